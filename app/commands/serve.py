"""``headroom serve MODEL.gguf``: plan, launch the engine with exactly the planned flags, wait until it
is healthy, print plan vs actual and the endpoint, serve until Ctrl-C, stop cleanly."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from app.planner.units import Bytes, parse_tokens


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="plan, launch the engine, check the plan held, serve until Ctrl-C",
                       description=__doc__)
    p.add_argument("model", type=Path, help="the GGUF file")
    p.add_argument("-c", "--ctx", default="4096", help="context in tokens: 32768, 128k, 1M (default 4096)")
    p.add_argument("-ctk", "--cache-type-k", default="f16", dest="type_k")
    p.add_argument("-ctv", "--cache-type-v", default="f16", dest="type_v")
    p.add_argument("-np", "--parallel", type=int, default=1, dest="n_parallel")
    p.add_argument("-kvu", "--kv-unified", action="store_true", dest="kv_unified")
    p.add_argument("--swa-full", action="store_true")
    p.add_argument("-ub", "--ubatch-size", type=int, default=512, dest="n_ubatch")
    p.add_argument("-b", "--batch-size", type=int, default=2048, dest="n_batch")
    p.add_argument("-fa", "--flash-attn", choices=("on", "off", "auto"), default="on")
    p.add_argument("-ngl", "--gpu-layers", type=int, default=999, dest="n_gpu_layers")
    p.add_argument("-nkvo", "--no-kv-offload", action="store_true")
    p.add_argument("--window", action="store_true", help="use the opencoti engine's KV window")
    p.add_argument("--vram-target", type=Bytes.parse, default=None, help="GPU budget for the window, e.g. 80GiB")
    p.add_argument("--engine", type=Path, default=None, help="the engine binary to use (else discovered)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (beyond loopback needs the API key)")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--api-key", action="store_true",
                   help="require Headroom's stored API key even on 127.0.0.1 (always required elsewhere)")
    p.add_argument("--no-measure", action="store_true", help="skip pass 1 (compute buffer estimated)")
    p.add_argument("--smoke", action="store_true", help="run the shared-sequence smoke test once ready")
    p.add_argument("--diagnostic", action="store_true",
                   help="launch with GGML_SCHED_DEBUG_REALLOC=1 (for --smoke: name graph re-reserves)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the engine to load")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Any:
    from app.planner.settings import LaunchSettings

    return LaunchSettings(n_ctx=parse_tokens(str(args.ctx)), type_k=args.type_k, type_v=args.type_v,
                          n_parallel=args.n_parallel, kv_unified=args.kv_unified, swa_full=args.swa_full,
                          n_ubatch=args.n_ubatch, n_batch=args.n_batch, flash_attn=args.flash_attn,
                          n_gpu_layers=args.n_gpu_layers, offload_kqv=not args.no_kv_offload)


def _plan(args: argparse.Namespace, engine_window: bool) -> Any:
    """make_plan with pass 1 for the plan's own launch (re-measured if the solver changed it)."""
    from app.planner.devices import resolve_gpus
    from app.planner.gguf_model import read_shape
    from app.planner.measure import MeasureError, measure
    from app.planner.plan import make_plan

    shape, inv, settings = read_shape(args.model), resolve_gpus([]), _settings(args)
    kw: dict[str, Any] = {"engine_window": engine_window, "vram_target": args.vram_target}
    plan = make_plan(shape, inv, settings, **kw)
    if args.no_measure:
        return plan
    for _ in range(2):
        try:
            measurement = measure(args.model, plan.launch)
        except MeasureError as exc:
            print(f"pass 1 failed, compute buffer estimated: {exc}", file=sys.stderr)
            return plan
        measured = make_plan(shape, inv, settings, measurement=measurement, **kw)
        if measured.launch == plan.launch:
            return measured
        plan = measured
    return plan


def run(args: argparse.Namespace) -> int:
    from app.engine.discover import discover_engines
    from app.engine.launch import LaunchRefused, plan_check, prepare
    from app.engine.process import EngineFailed
    from app.planner.errors import PlannerError

    if not args.model.is_file():
        print(f"headroom serve: model not found: {args.model}", file=sys.stderr)
        return 2
    if args.engine is not None and not args.engine.is_file():
        print(f"headroom serve: engine not found: {args.engine}", file=sys.stderr)
        return 2
    engines = discover_engines(args.engine)
    if args.engine is not None:
        engines = [e for e in engines if e.source == "settings"] or engines
    try:
        plan = _plan(args, engine_window=args.window)
    except (PlannerError, ValueError) as exc:
        print(f"headroom serve: cannot plan: {exc}", file=sys.stderr)
        return 2
    for w in plan.warnings:
        print(f"warning: {w}")
    env: dict[str, str] = {}
    if args.diagnostic:
        from app.sessions.smoke import DIAGNOSTIC_ENV

        env.update(DIAGNOSTIC_ENV)
    try:
        spec = prepare(plan, args.model.resolve(), engines, host=args.host, port=args.port or None,
                       require_key=args.api_key, env=env)
    except LaunchRefused as exc:
        print(f"headroom serve: refused: {exc}", file=sys.stderr)
        return 2
    print(f"plan: {plan.mode}, {plan.launch.n_ctx} tokens — {plan.reason}")
    print(f"engine: {spec.engine.kind} {spec.engine.version} ({spec.engine.path})")
    print(f"command: {spec.shell_line}", flush=True)
    if spec.api_key:
        from app.engine.apikey import key_path

        print(f"API key required (stored 0600 in {key_path()}); export HEADROOM_API_KEY=$(cat {key_path()})")
    server = spec.server()
    server.add_listener(lambda status, detail: print(f"engine: {status.value}" + (f" — {detail}" if detail else ""), flush=True))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM stops as cleanly as Ctrl-C

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        server.start()
        server.wait_ready(timeout=args.timeout)
        check = plan_check(plan, server, snapshot=_snapshot(plan, server.pid), api_key=spec.api_key)
        print("plan vs actual:")
        print(check.table())
        from app.engine.check import describe

        print(describe(check))
        if args.smoke:
            _smoke(server, spec.api_key, args.diagnostic)
        print(f"serving at {server.base_url} — Ctrl-C to stop", flush=True)
        while not stop.wait(1.0):
            server.check_alive()
    except EngineFailed as exc:
        print(f"headroom serve: the engine failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        code = server.stop()
        signal.signal(signal.SIGTERM, previous)
    print(f"engine stopped (exit code {code})")
    return 0


def _snapshot(plan: Any, pid: int | None) -> Any:
    """NVML's view of the engine's GPU memory (None without GPUs)."""
    if not plan.gpus:
        return None
    from app.planner.devices import Poller

    with Poller() as poller:
        return poller.poll(pid)


def _smoke(server: Any, api_key: str | None, diagnostic: bool) -> None:
    from app.sessions.smoke import run_smoke

    result = run_smoke(server.base_url, api_key, server.tail, diagnostic=diagnostic)
    print(f"smoke: {result.kind} — {result.message}", flush=True)
