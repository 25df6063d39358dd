"""``headroom plan MODEL.gguf -c 512k -ctk q8_0 -np 4 -kvu --gpu auto|H200|NAME:SIZE [--measure] [--json]``.

Prints the plan as a table, or its versioned JSON with ``--json`` (see app/planner/plan_types.py).
Pass 1: a cached measurement for exactly this launch is used when there is one (nothing runs);
``--measure`` runs pass 1 first (through the same cache). The engine advisories for the engine a
launch would use (``--engine FILE``, else the one chosen in the window, else discovered; not started)
are printed too; pass 1 measures with, and looks up the cache for, that engine's libllama. Launch flags: app/commands/common.py.
Exit status (``EXIT_STATUS``, the ``--help`` epilog): 0 it fits (as asked, or with the alternative
the plan chose, said on the first line); 1 it does not fit; 2 the model or settings cannot be planned.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.commands.common import (
    add_engine_arg,
    add_gpu_args,
    add_launch_args,
    advisory_lines,
    exit_status,
    given_engine_problem,
    hub_model,
    inventory_from_args,
    llamafile_json,
    llamafile_lines,
    pass1_lib_dir,
    plan_request,
    say_pass1,
    seconds,
    settings_from_args,
)
from app.engine.advisories import Advisory
from app.engine.discover import EngineInfo
from app.planner import words
from app.planner.measurement import Measurement
from app.planner.plan_types import PLAN_JSON_VERSION, Alternative, ContextFit, Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.solve.speed import TURN_PROMPT, TURN_REPLY, Figure, SpeedRow
from app.planner.units import Bytes, round_tokens
from app.text import printable, printable_lines

EXIT_STATUS = exit_status("it fits with the context asked for (as asked, or another way the plan chose)",
                          "it does not fit, or only with a shorter context than asked (the plan says which)",
                          "the model, a file, a hub ref or the settings cannot be used")


def register(sub: Any) -> None:
    p = sub.add_parser("plan", allow_abbrev=False, epilog=EXIT_STATUS,
                       help="plan how a model and its context fit the GPUs (no engine started)")
    p.add_argument("model", help="the GGUF file (the first part of a split model), a llamafile (the GGUF inside it, "
                                 "from its .args), or hf:owner/name[:QUANT] (planned from its header, fetched "
                                 "without downloading the weights)")
    add_launch_args(p)
    add_gpu_args(p)
    add_engine_arg(p, "that would launch this plan")
    p.add_argument("--measure", action="store_true",
                   help="run pass 1 first (else a cached pass 1 for this exact launch is used when there is one)")
    p.add_argument("--timeout", type=seconds, default=60.0, help="seconds before pass 1 is stopped")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--save-llamafile", type=Path, default=None, metavar="FILE",
                   help="write the plan as one llamafile: the llamafile engine (--engine FILE, or the one inside "
                        "the llamafile planned), the model and an .args of the planned flags")
    p.set_defaults(func=run)


class _Pass1:
    """Where the plan's measurements come from: the cache only, or pass 1 run (through the cache).
    The plan request (app.planner.request) decides which launches to ask for."""

    def __init__(self, model: str, *, run: bool, timeout: float, lib_dir: str | None = None) -> None:
        self.model, self.run, self.timeout = model, run, timeout
        self.lib_dir = lib_dir  # the launching engine's libllama (common.pass1_lib_dir): its cache entries
        self.from_cache = False  # for the last measurement handed out
        self.failure = ""

    def __call__(self, launch: LaunchSettings) -> Measurement | None:
        from app.probe.measure import MeasureError, cached_measurement, measure_cached

        if self.run:
            if self.failure:  # pass 1 failed once: not again for another launch in the same command
                return None
            try:
                say_pass1(self.model, launch, self.lib_dir)
                m, self.from_cache = measure_cached(self.model, launch, timeout=self.timeout, lib_dir=self.lib_dir)
            except MeasureError as exc:
                self.failure = str(exc)
                return None
            return m
        found = cached_measurement(self.model, launch, lib_dir=self.lib_dir)
        self.from_cache = self.from_cache or found is not None
        return found

    def describe(self, m: Measurement | None) -> str:
        from app.probe.cache import measurements_dir

        if m is None:
            return ("pass 1: none cached for this launch and engine; compute buffers estimated "
                    "(headroom plan --measure, or headroom measure with the same flags and --engine)")
        where = f"cached in {measurements_dir()}" if self.from_cache else "run now"
        return f"pass 1: {m.source}, {m.backend} backend, {m.llama_label}, {where}"


def _engines(given: Path | None) -> list[EngineInfo]:
    """The engines a launch may use: only ``--engine FILE`` when given (as serve), else those discovered
    (the chosen one first). ValueError when the file given is not an engine."""
    from app.engine.discover import EngineOrigin, discover_engines

    if given is None:
        return discover_engines()
    if not given.is_file():
        raise ValueError(f"engine {'is a directory, not a file' if given.is_dir() else 'not found'}: {given}")
    engines = discover_engines(given)
    problem = given_engine_problem(given, engines)
    if problem:
        raise ValueError(problem)
    return [e for e in engines if e.source == EngineOrigin.SETTINGS]


def _own_engine(args: argparse.Namespace) -> list[EngineInfo]:
    """A llamafile model without ``--engine``: the llamafile itself, when it runs here (as ``serve`` launches
    it); [] otherwise."""
    from app.engine.discover import EngineOrigin, discover_engines

    found = getattr(args, "llamafile", None)
    if args.engine is not None or not found:
        return []
    return [e for e in discover_engines(found[0].path) if e.source == EngineOrigin.SETTINGS and e.is_llamafile
            and e.version != "unknown"]


def _launching(engines: list[EngineInfo], window: bool) -> EngineInfo | None:
    """The engine a launch would use, before the plan is made (its speed figures depend on it)."""
    from app.engine.discover import choose

    return choose(engines, PlanMode.asked(window))


def _engine_for(plan: Plan, engines: list[EngineInfo]) -> tuple[EngineInfo | None, str]:
    """The engine a launch of ``plan`` would use (discovered, not started), and why none can launch
    it ('' when one can)."""
    from app.engine.discover import choose
    from app.engine.launch import LaunchRefused, pick_engine

    try:
        return pick_engine(plan, engines), ""
    except LaunchRefused as exc:
        return choose(engines, plan.mode), str(exc)


def _advisories(launch: LaunchSettings, mode: PlanMode, engine: EngineInfo | None, arch: str, *,
                spills: bool = True, kv_host_layers: int = 0) -> list[Advisory]:
    from app.engine.launch import launch_advisories

    return [] if engine is None else launch_advisories(launch, mode, engine, arch, spills=spills,
                                                       kv_host_layers=kv_host_layers)


def _not_modelled(args: argparse.Namespace, arch: str, message: str) -> int:
    """A model the planner does not model: say so, with its advisories on the discovered engine."""
    from app.engine.discover import choose

    settings = settings_from_args(args)
    mode = PlanMode.asked(args.window)
    try:
        engines = _engines(args.engine)
    except ValueError:
        engines = []
    advs = _advisories(settings, mode, choose(engines, mode), arch)
    if args.json:  # stdout stays JSON: the error and the advisories as data
        print(json.dumps({"version": PLAN_JSON_VERSION, "error": message, "arch": arch,
                          "advisories": [asdict(a) for a in advs]}, indent=2))
    print(f"headroom plan: {printable_lines(message)}", file=sys.stderr)
    if advs:
        print("\n".join(advisory_lines(advs)), file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from app.engine.gpu_reach import reach as gpu_reach
    from app.hub.preview import preview_origin
    from app.planner.errors import NotModelled, PlannerError
    from app.planner.gguf.model import read_shape
    from app.planner.gguf.reader import shown_name

    pass1: _Pass1 | None = None
    try:
        args.model = hub_model(args.model, download=False)
        settings = settings_from_args(args)
        shape = read_shape(args.model)
        inventory = inventory_from_args(args)
        engines = _own_engine(args) or _engines(args.engine)
        # (a model the estimate does not know is planned from pass 1: it runs, as it takes a second)
        pass1 = _Pass1(args.model, run=args.measure or not shape.modelled, timeout=args.timeout,
                       lib_dir=pass1_lib_dir(args))
        request = plan_request(args, shape, inventory, pass1, _launching(engines, args.window))
        plan, measurement = request.plan(settings)
        fit = request.largest_fit(settings, measurement)
    except NotModelled as exc:  # (the settings parsed before the model was read)
        if pass1 is not None and pass1.failure:  # planned from pass 1, which failed: its reason, not "not modelled"
            return _not_modelled(args, exc.arch, f"cannot plan {exc.arch} (the estimate does not know it) because "
                                                 f"{pass1.failure}")
        return _not_modelled(args, exc.arch, str(exc))
    except (PlannerError, ValueError) as exc:
        print(f"headroom plan: {printable_lines(str(exc))}", file=sys.stderr)  # not into a `--json > plan.json`
        return 2
    if pass1.failure:
        print(f"headroom plan: pass 1 failed, compute buffers estimated: {pass1.failure}", file=sys.stderr)
    engine, no_engine = _engine_for(plan, engines)
    reach = gpu_reach(engine, inventory)  # (what a launch here runs on: serve plans for that)
    advs = _advisories(plan.launch, plan.mode, engine, shape.arch, spills=plan.tail_cells > 0,
                       kv_host_layers=plan.kv_host_layers)
    if args.json:
        print(json.dumps(plan.to_json() | llamafile_json(args, plan.launch) | {
            "model": str(shape.path), "header_only": preview_origin(shape.path) is not None, "arch": shape.arch, "max_context": fit.to_json(),
            **({"planned_from": "pass 1's measured law"} if not shape.modelled else {}),
            "measurement": None if measurement is None else {
                "source": str(measurement.source), "backend": measurement.backend,
                "llama_commit": measurement.llama_commit, "cached": pass1.from_cache},
            "engine": None if engine is None else engine.to_json(), "engine_refused": no_engine or None,
            "asked_context_planned": plan.launch.n_ctx >= settings.n_ctx,
            "gpu_reach": reach.to_json(), "advisories": [vars(a) for a in advs]}, indent=2))
        return _status(plan, settings)
    origin = preview_origin(shape.path)
    # the file's name, as the window shows it (general.name is a stranger's text, often not the model's)
    title = f"{printable(shown_name(shape.path))} ({shape.arch}, {shape.n_layer} layers)"
    if origin is not None:
        title += f" — planned from the header of hf:{origin.repo}/{origin.path} (not downloaded)"
    if not shape.modelled:
        title += f" — planned from pass 1's measurement (the estimate does not know {printable(shape.arch)})"
    print(render(plan, title, fit, settings, shape.head_dim_k))
    for line in llamafile_lines(args, plan.launch):
        print(f"  llamafile: {line}")
    print(f"  {pass1.describe(measurement)}")
    if engine is not None:
        print(f"  engine: {engine.kind} {engine.version} ({engine.llama_cpp}) {engine.path}")
    if no_engine:
        print(f"  no engine can launch this plan: {no_engine}")
    if reach.sentence:
        print(f"  GPU: {reach.sentence} `headroom serve` plans for what runs here.")
    if reach.note:
        print(f"  GPU: {reach.note}")
    print("\n".join(f"  {line}" for line in advisory_lines(advs)) if advs else "  advisories: none known")
    if args.save_llamafile is not None:
        if not plan.feasible:
            print("headroom plan: not saved as a llamafile: the plan does not fit", file=sys.stderr)
            return 1
        return _save_llamafile(args, plan)
    return _status(plan, settings)


def _status(plan: Plan, settings: LaunchSettings) -> int:
    """0 when the plan fits with the context asked for; 1 when it does not fit, or fits only shorter: a
    request not honoured is not a success (a script reads the status)."""
    if plan.feasible and plan.launch.n_ctx < settings.n_ctx:
        print(f"headroom plan: the context asked for ({settings.n_ctx:,}) does not fit; the plan is for "
              f"{plan.launch.n_ctx:,} (exit 1)", file=sys.stderr)
        return 1
    return 0 if plan.feasible else 1


def _save_llamafile(args: argparse.Namespace, plan: Plan) -> int:
    """``--save-llamafile FILE``: the plan as one llamafile (app/llamafile/save.py), progress on stderr."""
    import time

    from app.llamafile.save import SaveError, save_llamafile
    from app.planner.gguf.reader import split_member

    found = getattr(args, "llamafile", None)
    engine = args.engine if args.engine is not None else (found[0].path if found else None)
    if engine is None:
        print("headroom plan: not saved: no llamafile engine at hand: give --engine a llamafile (an engine-only "
              "one, or one with a model inside) to build the new file on", file=sys.stderr)
        return 2
    inside = split_member(engine)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= 2.0 or done == total:
            last[0] = time.monotonic()
            print(f"saving: {Bytes(done)} of {Bytes(total)} ({100 * done // max(total, 1)} %)", file=sys.stderr,
                  flush=True)

    try:
        out = save_llamafile(args.save_llamafile, inside[0] if inside else Path(engine), Path(args.model),
                             plan.launch.with_(cache_ram_mib=plan.cache_ram_mib), progress=progress,
                             kept=found[1].kept_args if found else ())
    except SaveError as exc:
        print(f"headroom plan: not saved: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headroom plan: not saved (stopped); nothing was left behind", file=sys.stderr)
        return 130
    print(f"saved {out} ({Bytes(out.stat().st_size)}): it launches as planned with ./{out.name}")
    return 0


def _projector_lines(plan: Plan, device: str) -> list[str]:
    """The vision projector's rows on ``device`` (its weights and compute; the CPU's share of a GPU
    projector's compute on the host), each with its source."""
    pr = plan.projector
    if pr is None:
        return []
    rows = [("mmproj weights", pr.weights, "weights"), ("mmproj compute", pr.compute, "compute")] if pr.device == device \
        else [("mmproj compute", pr.compute_host, "compute")] if device == "host" and pr.compute_host else []
    return [_row(name, n, pr.sources.get(key, "")) for name, n, key in rows]


