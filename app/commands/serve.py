"""``headroom serve MODEL.gguf``: plan, launch the engine with exactly the planned flags, wait until it
is healthy, print plan vs actual and the endpoint, serve until Ctrl-C, stop cleanly.

The launch and GPU flags are the same as ``headroom plan``'s. The engine advisories for this
model on the chosen engine are printed before launching. A model the estimate does not know is planned
from pass 1's measured law (app/planner/law.py) and checked like any other; one pass 1 cannot measure is
refused with pass 1's reason. ``--unplanned`` launches with the flags exactly as given (no plan, no
plan-vs-actual check).

Serve launches on this machine's real devices: ``--gpu`` with a card it does not have (a simulated
H200, ``NAME:SIZE``) is for ``headroom plan`` and is refused here. A launch whose pass 1 failed is
refused too, with pass 1's reason (``--no-measure`` skips pass 1 and plans on the estimate).

``--smoke`` is a verdict for a script: it launches with what the shared-sequence smoke test needs
(``-np 2 -kvu`` unless ``-np`` is given), prints ``smoke: ok`` or why not, stops the engine and exits 0 or
1; ``--then-serve`` keeps serving after a passed smoke test."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from app.commands.common import (
    add_engine_arg,
    add_gpu_args,
    add_launch_args,
    advisory_lines,
    exit_status,
    for_what_runs,
    given_engine_problem,
    help_text,
    hub_model,
    inventory_from_args,
    llamafile_lines,
    llamafile_of,
    pass1_lib_dir,
    plan_request,
    say_pass1,
    seconds,
    settings_from_args,
)
from app.engine.discover import EngineInfo, EngineOrigin
from app.engine.process import ServerStatus
from app.planner import words
from app.planner.devices import Inventory
from app.planner.errors import NotModelled
from app.planner.gguf.model import ModelShape
from app.planner.measurement import Measurement
from app.planner.plan_types import Alternative, DevicePlan, Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.units import Bytes, format_tokens

if TYPE_CHECKING:
    from app.engine.check import PlanCheck


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="plan, launch the engine, check the plan held, serve until Ctrl-C",
                       description=_DESCRIPTION, epilog=EXIT_STATUS, allow_abbrev=False,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the GGUF file (the first part of a split model), a llamafile (it serves its own "
                                 "weights; with --engine, another engine serves a copy), or hf:owner/name[:QUANT] "
                                 "(downloaded first)")
    add_launch_args(p)
    add_gpu_args(p)
    add_engine_arg(p, "to launch")
    p.add_argument("--host", default="127.0.0.1", help="listen address (beyond loopback needs the API key)")
    p.add_argument("--port", type=port, default=0, help="port (default: a free one)")
    p.add_argument("--api-key", action="store_true",
                   help="require Headroom's stored API key even on 127.0.0.1 (always required elsewhere)")
    p.add_argument("--alias", default=None, metavar="NAME",
                   help="the name OpenAI clients list the model by (/v1/models; default: the GGUF's general.name, "
                        "else the file's name)")
    p.add_argument("--no-measure", action="store_true", help="skip pass 1 (compute buffer estimated)")
    p.add_argument("--smoke", action="store_true",
                   help="run the shared-sequence smoke test once ready, print its verdict, stop and exit 0 or 1 "
                        "(-np 2 -kvu unless -np is given)")
    p.add_argument("--then-serve", action="store_true", help="with --smoke: keep serving after it passed")
    p.add_argument("--diagnostic", action="store_true",
                   help="launch with GGML_SCHED_DEBUG_REALLOC=1 (for --smoke: name graph re-reserves)")
    p.add_argument("--timeout", type=seconds, default=120.0, help="seconds to wait for the engine to load")
    p.add_argument("--slot-save-path", type=Path, default=None, metavar="DIR",
                   help="where the engine saves slot caches (for `headroom sessions save/restore`); "
                        "llama-server's flag, allocates nothing")
    p.add_argument("--alternative", metavar="TEXT", default=None,
                   help="launch the way that fits whose label holds TEXT, as `headroom plan` lists them (e.g. "
                        "\"KV of\", \"-nkvo\", \"-c 49664\"), instead of the one the plan chose")
    p.add_argument("--unplanned", action="store_true",
                   help="launch with the flags exactly as given, without a plan (--fit off, no plan-vs-actual "
                        "check): for a model Headroom cannot plan, or to see what the engine does with yours")
    p.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                   help="with --unplanned: one more engine argument, passed as is (repeatable; e.g. "
                        "--engine-arg=--rpc --engine-arg=127.0.0.1:50052)")
    p.set_defaults(func=run, n_parallel=None)  # None: not given (--smoke then takes 2 slots in one pool)


_DESCRIPTION = help_text(__doc__ or "")
EXIT_STATUS = exit_status("served, then stopped cleanly (Ctrl-C); with --smoke: the smoke test passed",
                          "the plan does not fit, pass 1 or the engine failed, or the smoke test failed",
                          "the model, a file, a hub ref, the settings or the launch cannot be used (a refused "
                          "launch, --gpu with a card this machine does not have)")


def simulated_gpus(specs: list[str]) -> list[str]:
    """The ``--gpu`` values that name a card rather than this machine's own GPUs (``auto``)."""
    names = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    return [n for n in names if n.lower() != "auto"]


