"""The context chart's redraw (issue 20, build item 4): from a settings change to the chart painted.

    .venv/bin/python -m bench.bench_chart [--repeat 12] [--out bench/results/chart-cpu-DATE.md]

One real ``WindowState`` with a real ``ContextChart`` bound to it (offscreen, 900×560), as the window
has them. Each timing is one settings change as the settings panel sends it (``set_settings``: the
re-plan, its largest contexts, the chart's prices for every context of its grid and every KV type)
and then the chart painted into a QImage (``render_image``). Every change is to settings not seen
before in that row, so nothing the planner caches per launch is reused: the context moved (the
slider), the KV type changed, the number of slots changed (every KV layout new), the safety margin
changed. Over the shape fixtures, the 30 GB Qwen3-30B-A3B Q8_0 and the 1M-context Qwen2.5-14B
among them, on a simulated RTX 4090, two of them, the rolling KV window, and no GPU.

Target: per row, the median change-to-painted < 30 ms of the GUI thread's own time
(``time.thread_time``: the work the window does, whatever else shares the machine's cores); the wall
time is beside it, with the load average in the header. The medians of each part are wall times.
Exits 1 when one misses. The image is ARGB32 premultiplied, the format a window's backing store has.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.machine.devices import resolve_gpus
from app.planner.devices import Inventory
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.ui.context_chart import ContextChart
from app.ui.qt import QApplication
from app.ui.window_state import PlanSettings, WindowState
from bench.report import Target, Verdicts, table
from tests.fixtures import gguf_factory, shapes

REDRAW = Target("a settings change to the context chart painted", 30.0, "ms", "issue 20, build item 4")
MODELS = ("qwen2.5-14b-instruct-1m-q8_0", "llama-3.1-8b-instruct-q4_k_m", "qwen3-30b-a3b-q8_0",
          "gemma-3-12b-it-q4_k_m", "deepseek-v2-lite-chat-q8_0", "granite-4.0-h-tiny-q8_0")
SIZE = (900, 560)


def changes(kind: str, base: PlanSettings) -> Iterator[PlanSettings]:
    """Settings a user reaches one edit at a time, none repeated."""
    launch = base.launch
    i = 0
    while True:
        i += 1
        if kind == "context":  # the slider's round sizes and typed ones between them
            s = launch.with_(n_ctx=4096 + 256 * 37 * i)
        elif kind == "kv type":
            t = ("q8_0", "q4_0", "f16", "q5_0", "q4_1", "iq4_nl")[i % 6]
            s = launch.with_(type_k=t, type_v=t, n_ctx=launch.n_ctx + 256 * i)
        elif kind == "slots":
            s = launch.with_(n_parallel=1 + i % 8, n_ctx=launch.n_ctx + 256 * i)
        else:  # the safety margin
            s = launch
            yield replace(base, safety=(256 + 32 * i) * MiB)
            continue
        yield replace(base, launch=s)


def setups() -> list[tuple[str, Inventory, bool]]:
    return [("RTX 4090", resolve_gpus(["RTX 4090"]), False),
            ("2x RTX 4090", resolve_gpus(["RTX 4090,RTX 4090"]), False),
            ("RTX 4090, window", resolve_gpus(["RTX 4090"]), True),
            ("no GPU", Inventory(gpus=(), host=resolve_gpus(["RTX 4090"]).host, reason="bench: no GPU"), False)]


def measure_row(state: WindowState, chart: ContextChart, next_settings: Iterator[PlanSettings],
                repeat: int) -> dict[str, list[float]]:
    """Per change, ms: the wall time from the change to the chart painted and the GUI thread's own
    CPU time for it; the plan's part and the paint's."""
    out: dict[str, list[float]] = {"total": [], "cpu": [], "plan": [], "paint": []}
    for _ in range(repeat):
        s = next(next_settings)
        c0, t0 = time.thread_time(), time.perf_counter()
        state.set_settings(s)  # the re-plan, then the chart's prices (planChanged)
        t1 = time.perf_counter()
        chart.render_image()
        t2, c2 = time.perf_counter(), time.thread_time()
        assert chart.curve is not None and chart.curve.n_ctx == s.launch.n_ctx, "the chart did not follow"
        out["total"].append((t2 - t0) * 1000)
        out["cpu"].append((c2 - c0) * 1000)
        out["plan"].append(state.plan_ms)
        out["paint"].append((t2 - t1) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None, help="also write the table as markdown here")
    args = ap.parse_args()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    verdicts = Verdicts()
    rows: list[list[object]] = []
    started = time.perf_counter()
    for name in MODELS:
        path = gguf_factory.ensure(shapes.BY_NAME[name])
        for label, inv, window in setups():
            state = WindowState(inv, inv.reason)
            chart = ContextChart()
            chart.bind(state)
            chart.resize(*SIZE)
            chart.show()
            app.processEvents()
            base = PlanSettings(LaunchSettings(n_ctx=32 * 1024), engine_window=window)
            state.settings = base
            state.open_model(path)
            app.processEvents()
            for kind in ("context", "kv type", "slots", "safety"):
                m = {k: statistics.median(v) for k, v in measure_row(state, chart, changes(kind, base),
                                                                      args.repeat).items()}
                mark = verdicts.check(REDRAW, f"{name}, {label}, {kind}", m["cpu"])
                rows.append([name, label, kind, f"{m['plan']:.1f}", f"{m['total'] - m['plan'] - m['paint']:.1f}",
                             f"{m['paint']:.1f}", f"{m['total']:.1f}", f"{m['cpu']:.1f}",
                             f"{REDRAW.ratio(m['cpu']):.2f}", mark])
            chart.close()
            chart.deleteLater()
            app.processEvents()
    headers = ["model", "devices", "change", "plan ms", "chart prices ms", "paint ms", "wall ms",
               "GUI thread CPU ms", "/30ms", "target"]
    text = table(headers, rows)
    took = time.perf_counter() - started
    head = (f"context chart redraw, {args.repeat} changes per row, {SIZE[0]}x{SIZE[1]} offscreen "
            f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {took:.0f} s)")
    print(head)
    print(text)
    verdicts.print()
    if args.out is not None:
        import io
        from contextlib import redirect_stdout

        buf = io.StringIO()
        with redirect_stdout(buf):
            verdicts.print()
        args.out.write_text(f"# The context chart's redraw ({time.strftime('%Y-%m-%d')})\n\n"
                            f"Command: `.venv/bin/python -m bench.bench_chart --repeat {args.repeat}`\n\n"
                            f"```\n{head}\n{text}\n{buf.getvalue()}```\n")
    return verdicts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