def _row(name: str, n: int, source: object) -> str:
    """One part's row: its name, its bytes and where the number came from (nothing after the
    bytes when it came from nowhere: the free row)."""
    return f"    {name:<16}{Bytes(n)!s:>12}   {source!s}".rstrip()


def render(plan: Plan, title: str, fit: ContextFit, asked: LaunchSettings | None = None, head_dim: int = 0) -> str:
    """The plan as a readable table; first, when the plan changed the settings as ``asked``, that."""
    from app.planner.units import format_tokens

    launch = plan.launch
    first = words.changed(plan, asked) if asked is not None else ""
    out = ([first] if first else []) + [title,
           f"  context {format_tokens(launch.n_ctx)}  K {launch.type_k} V {launch.type_v}  "
           f"-np {launch.n_parallel}{' -kvu' if launch.kv_unified else ''}  -fa {launch.flash_attn}  "
           f"-ub {launch.n_ubatch}  -ngl {words.ngl_text(launch.n_gpu_layers)}"
           f"{'  -nkvo' if not launch.offload_kqv else ''}"
           + (f"  --rpc {','.join(launch.rpc)}" if launch.rpc else "")
           + (f"  -ts {','.join(map(str, launch.tensor_split))}" if launch.tensor_split else ""),
           f"  mode {plan.mode}: {'FITS' if plan.feasible else 'DOES NOT FIT'} — {plan.reason}", ""]
    parts = ("other_processes", "weights", "compute", "kv_resident", "overhead", "safety", "free")
    extra = ("lora", "draft_weights", "draft_kv", "draft_compute")  # shown when the launch has them
    for g in plan.gpus:
        out.append(f"  {g.name}  {g.label}  total {Bytes(g.total)}"
                   + (f"  budget {Bytes(g.budget)}" if g.budget is not None else ""))
        shown = [*parts[:4], *(p for p in extra if p in g.sources), *parts[4:]]
        rows = [_row(p.replace("_", " "), g.part(p), g.sources.get(p, "")) for p in shown]
        out += rows[:-1] + _projector_lines(plan, g.name) + rows[-1:]  # (free last)
    h = plan.host
    out.append(f"  host RAM  available {Bytes(h.available)} of {Bytes(h.total)}")
    for p in ("weights_mapped", "kv_tail", "compute_pinned", "output_buffer",
              *(p for p in extra if p in h.sources), "prompt_cache", "free"):
        out += _projector_lines(plan, "host") if p == "free" else []
        # no GPU: the host holds the whole KV cache, not a tail of it (as the window's bar says)
        name = "kv cache" if p == "kv_tail" and not plan.gpus else p.replace("_", " ")
        out.append(_row(name, h.part(p), h.sources.get(p, "")))
    out.append(f"  {words.kv_placement(plan)}")
    out += _largest_lines(plan, fit)
    if plan.alternatives and len(plan.alternatives) > 1:
        width = max(14, *(len(a.label) + 2 for a in plan.alternatives))
        out.append("  alternatives (predicted tokens/s: prefill with the context half full, then decode with it "
                   f"empty / half / full; {_choice_words(plan)}):")
        out.append(f"   {words.ALTERNATIVES_LEGEND}")
        for a in plan.alternatives:
            # (an infeasible "chosen" is only where the plan stands when nothing fits: not starred)
            mark = "-" if not a.feasible else ("*" if a.chosen else " ")
            out.append(f"   {mark} {a.label:<{width}}{_speed_cells(a) if a.feasible else ' ' * SPEED_CELLS}   {a.note}".rstrip())
    elif plan.speed is not None:
        out.append(f"  predicted: {_speed_cells_row(plan.speed)}")
    if plan.speed_figures is not None:
        out.append(f"  {_figures_line(plan, head_dim)}")
    if plan.network is not None:
        net = plan.network
        out.append("  " + words.network_summary(net.per_token, net.per_ubatch, launch.effective_n_ubatch,
                                                sum(net.load.values()), len(net.boundaries)))
    out += [f"  warning: {w}" for w in plan.warnings]
    return "\n".join(out)


