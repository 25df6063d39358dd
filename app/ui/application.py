"""Start the window: the QApplication, what to open first, and the ``--screenshot`` path."""

from __future__ import annotations

import sys
from pathlib import Path

from app.planner.plan import Plan
from app.planner.units import Bytes, parse_tokens
from app.ui.main_window import MainWindow, app_icon
from app.ui.qt import QApplication, QTimer

#: After the first plan, how long the screenshot waits for layouts and painting to settle (ms).
SCREENSHOT_SETTLE_MS = 300


def make_app(argv: list[str] | None = None) -> QApplication:
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        return existing
    app = QApplication(argv if argv is not None else sys.argv[:1])
    app.setApplicationName("Headroom")
    app.setOrganizationName("headroom")
    app.setDesktopFileName("headroom")
    app.setWindowIcon(app_icon())
    return app


def open_first(window: MainWindow, model: Path | None, demo: bool) -> None:
    """The model given, else the last one, else the demo (so the picture is never empty)."""
    if demo:
        window.open_demo()
        return
    if model is not None:
        window.open_model(model)
        return
    last = Path(window.state.last_model) if window.state.last_model else None
    if last is None or not last.is_file() or not window.open_model(last):
        window.open_demo()


def save_screenshot(window: MainWindow, path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    return bool(window.grab().save(str(path), "PNG"))


def plan_summary(plan: Plan) -> str:
    """One line saying what the picture shows (the screenshot test reads it)."""
    gpus = ", ".join(f"{g.label} {Bytes(g.total)}" for g in plan.gpus) or "no GPU"
    return (f"mode={plan.mode} n_ctx={plan.launch.n_ctx} feasible={plan.feasible} "
            f"window_cells={plan.window_cells} tail_cells={plan.tail_cells} gpus=[{gpus}]")


def run_gui(*, model: Path | None = None, demo: bool = False, ctx: str | None = None,
            screenshot: Path | None = None) -> int:
    app = make_app()
    window = MainWindow(persist=screenshot is None)
    if screenshot is not None:
        window.resize(1400, 900)
        shot_path = screenshot

        def save_and_quit() -> None:
            ok = save_screenshot(window, shot_path)
            if ok and window.plan is not None:
                print(f"screenshot: {shot_path}: {plan_summary(window.plan)}", flush=True)
            app.exit(0 if ok else 1)

        waiting = {"plan", "engines"}  # shoot once the picture and the engine list are both shown

        def shown(what: str) -> None:
            if what in waiting:
                waiting.discard(what)
                if not waiting:
                    QTimer.singleShot(SCREENSHOT_SETTLE_MS, save_and_quit)

        window.planned.connect(lambda _p: shown("plan"))
        window.launch.enginesFound.connect(lambda _e: shown("engines"))
    window.show()
    open_first(window, model, demo)
    if ctx:
        window.settings.context.set_value(parse_tokens(ctx), emit=True)
    window.launch.discover()
    rc = app.exec()
    window.close()
    return rc
