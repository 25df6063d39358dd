"""Take the README's picture of the chat in use: ``python -m tests.ui.chat_screenshot ENGINE MODEL OUT``
(under Xvfb, ``QT_QPA_PLATFORM=xcb``; tests/ui/test_chat_screenshot.py runs it).

The real window launches the real engine on MODEL with 3 parallel sessions, sends two chat turns,
forks a third message into 3 replies side by side, and saves the window to OUT. The tiny test models
have random weights: their replies are random bytes (control characters shown as their escapes, as the CLI prints them).
Prints ``chat screenshot: OUT`` and exits 0, or says what did not happen and exits 1.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.ui.application import make_app, save_screenshot
from app.ui.main_window import MainWindow
from app.ui.qt import QApplication
from app.ui.state import UiState

#: The longest each step may take (the engine's start, one reply) on a busy 2-core machine.
STEP_S = 180.0
SIZE = (1600, 1000)
#: The plan's share of the right-hand column, as a user drags it to give the chat more room (px).
PLAN_PX = 430


def until(app: QApplication, what: str, done: Callable[[], bool], timeout: float = STEP_S) -> None:
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise SystemExit(f"chat screenshot: no {what} within {timeout:.0f} s")
        app.processEvents()
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    engine, model, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    app = make_app()
    with tempfile.TemporaryDirectory() as tmp:
        window = MainWindow(state=UiState(), persist=False, state_file=Path(tmp) / "gui-state.json",
                            read_host=lambda: None)
        window.resize(*SIZE)
        window.show()
        found: list[list[str]] = []
        window.launch.enginesFound.connect(lambda engines: found.append([e.path for e in engines]))
        window.launch.discover()
        until(app, "engine list", lambda: bool(found))
        window.settings.engine.setCurrentIndex(found[0].index(str(engine)))
        window.settings.n_parallel.setValue(3)
        window.settings.kv_unified.setChecked(True)
        if not window.open_model(model):
            print(f"chat screenshot: could not open {model}", file=sys.stderr)
            return 1
        ready: list[str] = []
        window.launch.engineReady.connect(ready.append)
        window.launch.launch()
        until(app, "engine ready", lambda: bool(ready))
        window.vsplit.automatic = False
        window.vsplit.setSizes([PLAN_PX, window.vsplit.height() - PLAN_PX])
        chat = window.chat
        replies: list[object] = []
        chat.replyDone.connect(replies.append)
        chat.max_tokens.setValue(24)
        for n, (text, fork) in enumerate((("Write a haiku about memory.", False),
                                          ("Shorter, please.", False),
                                          ("Three ways to end it", True)), start=1):
            chat.message.setText(text)
            if fork:
                chat.k.setValue(3)
                chat.fork()
            else:
                chat.send()
            until(app, f"reply {n}", lambda n=n: len(replies) >= n)  # type: ignore[misc]
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # let layouts and painting settle
            app.processEvents()
            time.sleep(0.01)
        ok = save_screenshot(window, out)
        stopped: list[bool] = []
        window.launch.engineStopped.connect(lambda: stopped.append(True))
        window.launch.stop()
        until(app, "engine stop", lambda: bool(stopped), timeout=60)
        window.close()
    print(f"chat screenshot: {out}" if ok else f"chat screenshot: could not save {out}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
