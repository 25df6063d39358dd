"""``headroom measure MODEL.gguf``: pass 1 for one launch, printed (or ``--json``).

    headroom measure MODEL.gguf --ctx 128k --ctk f16 --np 4 --kvu --fa on --ub 512 [--json]

``--with probe`` (default) runs the llama-cpp-python no_alloc probe through the on-disk cache;
``--with fit-params`` asks the engine build's own ``llama-fit-params -fitp on``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.planner.errors import PlannerError
from app.planner.measurement import Measurement
from app.planner.settings import ALL_LAYERS, KV_TYPES, LaunchSettings
from app.planner.units import Bytes, format_tokens, parse_tokens


def register(sub: Any) -> None:
    p = sub.add_parser("measure", help="measure the compute buffer and KV cache llama.cpp would reserve",
                       description="Pass 1: what llama.cpp's own allocator would reserve for this exact "
                                   "launch (nothing is loaded or allocated).")
    p.add_argument("model", help="the GGUF file")
    p.add_argument("-c", "--ctx", default="4096", help="context length: 32768, 128k, 1M (default 4096)")
    p.add_argument("--ctk", choices=KV_TYPES, default="f16", help="K cache type (default f16)")
    p.add_argument("--ctv", choices=KV_TYPES, default=None, help="V cache type (default: same as --ctk)")
    p.add_argument("--np", type=int, default=1, help="parallel slots (llama-server -np, default 1)")
    p.add_argument("--kvu", action="store_true", help="one unified KV cache for all slots (-kvu)")
    p.add_argument("--fa", choices=("on", "off", "auto"), default="on", help="flash attention (default on)")
    p.add_argument("--ub", type=int, default=512, help="physical batch -ub (default 512)")
    p.add_argument("-b", "--batch", type=int, default=2048, help="logical batch -b (default 2048)")
    p.add_argument("--ngl", type=int, default=ALL_LAYERS, help="layers on the GPU (default: all)")
    p.add_argument("--nkvo", action="store_true", help="keep the KV cache in host memory (-nkvo)")
    p.add_argument("--swa-full", action="store_true", help="full-size SWA cache (--swa-full)")
    p.add_argument("--with", dest="method", choices=("probe", "fit-params"), default="probe",
                   help="probe: llama-cpp-python no_alloc (default); fit-params: the engine's llama-fit-params")
    p.add_argument("--refresh", action="store_true", help="measure again even when cached")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before the probe is stopped")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> LaunchSettings:
    return LaunchSettings(
        n_ctx=parse_tokens(args.ctx), type_k=args.ctk, type_v=args.ctv or args.ctk, n_parallel=args.np,
        kv_unified=args.kvu, swa_full=args.swa_full, n_ubatch=args.ub, n_batch=args.batch,
        flash_attn=args.fa, n_gpu_layers=args.ngl, offload_kqv=not args.nkvo)


def _measure(args: argparse.Namespace, settings: LaunchSettings) -> tuple[Measurement, bool, str | None]:
    from app.engine.native_build import find_build
    from app.planner.measure import gpu_caveat, measure_cached

    engine = find_build()
    if args.method == "fit-params":
        from app.planner.measure_engine import fit_params_measure

        if engine is None or not engine.fit_params.is_file():
            raise PlannerError("no engine build with llama-fit-params: run `headroom engine build` first")
        return fit_params_measure(engine, args.model, settings, timeout=args.timeout), False, None
    m, hit = measure_cached(args.model, settings, timeout=args.timeout, refresh=args.refresh)
    targets_gpu = settings.n_gpu_layers > 0
    return m, hit, gpu_caveat(m, targets_gpu=targets_gpu, engine=engine)


def render(m: Measurement, settings: LaunchSettings, *, cached: bool, caveat: str | None) -> str:
    head = (f"pass 1: {format_tokens(settings.n_ctx)} ctx, -np {settings.n_parallel}"
            f"{' -kvu' if settings.kv_unified else ''}, -fa {settings.flash_attn}, -ub {settings.n_ubatch}, "
            f"K {settings.type_k} / V {settings.type_v}")
    lines = [head, f"  measured by {m.source} ({m.backend}, llama.cpp {m.llama_commit[:9]}) "
                   f"in {m.seconds:.2f} s{' [cached]' if cached else ''}"]
    lines.append(f"  {'device':<12} {'compute':>10} {'KV':>10}")
    for d in m.devices:
        lines.append(f"  {d.name + (' (host)' if d.host else ''):<12} {Bytes(d.compute)!s:>10} {Bytes(d.kv)!s:>10}")
    lines.append(f"  KV cache total {Bytes(m.kv_total)}")
    if m.recurrent:
        lines.append(f"  recurrent state {Bytes(m.recurrent)}")
    lines += [f"  {line}" for line in m.kv_lines]
    lines += [f"  note: {w}" for w in m.warnings]
    if caveat:
        lines.append(f"  caveat: {caveat}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        m, hit, caveat = _measure(args, settings)
    except (PlannerError, ValueError) as exc:
        print(f"headroom measure: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"settings": settings.to_json(), "measurement": m.to_json(), "cached": hit,
                          "caveat": caveat}, indent=2))
    else:
        print(render(m, settings, cached=hit, caveat=caveat))
    return 0
