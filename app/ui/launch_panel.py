"""Launch / Stop: the engine under supervision, with progress (starting → loading → healthy), the
endpoint to copy, and the plan-vs-actual check once it is up.

``ServerProcess`` (app.engine.process) does the supervising; this panel runs its blocking calls in
``TaskThread``s and turns its listener callbacks (any thread) into queued Qt signals. Log lines are
batched and handed to the console ten times a second, so a chatty engine never floods the GUI.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from app.engine.advisories import Advisory
from app.engine.argv import ArgvError, shell_line
from app.engine.check import PlanCheck, describe
from app.engine.discover import EngineInfo, discover_engines
from app.engine.launch import LaunchRefused, advisories, plan_check, prepare
from app.engine.process import ServerProcess, ServerStatus
from app.hub.preview import preview_refusal
from app.planner.plan import Plan
from app.ui.engine_builder import EngineBuilder
from app.ui.qt import (
    QComboBox,
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    Qt,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.workers import TaskThread

HOST = "127.0.0.1"
LOOKING = "looking for engines…"
NO_MODEL = "Open a model first: there is nothing to launch yet"
NONE_FOUND = "no engine found — Build engine…"
#: How an advisory reads before launch (severity -> colour); "error" refuses the launch.
ADVICE_COLOUR = {"error": "#d62728", "warning": "#c77800", "info": ""}
#: How often queued engine log lines reach the console (ms).
LOG_FLUSH_MS = 100
STATUS_TEXT = {
    ServerStatus.STARTING: "starting…", ServerStatus.LOADING: "loading the model…",
    ServerStatus.READY: "healthy", ServerStatus.FAILED: "failed", ServerStatus.STOPPED: "stopped",
}


class LaunchPanel(QWidget):
    logLines = Signal(list)  # list[str], batched
    statusChanged = Signal(object, str)  # ServerStatus, detail (queued from engine threads)
    engineReady = Signal(str)  # base URL
    launchFailed = Signal(str)  # the classified message
    engineStopped = Signal()
    launched = Signal(object)  # the Plan the engine was started with
    enginesFound = Signal(list)
    checked = Signal(object)  # PlanCheck: plan vs what the engine allocated

    def __init__(self, engine_combo: QComboBox, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.engine_combo = engine_combo
        self.engines: list[EngineInfo] = []
        self.server: ServerProcess | None = None
        self._plan: Plan | None = None
        self._launched_plan: Plan | None = None
        self._model: Path | None = None
        self._not_launchable = ""  # why this model cannot be launched at all (a header-only preview)
        self._arch = ""
        self.advice: list[Advisory] = []  # the engine advisories for the current plan and engine
        self._tasks: set[TaskThread] = set()
        self._lines: list[str] = []
        self._lines_lock = threading.Lock()
        self.launch_button = QPushButton("&Launch")
        self.launch_button.clicked.connect(self.launch)
        self.stop_button = QPushButton("S&top")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop)
        self.status = QLabel("Engine: not running")
        self.status.setObjectName("engineStatus")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setVisible(False)
        self.endpoint = QLineEdit()
        self.endpoint.setReadOnly(True)
        self.endpoint.setPlaceholderText("endpoint URL (when running)")
        self.endpoint.setAccessibleName("Endpoint URL")
        self.copy_button = QPushButton("Cop&y")
        self.copy_button.clicked.connect(self.copy_endpoint)
        self.check = QLabel()
        self.check.setObjectName("planCheck")
        self.check.setWordWrap(True)
        self.check.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # The command line: one read-only line (never wider than the column), all of it in the tooltip.
        self.command = QLineEdit()
        self.command.setReadOnly(True)
        self.command.setObjectName("commandLine")
        self.command.setAccessibleName("Engine command line")
        self.command.setVisible(False)
        self.command_caption = QLabel()
        self.command_caption.setObjectName("commandCaption")
        self.command_caption.setVisible(False)
        for label in (self.status, self.check):  # engine text, never markup
            label.setTextFormat(Qt.TextFormat.PlainText)
        self.advice_label = QLabel()
        self.advice_label.setObjectName("engineAdvice")
        self.advice_label.setWordWrap(True)
        self.advice_label.setVisible(False)
        self.engine_combo.setPlaceholderText(LOOKING)
        self.engine_combo.currentIndexChanged.connect(self._engine_tooltip)
        self.builder = EngineBuilder()
        self.builder.setVisible(False)
        self.builder.logLines.connect(self.logLines)
        self.builder.built.connect(lambda: self.discover())
        # Launch / Stop and the endpoint: ``controls``, which the window pins below its scrolling form.
        self.controls = QWidget()
        row = QHBoxLayout()
        row.addWidget(self.launch_button)
        row.addWidget(self.stop_button)
        ep = QHBoxLayout()
        ep.addWidget(self.endpoint, 1)
        ep.addWidget(self.copy_button)
        pinned = QVBoxLayout(self.controls)
        pinned.setContentsMargins(0, 0, 0, 0)
        pinned.addLayout(row)
        pinned.addLayout(ep)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.builder)
        lay.addWidget(self.advice_label)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(self.check)
        lay.addWidget(self.command_caption)
        lay.addWidget(self.command)
        self._not_launchable = NO_MODEL
        self._enable_launch()  # nothing to launch before a model is open
        self.statusChanged.connect(self._on_status)
        self._flush = QTimer(self)
        self._flush.setInterval(LOG_FLUSH_MS)
        self._flush.timeout.connect(self._flush_lines)
        self._flush.start()

    # ---- engines -------------------------------------------------------------------------------
    def discover(self, chosen: Path | None = None) -> None:
        """Find engines in the background; the combo fills when done."""
        self.engine_combo.setPlaceholderText(LOOKING)
        self._run(lambda _c: discover_engines(chosen), self.set_engines, self._discovery_failed)

    def _discovery_failed(self, message: str) -> None:
        self.set_engines([])
        self.status.setText(f"Engine discovery failed: {message}")

    def set_engines(self, engines: object) -> None:
        assert isinstance(engines, list)
        self.engines = engines
        self.engine_combo.blockSignals(True)
        self.engine_combo.clear()
        for i, e in enumerate(engines):
            text = f"{e.kind} {e.version} ({e.llama_cpp.removeprefix('llama.cpp ')}) — {e.source}"
            self.engine_combo.addItem(text, e.path)  # a narrow window cuts the text: the tooltip has it all
            self.engine_combo.setItemData(i, f"{text}\n{e.path}", Qt.ItemDataRole.ToolTipRole)
        view = self.engine_combo.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + view.verticalScrollBar().sizeHint().width())
        self.engine_combo.blockSignals(False)
        self.engine_combo.setPlaceholderText(NONE_FOUND if not engines else "")
        self.builder.setVisible(not engines or self.builder.running)
        if not engines:
            self.status.setText("No engine found: press Build engine… above, or put llama-server or a "
                                "llamafile on PATH.")
        self.enginesFound.emit(engines)
        self.engine_combo.currentIndexChanged.emit(self.engine_combo.currentIndex())

    @property
    def running_plan(self) -> Plan | None:
        """The plan the engine now starting or running was launched with (None when none is)."""
        return self._launched_plan if self.server is not None else None

    def _engine_tooltip(self, i: int) -> None:
        """The chosen engine's full text and path, wherever the combo cuts it."""
        tip = self.engine_combo.itemData(i, Qt.ItemDataRole.ToolTipRole)
        self.engine_combo.setToolTip(f"The engine to launch: {tip}" if isinstance(tip, str) else
                                     "The engine to launch, with its detected kind and version")

    def engine(self) -> EngineInfo | None:
        i = self.engine_combo.currentIndex()
        return self.engines[i] if 0 <= i < len(self.engines) else None

    def set_plan(self, plan: Plan, model: Path | None, arch: str = "", *, not_launchable: str = "") -> None:
        """``not_launchable``: why this model cannot be launched at all (a header-only preview); the
        Launch button stays off and says so, whatever the plan."""
        self._plan, self._model, self._arch = plan, model, arch
        self._not_launchable = not_launchable
        self._enable_launch()
        engine = self.engine()
        self.advice = advisories(plan, engine, arch) if engine is not None and arch else []
        self.advice_label.setText("<br>".join(advice_html(a) for a in self.advice))
        self.advice_label.setVisible(bool(self.advice))

    def set_no_plan(self, reason: str) -> None:
        """The settings give no plan: nothing to launch, and the button's tooltip says why."""
        self._plan = None
        self._not_launchable = f"Nothing to launch: {reason}"
        self.advice = []
        self.advice_label.setVisible(False)
        self._enable_launch()

    def _enable_launch(self) -> None:
        """Launch is offered for a plan that fits; one that does not says why on the button's tooltip."""
        plan = self._plan
        fits = plan is not None and plan.feasible
        why_not = self._not_launchable
        self.launch_button.setEnabled(self.server is None and self._model is not None and fits and not why_not)
        no_fit = "" if fits or plan is None else (f"Nothing to launch: the plan does not fit ({plan.reason}). "
                                                  "Use one of the other ways to run it, shown with the plan.")
        self.launch_button.setToolTip("\n".join(t for t in (why_not, no_fit) if t))

    def refusal(self) -> str | None:
        """The first "error" advisory's message: the launch is refused with it."""
        return next((str(a) for a in self.advice if a.severity == "error"), None)

    # ---- launch / stop -------------------------------------------------------------------------
    def launch(self) -> None:
        plan, model, engine = self._plan, self._model, self.engine()
        if self.server is not None or plan is None or model is None:
            return
        if engine is None:
            self._failed("No engine to launch: press Build engine…, run `headroom engine build` or choose one.")
            return
        refused = self.refusal()
        if refused is not None:
            self._failed(f"Cannot launch this plan: {refused}")
            return
        try:
            spec = prepare(plan, model, [engine], host=HOST, arch=self._arch or None,
                           unlaunchable=preview_refusal)
        except (LaunchRefused, ArgvError) as exc:
            self._failed(f"Cannot launch this plan: {exc}")
            return
        argv = spec.argv
        server = spec.server()
        server.add_listener(lambda st, detail: self.statusChanged.emit(st, detail))
        server.add_line_listener(self._queue_line)
        self.server = server
        self._launched_plan = plan
        self.check.clear()
        self.check.setToolTip("")
        self._show_command(shell_line(argv), "Command line:")
        self.launch_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.progress.setVisible(True)
        self.status.setText("Engine: starting…")
        self.launched.emit(plan)

        def work(_c: threading.Event) -> str:
            server.start()
            server.wait_ready(timeout=120.0)
            return server.base_url

        self._run(work, self._ready, self._failed)

    def _queue_line(self, line: str) -> None:
        with self._lines_lock:
            self._lines.append(line)

    def _flush_lines(self) -> None:
        with self._lines_lock:
            lines, self._lines = self._lines, []
        if lines:
            self.logLines.emit(lines)

    def _on_status(self, status: object, detail: str) -> None:
        assert isinstance(status, ServerStatus)
        self.status.setText(f"Engine: {STATUS_TEXT[status]}" + (f" ({detail})" if detail else ""))

    def _ready(self, url: object) -> None:
        self.progress.setVisible(False)
        self.endpoint.setText(str(url))
        self.status.setText(f"Engine: healthy at {url}")
        self.engineReady.emit(str(url))
        server, plan = self.server, self._launched_plan
        if server is not None and plan is not None:
            self.check.setText("Comparing the plan with what the engine allocated…")
            self._run(lambda _c: plan_check(plan, server), self._show_check,
                      lambda msg: self.check.setText(f"Plan check failed: {msg}"))

    def _show_check(self, check: object) -> None:
        assert isinstance(check, PlanCheck)
        colour = "" if check.ok else "color: #c77800;"
        self.check.setStyleSheet(colour)
        self.check.setText(describe(check))
        self.check.setToolTip(f"<pre>{check.table()}</pre>")
        self.checked.emit(check)

    def _failed(self, message: str) -> None:
        self.progress.setVisible(False)
        self.status.setText(f"Engine failed: {message}")
        server, self.server = self.server, None
        self.launchFailed.emit(message)  # with no engine left: listeners see it gone
        if server is not None and server.running():
            self._run(lambda _c: server.stop(), lambda _r: None, lambda _m: None)
        self.stop_button.setEnabled(False)
        self._enable_launch()

    def stop(self) -> None:
        server = self.server
        if server is None:
            return
        self.stop_button.setEnabled(False)
        self.status.setText("Engine: stopping…")
        self._run(lambda _c: server.stop(), self._stopped, self._failed)

    def _stopped(self, _code: object) -> None:
        self.server = None
        self.progress.setVisible(False)
        self.endpoint.clear()
        self.status.setText("Engine: stopped")
        # What the check and the command describe is gone: they say they are about the last run.
        if self.check.text():
            self.check.setText(f"Last run (stopped): {self.check.text()}")
        if self.command.text():
            self._show_command(self.command.text(), "Last run (stopped), command line:")
        self._enable_launch()
        self.engineStopped.emit()

    def _show_command(self, line: str, caption: str) -> None:
        self.command.setText(line)
        self.command.setCursorPosition(0)  # the start of the command shows; the tooltip has it all
        self.command.setToolTip(line)
        self.command_caption.setText(caption)
        for w in (self.command, self.command_caption):
            w.setVisible(True)

    def copy_endpoint(self) -> None:
        if self.endpoint.text():
            QGuiApplication.clipboard().setText(self.endpoint.text())

    # ---- plumbing ------------------------------------------------------------------------------
    def _run(self, fn: Callable[[threading.Event], object], ok: Callable[[Any], None],
             err: Callable[[str], None]) -> None:
        task = TaskThread(fn, self)
        task.succeeded.connect(ok)
        task.failed.connect(err)
        task.finished.connect(lambda: self._done(task))
        self._tasks.add(task)
        task.start()

    def _done(self, task: TaskThread) -> None:
        self._tasks.discard(task)
        task.deleteLater()

    def shutdown(self) -> None:
        """Stop the engine (never leave one behind), any build, and wait for the workers."""
        self.builder.shutdown()
        server, self.server = self.server, None
        if server is not None:
            server.stop(grace=5.0)
        for task in list(self._tasks):
            task.cancel()
            task.wait()
        self._flush.stop()


def advice_html(a: Advisory) -> str:
    """One advisory as the launch panel shows it: severity colour, title, detail, and what to do."""
    colour = ADVICE_COLOUR.get(a.severity, "")
    style = f" style='color:{colour}'" if colour else ""
    sign = {"error": "⛔", "warning": "⚠"}.get(a.severity, "ℹ")
    return (f"<span{style}>{sign} <b>{escape(a.title)}</b>: {escape(a.detail)}.</span> "
            f"<i>{escape(a.action)}</i>")
