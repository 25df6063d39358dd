"""GPU and host inventory (NVML through ``pynvml`` from nvidia-ml-py; host RAM through psutil).

Data types first; the readers follow. Sizes are bytes. The NVML calls themselves, and what each
failure means, live in ``nvml_session.py``; simulated cards in ``gpu_table.py``.

- ``inventory()``: everything, once (the plan starts from it). Never raises for a missing driver or a
  failing GPU: ``reason`` and ``warnings`` say what happened.
- ``resolve_gpus(["H200", "MyCard:20GiB"])``: simulated cards instead; ``[]``/``["auto"]`` = real.
- ``Poller`` / ``snapshot()``: the cheap reading the UI takes about once a second, telling the
  launched engine's memory (by PID, children included) from other processes', with host RAM and the
  engine's RSS too (app/planner/live.py sets them against the running plan).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import psutil

from app.planner.gpu_table import SIMULATED_SUFFIX, parse_spec
from app.planner.nvml_session import NvmlSession, ProcessReading, StaticInfo
from app.planner.repack import CpuFeatures


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used: int  # bytes of GPU memory
    kind: str = "compute"  # "compute" | "graphics" | "compute+graphics"
    name: str = ""
    is_engine: bool = False  # the launched engine or one of its children (live snapshots only)


@dataclass(frozen=True)
class GpuDevice:
    """One device the engine offloads to: a local GPU (NVML) or a device of an RPC worker.

    ``name`` is the marketing name (for a worker: its endpoint's description); ``engine_name`` is
    the name llama.cpp gives its buffers, which the engine log and ``-ot`` use (``CUDA0``;
    ``RPC0[host:port]``: the device's index *on that worker* and the endpoint, ggml-rpc.cpp
    ``ggml_backend_rpc_buffer_type``); ``device_name`` is the name ``--list-devices`` prints and
    ``--vram-target RPC0=2GiB`` takes (``CUDA0``, ``RPC0``: numbered across all workers).
    """

    index: int
    name: str
    total: int
    free: int
    used: int = 0
    reserved: int = 0
    uuid: str = ""
    simulated: bool = False
    processes: tuple[GpuProcess, ...] = ()
    pcie_gen: int | None = None
    pcie_width: int | None = None
    #: Where total/free come from: "from NVML", or the simulated card's source.
    source: str = ""
    #: "v2" (used and reserved apart), "v1" (used includes reserved) or "" (simulated).
    memory_api: str = ""
    #: False when NVML would not list the processes (then ``processes`` is empty, not "none").
    processes_known: bool = True
    #: "CUDA" (a local GPU) or "RPC" (a device of a ggml-rpc-server worker at ``endpoint``).
    backend: str = "CUDA"
    endpoint: str = ""
    #: For an RPC device: its index on its worker (the ``RPC<n>`` of its buffer name).
    remote_index: int = 0
    #: This device's own budget (``--vram-target RPC0=2GiB``): what the engine may use on it,
    #: safety margin included. None: no budget beyond its free memory (and a global target).
    budget: int | None = None

    @property
    def is_rpc(self) -> bool:
        return self.backend == "RPC"

    @property
    def engine_name(self) -> str:
        if self.is_rpc:
            return f"RPC{self.remote_index}[{self.endpoint}]"
        return f"CUDA{self.index}"

    @property
    def device_name(self) -> str:
        return f"{self.backend}{self.index}"

    @property
    def label(self) -> str:
        """The name as shown: a simulated card says so ("NVIDIA H200 (simulated)"); a worker's
        device says where it is ("RPC0 on 127.0.0.1:50052")."""
        if self.is_rpc:
            return f"{self.device_name} on {self.endpoint}"
        return self.name + (SIMULATED_SUFFIX if self.simulated and "simulated" not in self.name else "")


@dataclass(frozen=True)
class HostMemory:
    total: int
    available: int
    swap_total: int = 0
    swap_free: int = 0


@dataclass(frozen=True)
class Inventory:
    """What the plan can use. ``gpus``: every offload device *in the engine's order*: the RPC
    workers' devices first (in ``--rpc`` order), then the local GPUs (src/llama.cpp
    ``llama_model_load``), so position ``i`` is the engine's device ``i`` and ``-ts`` share ``i``."""

    gpus: tuple[GpuDevice, ...]
    host: HostMemory
    nvml_ok: bool = False
    reason: str = ""  # why there are no real GPUs, e.g. "no NVIDIA driver found"
    driver: str | None = None
    cuda: str | None = None
    warnings: tuple[str, ...] = field(default=())
    #: RPC workers that did not answer: (endpoint, why). The plan goes on without them.
    dead_workers: tuple[tuple[str, str], ...] = ()
    #: The CPU backend's features as the engine that will run reports them (its ``system_info`` line,
    #: app/engine/discover.py ``EngineInfo.cpu_features``): which host weights it repacks. None: not
    #: known, a native build's (this machine's /proc/cpuinfo, app/planner/repack.py).
    cpu: CpuFeatures | None = None

    @property
    def local_gpus(self) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.gpus if not g.is_rpc)

    @property
    def rpc_devices(self) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.gpus if g.is_rpc)

    @property
    def rpc_endpoints(self) -> tuple[str, ...]:
        """The workers the engine gets with ``--rpc`` (those that answered, in order)."""
        return tuple(dict.fromkeys(g.endpoint for g in self.rpc_devices))


