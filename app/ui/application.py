"""Start the window: the QApplication, what to open first, and the ``--screenshot`` path."""

from __future__ import annotations

import sys
from pathlib import Path

from app.planner.plan_types import Plan
from app.planner.units import Bytes, parse_tokens
from app.ui import first_run
from app.ui.main_window import MainWindow
from app.ui.qt import QApplication, QTimer
from app.ui.window_layout import app_icon

#: After the first plan, how long the screenshot waits for layouts and painting to settle (ms).
SCREENSHOT_SETTLE_MS = 300
#: The longest the screenshot waits for the first plan (or the error in its place) and the engine
#: list; past it, the window is saved as it is and the exit code says something was missing (ms).
SCREENSHOT_DEADLINE_MS = 60_000
#: The window's size in a screenshot unless ``--size`` says otherwise (width, height).
SCREENSHOT_SIZE = (1400, 900)


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


def open_first(window: MainWindow, model: Path | None, demo: bool) -> bool:
    """The model given, else the first-run guide when nothing is configured, else the last model,
    else the demo (so the picture is never empty). False when the model given could not be opened
    (the window then shows why), or the guide is open (no model yet)."""
    if demo:
        return window.open_demo()
    if model is not None:  # `headroom gui MODEL`, a .gguf opened from the file manager
        fresh = first_run.wanted(window)  # before the model is remembered
        opened = window.open_model(model)
        first_run.offer(window, nothing_configured=fresh)  # the engine step still to do on a first start
        return opened
    if first_run.offer(window) is not None:
        return False
    last = Path(window.state.last_model) if window.state.last_model else None
    if last is None or not last.is_file() or not window.open_model(last):
        return window.open_demo()
    return True


def save_screenshot(window: MainWindow, path: Path) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    return bool(window.grab().save(str(path), "PNG"))


def plan_summary(plan: Plan) -> str:
    """One line saying what the picture shows (the screenshot test reads it)."""
    gpus = ", ".join(f"{g.label} {Bytes(g.total)}" for g in plan.gpus) or "no GPU"
    return (f"mode={plan.mode} n_ctx={plan.launch.n_ctx} feasible={plan.feasible} "
            f"window_cells={plan.window_cells} tail_cells={plan.tail_cells} gpus=[{gpus}]")


class Screenshot:
    """``--screenshot``: save the window once the first plan (or the error shown instead of one),
    the engine list and this machine's GPUs (read in the background) are on screen, then quit. Exit
    code 0 only for a saved picture of a plan."""

    def __init__(self, app: QApplication, window: MainWindow, path: Path,
                 size: tuple[int, int] = SCREENSHOT_SIZE) -> None:
        self.app, self.window, self.path = app, window, path
        self.waiting = {"picture", "engines"} | ({"gpus"} if window.reading_gpus else set())
        self.done = False
        window.resize(*size)
        window.planned.connect(lambda _p: self.shown("picture"))
        window.errorShown.connect(lambda _m: self.shown("picture"))  # a plan will not come
        window.launch.enginesFound.connect(lambda _e: self.shown("engines"))
        window.gpusRead.connect(lambda _i: self.shown("gpus"))
        QTimer.singleShot(SCREENSHOT_DEADLINE_MS, self.deadline)

    def shown(self, what: str) -> None:
        if what in self.waiting:
            self.waiting.discard(what)
            if not self.waiting:
                QTimer.singleShot(SCREENSHOT_SETTLE_MS, self.save_and_quit)

    def deadline(self) -> None:
        if self.waiting and not self.done:
            print(f"headroom gui: no {' and no '.join(sorted(self.waiting))} after "
                  f"{SCREENSHOT_DEADLINE_MS // 1000} s; saving the window as it is", file=sys.stderr)
            self.save_and_quit()

    def save_and_quit(self) -> None:
        if self.done:
            return
        self.done = True
        ok = save_screenshot(self.window, self.path)
        error = self.window.error_message
        if not ok:
            print(f"headroom gui: could not save the screenshot to {self.path}", file=sys.stderr)
        elif error or self.window.plan is None:
            print(f"screenshot: {self.path}: no plan", flush=True)
            print(f"headroom gui: {error or 'no plan was made'}", file=sys.stderr)
        else:
            print(f"screenshot: {self.path}: {plan_summary(self.window.plan)}", flush=True)
        self.app.exit(0 if ok and not error and self.window.plan is not None and not self.waiting else 1)


def run_gui(*, model: Path | None = None, demo: bool = False, ctx: str | None = None,
            screenshot: Path | None = None, size: tuple[int, int] | None = None) -> int:
    app = make_app()
    window = MainWindow(persist=screenshot is None)
    shot = Screenshot(app, window, screenshot, size or SCREENSHOT_SIZE) if screenshot is not None else None
    window.show()
    if open_first(window, model, demo) and ctx:
        window.settings.set_context(parse_tokens(ctx))
    remembered = Path(window.state.engine_path) if window.state.engine_path else None
    # an engine file chosen before (File ▸ Choose engine…) is found again even where nothing else looks
    window.launch.discover(remembered if remembered is not None and remembered.is_file() else None)
    rc = app.exec()
    window.close()
    del shot  # kept until the event loop ends
    return rc
