"""How much a live GPU snapshot costs on the replayed H200 NVML (target: < 5 ms, so a 1/s poll
never janks the GUI). Run: ``.venv/bin/python bench/bench_devices.py [--n 2000]``.

Replayed NVML answers in microseconds, so this measures Headroom's own work per snapshot
(building samples, PID → engine classification, psutil names); a real driver adds its call costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.planner.devices import Poller  # noqa: E402
from app.planner.units import GiB  # noqa: E402
from tests.fixtures.fake_nvml import FakeNvml  # noqa: E402

TARGET_MS = 5.0


def _scenarios() -> list[tuple[str, FakeNvml, int | None]]:
    me = os.getpid()
    parent = os.getppid()
    return [
        ("1 GPU, idle (recorded)", FakeNvml(), None),
        ("1 GPU, pid 419 (recorded) + engine", FakeNvml(compute=[(me, 2 * GiB), (419, 543_162_368)]), me),
        ("8 GPUs, 3 processes each", FakeNvml(device_count=8,
                                              compute=[(me, GiB), (parent, GiB), (419, 543_162_368)]), me),
    ]


def _time(n: int, fake: FakeNvml, engine_pid: int | None) -> tuple[float, list[float]]:
    with Poller(fake) as poller:
        t0 = time.perf_counter_ns()
        poller.poll(engine_pid)  # first poll: nvmlInit + handles + static facts
        first = (time.perf_counter_ns() - t0) / 1e6
        samples = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            snap = poller.poll(engine_pid)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
            assert snap.ok and snap.gpus
    return first, samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="snapshots per scenario")
    args = parser.parse_args()
    print(f"{'scenario':<38} {'first ms':>9} {'mean ms':>9} {'p95 ms':>9} {'max ms':>9} "
          f"{'mean/5ms':>9} {'p95/5ms':>9}")
    worst = 0.0
    for label, fake, engine_pid in _scenarios():
        first, samples = _time(args.n, fake, engine_pid)
        mean = statistics.fmean(samples)
        p95 = statistics.quantiles(samples, n=20)[-1]
        worst = max(worst, p95)
        print(f"{label:<38} {first:>9.3f} {mean:>9.4f} {p95:>9.4f} {max(samples):>9.3f} "
              f"{mean / TARGET_MS:>9.4f} {p95 / TARGET_MS:>9.4f}")
    verdict = "OK" if worst < TARGET_MS else "TOO SLOW"
    print(f"worst p95 {worst:.4f} ms vs target {TARGET_MS} ms: {verdict} ({args.n} snapshots per scenario)")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
