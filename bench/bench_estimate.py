"""The CPU compute estimate against CPU pass 1 over the whole grid (issue 17, §1).

    .venv/bin/python -m bench.bench_estimate [--models NAME,NAME] [--worst 25]

Every launch of tests/fixtures/estimate_sweep.py's grid — contexts 4k, 32k, 256k and 1M; ubatch 256,
512, 2048 and 4096; -np 1, 2 and 8 with -kvu on and off; flash attention on (f16, q8_0, q4_0 caches)
and off (f16) — on nine shape fixtures from a 259-token to a 262k-token vocabulary: 2880 launches,
each model's in one no_alloc child (about 5 minutes on 2 busy cores). For each, llama.cpp's own CPU
compute buffer (pass 1) beside the estimate a plan shows before pass 1 (app/planner/memory/compute.py).

Targets (issue 17): before its 64 MiB margin the estimate is never below pass 1, and never more than
max(1 %, 64 MiB) above it. Prints a table per model and regime, the launches nearest each bound, and
exits 1 when any launch misses.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import defaultdict

from app.planner.units import MiB
from bench.report import Target, Verdicts, table
from tests.fixtures import estimate_sweep
from tests.fixtures.estimate_sweep import Row, tolerance

UNDER = Target("the estimate's shortfall below pass 1", 0.001, "MiB", "issue 17: never below pass 1")
OVER = Target("the estimate's excess over pass 1, as a share of max(1 %, 64 MiB)", 1.0, "x",
              "issue 17: within max(1 %, 64 MiB)")


def _regime(r: Row) -> str:
    s = r.settings
    return f"-fa {s.flash_attn} {s.type_k}"


def summary(rows: list[Row], verdicts: Verdicts) -> None:
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.model, _regime(r))].append(r)
    out = []
    for (model, regime), rs in groups.items():
        short = max(-r.over for r in rs)
        excess = max(r.over / tolerance(r.pass1) for r in rs)
        cells = {verdicts.check(UNDER, f"{model} {regime}", max(short, 0.0) / MiB),
                 verdicts.check(OVER, f"{model} {regime}", excess)}
        out.append([model, regime, len(rs), f"{min(r.pass1 for r in rs) / MiB:,.1f}",
                    f"{max(r.pass1 for r in rs) / MiB:,.1f}", f"{min(r.over for r in rs) / MiB:+.2f}",
                    f"{max(r.over for r in rs) / MiB:+.2f}", f"{excess:.2f}", "MISSED" if "MISSED" in cells else "ok"])
    print(table(["model", "regime", "launches", "pass 1 min MiB", "pass 1 max MiB", "est − pass 1 min",
                 "est − pass 1 max", "max / bar", "verdict"], out))


def nearest(rows: list[Row], n: int) -> None:
    def line(r: Row) -> list[object]:
        return [r.label(), f"{r.pass1 / MiB:,.2f}", f"{r.before_margin / MiB:,.2f}", f"{r.over / MiB:+.2f}",
                f"{tolerance(r.pass1) / MiB:,.1f}"]

    headers = ["launch", "pass 1 MiB", "estimate − margin MiB", "difference", "bar MiB"]
    print(f"\nthe {n} launches nearest pass 1 (the lower bound):")
    print(table(headers, [line(r) for r in sorted(rows, key=lambda r: r.over)[:n]]))
    print(f"\nthe {n} launches nearest the upper bound (difference / bar):")
    print(table(headers, [line(r) for r in sorted(rows, key=lambda r: -r.over / tolerance(r.pass1))[:n]]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--models", default=",".join(estimate_sweep.MODELS), help="comma-separated shape names")
    ap.add_argument("--worst", type=int, default=20, help="launches to list nearest each bound")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    cases = estimate_sweep.grid(models)
    print(f"{len(cases)} launches, {len(models)} models; {platform.node()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    started = time.monotonic()
    rows = estimate_sweep.run(cases, timeout=7200)
    print(f"pass 1 for all of them in {time.monotonic() - started:.0f} s\n")
    failed = [r for r in rows if r.error]
    for r in failed:
        print(f"pass 1 failed: {r.label()}: {r.error}")
    verdicts = Verdicts()
    summary([r for r in rows if not r.error], verdicts)
    nearest([r for r in rows if not r.error], args.worst)
    print()
    verdicts.print()
    return 1 if failed else verdicts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
