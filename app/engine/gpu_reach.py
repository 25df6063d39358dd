"""Whether the engine that will launch can use this machine's GPUs, decided before it launches.

A GPU plan launched on an engine that cannot use the GPU runs every layer on the CPU, at a tenth of
the speed the plan predicted, and says so nowhere a user looks (llama.cpp loads its CUDA module
silently, ggml/src/ggml-backend-reg.cpp ``ggml_backend_load_best``, and a release build logs nothing
when that fails). Headroom says it once, before Launch, with the cause, and plans for what will run
(``headroom serve``, the window's Launch); ``headroom plan`` keeps the plan asked for and adds the
sentence. What it decides from, without running a model:

- a Headroom build's stamp (app/engine/native_build.py): a CPU build, or a CUDA build and the GPU code it
  carries (CMAKE_CUDA_ARCHITECTURES, app/engine/cuda_toolchain.py);
- NVML (app/machine/devices.py): whether a driver answers, which CUDA it runs, each card's compute
  capability; and whether the driver's ``libcuda.so.1`` loads (what the CUDA module links);
- any other llama-server: what it lists (``--list-devices``: a CPU build lists ``(none)``);
- a llamafile: not known before it runs; its log says at launch (app/llamacpp/llamafile_gpu.py).

Recorded engine output for each case (a CUDA build without a driver, with an old driver, on a card it
has no code for) is in tests/fixtures/cuda_logs/ (its README says which were recorded and which were
written from llama.cpp's source).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from app.engine.capabilities import engine_env
from app.engine.cuda_toolchain import CUDA_MAJOR, MIN_DRIVER, MIN_DRIVER_CUDA, arch_span, parse_archs, runs_on
from app.engine.discover import EngineInfo
from app.machine.nvml_session import NO_DRIVER
from app.planner.devices import GpuDevice, Inventory

LIST_TIMEOUT_S = 60.0
#: common/arg.cpp, --list-devices: "  %s: %s (%zu MiB, %zu MiB free)" (name, description, total, free)
_LISTED = re.compile(r"^\s+(?P<name>[A-Za-z]+\d+): ")
WAY_TO_GPU = "for the GPU, Headroom's CUDA bundle or an engine built with native/build.py --backend cuda"


@dataclass(frozen=True)
class GpuReach:
    """What the engine will run on: ``gpus``, the indices of this machine's GPUs it will use (of the
    inventory's local GPUs); ``sentence``, why some or all of them will not be (``""`` when every
    one will); ``gpu_code``, the GPU code the engine carries, in words; ``note``, a remark that changes
    nothing of the plan (a first start that compiles the engine's PTX for the card)."""

    gpus: tuple[int, ...]
    sentence: str = ""
    gpu_code: str = ""
    note: str = ""
    #: The card UUIDs a launch shows the engine (``CUDA_VISIBLE_DEVICES``) when some are left out; None:
    #: every card (nothing to hide).
    visible: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, object]:
        return {"gpus": list(self.gpus), "sentence": self.sentence, "gpu_code": self.gpu_code, "note": self.note}


def gpu_code_words(archs: str) -> str:
    """``CUDA code for sm_75–sm_120 (machine code for sm_86, sm_89, sm_120a; PTX for sm_75 and newer)``."""
    parsed = parse_archs(archs)
    sass = [a.sm for a in parsed if a.machine_code]
    ptx = [a.sm for a in parsed if a.ptx]
    parts = ([f"machine code for {', '.join(sass)}"] if sass else []) + \
        ([f"PTX for {', '.join(ptx)} and newer cards"] if ptx else [])
    return f"CUDA {CUDA_MAJOR} code for {arch_span(archs)} ({'; '.join(parts)})"


