"""Planner speed: reading a model's shape, and re-planning as the GUI does on every slider move.

    .venv/bin/python -m bench.bench_planner [--repeat 20] [--with-gguf-reader]

Targets (issue 3): the shape of the largest (~18.6 GB) fixture read in < 100 ms (cold: the lru
cache is cleared each time; the header is in the page cache after the first read), and a re-plan
with a cached shape and measurement in < 10 ms. ``--with-gguf-reader`` adds gguf.GGUFReader on
the same headers for the ratio (it materialises the tokenizer arrays: seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from app.planner.devices import GpuDevice, HostMemory, Inventory
from app.planner.gguf_model import _read_shape_cached, read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan import make_plan, max_context
from app.planner.settings import LaunchSettings
from app.planner.units import GiB, MiB
from tests.fixtures import gguf_factory, shapes

SHAPE_TARGET_MS = 100.0
REPLAN_TARGET_MS = 10.0


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--with-gguf-reader", action="store_true")
    args = ap.parse_args()

    print(f"{'shape read (cold cache)':<34}{'size GB':>9}{'tensors':>9}{'vocab':>8}{'ms':>9}{'target':>8}"
          + ("  GGUFReader ms   ratio" if args.with_gguf_reader else ""))
    for spec in shapes.SHAPES:
        path = gguf_factory.ensure(spec)
        shape = read_shape(path)

        def cold(p: object = path) -> object:
            _read_shape_cached.cache_clear()
            return read_shape(p)  # type: ignore[arg-type]

        ms = timed(cold, args.repeat)
        row = (f"{spec.name:<34}{shape.file_size / 1e9:>9.1f}{len(shape.tensors):>9}{shape.n_vocab:>8}"
               f"{ms:>9.1f}{'ok' if ms < SHAPE_TARGET_MS else 'SLOW':>8}")
        if args.with_gguf_reader:
            import gguf

            def reference(p: object = path) -> object:
                return gguf.GGUFReader(str(p))

            ref = timed(reference, 1)
            row += f"{ref:>15.0f}{ref / ms:>8.0f}x"
        print(row)

    shape = read_shape(gguf_factory.ensure(shapes.QWEN25_14B_1M))
    inv = Inventory((GpuDevice(0, "NVIDIA H200", 143155 * MiB, 142629 * MiB, simulated=True),),
                    HostMemory(128 * GiB, 120 * GiB))
    meas = Measurement((DeviceMeasurement("CUDA0", compute=623 * MiB),
                        DeviceMeasurement("CUDA_Host", compute=532 * MiB, host=True)), "CUDA", "0c1e57098", 1.5)
    small = Inventory((GpuDevice(0, "Small", 48 * GiB, 48 * GiB, simulated=True),), inv.host)
    base = LaunchSettings(n_ctx=524288, n_parallel=4, kv_unified=True)
    ctxs = iter(range(1 << 30))

    def slider(inventory: Inventory, **kw: object) -> Callable[[], object]:
        def move() -> object:  # a new context each call, as a slider drag produces
            return make_plan(shape, inventory, base.with_(n_ctx=256 * (1024 + next(ctxs) % 2048)),
                             measurement=meas, **kw)  # type: ignore[arg-type]
        return move

    print()
    print(f"{'re-plan (cached shape + measurement)':<44}{'ms':>9}{'target':>8}")
    for label, fn in [
        ("stock, fits (H200)", slider(inv)),
        ("window engine (48 GiB card)", slider(small, engine_window=True)),
        ("stock, does not fit: alternatives priced", slider(small)),
        ("max_context (H200)", lambda: max_context(shape, inv, base, measurement=meas)),
    ]:
        ms = timed(fn, args.repeat)
        print(f"{label:<44}{ms:>9.2f}{'ok' if ms < REPLAN_TARGET_MS else 'SLOW':>8}")


if __name__ == "__main__":
    main()
