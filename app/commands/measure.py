"""``headroom measure MODEL.gguf``: pass 1 for one launch, printed (or ``--json``).

    headroom measure MODEL.gguf -c 128k -ctk f16 -np 4 -kvu -fa on -ub 512 [--json]

The launch flags (both llama-server's and Headroom's spellings) are app/commands/common.py's.

``--with probe`` (default) runs the llama-cpp-python no_alloc probe through the on-disk cache;
``--with fit-params`` measures as ``llama-fit-params`` does, in the engine build's own libllama (its
backend), but with llama-server's context parameters: the binary itself reserves logits for a whole
ubatch and takes no ``-kvu`` (app/probe/fit_params.py).

SIGTERM stops it as Ctrl-C does; killed outright, its child dies with it (app.engine.process).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType
from typing import Any

from app.commands.common import (
    add_engine_arg,
    add_launch_args,
    exit_status,
    hub_model,
    pass1_lib_dir,
    seconds,
    settings_from_args,
)
from app.planner.errors import PlannerError
from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings
from app.planner.units import Bytes, format_tokens
from app.probe.measure import MeasureError


def register(sub: Any) -> None:
    p = sub.add_parser("measure", allow_abbrev=False, help="measure the compute buffer and KV cache llama.cpp would reserve",
                       description="Pass 1: what llama.cpp's own allocator would reserve for this exact "
                                   "launch (nothing is loaded or allocated).",
                       epilog=exit_status("measured", "pass 1 ran and failed (a crash, a timeout, out of memory)",
                                          "the model, a file, a hub ref or the settings cannot be used "
                                          "(as for `headroom plan`)"))
    p.add_argument("model", help="the GGUF file, a llamafile (the GGUF inside it, measured without a copy), or "
                                 "hf:owner/name[:QUANT] (measured from its header only)")
    add_launch_args(p)
    p.add_argument("--rpc", default=None, metavar="HOST:PORT[,...]",
                   help="measure with these ggml-rpc-server workers' devices too, as the engine will use them")
    p.add_argument("--with", dest="method", choices=("probe", "fit-params"), default="probe",
                   help="probe: llama-cpp-python no_alloc (default); fit-params: llama-fit-params' method in the "
                        "engine build's library, with llama-server's context parameters")
    add_engine_arg(p, "that will launch")
    p.add_argument("--refresh", action="store_true", help="measure again even when cached")
    p.add_argument("--timeout", type=seconds, default=60.0, help="seconds before the probe is stopped")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _measure(args: argparse.Namespace, settings: LaunchSettings) -> tuple[Measurement, bool, str | None]:
    from app.engine.native_build import find_build
    from app.probe.measure import gpu_caveat, measure_cached

    def check_model() -> None:
        """A missing, truncated or non-GGUF file, or settings the engine refuses: one clear line, said as
        `plan` says it (and the probe's own failure never shown)."""
        from app.planner.errors import NotModelled
        from app.planner.gguf.model import read_headers, read_shape
        from app.planner.memory.kv import check_supported

        read_headers(args.model)
        try:  # a quantized V without flash attention ...
            check_supported(read_shape(args.model), settings)
        except NotModelled:
            pass  # the planner does not know the architecture; the probe still measures it

    if args.method == "fit-params":
        from app.probe.fit_params import fit_params_measure

        check_model()
        engine = find_build()
        if engine is None:
            raise PlannerError("no engine build: run `headroom engine build` first")
        return fit_params_measure(engine, args.model, settings, timeout=args.timeout), False, None
    # The file is checked while the probe measures (its child started first): pass 1 takes the longer of
    # the two, not both; a file the check refuses stops the probe.
    checked = []

    def check_once() -> None:
        checked.append(True)
        check_model()

    try:
        m, hit = measure_cached(args.model, settings, timeout=args.timeout, refresh=args.refresh,
                                lib_dir=pass1_lib_dir(args), meanwhile=check_once)
    except Exception:
        if not checked:  # failed before the check ran (no such file, unreadable ...): the check's line first
            check_model()
        raise
    return m, hit, gpu_caveat(m, targets_gpu=_targets_gpu(settings), engine=find_build())


def _targets_gpu(settings: LaunchSettings) -> bool:
    """Whether the launch puts layers on a GPU: ``-ngl`` above 0 and a GPU to put them on (this machine's
    or an RPC worker's); a CPU-only machine's launch is a CPU plan, and CPU numbers are its own."""
    if settings.n_gpu_layers <= 0:
        return False
    from app.machine.devices import resolve_gpus

    return bool(settings.rpc) or bool(resolve_gpus(["auto"]).gpus)


def render(m: Measurement, settings: LaunchSettings, *, cached: bool, caveat: str | None) -> str:
    head = (f"pass 1: {format_tokens(settings.n_ctx)} ctx, -np {settings.n_parallel}"
            f"{' -kvu' if settings.kv_unified else ''}, -fa {settings.flash_attn}, -ub {settings.n_ubatch}, "
            f"K {settings.type_k} / V {settings.type_v}"
            + (f", --rpc {','.join(settings.rpc)}" if settings.rpc else "")
            + (f", -ts {','.join(map(str, settings.tensor_split))}" if settings.tensor_split else ""))
    lines = [head, f"  measured by {m.source} ({m.backend}, {m.llama_label}) "
                   f"in {m.seconds:.2f} s{' [cached]' if cached else ''}"]
    width = max([12, *(len(d.name) + (7 if d.host else 0) for d in m.devices)])
    lines.append(f"  {'device':<{width}} {'compute':>10} {'KV':>10}")
    for d in m.devices:
        lines.append(f"  {d.name + (' (host)' if d.host else ''):<{width}} {Bytes(d.compute)!s:>10} {Bytes(d.kv)!s:>10}")
    lines.append(f"  KV cache total {Bytes(m.kv_total)}")
    if m.recurrent:
        lines.append(f"  recurrent state {Bytes(m.recurrent)}")
    lines += [f"  {line}" for line in m.kv_lines]
    lines += [f"  note: {w}" for w in m.warnings]
    if caveat:
        lines.append(f"  caveat: {caveat}")
    return "\n".join(lines)


def _json_error(args: argparse.Namespace, error: str, hint: str = "", log_tail: list[str] | None = None) -> None:
    """With ``--json`` a failure is JSON on stdout too (a script reads one place), said on stderr as well."""
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": error, "hint": hint, "log_tail": log_tail or []}, indent=2))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM stops pass 1 as Ctrl-C does: the probe is killed first


def run(args: argparse.Namespace) -> int:
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        args.model = hub_model(args.model, download=False)
        settings = settings_from_args(args)
        if args.rpc:
            from app.engine.rpc import parse_endpoints

            settings = settings.with_(rpc=parse_endpoints(args.rpc))
        m, hit, caveat = _measure(args, settings)
    except MeasureError as exc:  # the probe ran and failed
        print(f"headroom measure: {exc}", file=sys.stderr)
        _json_error(args, exc.reason, exc.hint, list(exc.log_tail))
        return 1
    except (PlannerError, ValueError) as exc:  # bad input: a file, a setting or a repo it cannot use
        print(f"headroom measure: {exc}", file=sys.stderr)
        _json_error(args, str(exc))
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    warnings = [w] if (w := _over_training(args.model, settings)) else []
    if args.json:
        print(json.dumps({"settings": settings.to_json(), "measurement": m.to_json(), "cached": hit,
                          "caveat": caveat, "warnings": warnings}, indent=2))
    else:
        print(render(m, settings, cached=hit, caveat=caveat))
        for w in warnings:
            print(f"  warning: {w}")
    return 0


def _over_training(model: str, settings: LaunchSettings) -> str | None:
    """``plan``'s warning for a context per sequence past the model's training context (a walkthrough
    measured 16k on a 4k model and was told nothing), or None (also for a model the planner cannot read:
    the probe measured it anyway)."""
    from app.planner.errors import PlannerError
    from app.planner.gguf.model import read_shape
    from app.planner.solve.plan import over_training

    try:
        return over_training(read_shape(model), settings)
    except (PlannerError, ValueError, OSError):
        return None
