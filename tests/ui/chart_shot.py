"""Take the context chart's picture: the demo in the real window, the Context chart tab open.

    python -m tests.ui.chart_shot OUT.png [WIDTH HEIGHT]

Run under a display (Xvfb for docs/screenshot-chart.png, tests/ui/test_chart_screenshot.py); prints
``chart: OUT.png: <the curve's summary>``. State, cache and config go where the environment says
(the test gives it a temporary home)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from app.ui.main_window import MainWindow
from app.ui.qt import QApplication
from app.ui.state import UiState


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    width, height = (int(argv[1]), int(argv[2])) if len(argv) >= 3 else (1400, 900)
    app = QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory() as tmp:
        window = MainWindow(state=UiState(), persist=False, state_file=Path(tmp) / "state.json")
        window.resize(width, height)
        window.show()
        window.open_demo()
        window.plan_tabs.setCurrentWidget(window.chart)
        window.launch.discover()
        deadline = time.monotonic() + 60  # the engines found decide the placement (no opencoti: stock)
        while window.current.engines is None and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.02)
        for _ in range(50):
            app.processEvents()
        curve = window.chart.curve
        ok = window.grab().save(str(out))
        summary = "no chart" if curve is None else (
            f"curves={','.join(k.label for k in curve.curves)} n_ctx={curve.n_ctx} largest={curve.largest} "
            f"mode={curve.mode}")
        print(f"chart: {out}: {summary}", flush=True)
        window.close()
    return 0 if ok and curve is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
