"""Pass 1 (``headroom measure``, a fresh measurement) beside ``llama-fit-params`` on the same file and
context, wall clock of each whole command, paired (one of each per round, ``--repeat`` rounds).

    .venv/bin/python -m bench.bench_fit_params [--repeat 5] [--ctx 131072]

The file is the Qwen2.5-14B-1M shape (tests/fixtures/shapes.py ``QWEN25_14B_1M``, sparse). Target
(issue 30): pass 1 within 1.2x of llama-fit-params' wall time. Beside the totals, where pass 1's time
goes: the interpreter alone, the CLI's imports, and the child's (``app.probe.worker``) imports.
Exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from app.engine.native_build import find_build
from tests.fixtures import gguf_factory, shapes

TARGET = 1.2


def _wall(argv: Sequence[str], check: bool = True) -> float:
    """Seconds the command took. ``check=False``: llama-fit-params exits 1 on a machine without a GPU
    after it has measured (it finds no device to fit), which is still its whole work."""
    started = time.monotonic()
    subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=check,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ctx", type=int, default=131072)
    args = p.parse_args(argv)
    build = find_build()
    if build is None:
        print("no engine build: run `headroom engine build`", file=sys.stderr)
        return 1
    model = str(gguf_factory.ensure(shapes.QWEN25_14B_1M))
    ctx = str(args.ctx)
    rows: dict[str, list[float]] = {k: [] for k in ("headroom measure", "llama-fit-params", "python -c pass",
                                                    "import app.commands.measure", "import app.probe.worker")}
    py = sys.executable
    for _ in range(args.repeat):
        rows["headroom measure"].append(_wall([py, "-m", "app", "measure", model, "-c", ctx, "--refresh"]))
        rows["llama-fit-params"].append(_wall([str(build.fit_params), "-m", model, "-c", ctx], check=False))
        rows["python -c pass"].append(_wall([py, "-c", "pass"]))
        rows["import app.commands.measure"].append(_wall([py, "-c", "import app.commands.measure"]))
        rows["import app.probe.worker"].append(_wall([py, "-c", "import app.probe.worker"]))
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio = med["headroom measure"] / med["llama-fit-params"]
    print(f"pass 1 vs llama-fit-params on {shapes.QWEN25_14B_1M.name} at -c {ctx} "
          f"(median of {args.repeat} paired rounds; engine {build.label})")
    width = max(map(len, rows))
    for k, v in rows.items():
        print(f"  {k.ljust(width)}  {med[k]:6.2f} s   (runs: {', '.join(f'{x:.2f}' for x in v)})")
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"target: pass 1 within {TARGET}x of llama-fit-params ... {ratio:.2f}x {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