def _choice_words(plan: Plan) -> str:
    """Why the starred alternative is the one: the fastest typical turn among those that keep the asked
    context and KV type, or, when none keeps them, what was given up (app/planner/solve/plan.py)."""
    turn = (f"the fastest typical turn (a {round_tokens(TURN_PROMPT)} prompt read and {TURN_REPLY} tokens "
            "written half-way)")
    asked = words.as_set_launch(plan)
    chosen = next((a.launch for a in plan.alternatives if a.chosen and a.feasible), None)
    if chosen is None or (chosen.n_ctx, chosen.type_k, chosen.type_v) == (asked.n_ctx, asked.type_k, asked.type_v):
        return f"chosen: {turn} of those that keep the asked context and KV type"
    if chosen.n_ctx == asked.n_ctx:
        return f"none keeps the asked KV type at this context: chosen: {turn} with a smaller one"
    return ("none keeps the asked context: chosen: a shorter one, the other end beside it on the "
            "\"largest context\" line")


def _largest_lines(plan: Plan, fit: ContextFit) -> list[str]:
    """"how far can I go": the largest context fully resident and the longest with part of it in
    host RAM — the same figures the alternatives offer when the asked context fits no way, and the
    window's (words.context_reach)."""
    from app.planner.units import format_tokens

    trained = f"trained {format_tokens(fit.n_ctx_train)}"
    as_set = words.as_set_launch(plan)
    # "fully resident" only when the settings as given put everything on the GPU (not -ngl 0, -nkvo)
    resident = "fully resident" if words.all_on_gpu(as_set) else words.resident_where(as_set)
    reach = words.context_reach(plan, fit)
    parts = [] if reach and reach[0].resident else [f"none fits {'in host RAM' if not plan.gpus else resident} as set"]
    for end in reach:
        where = resident if end.resident and plan.gpus else end.where
        speed = f" ({words.speed_words(end.alternative)})" if end.alternative is not None else ""
        parts.append(f"{'at least ' if end.at_least else ''}{format_tokens(end.n_ctx)} {where}{speed}")
    return [f"  largest context: {', '.join(parts)} ({trained})"]


