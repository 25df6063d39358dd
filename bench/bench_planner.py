"""Planner speed (issue 3): reading a model's shape, and re-planning as the GUI does on every move.

    .venv/bin/python -m bench.bench_planner [--repeat 20] [--with-gguf-reader]

Targets: the shape of every shape fixture, the 32.5 GB ``qwen3-30b-a3b-q8_0`` included, read in
< 100 ms, both with the header in the page cache and with it dropped first (the first open of a
file); a re-plan with a cached shape and measurement in < 10 ms, on the 30 GB shape and on the
14B-1M headline shape. Each re-plan uses a new context, as a slider drag produces. Exits 1 when a
median misses its target. ``--with-gguf-reader`` adds gguf.GGUFReader on the same headers
(it materialises the tokenizer arrays: seconds) for the ratio.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from app.machine.devices import resolve_gpus
from app.planner.devices import Inventory
from app.planner.gguf.model import ModelShape, forget_cached, read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.units import MiB
from app.probe.measure import measure
from bench.report import Target, Verdicts, table, timings
from tests.fixtures import gguf_factory, pagecache, shapes

SHAPE = Target("reading a model's shape", 100.0, "ms", "issue 3, the 30 GB fixture")
REPLAN = Target("a re-plan, shape and measurement cached", 10.0, "ms", "issue 3, the GUI re-plans per slider move")

#: Pass 1 of the headline case as the H200 log records it (tests/fixtures/h200/llama-server-qwen2-
#: 14b-1m-c524288-fa-ub512-f16.log): CUDA0 623 MiB, CUDA_Host 532 MiB of compute buffer.
H200_14B_MEASUREMENT = Measurement((DeviceMeasurement("CUDA0", compute=623 * MiB),
                                    DeviceMeasurement("CUDA_Host", compute=532 * MiB, host=True)),
                                   "CUDA", "0c1e57098", 1.5)


def _ms(fn: Callable[[], object], repeat: int) -> list[float]:
    return [t * 1000 for t in timings(fn, repeat)]


def shape_reads(repeat: int, with_reader: bool, verdicts: Verdicts) -> None:
    rows = []
    for spec in shapes.SHAPES:
        path = gguf_factory.ensure(spec)
        shape = read_shape(path)

        def warm(p: Path = path) -> object:
            forget_cached()
            return read_shape(p)

        def dropped(p: Path = path) -> object:
            forget_cached()
            pagecache.drop(p)
            return read_shape(p)

        hot, cold = _ms(warm, repeat), _ms(dropped, repeat)
        med_hot, med_cold = statistics.median(hot), statistics.median(cold)
        marks = {verdicts.check(SHAPE, f"{spec.name} (cached)", med_hot),
                 verdicts.check(SHAPE, f"{spec.name} (dropped)", med_cold)}
        row: list[object] = [spec.name, f"{shape.file_size / 1e9:.1f}", len(shape.tensors), shape.n_vocab,
                             f"{med_hot:.1f}", f"{med_cold:.1f}", f"{max(cold):.1f}",
                             f"{SHAPE.ratio(max(med_hot, med_cold)):.2f}", "MISSED" if "MISSED" in marks else "ok"]
        if with_reader:
            import gguf

            def reference(p: Path = path) -> object:
                return gguf.GGUFReader(str(p))

            ref = statistics.median(_ms(reference, 1))
            row += [f"{ref:.0f}", f"{ref / med_hot:.0f}x"]
        rows.append(row)
    headers = ["shape read (lru cleared)", "file GB", "tensors", "vocab", "cached ms", "dropped ms",
               "max ms", "/100ms", "target"]
    if with_reader:
        headers += ["GGUFReader ms", "ratio"]
    print(f"median of {repeat}; 'dropped': the file's pages evicted before each read")
    print(table(headers, rows))


def _pass1_here(path: Path, settings: LaunchSettings) -> Measurement:
    """The shape's own pass 1 on this machine (CPU backend), as the GUI caches it."""
    return measure(path, settings)


def replans(repeat: int, verdicts: Verdicts) -> None:
    h200 = resolve_gpus(["H200"])
    card24 = resolve_gpus(["RTX 4090"])
    base = LaunchSettings(n_ctx=131072, n_parallel=4, kv_unified=True)
    big = gguf_factory.ensure(shapes.QWEN3_30B_A3B_Q8)
    headline = gguf_factory.ensure(shapes.QWEN25_14B_1M)
    cases: list[tuple[str, ModelShape, Measurement, str]] = [
        ("30 GB", read_shape(big), _pass1_here(big, base), "pass 1 here (CPU)"),
        ("14B-1M", read_shape(headline), H200_14B_MEASUREMENT, "recorded H200 pass 1"),
    ]
    ctxs = itertools.count()
    rows = []
    for tag, shape, meas, meas_from in cases:
        def slider(inv: Inventory, window: bool = False, s: ModelShape = shape,
                   m: Measurement = meas) -> Callable[[], object]:
            def move() -> object:  # 256k … 768k, a new context each call
                n_ctx = 256 * (1024 + next(ctxs) % 2048)
                return make_plan(s, inv, base.with_(n_ctx=n_ctx), engine_window=window, measurement=m)
            return move

        def fit(s: ModelShape = shape, m: Measurement = meas) -> object:
            return max_context(s, card24, base, engine_window=True, measurement=m)

        for label, fn in [
            ("stock, fits (H200)", slider(h200)),
            ("window engine (24 GiB card)", slider(card24, window=True)),
            ("stock, does not fit (24 GiB): alternatives", slider(card24)),
            ("max_context, uncached (24 GiB, window)", fit),
        ]:
            ms = _ms(fn, repeat)
            med = statistics.median(ms)
            name = f"{tag}: {label}"
            rows.append([name, meas_from, f"{med:.2f}", f"{max(ms):.2f}", f"{REPLAN.ratio(med):.3f}",
                         verdicts.check(REPLAN, name, med)])
    print(f"median of {repeat}; each call a new context (256k-768k), -np 4 -kvu")
    print(table(["re-plan", "measurement", "median ms", "max ms", "/10ms", "target"], rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--with-gguf-reader", action="store_true")
    args = ap.parse_args()
    verdicts = Verdicts()
    shape_reads(args.repeat, args.with_gguf_reader, verdicts)
    print()
    replans(args.repeat, verdicts)
    print()
    verdicts.print()
    return verdicts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
