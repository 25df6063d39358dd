"""Shared sessions on the running engine: fork one prompt into K sessions (decoded once, shared),
continue any of them, run the shared-sequence smoke test, and see the known-issue advisories.

All HTTP runs in ``TaskThread``s (app.sessions is plain Python); streamed pieces are queued and
shown ten times a second. Bound to the window state (``bind``), it works on the running engine once
it is ready, and is cleared when it is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from html import escape
from typing import Any

from app.engine.advisories import Advisory, Severity
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, TurnResult, fork, send
from app.sessions.smoke import SmokeResult, run_smoke
from app.sessions.store import Session
from app.ui.qt import (
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.window_state import WindowState
from app.ui.workers import TaskThread

#: Tokens each reply may take in the panel (short: it is a demonstration, not a chat client).
N_PREDICT = 48


class SessionsPanel(QGroupBox):
    turnDone = Signal(object)  # TurnResult
    smokeDone = Signal(object)  # SmokeResult
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Shared sessions", parent)
        self.base_url = ""
        self.n_slots = 1
        self.log_tail: Callable[[], list[str]] | None = None
        self.sessions: dict[str, Session] = {}
        self._tasks: set[TaskThread] = set()
        self._pieces: dict[str, str] = {}
        self._lock = threading.Lock()
        self.advisories = QLabel()
        self.advisories.setWordWrap(True)
        self.advisories.setObjectName("advisories")
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("Prompt to fork (or to continue the chosen session)")
        self.prompt.setAccessibleName("Session prompt")
        self.k = QSpinBox()
        self.k.setRange(2, 64)
        self.k.setPrefix("into ")
        self.k.setAccessibleName("Number of sessions")
        self.fork_button = QPushButton("Fo&rk")
        self.fork_button.clicked.connect(self.fork)
        self.chosen = QComboBox()
        self.chosen.setAccessibleName("Session")
        self.chosen.currentIndexChanged.connect(self._show_chosen)
        self.continue_button = QPushButton("Contin&ue")
        self.continue_button.clicked.connect(self.continue_chosen)
        self.smoke_button = QPushButton("Smoke test")  # every Alt letter of it is taken
        self.smoke_button.setToolTip("Fork two sessions from one prompt and continue both: "
                                     "checks that forking works on this engine")
        self.smoke_button.clicked.connect(self.smoke)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setMaximumHeight(120)
        self.text.setMinimumHeight(36)  # a short window gives the plan the height, not this pane
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setObjectName("sessionResult")
        for label in (self.advisories, self.result):  # escaped HTML, even a one-part text without a tag
            label.setTextFormat(Qt.TextFormat.RichText)
        row1 = QHBoxLayout()
        row1.addWidget(self.prompt, 1)
        row1.addWidget(self.k)
        row1.addWidget(self.fork_button)
        row2 = QHBoxLayout()
        row2.addWidget(self.chosen, 1)
        row2.addWidget(self.continue_button)
        row2.addWidget(self.smoke_button)
        lay = QVBoxLayout(self)
        lay.addWidget(self.advisories)
        lay.addLayout(row1)
        lay.addLayout(row2)
        lay.addWidget(self.text)
        lay.addWidget(self.result)
        self._flush = QTimer(self)
        self._flush.setInterval(100)
        self._flush.timeout.connect(self._show_pieces)
        self._flush.start()
        self.set_engine("", None)

    def bind(self, state: WindowState) -> None:
        """The running engine's sessions: from when it answers until it is gone."""

        def ready(url: str) -> None:
            engine, running = state.running_engine, state.running
            self.set_engine(url, engine.log_tail if engine is not None else None,
                            running.launch.n_parallel if running is not None else 1)

        state.engineReady.connect(ready)
        state.runningChanged.connect(lambda plan: self.set_engine("", None) if plan is None else None)

    def set_advisories(self, items: list[Advisory]) -> None:
        colour = {Severity.ERROR: "#d62728", Severity.WARNING: "#c77800"}
        self.advisories.setText("<br>".join(
            f"<span style='color:{colour.get(a.severity, '')}'>{escape(a.title)}</span>: "
            f"{escape(a.detail)} — {escape(a.action)}"
            for a in items))
        self.advisories.setVisible(bool(items))

    def set_engine(self, base_url: str, log_tail: Callable[[], list[str]] | None, n_slots: int = 1) -> None:
        """The running engine ("" when none): the controls work only while one is up. Sessions live in
        the engine's KV cache: when it stops (or another one starts) they are cleared, and it says so."""
        new_engine = base_url != self.base_url
        gone = sorted(self.sessions) if new_engine else []
        if gone:
            self.sessions.clear()
            self.chosen.clear()
            self.text.clear()
        self.base_url, self.log_tail, self.n_slots = base_url, log_tail, n_slots
        self.k.setMaximum(max(2, n_slots))
        self.prompt.setEnabled(bool(base_url))
        self.continue_button.setEnabled(bool(base_url) and bool(self.sessions))  # something to continue
        for w in (self.fork_button, self.smoke_button, self.k):  # a fork needs a slot per session
            w.setEnabled(bool(base_url) and n_slots >= 2)
        if gone:
            self.result.setText(f"Engine stopped: its sessions ({', '.join(gone)}) are gone with its KV cache. "
                                "Launch again and fork to start new ones.")
        elif not base_url:
            self.result.setText("Launch the engine with 2 or more parallel sessions to fork.")
        elif n_slots >= 2 and new_engine:  # (a result shown later stays: this runs after each turn)
            self.result.setText(f"Engine ready: type a prompt and fork it into up to {n_slots} sessions.")
        elif n_slots < 2:
            self.result.setText(f"This engine has {n_slots} slot: to fork, stop it, set Parallel sessions "
                                "to 2 or more and launch again.")

    # ---- actions -------------------------------------------------------------------------------
    def fork(self) -> None:
        names = [f"s{len(self.sessions) + i + 1}" for i in range(self.k.value())]
        prompt, client = self.prompt.text(), EngineClient(self.base_url)
        self._busy(f"Forking into {', '.join(names)}…")
        self._run(lambda _c: fork(client, prompt, names, Sampling(N_PREDICT),
                                  on_piece=lambda i, piece: self._piece(names[i], piece)))

    def continue_chosen(self) -> None:
        name = self.chosen.currentText()
        session = self.sessions.get(name)
        if session is None:
            return
        prompt, client = self.prompt.text(), EngineClient(self.base_url)
        self._busy(f"Continuing {name}…")
        self._run(lambda _c: send(client, session, name, prompt, Sampling(N_PREDICT),
                                  on_piece=lambda _i, piece: self._piece(name, piece)))

    def smoke(self) -> None:
        url, tail = self.base_url, self.log_tail
        self._busy("Running the shared-sequence smoke test…")
        self._run(lambda _c: run_smoke(url, log_tail=tail))

    # ---- results -------------------------------------------------------------------------------
    def _piece(self, name: str, piece: str) -> None:  # any thread
        with self._lock:
            self._pieces[name] = self._pieces.get(name, "") + piece

    def _show_pieces(self) -> None:
        with self._lock:
            pieces, self._pieces = self._pieces, {}
        name = self.chosen.currentText()
        if name in pieces or (pieces and not name):
            self.text.insertPlainText(pieces.get(name) or next(iter(pieces.values())))

    def _done(self, result: object) -> None:
        self._show_pieces()
        if isinstance(result, SmokeResult):
            self.result.setText(escape(str(result) + (f" — {result.sharing}" if result.sharing else "")))
            self.smokeDone.emit(result)
        elif isinstance(result, TurnResult) and self.base_url:  # not from an engine since stopped
            for s in result.sessions:
                if s.name not in self.sessions:
                    self.chosen.addItem(s.name)
                self.sessions[s.name] = s
            parts = [escape(str(result.proof))] if result.proof is not None else []
            parts += [f"{n}: {c} prompt tokens reused" for n, c in result.cached_tokens.items()]
            if result.error:
                parts.append(f"<span style='color:#d62728'>{escape(result.error)}</span>")
            self.result.setText("<br>".join(parts))
            self.chosen.setCurrentText(result.sessions[0].name)
            self._show_chosen()
            self.turnDone.emit(result)
        self.set_engine(self.base_url, self.log_tail, self.n_slots)

    def _show_chosen(self, _i: int = 0) -> None:
        s = self.sessions.get(self.chosen.currentText())
        self.text.setPlainText(s.text if s else "")

    def _busy(self, text: str) -> None:
        self.result.setText(text)
        for w in (self.fork_button, self.continue_button, self.smoke_button):
            w.setEnabled(False)

    def _failed(self, message: str) -> None:
        self.result.setText(f"<span style='color:#d62728'>{escape(message)}</span>")
        self.set_engine(self.base_url, self.log_tail, self.n_slots)
        self.failed.emit(message)

    def _run(self, fn: Callable[[threading.Event], Any]) -> None:
        task = TaskThread(fn, self)
        task.succeeded.connect(self._done)
        task.failed.connect(self._failed)
        task.finished.connect(lambda: self._forget(task))
        self._tasks.add(task)
        task.start()

    def _forget(self, task: TaskThread) -> None:
        self._tasks.discard(task)
        task.deleteLater()

    def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            task.wait()
        self._flush.stop()