@dataclass(frozen=True)
class RemoteDevice:
    """One device an RPC worker reported (``llama-server --rpc EP --list-devices``: ``RPC0: EP
    (24105 MiB, 24105 MiB free)``). ``index``: the device's index on its worker."""

    endpoint: str
    index: int
    description: str
    total: int
    free: int


def with_workers(inv: Inventory, devices: Sequence[RemoteDevice],
                 dead: Sequence[tuple[str, str]] = ()) -> Inventory:
    """``inv`` with the workers' devices in front (the engine's order), numbered ``RPC0``, ``RPC1``…
    across the workers as ggml-rpc numbers them (``ggml_backend_rpc_add_server``: one counter over
    every device of every worker that answered)."""
    rpc = tuple(GpuDevice(index=i, name=d.description, total=d.total, free=d.free, used=d.total - d.free,
                          source=f"from RPC worker {d.endpoint}", backend="RPC", endpoint=d.endpoint,
                          remote_index=d.index, processes_known=False)
                for i, d in enumerate(devices))
    return replace(inv, gpus=rpc + inv.local_gpus, dead_workers=inv.dead_workers + tuple(dead))


def with_budgets(inv: Inventory, budgets: Mapping[str, int]) -> Inventory:
    """Per-device budgets by ``device_name`` (``{"RPC0": 2 GiB, "cuda0": 20 GiB}``, any case) or, for
    a worker's devices, by its endpoint (``{"10.0.0.2:50052": 8 GiB}``: numbering shifts when a
    worker before it does not answer, its address does not). ValueError naming the devices there
    are when a name matches none."""
    def keys(g: GpuDevice) -> set[str]:
        return {g.device_name.upper()} | ({g.endpoint.upper()} if g.is_rpc else set())

    wanted = {n.strip().upper(): b for n, b in budgets.items()}
    unknown = [n for n in budgets if not any(n.strip().upper() in keys(g) for g in inv.gpus)]
    if unknown:
        have = ", ".join(g.device_name + (f" ({g.endpoint})" if g.is_rpc else "") for g in inv.gpus) or "none"
        raise ValueError(f"no device {', '.join(unknown)} to give a budget to (devices: {have})")

    def budget(g: GpuDevice) -> int | None:
        found = [wanted[k] for k in keys(g) if k in wanted]
        return min(found) if found else g.budget

    return replace(inv, gpus=tuple(replace(g, budget=budget(g)) for g in inv.gpus))


def host_memory() -> HostMemory:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return HostMemory(total=int(vm.total), available=int(vm.available),
                      swap_total=int(swap.total), swap_free=int(swap.free))


def _processes(session: NvmlSession, readings: list[ProcessReading],
               engine_pid: int | None) -> tuple[GpuProcess, ...]:
    return tuple(GpuProcess(pid=p.pid, used=p.used, kind=p.kind, name=session.process_name(p.pid),
                            is_engine=session.is_engine(p.pid, engine_pid)) for p in readings)


