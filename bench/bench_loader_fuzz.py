"""Issue 31: the loader rules, fuzzed with llama-server itself as the oracle.

Seeded copies of the tiny llama and the tiny iSWA gemma3, each changed by one class of
tests/fixtures/gguf_mutate.py ``LOADER_KINDS`` (C-string keys, names and values; keys alike after
UTF-8 replacement; alignment; experts; NaN/inf; weight types; types 41-44; pre-tokenizers; duplicate
tokens; split names; a layer with 0 heads), plus huge values written sparse (a 1 GiB ``general.name``,
a 2^30-element array, an alignment of 2^31). Each copy gets ``headroom plan``'s verdict (a child; its
peak RSS) and llama-server's (loaded, refused, crashed, hung). Targets: 0 crashes or tracebacks of
plan, 0 hangs, 0 planned-but-refused, 0 refused-but-loaded, plan's RSS < 500 MiB on every file.

    .venv/bin/python -m bench.bench_loader_fuzz [--per-model N] [--seed S] [--no-huge]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

from app.engine.native_build import find_build
from tests.fixtures import gguf_factory, gguf_mutate, shapes
from tests.fixtures.loader_oracle import engine_verdict, plan_verdict

RSS_LIMIT = 500 * 1024 * 1024


def copies(tmp: Path, per_model: int, seed: int, huge: bool) -> list[tuple[str, Path]]:
    rng = random.Random(seed)
    out: list[tuple[str, Path]] = []
    for spec in (shapes.TINY, shapes.TINY_GEMMA3):
        base = gguf_mutate.read(gguf_factory.ensure(spec))
        stream = gguf_mutate.loader_mutations(base, rng)
        for i in range(per_model):
            kind, h = next(stream)
            out.append((kind, h.write(tmp / gguf_mutate.file_name(kind, f"{spec.name}-{i:03d}-{kind}"))))
        if huge:
            for kind, key, what, n in (("huge_name", b"general.name", "string", 1 << 30),
                                       ("huge_name", b"general.name", "string", 64 << 20),
                                       ("huge_array", b"general.huge", "array", 1 << 30)):
                h = gguf_mutate.read(gguf_factory.ensure(spec))
                out.append((kind, gguf_mutate.write_with_hole(h, tmp / f"{spec.name}-{kind}-{n}.gguf", key, what, n)))
            h = gguf_mutate.read(gguf_factory.ensure(spec))
            gguf_mutate._set_kv(h, b"general.alignment", gguf_mutate.U32, gguf_mutate.encode(gguf_mutate.U32, 1 << 31))
            h.repack_offsets()
            out.append(("huge_alignment", h.write(tmp / f"{spec.name}-align-2g.gguf")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-model", type=int, default=130)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--no-huge", action="store_true")
    args = ap.parse_args(argv)
    build = find_build()
    if build is None:
        print("no engine build: run headroom engine build", file=sys.stderr)
        return 1
    rows: Counter[tuple[str, str, str]] = Counter()
    wrong: list[str] = []
    peak = 0
    with tempfile.TemporaryDirectory(prefix="loader-fuzz-") as d:
        tmp = Path(d)
        for kind, path in copies(tmp, args.per_model, args.seed, not args.no_huge):
            plan = plan_verdict(path)
            engine = engine_verdict(build.server, path, tmp / "server.log", deadline_s=240)
            peak = max(peak, plan.rss_bytes)
            side = "hang" if plan.rc is None else "refused" if plan.refused else "planned" if plan.sound else "crash"
            rows[(kind, side, engine.outcome)] += 1
            bad = (side in ("hang", "crash") or plan.rss_bytes >= RSS_LIMIT or engine.outcome == "hung"
                   or (side == "planned") != engine.loaded)
            if bad:
                wrong.append(f"{path.name}: plan {side} ({plan.err.strip()[:160]}), rss {plan.rss_bytes >> 20} MiB; "
                             f"engine {engine.outcome} {engine.detail[:200]}")
            print(f"{path.name}: plan {side}, engine {engine.outcome}{'  <-- WRONG' if bad else ''}", flush=True)
            path.unlink()
    print("\n| class | plan | llama-server | files |\n|---|---|---|---|")
    for (kind, side, outcome), n in sorted(rows.items()):
        print(f"| {kind} | {side} | {outcome} | {n} |")
    total = sum(rows.values())
    print(f"\n{total} files, plan peak RSS {peak / 2**20:.0f} MiB (target < 500 MiB)")
    print(f"target 0 disagreements, crashes, hangs, RSS over: {'met' if not wrong else 'MISSED'} ({len(wrong)})")
    for w in wrong:
        print("  " + w)
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
