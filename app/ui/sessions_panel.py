"""Shared sessions on the running engine: fork one prompt into K sessions (decoded once, shared),
continue any of them, run the shared-sequence smoke test, and see the known-issue advisories.

All HTTP runs in ``TaskThread``s (app.sessions is plain Python); streamed pieces are queued and
shown ten times a second. Bound to the window state (``bind``), it works on the running engine once
it is ready. Sessions are kept in the CLI's session store for the engine's URL (app.sessions.store),
and continued through the CLI's own path (``app.sessions.fork.turn``), so ``headroom sessions --url …``
sees and continues the same sessions; when the engine stops their text stays on screen (their KV
cache is gone with it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine.advisories import Advisory, Severity
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, TurnResult, fork, keep, turn
from app.sessions.smoke import SmokeResult, run_smoke
from app.sessions.store import Session, SessionStore, free_names
from app.text import escape
from app.ui.qt import (
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QShowEvent,
    QSpinBox,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
    prompt_line,
)
from app.ui.window_state import WindowState
from app.ui.workers import StreamBatcher, TaskPool

#: Tokens each reply may take in the panel (short: it is a demonstration, not a chat client).
N_PREDICT = 48


#: Shared sessions are completions, not a chat (said, so a reply that continues the text is expected).
PLAIN_TEXT = ("Sessions send your text as it is, with no chat template: the model continues it (the Chat tab "
              "formats a conversation with the model's template).")

class SessionsPanel(QGroupBox):
    turnDone = Signal(object)  # TurnResult
    smokeDone = Signal(object)  # SmokeResult
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None, *, store_root: Path | None = None,
                 pool: TaskPool | None = None) -> None:
        """``store_root``: where the session store lives (None: the cache directory, as for the CLI)."""
        super().__init__("Shared sessions", parent)
        self.store_root = store_root
        self.base_url = ""
        self.n_slots = 1
        self.log_tail: Callable[[], list[str]] | None = None
        self.sessions: dict[str, Session] = {}
        self.store: SessionStore | None = None  # the engine's (None: no engine; the texts stay shown)
        self.api_key: str | None = None  # the running engine's
        self.pool = pool if pool is not None else TaskPool(self)
        self.advisories = QLabel()
        self.advisories.setWordWrap(True)
        self.advisories.setObjectName("advisories")
        self.prompt = prompt_line()
        self.prompt.setPlaceholderText("Prompt to fork or continue")
        self.prompt.setToolTip("A prompt to fork into sessions, or to continue the chosen session with")
        self.prompt.setAccessibleName("Session prompt")
        self.k = QSpinBox()
        self.k.setRange(2, 64)
        self.k.setPrefix("into ")
        self.k.setAccessibleName("Number of sessions")
        self.fork_button = QPushButton("Fo&rk")
        self.fork_button.clicked.connect(self.fork)
        self.chosen = QComboBox()
        self.chosen.setAccessibleName("Session")
        self.chosen.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.chosen.setMinimumContentsLength(4)
        self.chosen.currentIndexChanged.connect(self._show_chosen)
        self.continue_button = QPushButton("Contin&ue")
        self.continue_button.clicked.connect(self.continue_chosen)
        self.smoke_button = QPushButton("Smoke test")  # every Alt letter of it is taken
        self.smoke_button.setToolTip("Fork two sessions from one prompt and continue both: "
                                     "checks that forking works on this engine")
        self.smoke_button.clicked.connect(self.smoke)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setAccessibleName("Session text")
        # Three lines at least, however short the window (at 1280×860 it had two); a taller one gives
        # it the rest.
        self.text.setMinimumHeight(self.text.fontMetrics().lineSpacing() * 3 + 12)
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setObjectName("sessionResult")
        for label in (self.advisories, self.result):  # escaped HTML, even a one-part text without a tag
            label.setTextFormat(Qt.TextFormat.RichText)
        # The prompt has a row of its own (beside the buttons a narrow pane cut it to a few letters).
        row1 = QHBoxLayout()
        row1.addWidget(self.prompt, 1)
        row2 = QHBoxLayout()
        row2.addWidget(self.fork_button)
        row2.addWidget(self.k)
        row2.addStretch(1)
        row2.addWidget(self.smoke_button)
        row3 = QHBoxLayout()
        row3.addWidget(self.chosen, 1)
        row3.addWidget(self.continue_button)
        lay = QVBoxLayout(self)
        lay.addWidget(self.advisories)
        lay.addLayout(row1)
        lay.addLayout(row2)
        lay.addLayout(row3)
        lay.addWidget(self.text)
        lay.addWidget(self.result)
        self._stream = StreamBatcher(self)  # each session's pieces, ten times a second
        self._stream.flushed.connect(self._show_pieces)
        self.set_engine("", None)

    def bind(self, state: WindowState) -> None:
        """The running engine's sessions: from when it answers until it is gone."""

        def ready(url: str) -> None:
            engine, running = state.running_engine, state.running
            self.api_key = engine.api_key if engine is not None else None
            self.set_engine(url, engine.log_tail if engine is not None else None,
                            running.launch.n_parallel if running is not None else 1)

        def another_model(_model: object) -> None:
            if state.running_engine is None and self.sessions:  # the model before's texts: not for this one
                self._show_sessions({})
                self.set_engine("", None)
                self.result.setText("Another model is open: the last model's sessions are no longer shown. "
                                    "Launch the engine with 2 or more parallel sessions to fork.")

        state.engineReady.connect(ready)
        state.runningChanged.connect(lambda plan: self.set_engine("", None) if plan is None else None)
        state.modelChanged.connect(another_model)

    def set_advisories(self, items: list[Advisory]) -> None:
        colour = {Severity.ERROR: "#d62728", Severity.WARNING: "#c77800"}
        self.advisories.setText("<br>".join(
            f"<span style='color:{colour.get(a.severity, '')}'>{escape(a.title)}</span>: "
            f"{escape(a.detail)} — {escape(a.action)}"
            for a in items))
        self.advisories.setVisible(bool(items))

    def set_engine(self, base_url: str, log_tail: Callable[[], list[str]] | None, n_slots: int = 1) -> None:
        """The running engine ("" when none): the controls work only while one is up. A session's KV
        cache lives in the engine: when it stops the texts stay on screen (and in the store), and a
        new engine continues them by evaluating their text again."""
        new_engine = base_url != self.base_url
        gone = sorted(self.sessions) if new_engine and not base_url else []
        if new_engine and base_url:
            self._open_store(base_url)
        self.base_url, self.log_tail, self.n_slots = base_url, log_tail, n_slots
        self.k.setMaximum(max(2, n_slots))
        self.prompt.setEnabled(bool(base_url))
        self.continue_button.setEnabled(bool(base_url) and bool(self.sessions))  # something to continue
        for w in (self.fork_button, self.smoke_button, self.k):  # a fork needs a slot per session
            w.setEnabled(bool(base_url) and n_slots >= 2)
        if gone:
            self.store = None
            self.result.setText(escape(
                f"Engine stopped: the text of {', '.join(gone)} is kept; their KV cache went with the engine. "
                "Launch again to continue them (the engine then evaluates each text again)."))
        elif not base_url:
            if not self.sessions:
                self.result.setText("Launch the engine with 2 or more parallel sessions to fork.")
        elif n_slots >= 2 and new_engine:  # (a result shown later stays: this runs after each turn)
            self.result.setText(f"Engine ready: type a prompt and fork it into up to {n_slots} sessions. "
                                f"{PLAIN_TEXT}")
        elif n_slots < 2 and new_engine:
            self.result.setText(f"This engine has {n_slots} slot: to fork, stop it, set Parallel sessions "
                                "to 2 or more and launch again.")

    def _open_store(self, base_url: str) -> None:
        """The store for a new engine's URL: the sessions shown before (a stopped engine's) and those
        stored for this URL, none pinned to a slot (a new engine process holds none of them)."""
        try:
            store = SessionStore(base_url, self.store_root)
        except ValueError as exc:  # an unreadable file: say so, keep the texts shown
            self.result.setText(f"<span style='color:#d62728'>{escape(str(exc))}</span>")
            self.store = None
            return
        shown = dict(self.sessions)

        def adopt(stored: dict[str, Session]) -> None:
            for name, s in shown.items():  # the stored one (the CLI may have continued it) wins
                stored.setdefault(name, s)
            for s in stored.values():
                s.slot = None

        try:
            store.update(adopt)
        except (OSError, ValueError) as exc:
            self.result.setText(f"<span style='color:#d62728'>{escape(str(exc))}</span>")
        self.store = store
        self._show_sessions(store.sessions)

    def showEvent(self, event: QShowEvent) -> None:
        """Shown again: the sessions as the store has them now (the CLI may have made some)."""
        super().showEvent(event)
        if self.store is not None and not self.pool.busy(self):
            try:
                self.store.reload()
            except (OSError, ValueError) as exc:
                self.result.setText(f"<span style='color:#d62728'>{escape(str(exc))}</span>")
                return
            self._show_sessions(self.store.sessions)

    def _show_sessions(self, sessions: dict[str, Session], current: str | None = None) -> None:
        self.sessions = dict(sessions)
        name = current or self.chosen.currentText()
        self.chosen.blockSignals(True)
        self.chosen.clear()
        self.chosen.addItems(list(self.sessions))
        if name in self.sessions:
            self.chosen.setCurrentText(name)
        self.chosen.blockSignals(False)
        self._show_chosen()

    # ---- actions -------------------------------------------------------------------------------
    def fork(self) -> None:
        if self.store is not None:  # the names the CLI took since are not free either
            try:
                self.store.reload()
                self._show_sessions(self.store.sessions)
            except (OSError, ValueError) as exc:
                self.result.setText(f"<span style='color:#d62728'>{escape(str(exc))}</span>")
                return
        names = free_names(self.sessions, self.k.value())
        prompt, client = self.prompt.text(), EngineClient(self.base_url, self.api_key)
        self._busy(f"Forking into {', '.join(names)}…")
        self._run(lambda _c: fork(client, prompt, names, Sampling(N_PREDICT),
                                  on_piece=lambda i, piece: self._piece(names[i], piece)))

    def continue_chosen(self) -> None:
        """The chosen session, continued as ``headroom sessions continue`` does (``turn``)."""
        name, store = self.chosen.currentText(), self.store
        if name not in self.sessions or store is None:
            return
        prompt, client = self.prompt.text(), EngineClient(self.base_url, self.api_key)
        self._busy(f"Continuing {name}…")
        self._run(lambda _c: turn(client, store, name, prompt, Sampling(N_PREDICT),
                                  on_piece=lambda _i, piece: self._piece(name, piece)))

    def smoke(self) -> None:
        url, tail, key = self.base_url, self.log_tail, self.api_key
        self._busy("Running the shared-sequence smoke test…")
        self._run(lambda _c: run_smoke(url, key, log_tail=tail))

    # ---- results -------------------------------------------------------------------------------
    def _piece(self, name: str, piece: str) -> None:  # any thread
        self._stream.add(name, piece)

    def _show_pieces(self, batch: object) -> None:
        assert isinstance(batch, dict)
        pieces = {str(k): "".join(v) for k, v in batch.items()}
        name = self.chosen.currentText()
        if name in pieces or (pieces and not name):
            self.text.insertPlainText(pieces.get(name) or next(iter(pieces.values())))

    def _done(self, result: object) -> None:
        self._show_pieces(self._stream.take())
        if isinstance(result, SmokeResult):
            self.result.setText(escape(str(result) + (f" — {result.sharing}" if result.sharing else "")))
            self.smokeDone.emit(result)
        elif isinstance(result, TurnResult) and self.base_url:  # not from an engine since stopped
            store = self.store
            store_error = ""
            if store is not None:
                if result.proof is not None:  # a fork (a continuation was stored by ``turn``)
                    try:
                        keep(store, result)
                    except (OSError, ValueError) as exc:  # the replies stay shown, the file says why
                        store_error = f"not stored: {exc}"
                sessions = {**store.sessions, **{s.name: s for s in result.sessions}}
            else:
                sessions = {**self.sessions, **{s.name: s for s in result.sessions}}
            self._show_sessions(sessions, result.sessions[0].name)
            parts = [escape(str(result.proof))] if result.proof is not None else []
            parts += [escape(f"{s.name}: {line}") for s in result.sessions if (line := result.reuse(s.name))]
            for problem in (result.error, store_error):
                if problem:
                    parts.append(f"<span style='color:#d62728'>{escape(problem)}</span>")
            self.result.setText("<br>".join(parts))
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
        self.pool.run(fn, self._done, self._failed, owner=self)

    def shutdown(self) -> None:
        self.pool.wait(self)
        self._stream.stop()
