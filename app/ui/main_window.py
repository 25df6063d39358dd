"""The main window: model + settings on the left, the budget picture in the middle, devices on top,
launch and the engine's log at the bottom. Only wiring; every number comes from the planner."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from app.engine.discover import EngineInfo
from app.planner.devices import HostMemory, Inventory, Poller, Snapshot, host_memory
from app.planner.errors import PlannerError
from app.planner.measurement import Measurement
from app.planner.plan import Plan
from app.planner.settings import LaunchSettings
from app.ui import demo
from app.ui.budget_view import BudgetView
from app.ui.console import Console
from app.ui.devices_panel import DevicesPanel
from app.ui.form_scroll import form_with_footer
from app.ui.hub_button import PREVIEW_LAUNCH, HubButton, model_title, preview_name
from app.ui.hub_dialog import HubDialog
from app.ui.launch_panel import LaunchPanel
from app.ui.live_replan import LiveReplan
from app.ui.measure_bar import NOT_MEASURED, STALE, MeasureBar
from app.ui.options_view import cap_text
from app.ui.planning import PlanInputs, inventory_for, real_inventory
from app.ui.qt import (
    QAction,
    QByteArray,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QFileDialog,
    QHBoxLayout,
    QIcon,
    QKeySequence,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.sessions_panel import SessionsPanel
from app.ui.settings_panel import SettingsPanel, tokens_text
from app.ui.state import UiState, load_state, save_state
from app.ui.workers import PollWorker

RESOURCES = Path(__file__).resolve().parent.parent.parent / "resources"


def app_icon() -> QIcon:
    return QIcon(str(RESOURCES / "headroom.svg"))


class MainWindow(QMainWindow):
    planned = Signal(object)  # every new Plan (tests and the screenshot wait on it)
    measured = Signal(object)  # a Measurement
    errorShown = Signal(str)

    def __init__(self, state: UiState | None = None, *, persist: bool = True,
                 state_file: Path | None = None, nvml: ModuleType | None = None,
                 read_host: Callable[[], HostMemory | None] = host_memory) -> None:
        super().__init__()
        self.nvml = nvml  # a pynvml stand-in for tests; None = the real one
        self.state_file = state_file
        self.state = state if state is not None else load_state(state_file)
        self.persist = persist
        self.setWindowTitle("Headroom")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.real_inventory = real_inventory(nvml)  # NVML read once; "Real GPUs" re-reads it
        inv, reason = inventory_for(self.state.simulated_gpus[0] if self.state.simulated_gpus else "",
                                    self.real_inventory)
        self.inputs = PlanInputs(inventory=inv, nvml_reason=reason)
        self.model_path: Path | None = None
        self.preview: str | None = None  # "<repo>/<file>" of a header-only copy: planned, not launched
        self.hub_dialog: HubDialog | None = None
        self.plan: Plan | None = None
        self.plan_ms = 0.0
        self._build()
        self._menus()
        self.poller = Poller(nvml, read_host)  # read_host: live host RAM (tests pass their own)
        self.poll = PollWorker(self._poll_once, parent=self)
        self.poll.polled.connect(self.devices.show_snapshot)
        self.live = LiveReplan(lambda: self.inputs.inventory, lambda: self.inputs.safety, self._live_busy,
                               self._apply_live, self)
        self.poll.polled.connect(self.live.offer)
        self.poll.start()
        if self.state.geometry:
            self.restoreGeometry(QByteArray.fromHex(self.state.geometry.encode()))
        else:
            self.resize(1280, 860)

    # ---- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.model_label = QLabel("No model")
        self.model_label.setWordWrap(True)
        self.open_button = QPushButton("&Open model…")
        self.open_button.clicked.connect(self.choose_model)
        self.hub_button = HubButton()
        self.hub_button.clicked.connect(self.open_hub)
        open_row = QHBoxLayout()
        open_row.addWidget(self.open_button, 1)
        open_row.addWidget(self.hub_button)
        self.error = QLabel()
        self.error.setObjectName("errorMessage")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728;")
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # messages quote logs ("<s>" is a token)
        self.error.setVisible(False)
        self.settings = SettingsPanel()
        self.settings.set_settings(self.state.launch_settings())
        self.settings.set_engine_window(self.state.engine_window)
        self.settings.safety.setValue(self.state.safety_mib)
        self.settings.vram_target.setValue(self.state.vram_target_mib)
        self.settings.changed.connect(self.replan)
        self.measure = MeasureBar()
        self.measure.button.clicked.connect(self.start_measure)
        self.measure.measured.connect(self._measure_done)
        self.measure.failed.connect(lambda msg: self.show_error(f"Pass 1 failed: {msg}"))
        self.launch = LaunchPanel(self.settings.engine, self)
        # Small screens: the form scrolls up and down only; Measure, Launch / Stop and the endpoint
        # never scroll away (a footer under the form).
        left_w, self.left_scroll = form_with_footer(
            [self.model_label, open_row, self.error, self.settings, self.measure, self.launch],
            [self.measure.controls, self.launch.controls], max_width=480)
        self.devices = DevicesPanel()
        self.devices.set_simulated_choice(self.state.simulated_gpus[0] if self.state.simulated_gpus else "")
        self.devices.simulationChanged.connect(self.set_simulated)
        self.budget = BudgetView()
        self.budget.settingsChosen.connect(self.settings.set_settings)
        self.plan_scroll = QScrollArea()
        self.plan_scroll.setWidgetResizable(True)
        self.plan_scroll.setWidget(self.budget)
        # The plan pane wraps instead of scrolling sideways (bars' free end, warnings, option notes).
        self.plan_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        mid = QVBoxLayout()
        mid.addWidget(self.devices)
        mid.addWidget(self.plan_scroll, 1)
        mid_w = QWidget()
        mid_w.setLayout(mid)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(left_w)
        top.addWidget(mid_w)
        top.setStretchFactor(1, 1)
        self.console = Console()
        self.launch.logLines.connect(self.console.append_lines)
        self.launch.enginesFound.connect(self._engines_found)
        self.sessions = SessionsPanel()
        self.launch.engineReady.connect(self._engine_up)
        self.launch.engineStopped.connect(lambda: self.sessions.set_engine("", None))
        self.launch.launchFailed.connect(lambda _m: self.sessions.set_engine("", None))
        self.launch.launched.connect(lambda plan: self.budget.set_running(plan, plan))
        self.launch.engineStopped.connect(self._engine_gone)
        self.launch.launchFailed.connect(lambda _m: self._engine_gone())
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.console)
        bottom.addWidget(self.sessions)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 2)
        vsplit = QSplitter(Qt.Orientation.Vertical)
        vsplit.addWidget(top)
        vsplit.addWidget(bottom)
        vsplit.setStretchFactor(0, 4)
        vsplit.setStretchFactor(1, 1)
        vsplit.setSizes([780, 180])  # the plan and the form first; the log and sessions get what is left
        self.setCentralWidget(vsplit)
        self.devices.show_inventory(self.inputs.inventory, self.inputs.nvml_reason)

    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        act = QAction("&Open model…", self)
        act.setShortcut(QKeySequence.StandardKey.Open)
        act.triggered.connect(self.choose_model)
        file_menu.addAction(act)
        self.recent_menu = file_menu.addMenu("Open &recent")
        self._fill_recent()
        hub = QAction("Open from &Hugging Face…", self)
        hub.triggered.connect(self.open_hub)
        file_menu.addAction(hub)
        demo_act = QAction("Open the &demo model", self)
        demo_act.triggered.connect(self.open_demo)
        file_menu.addAction(demo_act)
        file_menu.addSeparator()
        quit_act = QAction("&Quit", self)
        quit_act.setShortcut(QKeySequence.StandardKey.Quit)
        quit_act.triggered.connect(self.close)
        file_menu.addAction(quit_act)

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.state.recent:
            act = QAction(path, self)
            act.triggered.connect(lambda _c=False, p=path: self.open_model(Path(p)))
            self.recent_menu.addAction(act)
        self.recent_menu.setEnabled(bool(self.state.recent))

    # ---- model ---------------------------------------------------------------------------------
    def choose_model(self) -> None:
        start = str(Path(self.state.last_model).parent) if self.state.last_model else str(Path.home())
        path, _f = QFileDialog.getOpenFileName(self, "Open a GGUF model", start, "GGUF models (*.gguf)")
        if path:
            self.open_model(Path(path))

    def open_hub(self) -> None:
        """The repo picker (kept between uses: its listing stays); it hands back a file to open."""
        if self.hub_dialog is None:
            self.hub_dialog = HubDialog(self)
            self.hub_dialog.opened.connect(lambda path: self.open_model(Path(path)))
        self.hub_dialog.show()
        self.hub_dialog.activateWindow()

    def open_demo(self) -> bool:
        self.devices.set_simulated_choice(demo.DEMO_GPU)
        self.set_simulated(demo.DEMO_GPU, replan=False)
        self.settings.set_engine_window(True)
        self.settings.context.set_value(demo.DEMO_CONTEXT)
        return self.open_model(demo.ensure_demo_model(), remember=False)

    def open_model(self, path: Path, *, remember: bool = True) -> bool:
        """Read the model's shape (header only: fast) and plan. False, with a message, if unusable."""
        try:
            shape = self.inputs.load_model(path)
        except (PlannerError, OSError) as exc:
            reason = str(exc)  # the reader's message usually names the file already
            self.show_error(f"Cannot use {reason if reason.startswith(path.name) else f'{path.name}: {reason}'}")
            return False
        self.model_path = path
        self.preview = preview_name(path)
        self.model_label.setText(f"{model_title(path)}<br>{shape.arch}, {shape.n_layer} layers, "
                                 f"trained for {tokens_text(shape.n_ctx_train)} tokens")
        self.model_label.setToolTip(str(path))
        self.measure.status.setText(NOT_MEASURED)
        self.measure.status.setToolTip("")
        if remember:
            self.state.remember_model(str(path))
            self._fill_recent()
        self.show_error("")
        self.replan()
        return True

    def show_error(self, message: str) -> None:
        if not message and self.error.text() and self.statusBar().currentMessage() == self.error.text():
            self.statusBar().clearMessage()  # the message is no longer true: not even for 10 s
        self.error.setText(message)
        self.error.setVisible(bool(message))
        if message:
            self.statusBar().showMessage(message, 10_000)
            self.errorShown.emit(message)

    def dragEnterEvent(self, e: QDragEnterEvent) -> None:
        if e.mimeData().hasUrls() and any(u.toLocalFile().endswith(".gguf") for u in e.mimeData().urls()):
            e.acceptProposedAction()

    def dropEvent(self, e: QDropEvent) -> None:
        for url in e.mimeData().urls():
            if url.toLocalFile().endswith(".gguf"):
                self.open_model(Path(url.toLocalFile()))
                e.acceptProposedAction()
                return

    # ---- planning ------------------------------------------------------------------------------
    def set_simulated(self, name: str, *, replan: bool = True) -> None:
        if not name:
            self.real_inventory = real_inventory(self.nvml)
        inv, reason = inventory_for(name, self.real_inventory)
        self.inputs.set_inventory(inv)
        self.inputs.nvml_reason = reason
        self.state.simulated_gpus = [name] if name else []
        self.devices.show_inventory(inv, reason)
        if replan:
            self.replan()

    def _live_busy(self) -> bool:
        """A live re-plan waits while the user drags the context or the planned engine runs."""
        return self.settings.context.slider.isSliderDown() or self.launch.server is not None

    def _apply_live(self, inv: Inventory) -> None:
        if not any(g.simulated for g in inv.gpus):  # simulated cards: only their host RAM is live
            self.real_inventory = inv
        self.inputs.set_inventory(inv)
        self.replan()

    def replan(self) -> None:
        self.inputs.safety = self.settings.safety_bytes()
        self.inputs.vram_target = self.settings.vram_target_bytes()
        self.inputs.engine_window = self.settings.engine_window()
        if self.inputs.shape is None:
            return
        if self.settings.context.invalid:  # said under the field already: not again on top
            self._no_plan(f"context: {self.settings.context.invalid}", say=False)
            return
        settings = self.settings.settings()
        started = time.perf_counter()
        try:
            plan, used = self.inputs.measured_plan(settings)
            fit = self.inputs.largest_fit(settings, used)
        except (PlannerError, ValueError) as exc:
            self._no_plan(str(exc))
            return
        self.plan_ms = (time.perf_counter() - started) * 1000
        self.show_error("")  # the last message was about other settings
        if self.inputs.measurement is not None and not self.measure.running and \
                self.inputs.measurement_for(settings) is None:
            self.measure.status.setText(STALE)
        self.plan = plan  # what Launch would start now
        running = self.launch.running_plan
        if running is None:  # while an engine runs, the picture stays on what it runs
            self.budget.show_plan(plan, settings, fit)
        self.budget.set_running(running, plan)
        tail = bool(plan.gpus) and self.inputs.engine_window
        where = "in host RAM" if not plan.gpus else "with a host tail" if tail else "fully on GPU"
        capped = fit.tail_capped if tail else fit.resident_capped  # the search stopped, not the memory
        self.settings.context.set_largest_fit((fit.with_tail if tail else fit.resident) or None, where,
                                              capped=cap_text(fit) if capped else "")
        # A header-only copy has no weights: Launch has no model to start, and says why.
        self.launch.set_plan(plan, None if self.preview else self.model_path, self.inputs.shape.arch,
                             not_launchable=PREVIEW_LAUNCH if self.preview else "")
        self.sessions.set_advisories(self.launch.advice)
        self.planned.emit(plan)

    def _no_plan(self, reason: str, *, say: bool = True) -> None:
        """The settings give no plan: say so, grey the last picture, and offer no Launch, until the
        settings change to ones that plan."""
        self.show_error(f"Cannot plan: {reason}" if say else "")
        self.plan = None
        if self.launch.running_plan is None:  # while an engine runs, the picture stays on what it runs
            self.budget.show_no_plan(reason)
        self.launch.set_no_plan(f"the settings give no plan ({reason})")
        self.settings.context.set_largest_fit(None, "– (no plan)")
        self.sessions.set_advisories([])

    def _engines_found(self, engines: list[EngineInfo]) -> None:
        """The engine chosen last time, if it is still there; else an opencoti engine first in the
        list: plan for its rolling KV window."""
        paths = [e.path for e in engines]
        if self.state.engine_path in paths:
            self.settings.engine.setCurrentIndex(paths.index(self.state.engine_path))
        elif engines and engines[0].kind == "opencoti":
            self.settings.set_engine_window(True)

    def _engine_gone(self) -> None:
        """The engine stopped or failed: the picture goes back to the settings as they are now."""
        self.budget.set_running(None)
        self.replan()

    def _engine_up(self, url: str) -> None:
        server, running = self.launch.server, self.launch.running_plan
        slots = running.launch.n_parallel if running is not None else 1
        self.sessions.set_engine(url, server.tail if server is not None else None, slots)

    # ---- measure (pass 1) ----------------------------------------------------------------------
    def start_measure(self) -> None:
        if self.model_path is not None:
            self.measure.start(self.model_path, self.settings.settings(),
                               targets_gpu=bool(self.inputs.inventory.gpus))

    def _measure_done(self, m: Measurement, settings: LaunchSettings) -> None:
        self.inputs.measurement = m
        self.inputs.measured_for = settings
        self.measured.emit(m)
        self.replan()

    # ---- lifetime ------------------------------------------------------------------------------
    def _poll_once(self) -> Snapshot:
        """Runs on the poll thread, about once a second."""
        server = self.launch.server
        return self.poller.poll(server.pid if server is not None else None)

    def closeEvent(self, e: QCloseEvent) -> None:
        self.live.stop()
        self.poll.stop()
        self.poll.wait()
        self.poller.close()
        self.sessions.shutdown()
        self.launch.shutdown()
        self.measure.shutdown()
        if self.hub_dialog is not None:
            self.hub_dialog.shutdown()
        if self.persist:
            self.state.geometry = bytes(self.saveGeometry().toHex().data()).decode()
            self.state.settings = self.settings.settings().to_json()
            self.state.safety_mib = self.settings.safety.value()
            self.state.engine_window = self.settings.engine_window()
            self.state.vram_target_mib = self.settings.vram_target.value()
            engine = self.launch.engine()
            self.state.engine_path = engine.path if engine is not None else self.state.engine_path
            save_state(self.state, self.state_file)
        super().closeEvent(e)
