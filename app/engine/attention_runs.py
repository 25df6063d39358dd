"""The engine side of the speed figures: whether the engine that will launch runs a host-KV layer's
attention on the CPU (Headroom's patch 5), and the CPU-attention engine runs (app/engine/cpu_attention.py)
made once per machine and head size and kept in the speed-calibration cache (app/machine/calibrate.py).

A run needs a ``llama-batched-bench``: the one ``HEADROOM_BATCHED_BENCH`` names (``off``: none, never
measure; the tests' setting, tests/conftest.py), else the one beside the engine that launches, else the
one of Headroom's own build (the same ggml CPU code). With none, nothing is measured and the figures say
they are not calibrated. It is made:

- right after ``headroom engine build``, for the head sizes real models have (``BUILD_HEAD_DIMS``);
- by ``headroom doctor`` (unless ``--no-selftest``), which says the figures it found or measured;
- by ``plan`` and ``serve`` for a model whose head size has no run yet on this machine: in the background
  (``start_in_background``: ``headroom engine attention``, about a minute), so no plan waits for it; the
  line on stderr says the plan is priced without it, and the next plans price with it; by the window in
  its task pool (a status line; the plan is priced again when it lands);
- never while the machine is busy (``calibrate.busy``): a figure is kept for good, and one timed under
  load would price every later plan too slow; a later plan measures it;
- for the host CPU, and for each RPC worker's device in the plan (its own run, through the worker).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine.advisories import HOST_KV_ATTENTION
from app.engine.cpu_attention import batched_bench, bench_run, kv_types_for
from app.engine.discover import EngineInfo
from app.machine import calibrate
from app.planner.devices import GpuDevice, Inventory

#: The head sizes measured right after ``headroom engine build`` (and by ``doctor``): what almost every
#: real model has (Llama, Qwen, Mistral: 128; small models and some MoE: 64).
BUILD_HEAD_DIMS = (64, 128)
#: A ``llama-batched-bench`` to time with instead of the engine's own, or ``BENCH_OFF`` (module docstring).
BENCH_ENV = "HEADROOM_BATCHED_BENCH"
BENCH_OFF = "off"


def host_attention(engine: EngineInfo | None) -> bool:
    """The engine runs a host-KV layer's decode attention on the CPU: Headroom's own build, which
    carries patch 5 (llamafile, another llama-server or an older build of Headroom's do not)."""
    return engine is not None and HOST_KV_ATTENTION in engine.fixes


def bench_source(engine: EngineInfo | None) -> str:
    """What ``find_bench(engine)`` depends on, read without touching a file (the window asks on every
    plan): ``BENCH_ENV``'s value, else the engine's path ("": none known yet)."""
    return os.environ.get(BENCH_ENV, "").strip() or (engine.path if engine is not None else "")


def find_bench(engine: EngineInfo | None = None) -> Path | None:
    """The ``llama-batched-bench`` the runs are made with (module docstring), or None."""
    given = os.environ.get(BENCH_ENV, "").strip()
    if given:
        return Path(given) if given != BENCH_OFF and Path(given).is_file() else None
    if engine is not None and not engine.is_llamafile and (found := batched_bench(Path(engine.path))) is not None:
        return found
    from app.engine.native_build import find_build

    build = find_build()
    return batched_bench(build.server) if build is not None else None


def _who(device: GpuDevice | None) -> str:
    return "this CPU" if device is None else f"{device.engine_name} ({device.name})"


def _heads(heads: list[int]) -> str:
    return " and ".join(f"{h}-wide" for h in heads) + " heads"


def progress_line(todo: list[tuple[GpuDevice | None, int]]) -> str:
    """What is about to be measured, said before it runs (it takes seconds)."""
    who = list(dict.fromkeys(_who(d) for d, _ in todo))
    whose = "this CPU's attention speed" if who == ["this CPU"] else f"the attention speed of {' and '.join(who)}"
    return f"measuring {whose} for {_heads(sorted({h for _, h in todo}))} (once; up to a minute)…"


def _ns(seconds: float) -> str:
    """"66.5 ns", "2.09 µs" (a figure of a busy moment reads as what it is)."""
    return f"{seconds * 1e6:.3g} µs" if seconds >= 1e-6 else f"{seconds * 1e9:.3g} ns"


#: What an earlier version's run lacks (app/machine/calibrate.py ``ENGINE_RUN_VERSION``).
OLDER_RUN = ("an earlier version's run, without the server run (a token's fixed cost priced at the default) or "
             "before that the deep run and the GQA run (a decode priced "
             "over KV the caches hold, not a real model's, read from memory)")


def run_lines(runs: dict[str, Any], pairs: list[tuple[GpuDevice | None, int]], *, verb: str = "measured") -> list[str]:
    """One line per (device, head size) in ``runs`` (the cache's ``engine_runs``): its decode and prefill
    cost per KV cell and head by KV type, or that it could not be measured (its attention is then priced
    at memory bandwidth, not calibrated), or that the figures are an earlier version's run's."""
    out = []
    for dev, head in pairs:
        by_head = runs.get(calibrate.engine_run_key(dev)) or {}
        run = calibrate.run_stored(by_head, head)
        who = f"{_who(dev)}'s flash attention, {head}-wide heads"
        if run is None:  # not kept: the run failed or its runs disagreed
            out.append(f"{verb}: {who}: no figure this time (the engine run failed or was too noisy: is the "
                       "machine busy?); priced at memory bandwidth until a later plan measures it")
            continue
        # (read as the speed model reads them: a figure of any other shape is none)
        figs = calibrate.attention_figures({str(head): run})
        parts = [f"{a.kv_type} decode {a.curve_words() or _ns(a.decode.value)}"
                 + (f" ({_ns(a.decode_gqa.value)} a query head, {a.gqa:g} over a KV head)" if a.decode_gqa else "")
                 + (f", {_ns(a.decode_deep.value)} over more KV than the caches hold"
                    if a.decode_deep and not a.decode_curve else "")
                 + f", prefill {_ns(a.prefill.value)}" for a in figs]
        # a KV type whose runs failed or disagreed is said, not silently left out (app/planner/solve/
        # speed.py ``attention_cost`` prices it from another head size's figure, or at memory bandwidth)
        missing = [kv for kv in kv_types_for(head) if kv not in {a.kv_type for a in figs}]
        tail = f"; {' and '.join(missing)}: no figure (its runs failed or disagreed)" if parts and missing else ""
        figures = f"{'; '.join(parts)} per KV cell and head{tail}"
        if isinstance(srv := run.get(calibrate.SERVER_RUN), dict) and isinstance(t := srv.get("token"), (int, float)):
            figures += f"; a token's fixed cost in llama-server {t * 1e3:.2f} ms"
        if not calibrate.run_kept(by_head, head):
            lead = (f"{verb}: {who}: no new figure this time (the engine run failed or was too noisy: is the machine "
                    "busy?); kept" if verb == "measured" else f"{verb}: {who}:")
            out.append(f"{lead} {OLDER_RUN}" + (f": {figures}" if parts else "") + "; a later plan measures it again")
            continue
        out.append(f"{verb}: {who}: {figures}" if parts else
                   f"{verb}: {who}: no figure (the engine run failed or was too noisy): priced at memory "
                   "bandwidth, not calibrated")
    return out


def ensure_runs(inventory: Inventory, head_dims: tuple[int, ...], engine: EngineInfo | None = None, *,
                threads: int | None = None, path: Path | None = None,
                say: Callable[[str], None] | None = None) -> list[str]:
    """Make the engine runs ``inventory``'s devices have none of yet for ``head_dims`` and store them;
    ``say`` gets the progress line first. Returns what was measured, a line per device and head size
    (empty: nothing was missing, or there is no bench to measure with)."""
    todo = calibrate.missing_engine_runs(inventory, head_dims, path=path)
    if not todo:
        return []
    bench = find_bench(engine)
    if bench is None:
        return []
    if (why := calibrate.busy()) is not None:  # kept for good: not a figure of a busy moment
        who = " and ".join(dict.fromkeys(_who(d) for d, _ in todo))
        runs = calibrate.calibration_runs(inventory, path=path)
        older = any(calibrate.run_stored(runs.get(calibrate.engine_run_key(d)), h) for d, h in todo)
        return [f"not measured now: the attention speed of {who} (the machine is busy: {why}): priced "
                + ("with an earlier version's run" if older else "at memory bandwidth")
                + " until a plan on a quieter machine measures it"]
    if say is not None:
        say(progress_line(todo))
    heads = tuple(sorted({h for _, h in todo}))
    data = calibrate.calibration(inventory, path=path, engine_run=bench_run(bench, threads), head_dims=heads)
    return run_lines(data.get("engine_runs") or {}, todo)


#: The background run's process id, while it runs (in the cache; one run at a time for this machine).
PID_FILE = "attention-run.pid"


def _running_pid(pid_file: Path) -> int | None:
    """The pid of a background run still alive (``headroom engine attention``), else None."""
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"attention" in cmdline else None


def start_in_background(inventory: Inventory, head_dims: tuple[int, ...], engine: EngineInfo | None = None,
                        *, say: Callable[[str], None] | None = None) -> list[str]:
    """``ensure_runs`` without waiting: this CPU's missing runs are made by a background ``headroom engine
    attention`` (an RPC worker's, which go through the worker, here and now); the line says the plan at
    hand is priced without them. Nothing when nothing is missing or there is no bench."""
    from app.paths import cache_dir

    todo = calibrate.missing_engine_runs(inventory, head_dims)
    if any(d is not None for d, _ in todo):  # a worker's device: measured through it, now
        return ensure_runs(inventory, head_dims, engine, say=say)
    if not todo or find_bench(engine) is None:
        return []
    if calibrate.busy() is not None:
        return ensure_runs(inventory, head_dims, engine, say=say)  # (says why not now)
    heads = tuple(sorted({h for _, h in todo}))
    pid_file = cache_dir() / PID_FILE
    priced = "this plan is priced at memory bandwidth, the next plans with the measured speed"
    if (pid := _running_pid(pid_file)) is not None:
        return [f"this CPU's attention speed is being measured in the background (pid {pid}): {priced}"]
    argv = [sys.executable, "-m", "app", "engine", "attention", "--head-dims", ",".join(map(str, heads))]
    if engine is not None and not engine.is_llamafile:
        argv += ["--engine", engine.path]
    try:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        log = (cache_dir() / "logs")
        log.mkdir(exist_ok=True)
        with open(log / "attention-run.log", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        pid_file.write_text(f"{proc.pid}\n")
        # reaped when it ends, should this process (a serve, the tests) still run then
        threading.Thread(target=proc.wait, name="attention-run-reaper", daemon=True).start()
    except OSError as exc:  # a read-only cache: nothing could be kept anyway
        return [f"not measured: this CPU's attention speed ({exc.strerror or exc}): priced at memory bandwidth"]
    return [f"measuring this CPU's attention speed for {_heads(list(heads))} in the background (about a minute, "
            f"once; pid {proc.pid}): {priced}"]


def run_in_foreground(head_dims: tuple[int, ...], engine: EngineInfo | None) -> list[str]:
    """What ``headroom engine attention`` does: this CPU's runs for ``head_dims`` now, the lines said, and
    its pid file gone when done."""
    from app.paths import cache_dir

    pid_file = cache_dir() / PID_FILE
    try:
        return ensure_runs(host_only(), head_dims, engine)
    finally:
        if _running_pid(pid_file) == os.getpid():
            pid_file.unlink(missing_ok=True)


def host_only() -> Inventory:
    """This machine's host, no device: what ``engine build`` and ``doctor`` measure for (the host's
    figures are kept by its CPU model and RAM, whatever GPUs a plan later has)."""
    from app.machine.devices import host_memory

    return Inventory(gpus=(), host=host_memory())


def host_runs(*, measure_missing: bool, say: Callable[[str], None] | None = None,
              engine: EngineInfo | None = None) -> list[str]:
    """The host's runs for ``BUILD_HEAD_DIMS``, a line each: "measured" now (where missing and
    ``measure_missing``, with ``engine``'s bench where it has one), "stored" before (an earlier version's
    said as such), or not measured and why (``engine build``, ``doctor``)."""
    inventory = host_only()
    before = calibrate.missing_engine_runs(inventory, BUILD_HEAD_DIMS)
    made = ensure_runs(inventory, BUILD_HEAD_DIMS, engine, say=say) if measure_missing else []
    stored = calibrate.calibration_runs(inventory)
    kept = run_lines(stored, [(None, h) for h in BUILD_HEAD_DIMS if (None, h) not in before], verb="stored")
    if made:  # (what was measured, or why not now: said per head size or for all)
        return made + kept
    host = stored.get(calibrate.HOST_RUN)
    why = ("no llama-batched-bench to time it with: `headroom engine build`" if find_bench(engine) is None
           else "`headroom doctor` measures it; with --no-selftest it does not")
    rest = []
    for _, h in before:
        if calibrate.run_stored(host, h) is not None:  # an earlier version's run
            rest += run_lines(stored, [(None, h)], verb="stored")
        else:
            rest.append(f"not measured: this CPU's flash attention, {h}-wide heads ({why}): priced at memory "
                        "bandwidth, not calibrated")
    return kept + rest