@lru_cache(maxsize=8)
def _listed(launcher: tuple[str, ...], mtime: float) -> tuple[str, ...] | None:
    try:
        done = subprocess.run([*launcher, "--list-devices"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace", timeout=LIST_TIMEOUT_S, env=engine_env(), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tuple(m.group("name") for line in done.stdout.splitlines() if (m := _LISTED.match(line)))


def listed_devices(engine: EngineInfo) -> tuple[str, ...] | None:
    """The devices ``engine`` lists (``CUDA0``, ``Vulkan0``; RPC workers are not asked for), once per
    binary; None when it would not say (a llamafile, a timeout)."""
    if engine.is_llamafile:
        return None
    try:
        mtime = Path(engine.path).stat().st_mtime
    except OSError:
        return None
    return _listed(tuple(engine.launcher), mtime)


def decide(engine: EngineInfo | None, inventory: Inventory, *, listed: tuple[str, ...] | None,
           driver_loads: bool) -> GpuReach:
    """What ``engine`` will run on among ``inventory``'s local GPUs (module notes). Pure: ``listed`` is
    what the engine lists (None: not asked), ``driver_loads`` whether ``libcuda.so.1`` loads here."""
    local = inventory.local_gpus
    real = [g for g in local if not g.simulated]
    everyone = tuple(g.index for g in real)
    if engine is None or engine.is_llamafile:
        return GpuReach(everyone, gpu_code="" if engine is None else "decided by the llamafile when it starts")
    archs = engine.cuda_archs
    if engine.build_backend == "cpu" or (not archs and listed is not None
                                         and not any(n.startswith("CUDA") for n in listed)):
        code = "none: a CPU build" if engine.build_backend == "cpu" else "none that runs here (it lists no GPU)"
        if not local:
            return GpuReach((), gpu_code=code)
        what = ("this engine has no GPU code (a CPU build)" if engine.build_backend == "cpu" else
                "this engine lists no GPU (llama-server --list-devices: none): it has no GPU code for this machine")
        return GpuReach((), _said(f"{_cards(local)}: {what}, so it runs on the CPU; {WAY_TO_GPU}"), code)
    if not archs:  # another CUDA-capable llama-server: it lists what it will use
        return GpuReach(everyone, gpu_code=f"CUDA (it lists {', '.join(listed)})" if listed else "not known")
    code = gpu_code_words(archs)
    has = f"this engine has CUDA code for {arch_span(archs)}"
    no_driver = _said(f"{has}; no NVIDIA driver was found, so it runs on the CPU (install the NVIDIA driver "
                      f"{MIN_DRIVER} or newer: nvidia-smi must work)")
    if not local:  # a CUDA engine on a machine without a GPU: said too, once
        found_none = _said(f"{has}; no NVIDIA GPU was found, so it runs on the CPU")
        return GpuReach((), no_driver if not driver_loads or not inventory.nvml_ok else found_none, code)
    simulated = [g for g in local if g.simulated]
    if not real:
        are = "is" if len(simulated) == 1 else "are"
        return GpuReach((), _said(f"{_cards(simulated)} {are} not on this machine: a launch here runs on the CPU "
                                  f"({has}{_covers(archs, simulated)})"), code)
    if not driver_loads or inventory.reason == NO_DRIVER or not inventory.nvml_ok:
        return GpuReach((), no_driver, code)
    cuda = _cuda_number(inventory.cuda)
    if cuda is not None and cuda < MIN_DRIVER_CUDA:
        return GpuReach((), _said(f"{has}, built with CUDA {CUDA_MAJOR}, which needs NVIDIA driver {MIN_DRIVER} or "
                                  f"newer; this driver ({inventory.driver or 'version unknown'}) runs CUDA "
                                  f"{inventory.cuda}, so it runs on the CPU: update the NVIDIA driver"), code)
    usable: list[GpuDevice] = []
    left: list[GpuDevice] = []
    compiled: list[GpuDevice] = []
    for g in real:
        how = "native" if g.compute is None else runs_on(archs, *g.compute)
        (usable if how else left).append(g)
        if how == "ptx" and g.compute is not None:
            compiled.append(g)
    note = ""
    if compiled:
        note = _said(f"{_cards(compiled)}: the driver compiles this engine's PTX for {_sm(compiled[0])} at its first "
                     "start (minutes, once; kept in ~/.nv/ComputeCache)")
    if not left:
        return GpuReach(everyone, gpu_code=code, note=note)
    why = "; ".join(f"{g.name} (GPU {g.index}) is {_sm(g)}" for g in left)
    where = "so it runs on the CPU" if not usable else f"so {'it is' if len(left) == 1 else 'they are'} left out"
    return GpuReach(tuple(g.index for g in usable), _said(f"{has}; {why}, {where}"), code, note,
                    visible=tuple(g.uuid for g in usable if g.uuid))


def reach(engine: EngineInfo | None, inventory: Inventory) -> GpuReach:
    """``decide`` with what this machine says: the engine's device list (only for an engine that is not
    Headroom's, whose stamp says what it carries) and whether the driver loads."""
    from app.engine.cuda_toolchain import nvidia_driver_present

    ask = engine is not None and not engine.build_backend and bool(inventory.local_gpus)
    listed = None
    if ask and engine is not None:
        listed = engine.listed if engine.listed is not None else listed_devices(engine)
    return decide(engine, inventory, listed=listed, driver_loads=nvidia_driver_present())


def hidden_env(found: GpuReach, engine: EngineInfo | None, inventory: Inventory) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` that shows a CUDA engine only the cards it has code for (its first kernel on
    another aborts: tests/fixtures/cuda_logs/sm61-no-kernel-image.log); ``{}`` when nothing is hidden."""
    if found.visible is not None:
        return {"CUDA_VISIBLE_DEVICES": ",".join(found.visible) or "-1"}
    real = any(not g.simulated for g in inventory.local_gpus)
    if not found.gpus and real and engine is not None and engine.cuda_archs:
        return {"CUDA_VISIBLE_DEVICES": "-1"}
    return {}


def for_launch(inventory: Inventory, found: GpuReach) -> Inventory:
    """``inventory`` with only the GPUs the engine will use (the RPC workers' devices stay). Where that
    leaves none and ``found`` says why, its sentence is the one word on it: the inventory's own reason
    ("no NVIDIA driver found", which the plan would repeat as a warning) is dropped."""
    keep = set(found.gpus)
    gpus = tuple(g for g in inventory.gpus if g.is_rpc or (not g.simulated and g.index in keep))
    reason = "" if found.sentence and not gpus else inventory.reason
    return replace(inventory, gpus=gpus, reason=reason)


def _said(clause: str) -> str:
    """A clause as a sentence: its first letter capitalised, a full stop at the end."""
    return clause[:1].upper() + clause[1:] + ("" if clause.endswith(".") else ".")


def _cards(gpus: list[GpuDevice] | tuple[GpuDevice, ...]) -> str:
    names = [g.label for g in gpus]
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def _sm(g: GpuDevice) -> str:
    return "of unknown compute capability" if g.compute is None else f"sm_{g.compute[0]}{g.compute[1]}"


def _covers(archs: str, gpus: list[GpuDevice]) -> str:
    """``; it would run on the RTX 4090 (sm_89)`` / ``; it has no code for the GTX 1080 (sm_61)``."""
    parts = []
    for g in gpus:
        if g.compute is None:
            continue
        how = runs_on(archs, *g.compute)
        parts.append(f"it would run on the {g.name} ({_sm(g)}{', from PTX' if how == 'ptx' else ''})" if how
                     else f"it has no code for the {g.name} ({_sm(g)})")
    return ("; " + "; ".join(parts)) if parts else ""


def _cuda_number(text: str | None) -> int | None:
    """NVML's CUDA version as Headroom keeps it (``"12.9"``) → 12090; None when unknown."""
    if not text:
        return None
    major, _, minor = text.partition(".")
    try:
        return int(major) * 1000 + int(minor or 0) * 10
    except ValueError:
        return None