def port(text: str) -> int:
    """A TCP port, 1-65535 (0: a free one): llama-server wraps a larger number silently."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (1-65535, or 0 for a free one)")
    return value


def _file_problem(what: str, path: Path) -> str | None:
    """Why ``path`` cannot be the model or engine file, or None when it is a file (or a member of a
    llamafile, ``Model.llamafile/zip/model.gguf``)."""
    from app.planner.gguf.reader import missing_files

    if path.is_dir():
        return f"{what} is a directory, not a file: {path}"
    if missing_files((path,)):
        return f"{what} not found: {path}"
    return None


def _own_engine(lf: Any) -> tuple[list[EngineInfo], str | None]:
    """The llamafile as the engine for its own weights (probed from the file itself, as every engine
    is), or why it cannot be."""
    from app.engine.discover import discover_engines

    engines = [e for e in discover_engines(lf.path) if e.source == EngineOrigin.SETTINGS]
    if engines and engines[0].is_llamafile and engines[0].version != "unknown":
        return engines, None
    size = sum(m.size for m in (lf.model, lf.projector) if m is not None)
    return [], (f"{lf.path.name} did not start as an engine here (`{lf.path.name} --version` gave no llamafile "
                f"version), so it cannot serve its own weights: give --engine FILE (Headroom's llama-server: "
                f"`headroom engine where`) to serve them with another engine, which copies the GGUF out once "
                f"({Bytes(size)})")


def _for_engine(plan: Plan, engine: EngineInfo, model: Path) -> tuple[Plan, Path]:
    """The model and plan as ``engine`` names their files: the llamafile reads its own members in place
    (``/zip/…``); any other engine gets them copied out once, with progress (app/llamafile/extract.py).
    ExtractError when it cannot."""
    import dataclasses
    import time

    from app.llamafile.extract import extract, extracted_dir, pending
    from app.llamafile.launch import files_for

    files = files_for(model, plan.launch, engine.path if engine.is_llamafile else None)
    items = pending(files.to_extract)
    if files.reads_in_place:
        print(f"llamafile: launched as its own engine, its weights read in place (-m {files.model})", flush=True)
    elif files.to_extract:
        need = sum(p.left for p in items)
        print(f"llamafile: {engine.kind} cannot read the GGUF inside the llamafile: "
              + (f"copying {Bytes(need)} out once into {extracted_dir()} (reused after; Ctrl-C keeps what was copied)"
                 if items else f"using the copy made before in {extracted_dir()}"), flush=True)
        last = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 2.0 or done == total:
                last[0] = now
                print(f"copying: {Bytes(done)} of {Bytes(total)} ({100 * done // max(total, 1)} %)", flush=True)

        extract(items, progress=progress)
    return plan if files.launch == plan.launch else dataclasses.replace(plan, launch=files.launch), files.model


class Pass1Failed(Exception):
    """Pass 1 failed for the launch: serve refuses it (llama.cpp would fail the same way, or run
    with buffers nobody measured). ``error`` is the probe's MeasureError."""

    def __init__(self, error: Any) -> None:
        self.error = error
        super().__init__(str(error))