#: The width of ``_speed_cells_row``'s text (a column of the alternatives table).
SPEED_CELLS = 56


def _speed_cells_row(row: SpeedRow) -> str:
    empty, half, full = row.at
    return (f"prefill {words.tokens_per_s(half.prefill):>6} tok/s  decode {words.tokens_per_s(empty.decode):>5} / "
            f"{words.tokens_per_s(half.decode):>5} / {words.tokens_per_s(full.decode):>5} tok/s")


def _speed_cells(a: Alternative) -> str:
    return _speed_cells_row(a.speed) if a.speed is not None else f"{'speed not predicted':<{SPEED_CELLS}}"


def _figures_line(plan: Plan, head_dim: int = 0) -> str:
    """The machine's figures the speeds rest on, and whether they were calibrated here; of the host's
    attention runs, the one a model of ``head_dim``-wide heads is priced by (0: every run)."""
    fig = plan.speed_figures
    assert fig is not None
    def state(*figs: Figure) -> str:
        n = sum(f.calibrated for f in figs)
        return "calibrated" if n == len(figs) else ("not calibrated, defaults" if n == 0 else "partly calibrated")

    parts = [f"host {fig.host_bandwidth.value / 1e9:.0f} GB/s, {fig.host_flops.value / 1e12:.2f} TFLOP/s "
             f"({state(fig.host_bandwidth, fig.host_flops)})"]
    # the host CPU's measured attention (what a host tail, -nkvo or -ngl layers decode at)
    f16 = [a for a in fig.host_cpu_attention if a.kv_type == "f16"]
    if head_dim and f16:  # (the nearest head size is the one priced: speed.attention_cost)
        f16 = [min(f16, key=lambda a: abs(a.head_dim - head_dim))]
    if f16:
        # (and a query head's where query heads share a KV head: a GQA model is priced between the two)
        # (over KV read from memory where the deep run measured it: what a decode is priced at)
        # (by the KV a token reads where the engine run measured a curve: a decode is priced between
        # the two footprints around the model's)
        each = ", ".join(f"{a.curve_words() or f'{a.decode_read * 1e9:.3g} ns'} ({a.head_dim}-wide heads"
                         + (f"; {a.decode.value * 1e9:.3g} ns over KV the caches hold"
                            if a.decode_read > a.decode.value and not a.decode_curve else "")
                         + (f"; {a.decode_gqa.value * 1e9:.3g} ns a query head, {a.gqa:g} over a KV head"
                            if a.decode_gqa is not None else "") + ")" for a in f16)
        parts.append(f"host CPU attention (f16 decode, a KV cell and head) {each} (calibrated)")
    parts.append(f"a token's fixed cost {fig.token_overhead.value * 1e3:.2g} ms "
                 f"({'calibrated' if fig.token_overhead.calibrated else 'not calibrated, default'})")
    parts += [f"{d.name} {d.bandwidth.value / 1e9:.0f} GB/s, {d.flops.value / 1e12:.0f} TFLOP/s, link "
              f"{d.link.value / 1e9:.1f} GB/s ({state(d.bandwidth, d.flops, d.link)})" for d in fig.devices]
    learned = fig.decode_scale.calibrated or fig.prefill_scale.calibrated
    return (f"speed figures: {'; '.join(parts)}"
            + (f"; scaled by launches here (decode ×{fig.decode_scale.value:.2f}, prefill "
               f"×{fig.prefill_scale.value:.2f})" if learned else ""))
