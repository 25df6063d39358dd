"""Pass 1 end to end (child process included) on the shape fixtures, beside the real engine's start.

    .venv/bin/python -m bench.bench_measure [--repeat 3] [--ctx 8192] [--engine-ram-fraction 0.25]

The probe reads no weights (no_alloc, load_mode none), so its time must not grow with the file:
the table prints seconds per file and the ratio of the largest to the smallest. Beside it, the
real llama-server's start to ``/health`` 200 for the same LaunchSettings (``--no-warmup``), which
maps the whole file with MAP_POPULATE: it is only run where the file fits comfortably in the
available RAM (``--engine-ram-fraction``), and its page cache is dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from app.engine.argv import build_argv
from app.engine.discover import EngineInfo
from app.engine.native_build import EngineBuild, find_build
from app.planner.measure import measure
from app.planner.settings import LaunchSettings
from tests.fixtures import gguf_factory, pagecache, shapes
from tests.fixtures.server_proc import free_port

GB = 1e9


def engine_start_to_health(build: EngineBuild, model: Path, settings: LaunchSettings,
                           deadline_s: float = 600.0) -> float:
    """Seconds from exec to ``GET /health`` 200 (polled every 250 ms, like ollama)."""
    port = free_port()
    info = EngineInfo("llama-server", str(build.server), "bench", build.commit, "native build")
    argv = build_argv(info, settings, "stock", model, "127.0.0.1", port, extra=["--no-warmup"])
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
    models = sorted((gguf_factory.ensure(s) for s in shapes.SHAPES if not s.loadable),
                    key=lambda p: p.stat().st_size)
    print(f"pass 1 (llama-cpp-python no_alloc probe, child process) vs llama-server start to /health; "
          f"ctx {args.ctx}, median of {args.repeat}")
    print(f"{'model':<34} {'file GB':>8} {'pass 1 s':>9} {'max s':>7} {'s per GB':>9} {'engine s':>9} {'ratio':>7}")
    probe_s: dict[Path, float] = {}
    for model in models:
        size = model.stat().st_size
        times = [measure(model, settings).seconds for _ in range(args.repeat)]
        med = statistics.median(times)
        probe_s[model] = med
        available = psutil.virtual_memory().available
        if size < args.engine_ram_fraction * available:
            engine = engine_start_to_health(build, model, settings)
            engine_col, ratio = f"{engine:9.2f}", f"{engine / med:6.0f}x"
        else:
            engine_col, ratio = f"{'skipped':>9}", f"{'-':>7}"
        name = model.name.rsplit("-", 1)[0]
        print(f"{name:<34} {size / GB:8.1f} {med:9.3f} {max(times):7.3f} {med / (size / GB):9.4f} "
              f"{engine_col} {ratio}")
    small, large = models[0], models[-1]
    growth = probe_s[large] / probe_s[small]
    size_ratio = large.stat().st_size / small.stat().st_size
    print(f"largest/smallest file: {size_ratio:.1f}x the bytes, {growth:.2f}x the pass-1 time")
    print("engine 'skipped': the file would not fit in page cache next to the repacked weights here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
