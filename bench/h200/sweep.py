"""Issue 32's step 4 on the H200: CUDA pass 1 over launches the compute estimate was not fitted on
(4k–16k contexts, ``-ub`` 256–4096, ``-np`` up to 8), recorded for the tests to compare.

    python3 bench/h200/sweep.py --out DIR --deadline EPOCH_S [--cpu]

Each launch is ``headroom measure M -c C -ub U -np N [-kvu] -fa on --json``, as a user types it; its
output goes to ``DIR/sweep.txt`` (kept in the cache too: a second call resumes) behind a ``### <model file> -c C -ub U -np N`` line, the format
bench/h200/record.py reads into ``tests/fixtures/h200/pass1.jsonl`` (the estimate is pure: the tests
compute it from the shape and compare, tests/unit/planner/test_estimate.py). Launches run in an order
that covers every model, context, ubatch and ``-np`` early, so a deadline cuts the sweep evenly.
``--cpu``: the dry run, two launches of the 8-layer test model.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shlex
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.paths import cache_dir  # noqa: E402
from bench.h200.matrix import GEMMA_12B, LLAMA_8B, QWEN3_MOE, QWEN_1M, model_path  # noqa: E402
from bench.h200.serve_row import run_cli  # noqa: E402

CONTEXTS = ("4096", "8192", "16384")
UBATCHES = (256, 1024, 4096)
SLOTS = ((1, False), (4, True), (8, True), (8, False))


def launches(cpu: bool) -> list[tuple[str, str, int, int, bool]]:
    """(model, context, ubatch, slots, unified), spread so that any prefix varies every setting."""
    if cpu:
        return [("tiny-llama-deep", "4096", 256, 1, False), ("tiny-llama-deep", "8192", 1024, 4, True)]
    models = (QWEN_1M, LLAMA_8B, GEMMA_12B, QWEN3_MOE)
    grid = list(itertools.product(CONTEXTS, UBATCHES, SLOTS))
    # the i-th launch of each model takes the grid's (i * 7)-th point (7 is prime to 36): models interleave
    return [(m, c, ub, np_, kvu) for i in range(len(grid)) for k, m in enumerate(models)
            for c, ub, (np_, kvu) in [grid[(i * 7 + k * 9) % len(grid)]]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--deadline", type=float, required=True, help="epoch seconds by which to stop")
    p.add_argument("--cpu", action="store_true", help="dry run: two launches of the 8-layer test model")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # kept in the cache and copied to --out after each launch: a second call on the warm machine resumes
    state = cache_dir() / "bench-h200-sweep" / (dt.datetime.now(dt.UTC).strftime("%Y-%m-%d") + ("-cpu" if args.cpu else ""))
    state.mkdir(parents=True, exist_ok=True)
    out = state / "sweep.txt"
    measured = out.read_text() if out.exists() else ""
    todo = launches(args.cpu)
    done = 0
    for model, ctx, ub, np_, kvu in todo:
        path = model_path(model)
        head = f"### {path.name} -c {ctx} -ub {ub} -np {np_}{' -kvu' if kvu else ''} "
        if head in measured:
            done += 1
            continue
        left = args.deadline - time.time()
        if left < 10:
            print(f"[sweep] {left:.0f} s left: {len(todo) - done} of {len(todo)} launches not measured", flush=True)
            break
        argv_ = ["headroom", "measure", str(path), "-c", ctx, "-ub", str(ub), "-b", str(max(ub, 2048)),
                 "-np", str(np_), *(["-kvu"] if kvu else []), "-fa", "on", "--json"]
        code, text = run_cli(argv_, timeout=min(60.0, left - 5))
        with out.open("a") as f:
            f.write(f"{head}(exit {code})\n# {shlex.join(argv_)}\n{text}\n")
        shutil.copy(out, args.out / out.name)
        done += 1
        print(f"[sweep] {done}/{len(todo)} {model} -c {ctx} -ub {ub} -np {np_}{' -kvu' if kvu else ''}: exit {code}",
              flush=True)
    print(f"[sweep] {done} launches in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