def serve_plan(args: argparse.Namespace, shape: ModelShape, settings: LaunchSettings,
               engines: list[EngineInfo]) -> tuple[Plan, Inventory]:
    """The plan, with pass 1 (through the on-disk cache) for the plan's own launch unless --no-measure,
    and the devices it was made for; its speeds for the engine that will launch. Raises Pass1Failed
    when pass 1 ran and failed. (bench/h200/placement.py predicts a launch's speeds with it.)"""
    from app.engine.discover import choose
    from app.probe.measure import MeasureError, measure_cached

    engine = choose(engines, PlanMode.asked(args.window))
    inventory, reach = for_what_runs(args, inventory_from_args(args), engine)
    if reach.sentence:  # said once, before pass 1 and the plan: the plan is for what will run
        print(f"GPU: {reach.sentence}" + ("" if inventory.local_gpus else " The plan is for the CPU."), flush=True)
    if reach.note:
        print(f"GPU: {reach.note}", flush=True)

    lib_dir = pass1_lib_dir(args)  # the engine given or chosen measures with its own libllama

    def pass1(launch: LaunchSettings) -> Measurement | None:
        try:
            say_pass1(args.model, launch, lib_dir)
            return measure_cached(args.model, launch, lib_dir=lib_dir)[0]
        except MeasureError as exc:
            raise Pass1Failed(exc) from None

    request = plan_request(args, shape, inventory, None if args.no_measure else pass1, engine)
    plan = request.plan(settings).plan
    if args.alternative:  # another of the ways the plan lists, as planned for itself
        plan = request.plan(chosen_alternative(plan, args.alternative).launch).plan
    return plan, inventory


def chosen_alternative(plan: Plan, text: str) -> Alternative:
    """The plan's alternative that fits and whose label is ``text``, or else holds it (``--alternative``);
    ValueError naming the ones there are when none or several do."""
    fits = [a for a in plan.alternatives if a.feasible]
    # (a whole label is that one, even when it is part of another's: "KV of 2 layers on host" and "… 12 …")
    found = [a for a in fits if a.label == text] or [a for a in fits if text in a.label]
    if len(found) == 1:
        return found[0]
    listed = "; ".join(repr(a.label) for a in fits) or "none"
    how = "matches none" if not found else f"matches {len(found)}"
    raise ValueError(f"--alternative {text!r} {how} of the ways that fit: {listed}")


def _refuse_failed_pass1(failed: Pass1Failed) -> int:
    """Pass 1's own reason (the failing assertion, not the backtrace after it) and what to change."""
    error = failed.error
    from app.engine.launch import pass1_refusal
    from app.text import printable_lines

    print(f"headroom serve: refused: {printable_lines(pass1_refusal(error.reason))}", file=sys.stderr)
    if error.hint:
        print(f"  {error.hint}", file=sys.stderr)
    return 1


def _refuse_not_modelled(args: argparse.Namespace, settings: LaunchSettings, engines: list[EngineInfo],
                         exc: NotModelled) -> int:
    """A model the planner does not model is not served: its advisories, then why.

    Serving it would mean launching with numbers nobody checked (``--fit off`` and explicit sizes
    that could not be planned, no plan-vs-actual); llama-server itself can still run it."""
    from app.engine.discover import choose
    from app.engine.launch import launch_advisories

    mode = PlanMode.asked(args.window)
    engine = choose(engines, mode)
    if engine is not None:
        print("\n".join(advisory_lines(launch_advisories(settings, mode, engine, exc.arch))), flush=True)
    print(f"headroom serve: cannot plan: {exc}; Headroom serves only models it can plan "
          "(add --unplanned to launch it with the flags exactly as given, unchecked)", file=sys.stderr)
    return 2


def unplanned(settings: LaunchSettings, args: argparse.Namespace, reason: str) -> Plan:
    """A launch the user takes responsibility for: the settings as given, nothing sized or checked."""
    from app.planner.plan_types import HostPlan

    gpu = any(g != "auto" for g in args.gpu) or settings.n_gpu_layers > 0
    return Plan(launch=settings, mode=PlanMode.asked(args.window, gpu=gpu), gpus=(),
                host=HostPlan(total=0, available=0, weights_mapped=0, kv_tail=0, compute_pinned=0, free=0),
                feasible=True, reason=words.unplanned_reason(reason), warnings=(words.unplanned_warning(reason),),
                window_cells=0, tail_cells=0, vram_target=args.vram_target)


