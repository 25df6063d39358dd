"""Launch / Stop: the engine under supervision, with progress (starting → loading → healthy), the
endpoint to copy, and the plan-vs-actual check once it is up.

``LaunchedEngine`` (app.engine.running) does the supervising; this panel runs its blocking calls in
``TaskThread``s and turns its listener callbacks (any thread) into queued Qt signals. Log lines are
batched and handed to the console ten times a second, so a chatty engine never floods the GUI.

Bound to the window state (``bind``), it offers Launch for the state's plan on the chosen engine,
and tells the state what runs (a ``RunningEngine``: the only way the rest of the window reaches it).
Given the Measure bar (``use_measure``), Launch with estimated compute buffers runs pass 1 first for the
plan's own launch, as ``headroom serve`` does (the bar's progress and Cancel), and launches the plan
re-made with it; when pass 1 fails the launch is refused with its reason, by the same rule as
``headroom serve``. The sequence's decisions are app/ui/launch_sequence.py's ``MeasureThenLaunch``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.engine import check_report
from app.engine.advisories import Advisory, Severity
from app.engine.apikey import ApiKeyError
from app.engine.argv import ArgvError, shell_line
from app.engine.capabilities import port_is_free, refusal
from app.engine.check import PlanCheck
from app.engine.discover import EngineInfo, discover_engines
from app.engine.gpu_reach import GpuReach, hidden_env, reach
from app.engine.launch import LaunchRefused, advisories, prepare, served_name
from app.engine.process import ServerStatus
from app.engine.running import LaunchedEngine
from app.hub.preview import preview_refusal
from app.llamafile.extract import Pending
from app.planner import words
from app.planner.errors import PlannerError
from app.planner.plan_types import Plan
from app.text import escape
from app.ui.check_view import CheckView
from app.ui.demo import DEMO_LAUNCH
from app.ui.engine_builder import EngineBuilder
from app.ui.hub_button import PREVIEW_LAUNCH
from app.ui.launch_sequence import MEASURING_FIRST, MeasureThenLaunch
from app.ui.llamafile_copy import CopyOut
from app.ui.measure_bar import MeasureBar
from app.ui.qt import (
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.server_settings import ServerSettings
from app.ui.speed_check_row import SpeedCheckRow
from app.ui.window_state import NO_ENGINE_YET, WindowState, no_engine_yet
from app.ui.workers import StreamBatcher, TaskPool

NO_MODEL = "Open a model first: there is nothing to launch yet"
#: How an advisory reads before launch (severity -> colour); "error" refuses the launch.
ADVICE_COLOUR = {Severity.ERROR: "#d62728", Severity.WARNING: "#c77800", Severity.INFO: ""}
#: The sign before an advisory's title (ℹ for any other severity).
ADVICE_SIGN = {Severity.ERROR: "⛔", Severity.WARNING: "⚠"}
#: How often queued engine log lines reach the console (ms).
STATUS_TEXT = {
    ServerStatus.STARTING: "starting…", ServerStatus.LOADING: "loading the model…",
    ServerStatus.READY: "healthy", ServerStatus.FAILED: "failed", ServerStatus.STOPPED: "stopped",
}
NO_ENGINE = "No engine found: press Build engine… above, or put llama-server or a llamafile on PATH."
LOOKING_FOR_ENGINES = "Looking for engines…"
DISCOVERY_FAILED = "Engine discovery failed: "


class LaunchPanel(QWidget):
    logLines = Signal(list)  # list[str], batched
    statusChanged = Signal(object, str)  # ServerStatus, detail (queued from engine threads)
    engineReady = Signal(str)  # base URL
    launchFailed = Signal(str)  # the classified message
    engineStopped = Signal()
    enginesFound = Signal(list)
    checked = Signal(object)  # PlanCheck: plan vs what the engine allocated
    adviceChanged = Signal(list)  # list[Advisory]: the engine advisories for the plan and engine now
    runStarted = Signal(str)  # the command line of a launch (the console starts a fresh log)

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.pool = pool if pool is not None else TaskPool(self)
        self._state: WindowState | None = None
        #: Where the engine listens (the server panel's settings) and where its API key is kept.
        self._server: Callable[[], ServerSettings] = ServerSettings
        self._key_dir: Path | None = None
        self.engines: list[EngineInfo] = []
        self._engine: LaunchedEngine | None = None  # starting or running
        self._plan: Plan | None = None
        self._model: Path | None = None
        self._not_launchable = ""  # why this model cannot be launched at all (a header-only preview)
        self._arch = ""
        self._advice: list[Advisory] = []  # the engine advisories for the current plan and engine
        self._measure: MeasureBar | None = None
        self._sequence = MeasureThenLaunch()  # pass 1 first for an estimated plan, then the launch
        self._copy: CopyOut | None = None  # the copy out of a llamafile before a launch, made on the first
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
        self.advice_label.setTextFormat(Qt.TextFormat.RichText)  # escaped HTML (app.ui.launch_panel.advice_html)
        self.advice_label.setVisible(False)
        # Predicted tokens/s of the running plan and, after each chat reply, what the engine measured.
        self.speed_row = SpeedCheckRow(self.pool)
        # Plan vs actual as a table; the window shows it with the plan (check_view), the panel fills it.
        self.check_view = CheckView()
        self.builder = EngineBuilder(pool=self.pool)
        self.builder.setVisible(False)
        self.builder.logLines.connect(self.logLines)
        self.builder.built.connect(lambda: self.discover())
        # Launch / Stop and the endpoint: the window pins them below its scrolling form.
        self._controls = QWidget()
        row = QHBoxLayout()
        row.addWidget(self.launch_button)
        row.addWidget(self.stop_button)
        ep = QHBoxLayout()
        ep.addWidget(self.endpoint, 1)
        ep.addWidget(self.copy_button)
        pinned = QVBoxLayout(self._controls)
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
        lay.addWidget(self.speed_row)
        lay.addWidget(self.command_caption)
        lay.addWidget(self.command)
        self._not_launchable = NO_MODEL
        self._enable_launch()  # nothing to launch before a model is open
        self.statusChanged.connect(self._on_status)
        self._log = StreamBatcher(self)  # the engine's log lines, ten times a second
        self._log.flushed.connect(lambda batch: self.logLines.emit([ln for lines in batch.values() for ln in lines]))

    def use_server(self, settings: Callable[[], ServerSettings], key_dir: Path | None) -> None:
        """Where launches listen: ``settings()`` at each launch; the API key kept in ``key_dir``."""
        self._server, self._key_dir = settings, key_dir

    def use_measure(self, bar: MeasureBar) -> None:
        """Launch measures an estimated plan with ``bar`` first (bound to the same state)."""
        self._measure = bar
        bar.failed.connect(self._measure_failed)
        bar.cancelled.connect(self._measure_cancelled)

    def check_table(self) -> QWidget:
        """Plan vs actual as a table, for the window to show with the plan."""
        return self.check_view

    def reply_done(self, outcome: object) -> None:
        """A chat reply (``ChatPanel.replyDone``) finished: the speed row measures it against the plan."""
        self.speed_row.reply_done(outcome)

    def pinned_controls(self) -> QWidget:
        """Launch / Stop and the endpoint, for the window to pin where they never scroll away."""
        return self._controls

    # ---- the window state ----------------------------------------------------------------------
    def bind(self, state: WindowState) -> None:
        """Offer Launch for ``state``'s plan (a header-only preview never: Launch says why); what
        runs, and when it is ready, goes to ``state``."""
        self._state = state
        self.speed_row.bind(state)

        def planned(plan: Plan) -> None:
            model = state.model
            if model is not None:
                why = PREVIEW_LAUNCH if model.preview else DEMO_LAUNCH if model.demo else ""
                self.set_plan(plan, None if model.preview else model.path, model.shape.arch, not_launchable=why)
            waiting = self._sequence.waiting
            if self._sequence.ready(waiting is not None and state.measurement_for(waiting) is not None):
                self._launch_measured()  # pass 1 ran and the plan is re-made with it: launch that plan

        def another_model(_model: object) -> None:
            self._sequence.forget()
            if self._engine is None:
                self.forget_last_run()

        state.planChanged.connect(planned)
        state.modelChanged.connect(another_model)
        state.noPlan.connect(self._no_plan)

    # ---- engines -------------------------------------------------------------------------------
    def discover(self, chosen: Path | None = None) -> None:
        """Find engines in the background; the Engine list fills when done."""
        if self._state is not None:
            self._state.set_engines(None)  # looking
        self._run(lambda _c: discover_engines(chosen), self.set_engines, self._discovery_failed)

    def _discovery_failed(self, message: str) -> None:
        self.set_engines([])
        self.status.setText(f"{DISCOVERY_FAILED}{message}")

    def set_engines(self, engines: object) -> None:
        """The engines found: to the state (the first one chosen), then ``enginesFound``."""
        assert isinstance(engines, list)
        self.engines = engines
        if self._state is not None:
            self._state.set_engines(engines)
        self.builder.setVisible(not engines or self.builder.running)
        if not engines:
            self.status.setText(NO_ENGINE)
        elif (self.status.text() in (NO_ENGINE, LOOKING_FOR_ENGINES)
              or self.status.text().startswith((DISCOVERY_FAILED, *NO_ENGINE_YET))):
            self.status.setText("")  # an engine is there now: what was said about finding none is no longer true
        self.enginesFound.emit(engines)

    def engine(self) -> EngineInfo | None:
        """The engine chosen to launch."""
        return self._state.engine if self._state is not None else None

    def set_plan(self, plan: Plan, model: Path | None, arch: str = "", *, not_launchable: str = "") -> None:
        """``not_launchable``: why this model cannot be launched at all (a header-only preview); the
        Launch button stays off and says so, whatever the plan."""
        self._plan, self._model, self._arch = plan, model, arch
        engine = self.engine()
        # A plan the chosen engine cannot run (a flag it does not accept): said now, not at Launch.
        cannot = refusal(engine.capabilities, plan.launch, plan.mode) if engine and engine.capabilities else None
        self._not_launchable = not_launchable or (f"The engine chosen cannot launch this plan: {cannot}"
                                                  if cannot else "")
        self._enable_launch()
        self._advice = advisories(plan, engine, arch) if engine is not None and arch else []
        lines = [f"<span style='color:{ADVICE_COLOUR[Severity.ERROR]}'>{ADVICE_SIGN[Severity.ERROR]} "
                 f"{escape(self._not_launchable)}</span>"] if cannot and not not_launchable else []
        # said before Launch: what the engine will run on, and how fast (not for a plan that cannot launch)
        said = "" if not_launchable else self._runs_elsewhere(plan)
        if said:
            lines.append(f"<span style='color:{ADVICE_COLOUR[Severity.WARNING]}'>{ADVICE_SIGN[Severity.WARNING]} "
                         f"{escape(said)}</span>")
        self.advice_label.setText("<br>".join(lines + [advice_html(a) for a in self._advice]))
        self.advice_label.setVisible(bool(lines or self._advice))
        self.adviceChanged.emit(list(self._advice))

    def what_runs(self, plan: Plan) -> Plan:
        """``plan``, or, when the chosen engine cannot use its GPUs, the same settings planned for what it
        will run on: what Launch starts, checks and predicts the speed of."""
        found = self.gpu_reach()
        if not plan.gpus or not found.sentence or self._state is None:
            return plan
        try:
            runs = self._state.plan_for_what_runs(found)
        except (PlannerError, ValueError):
            return plan
        return runs if runs is not None else plan

    def _runs_elsewhere(self, plan: Plan) -> str:
        """The sentence before Launch when it starts another plan than the one shown (``what_runs``)."""
        runs = self.what_runs(plan)
        if runs is plan:
            return ""
        where = "on the CPU" if not runs.gpus else "on " + ", ".join(g.name for g in runs.gpus)
        if not runs.feasible:
            return f"{self.gpu_reach().sentence} Launch would run it {where}, where it does not fit: {runs.reason}."
        speed = f": expected {words.speed_sentence(runs.speed)}" if runs.speed is not None else ""
        return f"{self.gpu_reach().sentence} Launch runs it {where}{speed}."

    def gpu_reach(self) -> GpuReach:
        """What the chosen engine will run on among the window's devices (app/engine/gpu_reach.py; from the
        engine's stamp or what discovery asked it, never a process started here)."""
        state = self._state
        return reach(self.engine(), state.inventory) if state is not None else GpuReach(())

    def _no_plan(self, why: str) -> None:
        said = self._sequence.no_plan()
        if said is not None:
            self.progress.setVisible(False)
            self.status.setText(said)
        self.set_no_plan(f"the settings give no plan ({why})")

    def set_no_plan(self, reason: str) -> None:
        """The settings give no plan: nothing to launch, and the button's tooltip says why."""
        self._plan = None
        self._not_launchable = f"Nothing to launch: {reason}"
        self._advice = []
        self.advice_label.setVisible(False)
        self._enable_launch()
        self.adviceChanged.emit([])

    def _enable_launch(self) -> None:
        """Launch is offered for a plan that fits; one that does not says why on the button's tooltip."""
        plan = self._plan
        fits = plan is not None and plan.feasible
        why_not = self._not_launchable
        self.launch_button.setEnabled(self._engine is None and self._sequence.waiting is None and self._model is not None
                                      and fits and not why_not and not self.copying())
        no_fit = "" if fits or plan is None else (f"Nothing to launch: the plan does not fit ({plan.reason}). "
                                                  "Use one of the other ways to run it, shown with the plan.")
        self.launch_button.setToolTip("\n".join(t for t in (why_not, no_fit) if t))

    def refusal(self) -> str | None:
        """The first "error" advisory's message: the launch is refused with it."""
        return next((str(a) for a in self._advice if a.severity == Severity.ERROR), None)

    # ---- launch / stop -------------------------------------------------------------------------
    def launch(self) -> None:
        """Launch the plan (for what the engine will run on: ``what_runs``); an estimated one is measured
        first (pass 1), then the re-made plan launches."""
        plan, state = self._plan, self._state
        plan = self.what_runs(plan) if plan is not None else None
        if plan is not None and not plan.feasible:
            self._failed(f"Cannot launch: {self._runs_elsewhere(self._plan) if self._plan else plan.reason}")
            return
        sequence = self._sequence
        if self._engine is not None or sequence.waiting is not None or plan is None or self._model is None \
                or state is None:
            return
        if sequence.needs_pass1(plan, measured=state.measurement_for(plan.launch) is not None,
                                can_measure=self._measure is not None and self.engine() is not None
                                and self.refusal() is None) \
                and self._measure is not None and self._measure.measure_launch(plan.launch):
            sequence.measuring(plan.launch)
            self._enable_launch()
            self.progress.setVisible(True)  # the launch is under way: pass 1 is its first step
            self.status.setText(MEASURING_FIRST)
            return
        self._start(plan)

    def _launch_measured(self) -> None:
        after = self._sequence.after_pass1(self.what_runs(self._plan) if self._plan is not None else None)
        if after.plan is None:
            self._not_launched(after.why)
            return
        self._start(after.plan)

    def _measure_failed(self, message: str) -> None:
        """Pass 1 failed: the launch is refused with its reason, as ``headroom serve`` refuses it."""
        said = self._sequence.failed(message)
        if said is not None:
            self._not_launched(said)

    def _measure_cancelled(self) -> None:
        said = self._sequence.cancelled()
        if said is not None:
            self._not_launched(said)

    def _not_launched(self, why: str) -> None:
        self.progress.setVisible(False)
        self.status.setText(why)
        self._enable_launch()

    def _start(self, plan: Plan) -> None:
        model, engine, state = self._model, self.engine(), self._state
        if self._engine is not None or model is None or state is None:
            return
        if engine is None:  # nothing failed: a step still to do, said where the launch's words go
            self._not_launched(no_engine_yet(state.engines, "launch"))
            return
        refused = self.refusal()
        if refused is not None:
            self._failed(f"Cannot launch this plan: {refused}")
            return
        server = self._server()
        if server.port and not port_is_free(server.host, server.port):
            self._failed(f"port {server.port} on {server.host} is in use by another program: choose another "
                         "port under Server (or stop what holds it)")
            return
        asked = plan
        try:  # a llamafile's GGUF: read in place by the llamafile itself, copied out once for any other engine
            plan, model, items = CopyOut.for_engine(plan, model, engine.path if engine.is_llamafile else None)
        except PlannerError as exc:
            self._failed(f"Cannot launch this plan: {exc}")
            return
        if items:
            self._copy_then_start(asked, items)
            return
        try:
            spec = prepare(plan, model, [engine], host=server.host, port=server.port or None,
                           require_key=server.needs_key, key_dir=self._key_dir, arch=self._arch or None,
                           unlaunchable=preview_refusal, env=hidden_env(self.gpu_reach(), engine, state.inventory),
                           alias=served_name(state.model.shape.name if state.model else "", model))
        except (LaunchRefused, ArgvError, ApiKeyError) as exc:
            self._failed(f"Cannot launch this plan: {exc}")
            return
        engine_run = LaunchedEngine(plan, spec)
        engine_run.add_listener(lambda st, detail: self.statusChanged.emit(st, detail))
        engine_run.add_line_listener(self._queue_line)
        self._engine = engine_run
        self.check.clear()
        self.check.setStyleSheet("")
        self.check_view.clear()
        self._show_command(shell_line(spec.argv), "Command line:")
        self.runStarted.emit(shell_line(spec.argv))
        self.launch_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.progress.setVisible(True)
        self.status.setText("Engine: starting…")
        state.set_running(engine_run)
        self._run(lambda _c: engine_run.start(timeout=120.0), self._ready, self._failed)

    def _copy_then_start(self, plan: Plan, items: list[Pending]) -> None:
        """Copy the llamafile's GGUF out (the bar shows how far; Stop cancels), then launch ``plan``."""
        if self._copy is None:
            self._copy = CopyOut(self.pool, self)
            self._copy.progress.connect(self._copied)
        self.status.setText(CopyOut.words(items))
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.launch_button.setEnabled(False)
        self.stop_button.setEnabled(True)

        def copied(_paths: object) -> None:
            self._reset_progress()
            self.stop_button.setEnabled(False)
            self._start(plan)

        def failed(message: str) -> None:
            self._reset_progress()
            self.stop_button.setEnabled(False)
            self._not_launched(f"Engine: not launched: {message}")

        self._copy.start(items, copied, failed)

    def _copied(self, done: object, total: object) -> None:
        assert isinstance(done, int) and isinstance(total, int)
        self.progress.setValue(100 * done // max(total, 1))

    def _reset_progress(self) -> None:
        self.progress.setRange(0, 0)  # back to the busy bar the engine's start shows
        self.progress.setVisible(False)

    def copying(self) -> bool:
        return self._copy is not None and self._copy.running()

    def _queue_line(self, line: str) -> None:  # any thread
        self._log.add("log", line)

    def _on_status(self, status: object, detail: str) -> None:
        assert isinstance(status, ServerStatus)
        self.status.setText(f"Engine: {STATUS_TEXT[status]}" + (f" ({detail})" if detail else ""))

    def _ready(self, url: object) -> None:
        self.progress.setVisible(False)
        self.endpoint.setText(str(url))
        self.status.setText(f"Engine: healthy at {url}")
        if self._state is not None:
            self._state.engine_is_ready(str(url))
        self.engineReady.emit(str(url))
        running = self._engine
        if running is not None:
            self.check.setText("Comparing the plan with what the engine allocated…")
            self._run(lambda _c: running.plan_check(), self._show_check,
                      lambda msg: self.check.setText(f"Plan check failed: {msg}"))

    def _show_check(self, check: object) -> None:
        assert isinstance(check, PlanCheck)
        running = self._engine
        plan = running.plan if running is not None else self._plan
        if plan is None:
            return
        cpu_run = check_report.ran_on_cpu(check, plan)  # not a failure: nothing on a GPU to compare
        # amber: a number the plan knew differs, or nothing could be compared (an estimate that was off: no alarm)
        amber = not (check.ok or cpu_run) and (check_report.alarming(check, plan)
                                               or all(r.error is None for r in check.rows))
        self.check.setStyleSheet("color: #c77800;" if amber else "")
        self.check.setText(check_report.summary(check, plan))
        self.check_view.show_check(check, plan)
        self.checked.emit(check)

    def _failed(self, message: str) -> None:
        self.progress.setVisible(False)
        self.status.setText(f"Engine failed: {message}")
        running, self._engine = self._engine, None
        if self._state is not None:  # with no engine left: the window sees it gone, then why
            self._state.set_running(None)
        self.launchFailed.emit(message)
        if running is not None and running.running():
            self._run(lambda _c: running.stop(), lambda _r: None, lambda _m: None)
        self.stop_button.setEnabled(False)
        self._enable_launch()

    def stop(self) -> None:
        if self._copy is not None and self._copy.running():  # the copy out of a llamafile, before a launch
            self._copy.cancel()
            self._reset_progress()
            self.stop_button.setEnabled(False)
            self._not_launched("Engine: not launched: the copy out of the llamafile was stopped (what was copied "
                               "is kept: Launch goes on from there)")
            return
        running = self._engine
        if running is None:
            return
        self.stop_button.setEnabled(False)
        self.status.setText("Engine: stopping…")
        self._run(lambda _c: running.stop(), self._stopped, self._failed)

    def _stopped(self, _code: object) -> None:
        self._engine = None
        self.progress.setVisible(False)
        self.endpoint.clear()
        self.status.setText("Engine: stopped")
        # What the check and the command describe is gone: they say they are about the last run.
        if self.check.text():
            self.check.setText(f"Last run (stopped): {self.check.text()}")
        if self.command.text():
            self._show_command(self.command.text(), "Last run (stopped), command line:")
        self.check_view.mark_last_run()
        self._enable_launch()
        if self._state is not None:
            self._state.set_running(None)
        self.engineStopped.emit()

    def forget_last_run(self) -> None:
        """Another model: the last run's command line and check were about the model before."""
        for w in (self.command, self.command_caption):
            w.clear()
            w.setVisible(False)
        self.check.clear()
        self.check_view.clear()

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
        self.pool.run(fn, ok, err, owner=self)

    def shutdown(self) -> None:
        """Stop the engine (never leave one behind), any build, and wait for the workers."""
        self.builder.shutdown()
        running, self._engine = self._engine, None
        if running is not None:
            running.stop(grace=5.0)
        self.pool.wait(self)
        self._log.stop()


def advice_html(a: Advisory) -> str:
    """One advisory as the launch panel shows it: severity colour, title, detail, and what to do."""
    colour = ADVICE_COLOUR.get(a.severity, "")
    style = f" style='color:{colour}'" if colour else ""
    sign = ADVICE_SIGN.get(a.severity, "ℹ")
    return (f"<span{style}>{sign} <b>{escape(a.title)}</b>: {escape(a.detail)}.</span> "
            f"<i>{escape(a.action)}</i>")
