"""Pass 1 end to end (child process included) on the shape fixtures, beside the real engine's start.

    .venv/bin/python -m bench.bench_measure [--repeat 3] [--ctx 8192] [--engine-ram-fraction 0.25]

Targets (issue 4): pass 1 on the 30 GB shape (``qwen3-30b-a3b-q8_0``, 32.5 GB) and on the 8 GB
shape (``llama-3.1-8b-instruct-q4_k_m``, an 8B model) in < 2 s each, wall clock around
``measure()``; every other shape is held to the same limit. It reads no weights (no_alloc,
load_mode none), so its time must not grow with the file: the 30 GB shape may take at most 1.5x
the 8 GB one, and the Q8_0 copy of Qwen3-30B-A3B at most 1.5x its Q4_K_M copy (the same 579
tensors, 1.75x the bytes). Exits 1 when a target is missed.

Beside it, the real llama-server's start to ``/health`` 200 for the same LaunchSettings
(``--no-warmup``). It maps the whole file with MAP_POPULATE, so it only runs where the file is
below ``--engine-ram-fraction`` of the available RAM (never the 30 GB shape on a 24 GiB machine),
and the file's page cache is dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from app.engine.argv import build_argv
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.native_build import EngineBuild, find_build
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.probe.measure import measure
from bench.report import Target, Verdicts, table, timings
from tests.fixtures import gguf_factory, pagecache, shapes
from tests.fixtures.server_proc import free_port
from tests.fixtures.spec import ModelSpec

GB = 1e9
PASS1 = Target("pass 1 end to end", 2.0, "s", "issue 4, the 30 GB and the 8 GB shapes")
GROWTH = Target("pass-1 time of the larger file / the smaller", 1.5, "x", "issue 4: it must not grow with size")
BIG, SMALL = shapes.QWEN3_30B_A3B_Q8, shapes.LLAMA31_8B
SAME_TABLE = (shapes.QWEN3_30B_A3B, shapes.QWEN3_30B_A3B_Q8)


def engine_start_to_health(build: EngineBuild, model: Path, settings: LaunchSettings,
                           deadline_s: float = 600.0) -> float:
    """Seconds from exec to ``GET /health`` 200 (polled every 250 ms, like ollama)."""
    port = free_port()
    info = EngineInfo(EngineKind.LLAMA_SERVER, str(build.server), "bench", build.commit, EngineOrigin.HEADROOM_BUILD)
    argv = build_argv(info, settings, PlanMode.STOCK, model, "127.0.0.1", port, extra=["--no-warmup"])
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.monotonic() - started < deadline_s:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError("llama-server did not become healthy")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        pagecache.drop(model)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--engine-ram-fraction", type=float, default=0.25,
                    help="start the real engine only for files below this fraction of available RAM")
    args = ap.parse_args()
    build = find_build()
    if build is None:
        print("no engine build: run `headroom engine build` first")
        return 1
    settings = LaunchSettings(n_ctx=args.ctx, n_parallel=1)
    specs = sorted((s for s in shapes.SHAPES if not s.loadable), key=lambda s: gguf_factory.ensure(s).stat().st_size)
    verdicts = Verdicts()
    median_s: dict[str, float] = {}
    rows = []
    for spec in specs:
        model = gguf_factory.ensure(spec)
        size = model.stat().st_size

        def pass1(m: Path = model) -> object:
            return measure(m, settings)

        times = timings(pass1, args.repeat)
        med = median_s[spec.name] = statistics.median(times)
        available = psutil.virtual_memory().available
        if size < args.engine_ram_fraction * available:
            engine = engine_start_to_health(build, model, settings)
            engine_cols = [f"{engine:.2f}", f"{engine / med:.0f}x"]
        else:
            engine_cols = ["skipped", "-"]
        rows.append([spec.name, f"{size / GB:.1f}", f"{med:.3f}", f"{max(times):.3f}", f"{med / (size / GB):.4f}",
                     f"{PASS1.ratio(med):.2f}", verdicts.check(PASS1, spec.name, med), *engine_cols])
    print(f"pass 1 (llama-cpp-python no_alloc probe, child process) vs llama-server start to /health; "
          f"ctx {args.ctx}, -np 1, median of {args.repeat}")
    print(table(["model", "file GB", "pass 1 s", "max s", "s per GB", "/2s", "target", "engine s", "engine/pass 1"],
                rows))
    print(f"engine 'skipped': the file is over {args.engine_ram_fraction:g} of the available RAM "
          "(MAP_POPULATE would fill the page cache)")
    print()
    growth_rows = []
    for small, big in ((SMALL, BIG), SAME_TABLE):
        label = f"{big.name} / {small.name}"
        growth = median_s[big.name] / median_s[small.name]
        growth_rows.append([label, f"{_size(big) / _size(small):.2f}x", f"{growth:.2f}x",
                            f"{GROWTH.ratio(growth):.2f}", verdicts.check(GROWTH, label, growth)])
    print(table(["does pass 1 grow with the file?", "bytes", "pass-1 time", "/1.5x", "target"], growth_rows))
    print()
    verdicts.print()
    return verdicts.exit_code()


def _size(spec: ModelSpec) -> int:
    return gguf_factory.ensure(spec).stat().st_size


if __name__ == "__main__":
    sys.exit(main())
