"""The main window: model + settings on the left, the budget picture in the middle, devices on top,
launch and the engine's log at the bottom. Only wiring; every number comes from the planner.

The model, the settings, pass 1, the plan and the running engine live in one ``WindowState``
(``current``); each panel binds to it and the window talks to panels only through their methods
and signals. What the window decides (the demo, another model's settings, launch profiles, the engine
and card chosen, what is remembered at close) is ``WindowSession``'s (app/ui/window_session.py); every
background task runs on the window's one ``TaskPool`` (``pool``), NVML's readings included.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from app.engine.chosen import remember_chosen_engine
from app.engine.discover import EngineInfo
from app.llamafile.args import asked_context, baked_launch, changes_line, kept_line, opened
from app.machine.devices import Poller, host_memory
from app.paths import storage_problem
from app.planner.devices import HostMemory, Inventory, Snapshot
from app.planner.errors import PlannerError
from app.planner.gguf.reader import MODEL_FILTER, in_archive, is_model_name
from app.planner.plan_types import Plan
from app.planner.units import MiB
from app.text import escape, printable, printable_lines
from app.ui import demo
from app.ui import profile as profile_module
from app.ui.budget_view import BudgetView
from app.ui.chat_panel import ChatPanel
from app.ui.console import Console
from app.ui.context_chart import ContextChart
from app.ui.context_control import tokens_text
from app.ui.devices_panel import DevicesPanel
from app.ui.form_scroll import form_with_footer
from app.ui.help_menu import add_help_menu
from app.ui.hub_button import HubButton, model_title
from app.ui.hub_dialog import HubDialog
from app.ui.launch_panel import LaunchPanel
from app.ui.library_dialog import LibraryDialog
from app.ui.live_replan import LiveReplan
from app.ui.live_view import LiveView
from app.ui.measure_bar import MeasureBar
from app.ui.planning import inventory_for, machine_part, not_read_yet, read_machine
from app.ui.profile import Profile
from app.ui.qt import (
    QAction,
    QByteArray,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QKeySequence,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    Qt,
    QTabWidget,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.server_panel import ServerPanel
from app.ui.server_settings import ServerSettings
from app.ui.sessions_panel import SessionsPanel
from app.ui.settings_panel import SettingsPanel
from app.ui.shown_text import PlainLabel
from app.ui.state import UiState, ignored_fields, load_state, save_state
from app.ui.window_layout import PlanSplit, app_icon, first_size
from app.ui.window_session import BeforeDemo, ClosingPanels, ProfileError, WindowSession
from app.ui.window_state import OpenModel, WindowState
from app.ui.workers import PollWorker, TaskPool

#: Where the devices panel goes in the form when it has room: under the model's name and its open row.
DEVICES_IN_FORM_AT = 2
#: After the CPU's attention was measured in the background: the plan's speeds change with it.
REPRICED = "the speeds shown are priced with it now"


class MainWindow(QMainWindow):
    planned = Signal(object)  # every new Plan (tests and the screenshot wait on it)
    gpusRead = Signal(object)  # this machine's Inventory, read by NVML off the GUI thread
    measured = Signal(object)  # a Measurement
    errorShown = Signal(str)
    #: The CPU-attention engine run landed: its lines (app/engine/attention_runs.py), the plan priced again
    attentionMeasured = Signal(object)

    def __init__(self, state: UiState | None = None, *, persist: bool = True,
                 state_file: Path | None = None, nvml: ModuleType | None = None,
                 read_host: Callable[[], HostMemory | None] = host_memory) -> None:
        super().__init__()
        self.nvml = nvml  # a pynvml stand-in for tests; None = the real one
        self.state_file = state_file
        self.state = state if state is not None else load_state(state_file)
        #: Remembered settings of the wrong type (a hand-edited or older file): reset, and said once.
        self.ignored_state = ignored_fields(state_file) if state is None else []
        self.storage_problem = ""  # the read-only or full disk under the cache or the settings, in a sentence
        self.session = WindowSession(self.state)  # the window's decisions: the demo, another model, close
        self.persist = persist
        self.setWindowTitle("Headroom")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)
        self.pool = TaskPool(self)  # every background task of the window's panels; waited for at close
        #: What the CPU-attention engine run going on measures ("": none), shown in the status bar.
        self.attention_status = ""
        #: (head size, devices, the bench's source): each looked at once a window (plans come at every
        #: slider step; the cache and the engine builds are read once per key, not per plan)
        self._attention_asked: set[tuple[object, ...]] = set()
        # One NVML session for the window's life: the ~1/s poll and the inventory ("Real GPUs" re-reads
        # it) both read through it, on worker threads. Until its first answer the window plans for
        # no GPU, and says it is reading them.
        self.poller = Poller(nvml, read_host)  # read_host: live host RAM (tests pass their own)
        self.real_inventory = not_read_yet()
        simulated, dropped = self.session.simulated_at_start()
        if dropped:
            self.ignored_state.append("simulated_gpus")
        inv, reason = inventory_for(simulated, self.real_inventory)
        self.current = WindowState(inv, reason, self)
        self.hub_dialog: HubDialog | None = None
        self.library_dialog: LibraryDialog | None = None
        self._build()
        self._bind()
        self._menus()
        self.read_gpus()
        self.poll = PollWorker(self._poll_once, parent=self)
        self.poll.polled.connect(self.devices.show_snapshot)
        self.poll.polled.connect(self.live_view.show_snapshot)
        self.live = LiveReplan(lambda: self.current.inventory, lambda: self.current.settings.safety,
                               self._live_busy, self._apply_live, self)
        self.poll.polled.connect(self.live.offer)
        self.poll.start()
        if self.ignored_state:
            self.statusBar().showMessage(
                f"Some remembered settings could not be used and start from their defaults: "
                f"{', '.join(self.ignored_state)}", 30_000)
        storage = storage_problem()  # (a read-only or full disk under the cache or the settings)
        if storage:
            self.storage_problem = storage[:1].upper() + storage[1:] + "."
            self.statusBar().showMessage(self.storage_problem)
        if self.state.geometry:
            self.restoreGeometry(QByteArray.fromHex(self.state.geometry.encode()))
        else:
            self.resize(*first_size(self.screen().availableGeometry().size()))

    # ---- layout --------------------------------------------------------------------------------
    def _build(self) -> None:
        self.model_label = QLabel("No model")
        self.model_label.setWordWrap(True)
        self.open_button = QPushButton("&Open model…")
        self.open_button.clicked.connect(self.choose_model)
        self.hub_button = HubButton()
        self.hub_button.clicked.connect(self.open_hub)
        open_row = QHBoxLayout()
        self.library_button = QPushButton("Library…")  # every letter of it is another control's Alt key
        self.library_button.setToolTip("The GGUFs in your Hugging Face cache and folders, and a search of the Hub")
        self.library_button.clicked.connect(self.open_library)
        open_row.addWidget(self.open_button, 1)
        open_row.addWidget(self.hub_button)
        open_row.addWidget(self.library_button)
        self.error = PlainLabel()
        self.error.setObjectName("errorMessage")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728;")
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # messages quote logs ("<s>" is a token)
        self.error.setVisible(False)
        self.settings = SettingsPanel()
        self.settings.set_settings(self.state.launch_settings())
        self.settings.set_engine_window(self.state.engine_window)
        self.settings.set_margins(self.state.safety_mib, self.state.vram_target_mib)
        self.settings.set_advanced_open(self.state.advanced_open)  # the plain view, unless it was left open
        self.settings.refused.connect(self.show_error)
        self.settings.notice.connect(lambda text: self.statusBar().showMessage(printable_lines(text), 10_000))
        self.measure = MeasureBar(pool=self.pool)
        self.measure.failed.connect(lambda msg: self.show_error(f"Pass 1 failed: {msg.removeprefix('pass 1 failed: ')}"))
        self.launch = LaunchPanel(self, pool=self.pool)
        self.launch.use_measure(self.measure)  # Launch measures an estimated plan first (pass 1)
        self.server = ServerPanel()
        try:
            self.server.set_settings(ServerSettings.from_json(self.state.server or {}))
        except ValueError:
            self.server.set_settings(ServerSettings())  # a hand-edited state file: the defaults
        self.launch.use_server(self.server.settings, self.server.key_folder())
        self.devices = DevicesPanel(pool=self.pool)
        self.devices.set_simulated_choice(self.session.simulated_at_start()[0])
        self.devices.simulationChanged.connect(self.set_simulated)
        self.devices.workersAnswered.connect(self._workers_answered)
        if self.state.rpc_workers:  # remembered: asked again in the background
            self.devices.ask_workers(self.state.rpc_workers)
        # Small screens: the form scrolls up and down only; Measure, Launch / Stop and the endpoint
        # never scroll away (a footer under the form). The devices to plan for go in the form, under
        # the model, where it has room for them (``_place_devices``), else over the plan.
        left_w, self.left_scroll = form_with_footer(
            [self.model_label, open_row, self.devices, self.settings, self.server, self.measure, self.launch],
            [self.measure.pinned_controls(), self.launch.pinned_controls()], max_width=480)
        self._placing = False
        self.budget = BudgetView()
        self.budget.settingsChosen.connect(self.settings.set_settings)
        self.demo_banner = QLabel(demo.DEMO_BANNER)
        self.demo_banner.setObjectName("demoBanner")
        self.demo_banner.setWordWrap(True)
        self.demo_banner.setTextFormat(Qt.TextFormat.RichText)
        self.demo_banner.setStyleSheet("background: #fff3cd; color: #5c4400; border: 1px solid #c77800; padding: 6px;")
        self.demo_banner.linkActivated.connect(lambda _link: self.choose_model())
        self.demo_banner.setVisible(False)
        self.live_view = LiveView()  # the running engine's memory now (from the device poll)
        self.launch.checked.connect(self.live_view.show_check)
        plan_page = QWidget()  # live readings and plan vs actual (once an engine ran) over the budget picture
        plan_col = QVBoxLayout(plan_page)
        plan_col.setContentsMargins(0, 0, 0, 0)
        plan_col.addWidget(self.live_view)
        plan_col.addWidget(self.launch.check_table())
        plan_col.addWidget(self.budget, 1)
        self._plan_col = plan_col
        # Plan vs actual over the plan while its engine runs; once it stopped, under the new plan (whose
        # verdict is then what the pane is for).
        self.launch.checked.connect(lambda _check: self._place_check(running=True))
        self.launch.engineStopped.connect(lambda: self._place_check(running=False))
        self.plan_scroll = QScrollArea()
        self.plan_scroll.setWidgetResizable(True)
        self.plan_scroll.setWidget(plan_page)
        # The plan pane wraps instead of scrolling sideways (bars' free end, warnings, option notes).
        self.plan_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        mid = QVBoxLayout()
        self._mid = mid
        mid.addWidget(self.demo_banner)
        # Errors go here, over the plan they are about: in the form they pushed every setting down.
        mid.addWidget(self.error)
        # The budget picture, and beside it in a tab the context chart (it prices only while shown).
        self.chart = ContextChart()
        self.chart.contextChosen.connect(self.settings.set_context)
        self.plan_tabs = QTabWidget()
        self.plan_tabs.addTab(self.plan_scroll, "&Budget")
        self.plan_tabs.addTab(self.chart, "Context &chart")
        mid.addWidget(self.plan_tabs, 1)
        mid_w = QWidget()
        mid_w.setLayout(mid)
        self.console = Console()
        self.launch.logLines.connect(self.console.append_lines)
        self.launch.runStarted.connect(self.console.start_run)
        # A window with a state file of its own (a test's) keeps its sessions beside it, not in the CLI's store.
        self.sessions = SessionsPanel(store_root=self.state_file.parent if self.state_file else None, pool=self.pool)
        self.launch.adviceChanged.connect(self.sessions.set_advisories)
        self.chat = ChatPanel(pool=self.pool)
        self.chat.replyDone.connect(self.launch.reply_done)  # its speed row measures each reply
        talk = QTabWidget()  # the chat first; the shared-sessions proof one tab away
        self.talk = talk
        talk.addTab(self.chat, "Chat")
        sessions_page = QScrollArea()  # in a short window (1024×700) it scrolls rather than push the plan up
        sessions_page.setWidgetResizable(True)
        sessions_page.setFrameShape(QFrame.Shape.NoFrame)
        sessions_page.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        sessions_page.setWidget(self.sessions)
        talk.addTab(sessions_page, "Shared sessions")
        bottom = QSplitter(Qt.Orientation.Horizontal)
        self.bottom = bottom  # the log beside the chat and sessions
        bottom.addWidget(self.console)
        bottom.addWidget(talk)
        bottom.setStretchFactor(0, 1)  # the log wraps; the sessions' controls need their width
        bottom.setStretchFactor(1, 1)
        # The form has the whole height on the left (it never scrolls at 1280×860); on the right the
        # plan takes the upper part and the log and sessions the rest (more of it on a tall screen).
        vsplit = PlanSplit()
        vsplit.addWidget(mid_w)
        vsplit.addWidget(bottom)
        self.vsplit = vsplit
        self.chat.forkShown.connect(lambda k: vsplit.set_forking(k > 0))
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(left_w)
        top.addWidget(vsplit)
        top.setStretchFactor(1, 1)
        self.setCentralWidget(top)
        self.left_scroll.roomChanged.connect(self._place_devices)

    def _bind(self) -> None:
        """Every panel onto the one state; the window itself says what happened in its own words."""
        state = self.current
        for panel in (self.settings, self.devices, self.budget, self.chart, self.measure, self.launch,
                      self.sessions, self.live_view, self.chat, self.console):
            panel.bind(state)
        state.modelChanged.connect(self._show_model)
        state.planChanged.connect(self._planned)
        state.noPlan.connect(self._no_plan)
        state.measurementChanged.connect(lambda m: self.measured.emit(m) if m is not None else None)
        state.enginesChanged.connect(self._engines_found)
        state.runningChanged.connect(lambda plan: self._place_check(running=True) if plan is not None else None)
        self.settings.otherEngineWanted.connect(self.choose_engine_file)

    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        act = QAction("&Open model…", self)
        act.setShortcut(QKeySequence.StandardKey.Open)
        act.triggered.connect(self.choose_model)
        file_menu.addAction(act)
        self.recent_menu = file_menu.addMenu("Open &recent")
        self._fill_recent()
        library = QAction("Model &library…", self)
        library.triggered.connect(self.open_library)
        file_menu.addAction(library)
        hub = QAction("Open from &Hugging Face…", self)
        hub.triggered.connect(self.open_hub)
        file_menu.addAction(hub)
        engine_act = QAction("Choose &engine…", self)
        engine_act.setToolTip("Choose llama-server or a llamafile to launch (one Headroom did not find)")
        engine_act.triggered.connect(self.choose_engine_file)
        file_menu.addAction(engine_act)
        demo_act = QAction("Open the &demo model", self)
        demo_act.triggered.connect(self.open_demo)
        file_menu.addAction(demo_act)
        file_menu.addSeparator()
        save_profile = QAction("&Save launch profile…", self)
        save_profile.setShortcut(QKeySequence.StandardKey.Save)
        save_profile.triggered.connect(self.choose_profile_to_save)
        file_menu.addAction(save_profile)
        open_profile = QAction("Open launch &profile…", self)
        open_profile.triggered.connect(self.choose_profile_to_open)
        file_menu.addAction(open_profile)
        self.recent_profiles_menu = file_menu.addMenu("Recent launch pro&files")
        self._fill_recent_profiles()
        file_menu.addSeparator()
        quit_act = QAction("&Quit", self)
        quit_act.setShortcut(QKeySequence.StandardKey.Quit)
        quit_act.triggered.connect(self.close)
        file_menu.addAction(quit_act)
        self.glossary = add_help_menu(self)

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for path in self.state.recent:
            act = QAction(path, self)
            act.triggered.connect(lambda _c=False, p=path: self.open_model(Path(p)))
            self.recent_menu.addAction(act)
        self.recent_menu.setEnabled(bool(self.state.recent))

    def _fill_recent_profiles(self) -> None:
        self.recent_profiles_menu.clear()
        for path in self.state.recent_profiles:
            act = QAction(path, self)
            act.triggered.connect(lambda _c=False, p=path: self.open_profile(Path(p)))
            self.recent_profiles_menu.addAction(act)
        self.recent_profiles_menu.setEnabled(bool(self.state.recent_profiles))

    # ---- launch profiles -----------------------------------------------------------------------
    def profile(self) -> Profile | None:
        """The model, settings and server now, as a launch profile (None before a model is open)."""
        model = self.current.model
        if model is None:
            return None
        current = self.current.settings
        return Profile(str(model.path), self.settings.settings(), self.settings.wants_window(),
                       current.safety // MiB, (current.vram_target or 0) // MiB,
                       self.devices.simulated_choice(), self.server.settings())

    def choose_profile_to_save(self) -> None:
        if self.current.model is None:
            self.show_error("Open a model first: a launch profile holds a model and its settings")
            return
        path, _f = QFileDialog.getSaveFileName(self, "Save the launch profile",
                                               str(self.session.profile_path(self.current.model.path)),
                                               f"Launch profiles (*{profile_module.SUFFIX})")
        if path:
            self.save_profile(Path(path))

    def save_profile(self, path: Path) -> bool:
        profile = self.profile()
        if profile is None:
            return False
        error = self.session.save_profile(profile, path)
        if error:
            self.show_error(error)
            return False
        self._fill_recent_profiles()
        self.statusBar().showMessage(f"Launch profile saved: {path}", 10_000)
        return True

    def choose_profile_to_open(self) -> None:
        path, _f = QFileDialog.getOpenFileName(self, "Open a launch profile", str(self.session.profile_folder()),
                                               f"Launch profiles (*{profile_module.SUFFIX});;JSON (*.json)")
        if path:
            self.open_profile(Path(path))

    def open_profile(self, path: Path) -> bool:
        """Open the profile's model with its settings, planning options and server. A profile that
        cannot be used (or whose model cannot be read) changes nothing and says why."""
        try:
            profile, _model = self.session.read_profile(path, self.current.read_model)
        except ProfileError as exc:
            self.show_error(str(exc))
            return False
        self.devices.set_simulated_choice(profile.simulated)
        self.set_simulated(profile.simulated, replan=False)
        self.settings.set_engine_window(profile.engine_window)
        self.settings.set_margins(profile.safety_mib, profile.vram_target_mib)
        self.server.set_settings(profile.server)
        if not self.open_model(Path(profile.model)):
            return False
        self.settings.set_settings(profile.launch)
        self.session.profile_opened(path)
        self._fill_recent_profiles()
        return True

    # ---- engine --------------------------------------------------------------------------------
    def choose_engine_file(self) -> None:
        """File ▸ Choose engine… and the Engine list's Other…: an engine file, found again with it first."""
        path, _f = QFileDialog.getOpenFileName(self, "Choose llama-server or a llamafile",
                                               str(self.session.engine_folder()))
        if path:
            self.use_engine_file(Path(path))

    def use_engine_file(self, path: Path) -> None:
        """Discover the engines again with ``path`` first and choose it (remembered at close)."""
        self.session.choose_engine_file(path)  # what _engines_found chooses once discovery answers
        self._remember_engine(str(path))
        self.launch.discover(path)

    def _remember_engine(self, path: str) -> None:
        """The chosen engine, kept where the CLI finds it too (app/engine/chosen.py)."""
        if not self.persist:
            return
        try:
            remember_chosen_engine(path, self.state_file.parent if self.state_file is not None else None)
        except OSError as exc:  # a full or read-only disk: the window goes on with it chosen
            print(f"headroom: the chosen engine was not saved: {exc.strerror or exc}", file=sys.stderr)

    # ---- model ---------------------------------------------------------------------------------
    def choose_model(self) -> None:
        path, _f = QFileDialog.getOpenFileName(self, "Open a model (a GGUF or a llamafile)",
                                               str(self.session.model_folder()), MODEL_FILTER)
        if path:
            self.open_model(Path(path))

    def open_hub(self) -> HubDialog:
        """The repo picker (kept between uses: its listing stays); it hands back a file to open."""
        if self.hub_dialog is None:
            self.hub_dialog = HubDialog(self, pool=self.pool)
            self.hub_dialog.opened.connect(lambda path: self.open_model(Path(path)))
        self.hub_dialog.show()
        self.hub_dialog.activateWindow()
        return self.hub_dialog

    def open_library(self) -> None:
        """The GGUFs found here and a Hub search (kept between uses); it hands back a file or a repo."""
        if self.library_dialog is None:
            self.library_dialog = LibraryDialog(self.state, self, pool=self.pool)
            self.library_dialog.chosen.connect(lambda path: self.open_model(Path(path)))
            self.library_dialog.hubRepoChosen.connect(lambda repo: self.open_hub().open_ref(repo))
        self.library_dialog.show()
        self.library_dialog.activateWindow()

    def open_demo(self) -> bool:
        """The demo: a simulated 24 GB card, the rolling KV window where the engine can do it, 512k.
        Opening a real model afterwards puts the card and the placement back."""
        model = self.current.model
        self.session.enter_demo(self.devices.simulated_choice(), self.settings.wants_window(),
                                showing_demo=model is not None and model.demo)
        self.devices.set_simulated_choice(demo.DEMO_GPU)
        self.set_simulated(demo.DEMO_GPU, replan=False)
        self.settings.set_engine_window(True)
        self.settings.set_context(demo.DEMO_CONTEXT)
        return self.open_model(demo.ensure_demo_model(), remember=False, is_demo=True)

    def open_model(self, path: Path, *, remember: bool = True, is_demo: bool = False) -> bool:
        """Read the model's shape (header only: fast) and plan, with the settings the session says
        a model starts with (``WindowSession.opening``). False, with a message, if unusable."""
        try:
            model = self.current.read_model(path, demo=is_demo)
        except (PlannerError, OSError) as exc:
            reason = str(exc)  # the reader's message usually names the file already
            self.show_error(f"Cannot use {reason if reason.startswith(path.name) else f'{path.name}: {reason}'}")
            return False
        was = self.current.model
        start = self.session.opening(path, model.shape.n_ctx_train, is_demo=is_demo,
                                     open_path=was.path if was is not None else None,
                                     open_is_demo=was is not None and was.demo, has_extras=self.settings.has_extras())
        lf = opened(path)
        if lf is not None and (asked := asked_context(lf[1])) is not None:  # its .args is where the plan starts
            start = replace(start, context=asked)
        self._put_back(start.put_back)
        settings = (self.settings.settings_for_model(start.context, model.shape) if start.context is not None
                    else self.settings.extras_for_model(model.shape) if start.drop_extras else None)
        if lf is not None:  # (and it is the engine for its own weights: first in the Engine list)
            launch = baked_launch(lf[1], self.settings.settings())
            self.settings.set_settings(launch, emit=False)
            settings = self.settings.plan_settings()
            said = "; ".join(x for x in (changes_line(lf[1], launch, ()), kept_line(lf[1])) if x)
            self.statusBar().showMessage(printable(said or f"{lf[0].path.name}: a llamafile without .args"), 15_000)
            self.launch.discover(lf[0].path)
        self.current.use_model(model, settings)
        if remember:
            self.session.opened(path)
            self._fill_recent()
        return True

    def _put_back(self, before: BeforeDemo | None) -> None:
        """What the demo changed, back on the panels."""
        if before is None:
            return
        self.devices.set_simulated_choice(before.simulated)
        self.set_simulated(before.simulated, replan=False)
        self.settings.set_engine_window(before.engine_window)

    def _show_model(self, model: OpenModel) -> None:
        self.demo_banner.setVisible(model.demo)
        shape = model.shape
        inside = shape.path if in_archive(model.path) else model.path  # a llamafile: named with its GGUF
        law = "" if shape.modelled else " — planned from pass 1 (the estimate does not know it)"
        self.model_label.setText(f"{model_title(inside)}<br>{escape(shape.arch)}{law}, {shape.n_layer} layers, "
                                 f"trained for {tokens_text(shape.n_ctx_train)} tokens")
        self.model_label.setToolTip(printable(str(model.path)))
        self.show_error("")

    def _place_devices(self) -> None:
        """The devices to plan for in the form, under the model, while the form has room for them (at
        1366×768 its column had a gap above Measure while the Budget scrolled); over the plan when
        the form would have to scroll for them (Advanced open, a small window)."""
        inner = self.left_scroll.widget()
        form = inner.layout() if inner is not None else None
        if self._placing or not isinstance(form, QVBoxLayout):
            return
        in_form = form.indexOf(self.devices) >= 0
        # (the form scrolls when its least height is more than the room: its minimum, not its size hint)
        needs = self.devices.minimumSizeHint().height() + form.spacing()
        rest = form.minimumSize().height() - (needs if in_form else 0)
        fits = rest + needs <= self.left_scroll.viewport().height()
        if fits == in_form:
            return
        self._placing = True
        try:
            if fits:
                self._mid.removeWidget(self.devices)
                form.insertWidget(DEVICES_IN_FORM_AT, self.devices)
            else:
                form.removeWidget(self.devices)
                self._mid.insertWidget(self._mid.indexOf(self.demo_banner) + 1, self.devices)
        finally:
            self._placing = False

    def _place_check(self, *, running: bool) -> None:
        """The live readings and plan vs actual over the plan while the engine runs; once it stopped,
        both under the new plan (the last reading, frozen, and the last run's table stay readable there)."""
        col = self._plan_col
        for widget in (self.live_view, self.launch.check_table()):
            col.removeWidget(widget)
            if running:
                col.insertWidget(col.indexOf(self.budget), widget)
            else:
                col.addWidget(widget)

    @property
    def model_path(self) -> Path | None:
        return self.current.model.path if self.current.model is not None else None

    @property
    def plan(self) -> Plan | None:
        """What Launch would start now (None: no model, or the settings give no plan)."""
        return self.current.plan

    @property
    def error_message(self) -> str:
        """The error the window shows ("" when none)."""
        return self.error.text()

    def show_error(self, message: str) -> None:
        if not message and self.error.text() and self.statusBar().currentMessage() == self.error.text():
            self.statusBar().clearMessage()  # the message is no longer true: not even for 10 s
        self.error.setText(message)
        self.error.setVisible(bool(message))
        if message:
            self.statusBar().showMessage(printable_lines(message), 10_000)
            self.errorShown.emit(message)

    def dragEnterEvent(self, e: QDragEnterEvent) -> None:
        if e.mimeData().hasUrls() and any(is_model_name(u.toLocalFile()) for u in e.mimeData().urls()):
            e.acceptProposedAction()

    def dropEvent(self, e: QDropEvent) -> None:
        for url in e.mimeData().urls():
            if is_model_name(url.toLocalFile()):
                self.open_model(Path(url.toLocalFile()))
                e.acceptProposedAction()
                return

    # ---- planning ------------------------------------------------------------------------------
    def read_gpus(self) -> None:
        """Read this machine's GPUs in the background (NVML can take seconds to answer); the window
        plans with the last reading meanwhile, and again with the new one (``gpusRead``)."""
        self.pool.run(lambda _c: read_machine(self.poller.inventory), self._machine_read, self._gpus_not_read,
                      owner=self, key="gpus")

    @property
    def reading_gpus(self) -> bool:
        """NVML is being read for the inventory (the window plans with the last reading meanwhile)."""
        return self.pool.current(self, "gpus") is not None

    def _machine_read(self, inv: object) -> None:
        self.current.speed_calibrated()  # stored by read_machine: plans predict with it from now on
        self._gpus_read(inv)

    def _gpus_read(self, inv: object) -> None:
        assert isinstance(inv, Inventory)
        self.real_inventory = inv
        name = self.devices.simulated_choice()
        if name:  # a simulated card does not change with the reading; why there is no real GPU may
            _inv, reason = inventory_for(name, inv, self.devices.worker_readings())
            self.current.set_inventory(self.current.inventory, reason, replan=False)
        else:
            self.set_simulated("", read=False)
        self.gpusRead.emit(inv)

    def _gpus_not_read(self, message: str) -> None:
        self._gpus_read(replace(self.real_inventory, reason=f"the GPUs could not be read: {message}"))

    def set_simulated(self, name: str, *, replan: bool = True, read: bool = True) -> None:
        """Plan for the simulated card ``name`` ("": this machine's GPUs, read again in the background
        unless ``read`` is False)."""
        if not name and read:
            self.read_gpus()
        inv, reason = inventory_for(name, self.real_inventory, self.devices.worker_readings())
        self.session.simulate(name)
        self.current.set_inventory(inv, reason, replan=replan)

    def _live_busy(self) -> bool:
        """A live re-plan waits while the user drags the context or the planned engine runs."""
        return self.settings.dragging() or self.current.running_engine is not None

    def _workers_answered(self, readings: object) -> None:
        """The RPC workers answered (or the list was emptied): remember them, plan with their devices."""
        self.session.workers_answered(self.devices.worker_endpoints(), bool(readings))
        self.set_simulated(self.devices.simulated_choice())

    def _apply_live(self, inv: Inventory) -> None:
        real = machine_part(inv)
        if real is not None:
            self.real_inventory = real
        self.current.set_inventory(inv)

    def replan(self) -> None:
        self.current.replan()

    def _planned(self, plan: Plan) -> None:
        self.show_error("")  # the last message was about other settings
        self.planned.emit(plan)
        self._measure_attention()

    def _measure_attention(self) -> None:
        """The CPU-attention engine run for the open model's head size on the planning devices (the host,
        each RPC worker's), when this machine has none yet and a llama-batched-bench is there to make it:
        in the task pool, said in the status bar meanwhile; the plan is priced again when it lands."""
        from app.engine.attention_runs import bench_source, ensure_runs, find_bench, progress_line
        from app.machine.calibrate import engine_run_key, missing_engine_runs

        model = self.current.model
        if model is None or not self.current.speed_ready or self.pool.current(self, "attention") is not None:
            return  # (the calibration's first store is read_machine's: not two writers at once)
        inventory, head, engine = self.current.planning_inventory(), model.shape.head_dim_k, self.current.engine
        # (the engines are found in the background: one found later is another key, looked at again)
        asked = (head, bench_source(engine), *(engine_run_key(g) for g in inventory.rpc_devices))
        if asked in self._attention_asked:
            return
        self._attention_asked.add(asked)
        todo = missing_engine_runs(inventory, (head,))
        if not todo or find_bench(engine) is None:
            return  # nothing to measure, or nothing to measure with (the figures say not calibrated)
        self.attention_status = progress_line(todo)
        self.statusBar().showMessage(self.attention_status)
        self.pool.run(lambda _c: ensure_runs(inventory, (head,), engine), self._attention_measured,
                      self._attention_failed, owner=self, key="attention")

    def _attention_measured(self, lines: object) -> None:
        assert isinstance(lines, list)
        self.attention_status = ""
        # (the speeds on screen change with it: said, not left for the user to wonder why)
        measured = any(line.startswith("measured") for line in lines)  # (not when it was not measured now)
        self.statusBar().showMessage("; ".join(lines) + (f" — {REPRICED}" if measured else ""), 15_000)
        self.current.engine_runs_stored()
        self.current.replan()
        self.attentionMeasured.emit(lines)

    def _attention_failed(self, message: str) -> None:
        self.attention_status = ""
        self.statusBar().showMessage(f"this CPU's attention speed could not be measured: {message}", 15_000)

    def _no_plan(self, reason: str) -> None:
        """The settings give no plan: say so (a mistyped context is said under its field already);
        the panels grey the last picture and offer no Launch until the settings plan again."""
        self.show_error("" if self.current.settings.problem else f"Cannot plan: {reason}")

    def _engines_found(self, engines: list[EngineInfo] | None) -> None:
        """The engine chosen last time, if it is still there; else an opencoti engine first in the
        list: plan for its rolling KV window."""
        if not engines or self.settings.choose_engine(self.session.engine_to_choose()):
            return
        if self.session.wants_window_for(engines):
            self.settings.set_engine_window(True)

    # ---- lifetime ------------------------------------------------------------------------------
    def _poll_once(self) -> Snapshot:
        """Runs on the poll thread, about once a second."""
        engine = self.current.running_engine
        return self.poller.poll(engine.pid if engine is not None else None)

    def closeEvent(self, e: QCloseEvent) -> None:
        self.live.stop()
        self.poll.stop()
        self.poll.wait()
        self.devices.shutdown()
        self.sessions.shutdown()
        self.chat.shutdown()
        self.launch.shutdown()
        self.measure.shutdown()
        for dialog in (self.hub_dialog, self.library_dialog):
            if dialog is not None:
                dialog.shutdown()
        self.pool.close()  # whatever is left (the GPU reading): no thread outlives the window running
        self.poller.close()
        if self.persist:
            settings, model, engine = self.current.settings, self.current.model, self.current.engine
            state = self.session.remember_at_close(ClosingPanels(
                geometry=bytes(self.saveGeometry().toHex().data()).decode(),
                wants_window=self.settings.wants_window(), settings=self.settings.settings().to_json(),
                model_is_demo=model is not None and model.demo, safety_mib=settings.safety // MiB,
                vram_target_mib=(settings.vram_target or 0) // MiB, server=self.server.settings().to_json(),
                engine_path=engine.path if engine is not None else None,
                advanced_open=self.settings.advanced_open()))
            try:
                save_state(state, self.state_file)
            except OSError as exc:  # a full or read-only disk: the window still closes cleanly
                print(f"headroom: the window's settings were not saved: {exc.strerror or exc}", file=sys.stderr)
            self._remember_engine(state.engine_path)
        super().closeEvent(e)