def run(args: argparse.Namespace) -> int:
    from app.engine.discover import discover_engines
    from app.engine.launch import LaunchRefused, pick_engine, plan_check, prepare, served_name
    from app.engine.process import EngineFailed, bind_problem
    from app.hub.preview import preview_refusal, refuse_preview
    from app.llamacpp.failures import FailureKind
    from app.planner.errors import PlannerError
    from app.planner.gguf.model import read_shape
    from app.text import printable_lines

    try:
        args.model = Path(hub_model(str(args.model), download=True))
        refuse_preview(args.model)
    except PlannerError as exc:
        print(f"headroom serve: {exc}", file=sys.stderr)
        return 2
    problem = _file_problem("model", args.model) or (
        None if args.engine is None else _file_problem("engine", args.engine))
    if problem:
        print(f"headroom serve: {problem}", file=sys.stderr)
        return 2
    if args.n_parallel is None:  # -np not given: one slot, or what the smoke test forks into
        args.n_parallel = 2 if args.smoke else 1
        if args.smoke:  # (what a llamafile's .args asks does not undo what the smoke test needs)
            args.typed = {*getattr(args, "typed", ()), "n_parallel", "kv_unified"}
        if args.smoke and not args.kv_unified:
            args.kv_unified = True
            print("smoke: two slots in one KV pool (-np 2 -kvu), for the two shared sessions it forks", flush=True)
    try:
        lf = llamafile_of(args.model)
    except PlannerError as exc:
        print(f"headroom serve: cannot plan: {exc}", file=sys.stderr)
        return 2
    if lf is not None and args.engine is None:  # the llamafile serves its own weights
        engines, why = _own_engine(lf)
        if why:
            print(f"headroom serve: {why}", file=sys.stderr)
            return 2
    else:
        engines = discover_engines(args.engine)
    if args.engine is not None:
        problem = given_engine_problem(args.engine, engines)
        if problem:  # never fall back to another engine than the one asked for
            print(f"headroom serve: {problem}", file=sys.stderr)
            return 2
        engines = [e for e in engines if e.source == EngineOrigin.SETTINGS]
    busy = bind_problem(args.host, args.port)  # before pass 1 and the engine: nothing is started for it
    if busy is not None:
        advice = {"in_use": "pass another --port, or leave --port out for a free one",
                  "denied": "pass a --port above 1023, or leave --port out for a free one"}.get(
            busy.kind, "pass an address of this machine to --host (127.0.0.1, or 0.0.0.0 for all)")
        print(f"headroom serve: refused: {busy.text}: {advice}", file=sys.stderr)
        return 2
    cards = simulated_gpus(list(args.gpu))  # before any plan: serve plans for what runs here
    if cards:
        print(f"headroom serve: --gpu {','.join(cards)} plans for a card this machine does not have; serve "
              "launches on the real devices: drop --gpu (or --gpu auto)", file=sys.stderr)
        return 2
    try:
        settings = settings_from_args(args)
        modelled = read_shape(args.model)
        shape: ModelShape | None = modelled
        if args.unplanned:  # the user's own flags, unchecked, however well Headroom could plan them
            raise NotModelled(modelled.arch, "asked with --unplanned")
        plan, inventory = serve_plan(args, modelled, settings, engines)
    except Pass1Failed as failed:
        return _refuse_failed_pass1(failed)
    except NotModelled as exc:
        if not args.unplanned:
            return _refuse_not_modelled(args, settings, engines, exc)
        shape, plan, inventory = None, unplanned(settings, args, str(exc)), None
    except (PlannerError, ValueError) as exc:
        print(f"headroom serve: cannot plan: {exc}", file=sys.stderr)
        return 2
    if args.smoke and plan.launch.n_parallel < 2:  # found out before launching, not after loading
        print(f"headroom serve: --smoke forks two shared sessions: it needs -np 2 or more (-np 2 -kvu), "
              f"not -np {plan.launch.n_parallel}", file=sys.stderr)
        return 2
    if args.engine_arg and shape is not None:
        print("headroom serve: --engine-arg is only for --unplanned launches: extra engine flags would "
              "change what the plan sized", file=sys.stderr)
        return 2
    if not plan.feasible:  # the same plan `headroom plan` answers 1 for
        print(f"headroom serve: refused: {words.plan_does_not_fit(plan.reason)}", file=sys.stderr)
        return 1
    for w in plan.warnings:
        print(f"warning: {w}")
    extra = tuple(args.engine_arg)
    if args.slot_save_path is not None:
        try:
            args.slot_save_path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"headroom serve: --slot-save-path {args.slot_save_path}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        extra += ("--slot-save-path", str(args.slot_save_path.resolve()))
    env: dict[str, str] = {}
    if args.diagnostic:
        from app.sessions.smoke import DIAGNOSTIC_ENV

        env.update(DIAGNOSTIC_ENV)
    arch = shape.arch if shape is not None else _arch_of(args.model)
    try:
        engine = pick_engine(plan, engines)
        for line in llamafile_lines(args, plan.launch, engine.is_llamafile):
            print(f"llamafile: {line}", flush=True)
        # absolute(), not resolve(): a model in the Hugging Face cache is a link whose name (-00001-of-00002)
        # is how llama.cpp finds the other parts of a split set; the blob it points at has no such name
        launched, model_file = _for_engine(plan, engine, args.model.absolute())
        alias = args.alias or served_name(shape.name if shape is not None else "", args.model)
        spec = prepare(launched, model_file, [engine], host=args.host, port=args.port or None,
                       require_key=args.api_key, env=env, extra=extra, arch=arch, unlaunchable=preview_refusal,
                       alias=alias)
    except LaunchRefused as exc:
        print(f"headroom serve: refused: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("headroom serve: stopped while copying the GGUF out; what was copied is kept for the next time",
              file=sys.stderr)
        return 130
    except PlannerError as exc:  # the copy out of a llamafile (a full or read-only disk, a cancel)
        print(f"headroom serve: refused: {exc}", file=sys.stderr)
        return 2
    if spec.advisories:
        print("\n".join(advisory_lines(spec.advisories)), flush=True)
    print(f"plan: {plan.mode}, {format_tokens(plan.launch.n_ctx)} tokens — {plan.reason}")
    if plan.speed is not None:  # (what the launch is expected to do, before it loads; checked after)
        print(f"expected speed: {words.speed_sentence(plan.speed)} (predicted; checked after launch)")
    print(f"engine: {spec.engine.kind} {spec.engine.version}, {spec.engine.llama_cpp} ({spec.engine.path})")
    if "--alias" in spec.argv:
        print(f'model: served as "{spec.argv[spec.argv.index("--alias") + 1]}" (the name OpenAI clients list; '
              "--alias to change it)")
    print(f"command: {spec.shell_line}", flush=True)
    if spec.api_key:
        from app.engine.apikey import key_path

        print(f"API key required (stored 0600 in {key_path()}); export HEADROOM_API_KEY=$(cat {key_path()})")
    server = spec.server()
    server.add_listener(_print_status)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM stops as cleanly as Ctrl-C

    # SIGINT too: a process started in the background by a shell without job control (`headroom
    # serve … &` in a script) inherits SIGINT ignored, and Python keeps it so: Ctrl-C and `kill -INT`
    # would leave the engine running.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        server.wait_ready(timeout=args.timeout)
        if shape is not None:
            check = plan_check(plan, server, snapshot=_snapshot(plan, server.pid), api_key=spec.api_key)
            print("plan vs actual:")
            print(check.table())
            from app.engine.check import describe
            from app.engine.check_report import RAN_ON_CPU, ran_on_cpu
            from app.llamacpp.cuda_log import cuda_start
            from app.llamacpp.llamafile_gpu import gpu_story

            print(describe(check))
            if spec.engine.is_llamafile and ran_on_cpu(check, plan):  # "GPU silently falls back to CPU"
                print(gpu_story(server.log_lines()).sentence() or RAN_ON_CPU, flush=True)
            elif ran_on_cpu(check, plan) and (why := cuda_start(server.log_lines()).cause):
                print(f"GPU: {why}.", flush=True)
            for line in learn_overhead(plan.gpus, check):
                print(line, flush=True)
            _speed_row(plan, inventory, server.base_url, spec.api_key, shape.name)
        if args.smoke and not _smoke(server, spec.api_key, args.diagnostic):
            print("headroom serve: the smoke test failed; stopping the engine", file=sys.stderr)
            return 1
        if not args.smoke or args.then_serve:
            from app.sessions.reply_speed import ServingSpeed

            watch = ServingSpeed(plan, server.base_url, spec.api_key)  # (read before a client is told where)
            print(f"serving at {server.serving_at} — Ctrl-C to stop", flush=True)
            while not stop.wait(1.0):
                server.check_alive()
                if (said := watch.poll()) is not None:
                    print(said, flush=True)
    except EngineFailed as exc:
        # the failure is sentences ("The port is in use: …"); its log lines only when they say more
        said = printable_lines(exc.failure.message) if exc.failure.kind == FailureKind.PORT_IN_USE else str(exc)
        print(f"headroom serve: the engine failed. {said}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping the engine…", flush=True)
    finally:
        code = server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"engine stopped ({stopped_how(code)})")
    return 0


