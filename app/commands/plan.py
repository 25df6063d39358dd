"""``headroom plan MODEL.gguf --ctx 512k --ctk q8_0 --ctv q8_0 --np 4 [--kvu] --gpu auto|H200|NAME:SIZE``.

Prints the plan as a table, or its versioned JSON with ``--json`` (see app/planner/plan_types.py).
Exit status: 0 feasible, 1 not feasible, 2 the model or settings cannot be planned.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.planner.settings import ALL_LAYERS, KV_TYPES
from app.planner.units import Bytes, parse_tokens


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="plan how a model and its context fit the GPUs (no engine started)")
    p.add_argument("model", help="the GGUF file (the first part of a split model)")
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
    p.add_argument("--gpu", action="append", default=[], metavar="SPEC",
                   help='"auto" (the real GPUs, default), a card name ("H200") or "NAME:SIZE" '
                        '("MyCard:24GiB"); repeat for several')
    p.add_argument("--window", action="store_true", help="plan for an engine with a KV position window")
    p.add_argument("--vram-target", type=Bytes.parse, default=None, help="GPU budget, e.g. 80GiB")
    p.add_argument("--safety", type=Bytes.parse, default=Bytes.parse("256MiB"),
                   help="margin kept free per GPU (default 256MiB)")
    p.add_argument("--overhead", type=Bytes.parse, default=None,
                   help="per-process GPU overhead (default 590MiB, measured on an H200)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.planner.devices import resolve_gpus
    from app.planner.errors import PlannerError
    from app.planner.gguf_model import read_shape
    from app.planner.overhead import known_overhead
    from app.planner.plan import make_plan, max_context
    from app.planner.settings import LaunchSettings

    try:
        settings = LaunchSettings(
            n_ctx=parse_tokens(str(args.ctx)), type_k=args.ctk, type_v=args.ctv or args.ctk,
            n_parallel=args.np, kv_unified=args.kvu, swa_full=args.swa_full, n_ubatch=args.ub,
            n_batch=args.batch, flash_attn=args.fa, n_gpu_layers=args.ngl, offload_kqv=not args.nkvo)
        shape = read_shape(args.model)
        inventory = resolve_gpus(list(args.gpu))
        overhead = args.overhead
        if overhead is None and inventory.gpus and not inventory.gpus[0].simulated:
            known = known_overhead(inventory.gpus[0].name, inventory.driver)
            overhead = known.bytes if known.measured else None  # a measured value wins over the default
        options: dict[str, Any] = {"engine_window": args.window, "safety": int(args.safety),
                                   "vram_target": args.vram_target, "overhead": overhead}
        plan = make_plan(shape, inventory, settings, **options)
        fit = max_context(shape, inventory, settings, **options)
    except (PlannerError, ValueError) as e:
        print(f"headroom plan: {e}")
        return 2
    if args.json:
        print(json.dumps(plan.to_json() | {"model": str(shape.path), "arch": shape.arch,
                                           "max_context": fit.to_json()}, indent=2))
    else:
        print(render(plan, f"{shape.name} ({shape.arch}, {shape.n_layer} layers)", fit))
    return 0 if plan.feasible else 1


def render(plan: Any, title: str, fit: Any) -> str:
    """The plan as a readable table."""
    from app.planner.units import format_tokens

    launch = plan.launch
    out = [title,
           f"  context {format_tokens(launch.n_ctx)}  K {launch.type_k} V {launch.type_v}  "
           f"-np {launch.n_parallel}{' -kvu' if launch.kv_unified else ''}  -fa {launch.flash_attn}  "
           f"-ub {launch.n_ubatch}  -ngl {'all' if launch.n_gpu_layers >= ALL_LAYERS else launch.n_gpu_layers}"
           f"{'  -nkvo' if not launch.offload_kqv else ''}",
           f"  mode {plan.mode}: {'FITS' if plan.feasible else 'DOES NOT FIT'} — {plan.reason}", ""]
    parts = ("other_processes", "weights", "compute", "kv_resident", "overhead", "safety", "free")
    for g in plan.gpus:
        out.append(f"  {g.name}  {g.label}  total {Bytes(g.total)}")
        out += [f"    {p.replace('_', ' '):<16}{Bytes(getattr(g, p))!s:>12}   {g.sources.get(p, '')}" for p in parts]
    h = plan.host
    out.append(f"  host RAM  available {Bytes(h.available)} of {Bytes(h.total)}")
    for p in ("weights_mapped", "kv_tail", "compute_pinned", "free"):
        out.append(f"    {p.replace('_', ' '):<16}{Bytes(getattr(h, p))!s:>12}   {h.sources.get(p, '')}")
    out.append(f"  KV window {format_tokens(plan.window_cells)} cells resident, "
               f"host tail {format_tokens(plan.tail_cells)} cells")
    out.append(f"  largest context: {format_tokens(fit.resident)} fully resident, "
               f"{format_tokens(fit.with_tail)} with a host tail (trained {format_tokens(fit.n_ctx_train)})")
    if plan.alternatives and len(plan.alternatives) > 1:
        out.append("  alternatives (host bytes read per token; lower is faster):")
        for a in plan.alternatives:
            mark = "*" if a.chosen else ("-" if not a.feasible else " ")
            out.append(f"   {mark} {a.label:<14}{Bytes(a.host_bytes_per_token)!s:>12}   {a.note}")
    out += [f"  warning: {w}" for w in plan.warnings]
    return "\n".join(out)
