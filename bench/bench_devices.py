"""How much a live GPU snapshot costs on the replayed H200 NVML (target: < 5 ms, so a 1/s poll
never janks the GUI). Run: ``.venv/bin/python -m bench.bench_devices [--n 2000]``; exits 1 when the
worst scenario's p95 misses the target.

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

from app.machine.devices import Poller  # noqa: E402
from app.planner.units import GiB  # noqa: E402
from bench.report import Target, Verdicts, table  # noqa: E402
from tests.fixtures.fake_nvml import FakeNvml  # noqa: E402

SNAPSHOT = Target("a live snapshot (p95)", 5.0, "ms", "issue 5, the replayed H200 NVML")


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
    verdicts = Verdicts()
    rows = []
    for label, fake, engine_pid in _scenarios():
        first, samples = _time(args.n, fake, engine_pid)
        mean = statistics.fmean(samples)
        p95 = statistics.quantiles(samples, n=20)[-1]
        rows.append([label, f"{first:.3f}", f"{mean:.4f}", f"{p95:.4f}", f"{max(samples):.3f}",
                     f"{SNAPSHOT.ratio(p95):.4f}", verdicts.check(SNAPSHOT, label, p95)])
    print(f"{args.n} snapshots per scenario after the first (nvmlInit, handles, static facts)")
    print(table(["scenario", "first ms", "mean ms", "p95 ms", "max ms", "p95/5ms", "target"], rows))
    print()
    verdicts.print()
    return verdicts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