def _read_gpu(session: NvmlSession, info: StaticInfo, handle: Any, warnings: list[str]) -> GpuDevice:
    mem = session.read_memory(handle)
    procs = session.read_processes(handle)
    if procs is None:
        warnings.append(f"GPU {info.index} ({info.name}): NVML does not list its processes here")
    return GpuDevice(index=info.index, name=info.name, total=mem.total, free=mem.free, used=mem.used,
                     reserved=mem.reserved, uuid=info.uuid,
                     processes=_processes(session, procs or [], None),
                     pcie_gen=info.pcie_gen, pcie_width=info.pcie_width, source="from NVML",
                     memory_api=mem.api, processes_known=procs is not None)


def _no_gpu_reason(session: NvmlSession, warnings: list[str]) -> str:
    if session.device_count == 0:
        return "no NVIDIA GPU found"
    return "no usable NVIDIA GPU (" + "; ".join(warnings) + ")"


def inventory(nvml: ModuleType | None = None) -> Inventory:
    """What this machine has now. ``nvml`` is for tests (a module replaying recorded readings)."""
    session = NvmlSession(nvml)
    if not session.open():
        return Inventory(gpus=(), host=host_memory(), nvml_ok=False, reason=session.reason)
    try:
        warnings = list(session.warnings)
        gpus: list[GpuDevice] = []
        for info, handle in session.devices:
            try:
                gpus.append(_read_gpu(session, info, handle, warnings))
            except session.error as err:
                warnings.append(f"GPU {info.index} ({info.name}) skipped: {err}")
        reason = "" if gpus else _no_gpu_reason(session, warnings)
        return Inventory(gpus=tuple(gpus), host=host_memory(), nvml_ok=True, reason=reason,
                         driver=session.driver, cuda=session.cuda, warnings=tuple(warnings))
    finally:
        session.close()


def simulated_gpu(spec: str, index: int) -> GpuDevice:
    """A card from the table (``"RTX 4090"``, ``"h200"``) or ``"MyCard:20GiB"``. ValueError if unknown."""
    card = parse_spec(spec)
    return GpuDevice(index=index, name=card.name + SIMULATED_SUFFIX, total=card.total, free=card.free,
                     used=0, reserved=card.reserved, simulated=True, source=card.source)


def resolve_gpus(specs: list[str], nvml: ModuleType | None = None) -> Inventory:
    """``--gpu`` values → an Inventory. ``[]`` or ``["auto"]``: the real GPUs; otherwise simulated
    cards, one per spec (or per comma-separated name), numbered after any real ones ("auto" too)."""
    names = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    wants_real = not names or any(n.lower() == "auto" for n in names)
    wanted = [n for n in names if n.lower() != "auto"]
    if not wants_real:
        return Inventory(gpus=tuple(simulated_gpu(n, i) for i, n in enumerate(wanted)), host=host_memory())
    for name in wanted:
        parse_spec(name)  # an unknown card fails before NVML is touched
    real = inventory(nvml)
    if not wanted:
        return real
    extra = tuple(simulated_gpu(n, len(real.gpus) + i) for i, n in enumerate(wanted))
    return Inventory(gpus=real.gpus + extra, host=real.host, nvml_ok=real.nvml_ok, reason="",
                     driver=real.driver, cuda=real.cuda, warnings=real.warnings)


def nvml_status(nvml: ModuleType | None = None) -> dict[str, Any]:
    """For ``headroom doctor``: ok, reason, driver, cuda, gpus (a count), plus devices and warnings."""
    inv = inventory(nvml)
    return {
        "ok": inv.nvml_ok,
        "reason": inv.reason,
        "driver": inv.driver,
        "cuda": inv.cuda,
        "gpus": len(inv.gpus),
        "devices": [{"index": g.index, "name": g.name, "uuid": g.uuid, "total": g.total, "free": g.free,
                     "used": g.used, "reserved": g.reserved, "memory_api": g.memory_api,
                     "pcie_gen": g.pcie_gen, "pcie_width": g.pcie_width,
                     "processes": [{"pid": p.pid, "used": p.used, "kind": p.kind, "name": p.name}
                                   for p in g.processes]} for g in inv.gpus],
        "warnings": list(inv.warnings),
    }


