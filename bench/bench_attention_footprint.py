"""What a CPU's flash attention costs a cell and head as the KV a decoded token reads grows past the
caches, and with query heads sharing a KV head (GQA), against what the speed model prices it at
(``attention_cost`` on the CPU-attention engine run of app/engine/cpu_attention.py, timed over 1–8 MiB
of KV: its decode with one query head a KV head, and its GQA run's with four).

    .venv/bin/python -m bench.bench_attention_footprint [--head 128] [--threads 1] [--repeat 3] [--kv f16]
        [--footprints 1,2,4,8,16,32,64]

Each row is ``llama-batched-bench`` of Headroom's build on the host CPU, on a model written for it
(app/engine/selftest.py ``deep_attention_model``: narrow matrices, heads of ``--head``, as many layers
as make the row's KV): decode after a prompt of ``PROMPTS[0]`` tokens and one of ``PROMPTS[1]``, the
slope over the cells in between per query head (both prompts fill whole 256-cell blocks, so no masked
cells weigh on it), the median of ``--repeat`` runs and their spread, and measured ÷ priced
(docs/domain.md §12, "A CPU's attention cost per cell and head is not one number": GQA is taken in,
the growth with the KV is not).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from app.engine.cpu_attention import batched_bench, bench_run, parse_rows
from app.engine.native_build import find_build
from app.engine.selftest import deep_attention_model
from app.planner.memory.kv import row_bytes
from app.planner.solve.speed import CpuAttention, attention_cost, default

#: Prompts and tokens decoded after each: 240 + 16 and 496 + 16 cells fill 256-cell blocks exactly.
PROMPTS = (240, 496)
DECODE = 16
MAX_LAYERS = 512
MiB = 1024 * 1024
#: (query heads, KV heads, the KV a decoded token reads after the long prompt): the self-test model's
#: four heads from what an L2 holds to twice a large desktop's last-level cache, then GQA at the
#: largest (Qwen2.5-14B's 40 over 8).
ROWS = ((4, 4, 1 * MiB), (4, 4, 4 * MiB), (4, 4, 16 * MiB), (4, 4, 64 * MiB), (8, 8, 64 * MiB), (40, 8, 64 * MiB))


def layers(kv: str, head: int, n_head_kv: int, footprint: int) -> int:
    per_layer = (PROMPTS[1] + DECODE // 2) * n_head_kv * 2 * row_bytes(kv, head)
    return max(1, min(MAX_LAYERS, round(footprint / per_layer)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kv", default="f16")
    p.add_argument("--footprints", help="MiB a decoded token reads, comma-separated: one-over-one rows at "
                   "these instead of ROWS (where the cost of a cell turns, on this machine)")
    args = p.parse_args(argv)
    rows_ = ROWS if not args.footprints else tuple((4, 4, int(float(m) * MiB)) for m in args.footprints.split(","))
    build = find_build()
    bench = batched_bench(build.server) if build is not None else None
    if build is None or bench is None:
        print("no engine build with llama-batched-bench: run `headroom engine build`", file=sys.stderr)
        return 1
    run = bench_run(bench, args.threads)(None, args.head).get(args.kv, {})
    ref = run.get("decode")
    shared, deep = run.get("decode_gqa"), run.get("decode_deep")
    rates = (CpuAttention(args.kv, args.head, default(ref, "run"), default(run.get("prefill", 0.0), "run"),
                          default(shared, "run") if shared else None, run.get("gqa", 1.0),
                          default(deep, "run") if deep else None),) if ref else ()
    print(f"llama-batched-bench of {build.label}, host CPU, -t {args.threads}, {args.kv} KV, heads of {args.head}, "
          f"prompts {PROMPTS[0]} and {PROMPTS[1]}, {DECODE} tokens decoded after each, median of {args.repeat}")
    print("the engine run's figures (what the plan prices with): "
          + (f"decode {ref * 1e9:.0f} ns a cell and head" + (f", {shared * 1e9:.0f} a query head with "
                                                              f"{run.get('gqa', 1.0):g} a KV head" if shared
                                                              else ", no GQA run")
             + (f", {deep * 1e9:.0f} over KV past the caches (the deep run)" if deep else "") if ref
             else "none (its runs disagreed)"))
    head = ("query / KV heads", "layers", "KV a token reads", "ns a cell and query head", "runs", "priced",
            "measured ÷ priced")
    rows = [head]
    for n_head, n_kv, want in rows_:
        n_layer = layers(args.kv, args.head, n_kv, want)
        model = deep_attention_model(args.head, n_layer, n_head=n_head, n_head_kv=n_kv)
        read = (PROMPTS[1] + DECODE / 2) * n_layer * n_kv * 2 * row_bytes(args.kv, args.head)
        costs = []
        for _ in range(args.repeat):
            argv_ = [str(bench), "-m", str(model), "-c", str(PROMPTS[1] + DECODE), "-b", "2048", "-ub", "512",
                     "-fa", "on", "-npp", ",".join(map(str, PROMPTS)), "-ntg", str(DECODE), "-npl", "1",
                     "-ctk", args.kv, "-ctv", args.kv, "-ngl", "0", "-t", str(args.threads)]
            done = subprocess.run(argv_, capture_output=True, text=True, timeout=600, check=False)
            got = parse_rows(done.stdout + done.stderr)
            if len(got) == 2:
                (c1, (_, t1)), (c2, (_, t2)) = sorted(got.items())
                costs.append((t2 - t1) / (c2 - c1) / (n_layer * n_head))
        priced = attention_cost(rates, args.kv, args.head, decode=True, gqa=n_head / n_kv)
        if not costs:
            rows.append((f"{n_head} / {n_kv}", str(n_layer), f"{read / MiB:.0f} MiB", "no run", "", "", ""))
            continue
        mid = statistics.median(costs)
        rows.append((f"{n_head} / {n_kv}", str(n_layer), f"{read / MiB:.0f} MiB", f"{mid * 1e9:.0f}",
                     "–".join(f"{c * 1e9:.0f}" for c in (min(costs), max(costs))),
                     f"{priced * 1e9:.0f}" if priced else "—", f"{mid / priced:.2f}" if priced else "—"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
