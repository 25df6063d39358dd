"""The engine command line, as a pure function of the plan (docs/style.md: prepare / run / result).

Everything that changes what the engine allocates comes from one ``LaunchSettings`` (the same
object pass 1 measured with), so the launch is the plan. ``--fit off`` stops llama-server from
silently changing ``-c``/``-ngl`` (docs/domain.md §1); ``-lv 4`` makes it log the buffer sizes the plan
check reads. Never a shell: an argument list, shown as one copyable line with ``shlex.join``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine.discover import EngineInfo, EngineKind
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.planner.units import MiB

if TYPE_CHECKING:
    from app.planner.plan_types import Plan

MODES = tuple(PlanMode)

#: Flags left out when a probed engine lacks them: they refine the launch but are not the plan
#: (an engine without ``--fit`` never fits; without ``--metrics`` there is just no /metrics).
OPTIONAL = ("--fit", "--metrics", "-lv", "--cache-ram", "--alias")


class ArgvError(ValueError):
    """The settings and mode contradict each other (e.g. the window with a unified cache)."""


def _optional(engine: EngineInfo, name: str) -> bool:
    caps = engine.capabilities
    return caps is None or caps.accepts(name)


def build_argv(engine: EngineInfo, settings: LaunchSettings, mode: PlanMode, model: Path, host: str, port: int,
               *, vram_target: int | None = None, api_key_file: Path | None = None,
               extra: Sequence[str] = (), alias: str | None = None) -> list[str]:
    """The exact argument list that launches ``engine`` with ``settings`` in ``mode``.

    mode "window": opencoti's rolling KV window (``--kv-residency-mode window --vram-target MiB``,
    never with ``-kvu``; vram_target None = 0 = all free VRAM). mode "cpu": ``-ngl 0`` and, for a
    llamafile, ``--gpu disable``. The API key is never an argument (every local user reads a command
    line in ``ps``, docs/domain.md §6): ``api_key_file`` names the 0600 file that holds it. ``alias``: the
    name ``/v1/models`` gives the model (else the engine lists its file path, which clients show).
    """
    if mode not in MODES:
        raise ArgvError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == PlanMode.WINDOW and settings.kv_unified:
        raise ArgvError("the KV window cannot be combined with a unified KV cache (-kvu)")
    if mode == PlanMode.WINDOW and engine.kind != EngineKind.OPENCOTI:
        raise ArgvError(f"the KV window needs the opencoti engine, not {engine.kind}")
    argv = list(engine.server_prefix)
    if engine.is_llamafile:
        argv += ["--gpu", "disable" if mode == PlanMode.CPU else "nvidia"]
    ngl = 0 if mode == PlanMode.CPU else settings.n_gpu_layers
    if settings.rpc:  # first: -ot names the workers' buffers, which exist once --rpc has added them
        argv += ["--rpc", ",".join(settings.rpc)]
    argv += [
        "-m", str(model),
        "-c", str(settings.n_ctx),
        "-ngl", str(ngl),
        "-fa", settings.flash_attn,
        "-ctk", settings.type_k,
        "-ctv", settings.type_v,
        "-ub", str(settings.n_ubatch),
        "-b", str(settings.n_batch),
        "-np", str(settings.n_parallel),
    ]
    if settings.tensor_split:  # in the engine's device order: the workers' devices first
        argv += ["-ts", ",".join(str(t) for t in settings.tensor_split)]
    if settings.n_cpu_moe:  # before -ot: the engine applies the first override that matches
        argv += ["--n-cpu-moe", str(settings.n_cpu_moe)]
    if settings.tensor_overrides:
        argv += ["-ot", settings.override_text()]
    if settings.kv_unified:
        argv.append("-kvu")
    if settings.swa_full:
        argv.append("--swa-full")
    if not settings.offload_kqv:
        argv.append("-nkvo")
    if settings.lora:
        argv += ["--lora", ",".join(settings.lora)]
    if settings.draft_model:  # explicit: the engine's -ngld default is "auto", its spec type "none"
        argv += ["-md", settings.draft_model, "-ngld", str(0 if mode == PlanMode.CPU else settings.draft_n_gpu_layers),
                 "-ctkd", settings.draft_type_k, "-ctvd", settings.draft_type_v,
                 "--spec-type", "draft-simple", "--spec-draft-n-max", str(settings.draft_n_max)]
    if settings.mmproj:  # the vision projector the plan counts (app/planner/memory/projector.py), where it counts it
        argv += ["--mmproj", settings.mmproj] + ([] if settings.mmproj_offload else ["--no-mmproj-offload"])
    if mode == PlanMode.WINDOW:
        argv += ["--kv-residency-mode", "window", "--vram-target", str((vram_target or 0) // MiB)]
    if engine.uses_amx and _optional(engine, "-nr"):
        # no AMX weight buffer (nor CPU_REPACK): ggml's AMX code crashes where its compiler left the tile
        # configuration partly unwritten (docs/domain.md §11); the plan prices this engine's host weights
        # without repacking too
        argv.append("-nr")
    if _optional(engine, "--cache-ram") and settings.cache_ram_mib is not None:
        # explicit, so the limit the plan holds back is the engine's (argv_for_plan sizes auto)
        argv += ["--cache-ram", str(settings.cache_ram_mib)]
    if _optional(engine, "--fit"):
        argv += ["--fit", "off"]
    if _optional(engine, "-lv"):
        argv += ["-lv", "4"]
    if _optional(engine, "--metrics"):
        argv.append("--metrics")
    if alias and _optional(engine, "--alias"):
        argv += ["--alias", alias]
    argv += ["--host", host, "--port", str(port)]
    if api_key_file is not None:
        argv += ["--api-key-file", str(api_key_file)]
    argv += list(extra)
    return argv


def argv_for_plan(engine: EngineInfo, plan: Plan, model: Path, host: str, port: int, *,
                  api_key_file: Path | None = None, extra: Sequence[str] = (), alias: str | None = None) -> list[str]:
    """``build_argv`` from a Plan (its launch settings, mode and VRAM target; the prompt-cache size
    the plan held back, when it sized it)."""
    return build_argv(engine, plan.launch.with_(cache_ram_mib=plan.cache_ram_mib), plan.mode, model, host, port, vram_target=plan.vram_target,
                      api_key_file=api_key_file, extra=extra, alias=alias)


def shell_line(argv: Sequence[str], *, hide_key: bool = True) -> str:
    """One copyable shell line; a key given as ``--api-key KEY`` (an ``--engine-arg``) is masked unless
    ``hide_key`` is False."""
    shown = list(argv)
    if hide_key:
        for i, a in enumerate(shown[:-1]):
            if a == "--api-key":
                shown[i + 1] = "$HEADROOM_API_KEY"
    line = shlex.join(shown)
    return line.replace(shlex.quote("$HEADROOM_API_KEY"), '"$HEADROOM_API_KEY"')