# ---- live updates -------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuSample:
    """One GPU in a live snapshot."""

    index: int
    name: str
    total: int
    free: int
    used: int
    reserved: int
    processes: tuple[GpuProcess, ...] = ()
    processes_known: bool = True

    @property
    def engine_used(self) -> int:
        return sum(p.used for p in self.processes if p.is_engine)

    @property
    def other_used(self) -> int:
        return sum(p.used for p in self.processes if not p.is_engine)


@dataclass(frozen=True)
class Snapshot:
    gpus: tuple[GpuSample, ...]
    ok: bool
    reason: str = ""
    warnings: tuple[str, ...] = ()
    engine_pid: int | None = None
    taken_at: float = 0.0  # time.monotonic()
    host: HostMemory | None = None  # psutil at the same moment (also without NVML); None: not read
    #: The engine's resident set (``engine_pid`` and its children, psutil); None: no engine, or gone.
    engine_rss: int | None = None


def process_rss(pid: int) -> int | None:
    """Bytes resident in RAM for ``pid`` and its descendants (psutil ``memory_info().rss``; pages a
    child shares with its parent count twice). None when the process is gone or not visible."""
    try:
        proc = psutil.Process(pid)
        total = int(proc.memory_info().rss)
        children = proc.children(recursive=True)
    except (psutil.Error, OSError):
        return None
    for child in children:
        try:
            total += int(child.memory_info().rss)
        except (psutil.Error, OSError):
            continue  # a child that ended between the listing and the reading
    return total


def snapshot(session: NvmlSession, engine_pid: int | None,
             read_host: Callable[[], HostMemory | None] = host_memory) -> Snapshot:
    """Memory and processes per GPU now (one memory call and two process calls per GPU), host RAM
    (psutil, read even when NVML is unusable: CPU-only machines plan against it) and, with an
    ``engine_pid``, the engine's RSS. The session
    (``NvmlSession``, the handle cache) is opened on first use and keeps handles and names.
    ``read_host`` is for tests (host RAM that moves on cue; others' processes move the real one);
    when it returns None the snapshot has no host reading."""
    now = time.monotonic()
    host = read_host()
    rss = process_rss(engine_pid) if engine_pid is not None else None
    if not session.open():
        return Snapshot(gpus=(), ok=False, reason=session.reason, engine_pid=engine_pid, taken_at=now,
                        host=host, engine_rss=rss)
    samples: list[GpuSample] = []
    warnings = list(session.warnings)
    for info, handle in session.devices:
        try:
            mem = session.read_memory(handle)
            procs = session.read_processes(handle)
        except session.error as err:
            warnings.append(f"GPU {info.index} ({info.name}) skipped: {err}")
            continue
        samples.append(GpuSample(index=info.index, name=info.name, total=mem.total, free=mem.free,
                                 used=mem.used, reserved=mem.reserved,
                                 processes=_processes(session, procs or [], engine_pid),
                                 processes_known=procs is not None))
    reason = "" if samples else _no_gpu_reason(session, warnings)
    return Snapshot(gpus=tuple(samples), ok=True, reason=reason, warnings=tuple(warnings),
                    engine_pid=engine_pid, taken_at=now, host=host, engine_rss=rss)


class Poller:
    """Holds one NVML session for the UI's ~1/s worker. Thread-safe; ``close()`` shuts NVML down."""

    def __init__(self, nvml: ModuleType | None = None,
                 read_host: Callable[[], HostMemory | None] = host_memory) -> None:
        self._session = NvmlSession(nvml)
        self._read_host = read_host
        self._lock = threading.Lock()
        self._closed = False

    def poll(self, engine_pid: int | None = None) -> Snapshot:
        with self._lock:
            if self._closed:
                return Snapshot(gpus=(), ok=False, reason="poller closed", engine_pid=engine_pid,
                                taken_at=time.monotonic())
            return snapshot(self._session, engine_pid, self._read_host)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._session.close()

    def __enter__(self) -> Poller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