def stopped_how(code: int | None) -> str:
    """How the engine ended when asked to stop, in words ("exit code 0"; a SIGKILL is said as such)."""
    if code is not None and code < 0:
        if code == -signal.SIGKILL:
            return "it did not stop when asked: killed (SIGKILL)"
        try:
            return f"ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"ended by signal {-code}"
    return f"exit code {code}"


def _speed_row(plan: Plan, inventory: Inventory | None, base_url: str, api_key: str | None, model: str) -> None:
    """The engine's own timings of one short completion beside the plan's predicted tokens/s; the
    calibration learns measured ÷ predicted for this machine and these devices."""
    from app.engine.speed_check import NotMeasured, check_speed, measure
    from app.machine.calibrate import learn, load_now

    # the check's prompt fits a slot's share of the context (-np 3 at 4,096: about 1,365 tokens each)
    timings = measure(base_url, api_key, slot_tokens=plan.kv.n_ctx_seq if plan.kv is not None else None)
    if isinstance(timings, NotMeasured):
        print(f"speed: {timings}", flush=True)
        return
    check = check_speed(plan, timings)
    if check is None:
        print("speed: not predicted for this engine's placement (the window engine)", flush=True)
        return
    print(check.line(), flush=True)
    if check.not_learned() is not None:  # (load_now() samples the CPU for half a second: only then)
        print(check.not_learned(load_now()), flush=True)
    if inventory is not None and not learn(inventory, check.decode_ratio, check.prefill_ratio, model=model):
        print("speed: the calibration could not be stored (the cache is not writable)", flush=True)


def learn_overhead(gpus: Sequence[DevicePlan], check: PlanCheck, *, nvml: ModuleType | None = None,
                   path: Path | None = None) -> list[str]:
    """The first launch on a GPU model and driver measures the per-process overhead (CUDA context and
    libraries) that plans until then took from the H200 (app/machine/overhead.py): NVML's reading of
    the engine process less the buffers its log shows. Lines saying what was kept (none when a figure
    was kept before, or NVML had no reading of the process). ``nvml``/``path``: tests."""
    from app.machine.devices import inventory
    from app.machine.overhead import record_overhead

    measured = [(g.label, beyond) for g in gpus if not g.simulated and not g.remote
                and (beyond := check.process_overhead(g.name)) is not None]
    if not measured:
        return []
    driver = inventory(nvml).driver
    kept = [o for name, beyond in measured if (o := record_overhead(name, driver, beyond, path=path)) is not None]
    return [f"overhead: {Bytes(o.bytes)} per engine process, {o.source}; plans for this GPU and driver use it"
            for o in kept]


def _print_status(status: ServerStatus, detail: str) -> None:
    """Engine status changes as they happen; a failure and the stop are said once, at the end."""
    if status not in (ServerStatus.FAILED, ServerStatus.STOPPED):
        print(f"engine: {status.value}" + (f" — {detail}" if detail else ""), flush=True)


def _arch_of(model: Path) -> str:
    """The GGUF's ``general.architecture`` (for the advisories), read by the lean reader."""
    from app.planner.gguf.reader import read_header

    return str(read_header(model).fields.get("general.architecture", ""))


def _snapshot(plan: Any, pid: int | None) -> Any:
    """NVML's view of the engine's GPU memory (None without GPUs)."""
    if not plan.gpus:
        return None
    from app.machine.devices import Poller

    with Poller() as poller:
        return poller.poll(pid)


def _smoke(server: Any, api_key: str | None, diagnostic: bool) -> bool:
    """Run the shared-sequence smoke test on the ready engine; True when it passed."""
    from app.llamacpp.logs import parse_log
    from app.sessions.smoke import run_smoke

    backends = len(parse_log("\n".join(server.log_lines())).compute) or None
    result = run_smoke(server.base_url, api_key, server.tail, diagnostic=diagnostic, backends=backends)
    print(f"smoke: {result.kind} — {result.message}", flush=True)
    return result.ok
