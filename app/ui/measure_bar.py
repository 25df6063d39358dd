"""Measure (pass 1) in the background: the button, a busy indicator, Cancel, and what was measured.

Pass 1 runs in a child process (app.probe.measure); here it runs on a ``TaskThread`` so the
window stays responsive. Cancel sets the probe's cancel event: ``measure`` kills the child's process
group within ``CANCEL_POLL_S`` and raises ``MeasureCancelled``; a result already on its way is dropped.
The bar is free again at once; ``stopping`` holds cancelled workers until their child is gone.
Bound to the window state (``bind``), it measures the open model with the settings now and hands
the result to the state; it says when the plan's settings are no longer the ones measured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from app.engine.libpath import lib_dir_beside
from app.glossary import explain
from app.planner.measurement import Measurement
from app.planner.plan_types import Plan
from app.planner.settings import LaunchSettings
from app.probe.measure import (
    cached_measurement,
    gpu_caveat,
    measure_cached,
    start_ahead_soon,
    stop_ahead,
    waiting_ahead,
)
from app.text import printable
from app.ui.qt import QHBoxLayout, QLabel, QObject, QProgressBar, QPushButton, QVBoxLayout, QWidget, Signal
from app.ui.window_state import WindowState, no_engine_yet
from app.ui.workers import TaskPool

#: Runs pass 1: (model, settings, cancel) -> (measurement, from_cache). Tests swap in a slow child.
Probe = Callable[[Path, LaunchSettings, threading.Event], tuple[Measurement, bool]]
CANCELLED = "Measurement cancelled: pass 1 stopped"
NOT_MEASURED = "Compute buffer: estimated (not measured)"
STALE = "Compute buffer: estimated (pass 1 ran for other settings; measure again)"
#: A model the estimate does not know, measured as it opens (its plan comes from pass 1).
MEASURING_UNKNOWN = "Measuring: the estimate does not know {}, so its plan comes from pass 1…"


class MeasureBar(QWidget):
    measured = Signal(object, object)  # Measurement, the LaunchSettings it ran with
    failed = Signal(str)
    cancelled = Signal()  # Cancel was clicked (or another model opened) while pass 1 ran

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.pool = pool if pool is not None else TaskPool(self)
        self._state: WindowState | None = None
        #: The chosen engine's libllama (when it has one beside it), read on the GUI thread at each start.
        self._lib_dir: str | None = None
        self._running_for: LaunchSettings | None = None  # the settings pass 1 runs for now
        self._failed_for: LaunchSettings | None = None  # the settings the last pass 1 failed for
        # (its child started ahead where one waits, and the next one started after it: start_ahead)
        self.probe: Probe = lambda model, settings, cancel: measure_cached(model, settings, cancel=cancel,
                                                                           lib_dir=self._lib_dir, ahead=True)
        #: The stored pass 1 of a model and launch (runs nothing): looked up when a model opens and when
        #: the settings change, so a pass 1 that ``headroom measure`` or an earlier session made is used
        #: without a click (a walkthrough opened a measured model and was shown estimates).
        self.lookup: Callable[[Path, LaunchSettings, str | None], Measurement | None] = \
            lambda model, settings, lib_dir: cached_measurement(model, settings, lib_dir=lib_dir)
        self._looked_up: tuple[str, LaunchSettings, str | None] | None = None
        self._lookups = QObject(self)  # their owner in the pool: a lookup is no pass 1 being stopped
        self.button = QPushButton("&Measure (pass 1)")
        self.button.setToolTip(explain("pass 1"))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate
        self.busy.setVisible(False)
        self._status = QLabel(NOT_MEASURED)
        self._status.setWordWrap(True)
        self._controls = QWidget()  # Measure / Cancel: the window pins them below its scrolling form
        row = QHBoxLayout(self._controls)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addWidget(self.cancel_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.busy)
        lay.addWidget(self._status)

    def pinned_controls(self) -> QWidget:
        """Measure and Cancel, for the window to pin where they never scroll away."""
        return self._controls

    def status_text(self) -> str:
        """What the bar says about the compute buffer (its tooltip: ``status_tip``)."""
        return self._status.text()

    def status_tip(self) -> str:
        return self._status.toolTip()

    @property
    def running(self) -> bool:
        return self.pool.current(self, "pass 1") is not None

    # ---- the window state ----------------------------------------------------------------------
    def bind(self, state: WindowState) -> None:
        """Measure measures ``state``'s model with its settings now; the result goes to ``state``.
        A new model is not measured yet; a plan for other settings than the measured ones says so."""

        def measure() -> None:
            if state.engine is None and state.engines == []:  # none found: pass 1 has no libllama to run
                self._say(no_engine_yet(state.engines, "measure"))
                return
            if state.model is not None:
                self.start(state.model.path, state.settings.launch, targets_gpu=bool(state.inventory.gpus))

        def planned(plan: Plan) -> None:
            # (a pass 1 started since has reset _failed_for; the task that failed may not have finished yet)
            if self._failed_for is not None and state.settings.launch != self._failed_for:
                self._failed_for = None  # "failed" was about other settings: these are not measured yet
                self._say(NOT_MEASURED)
            if state.measurement is not None and not self.running and \
                    state.measurement_for(state.settings.launch) is None and state.measurement_for(plan.launch) is None:
                self._status.setText(STALE)
            self._look_up_stored()
            if state.model is not None and waiting_ahead() is None and not self.running:
                # (a model given on the command line, or restored, opened before any engine was found: no
                # model change came after the engine, so the first plan with both starts it)
                self._start_ahead()

        def another_model(_model: object) -> None:
            self.cancel()  # pass 1 of the model before is no measurement of this one
            self._failed_for, self._looked_up = None, None  # (the same file again: its stored pass 1 too)
            self._say(NOT_MEASURED)
            if state.model is not None:
                self._start_ahead()

        def no_plan(_why: str) -> None:
            """A model the estimate does not know has no plan until pass 1 measured it: measure it now,
            in the background, with the bar's progress (as a Measure click would)."""
            model = state.model
            if model is None or model.shape.modelled or model.shape.law or self.running \
                    or self._failed_for == state.settings.launch or (state.engine is None and state.engines == []):
                return
            self.start(model.path, state.settings.launch, targets_gpu=bool(state.inventory.gpus))
            self._say(MEASURING_UNKNOWN.format(printable(model.shape.arch)))

        self._state = state
        state.noPlan.connect(no_plan)
        self.button.clicked.connect(measure)
        self.measured.connect(state.set_measurement)
        state.modelChanged.connect(another_model)
        state.planChanged.connect(planned)

    def measure_launch(self, launch: LaunchSettings) -> bool:
        """Pass 1 for ``launch`` (a plan's own, as ``headroom serve`` measures before it launches) of the
        bound state's model, with the bar's progress and Cancel; False when it cannot start (none bound,
        no model, one running)."""
        state = self._state
        if state is None or state.model is None or self.running:
            return False
        self.start(state.model.path, launch, targets_gpu=bool(state.inventory.gpus))
        return True

    def _look_up_stored(self) -> None:
        """The stored pass 1 of the bound state's model and launch, in the background, shown as measured
        when there is one; once per model, launch and library, and never over a pass 1 running or done."""
        state = self._state
        if state is None or state.model is None or self.running:
            return
        launch = state.settings.launch
        if state.measurement_for(launch) is not None:
            return
        model, lib_dir = state.model.path, self._lib_dir_now()
        wanted = (str(model), launch, lib_dir)
        if wanted == self._looked_up:
            return
        self._looked_up = wanted
        lookup, targets_gpu = self.lookup, bool(state.inventory.gpus)

        def found(m: object) -> None:
            # (the model, its settings or the engine may have changed while it looked)
            current = (state.model is not None and str(state.model.path) == wanted[0]
                       and state.settings.launch == launch and self._lib_dir_now() == lib_dir)
            if not isinstance(m, Measurement) or not current or state.measurement_for(launch) is not None:
                return
            if self.running:
                self._looked_up = None  # pass 1 runs for these settings: if it is cancelled, look again
                return
            self._done((m, True), launch, targets_gpu)

        self.pool.run(lambda _cancel: lookup(model, launch, lib_dir), found, lambda _message: None,
                      owner=self._lookups, key="stored pass 1")

    def _lib_dir_now(self) -> str | None:
        """The chosen engine's libllama (None: the bindings' own, or no engine)."""
        engine = self._state.engine if self._state is not None else None
        return lib_dir_beside(engine.path) if engine is not None and not engine.is_llamafile else None

    def _start_ahead(self) -> None:
        """A model was opened: a pass-1 child is started now for the engine chosen, in the background,
        so that Measure (or Launch's pass 1) finds Python's start-up done (app/probe/measure.py
        ``start_ahead``). Not without an engine: pass 1 then has no libllama to run."""
        state = self._state
        if state is None or (state.engine is None and not state.engines):
            return
        start_ahead_soon(self._lib_dir_now())

    def _say(self, text: str, tip: str = "") -> None:
        self._status.setText(text)
        self._status.setToolTip(tip)

    def start(self, model: Path, settings: LaunchSettings, *, targets_gpu: bool) -> None:
        if self.running:
            return
        self._lib_dir = self._lib_dir_now()
        self._running_for, self._failed_for = settings, None
        probe = self.probe

        def work(cancel: threading.Event) -> tuple[Measurement, bool]:
            return probe(model, settings, cancel)

        self._set_busy(True)
        self._status.setText("Measuring with the engine's allocator…")
        self.pool.run(work, lambda r: self._done(r, settings, targets_gpu), self._failed, owner=self, key="pass 1")

    def cancel(self) -> None:
        """Stop pass 1 (its child is killed in the background); the bar is free again at once."""
        if self.running:
            self.pool.cancel(self, "pass 1")  # measure() kills the child's process group and returns
            self._looked_up = None  # (a lookup that answered while it ran was not used: the next plan asks again)
            self._status.setText(CANCELLED)
            self._set_busy(False)
            self.cancelled.emit()

    def _set_busy(self, on: bool) -> None:
        self.busy.setVisible(on)
        self.cancel_button.setVisible(on)
        self.button.setEnabled(not on)

    def _done(self, result: object, settings: LaunchSettings, targets_gpu: bool) -> None:
        assert isinstance(result, tuple)
        m, from_cache = result
        how = "from the measurement cache" if from_cache else f"{m.seconds:.2f} s"
        caveat = gpu_caveat(m, targets_gpu=targets_gpu)
        if caveat:  # the plan's warnings say it in full once; here the headline, the rest on hover
            self._status.setText(f"Pass 1 ran on the {m.backend} — GPU compute is still estimated ({how})")
            self._status.setToolTip(caveat)
        else:
            self._status.setText(f"Compute buffer measured by pass 1 ({m.backend}, {how})")
            self._status.setToolTip("")
        self._set_busy(False)
        self.measured.emit(m, settings)

    def _failed(self, message: str) -> None:
        self._failed_for = self._running_for
        self._status.setText("Measurement failed")
        self._set_busy(False)
        self.failed.emit(message)

    @property
    def stopping(self) -> bool:
        """A cancelled pass 1 whose child is still being killed."""
        return self.pool.busy(self) and not self.running

    def shutdown(self) -> None:
        self.cancel()
        self.pool.wait(self)
        self.pool.wait(self._lookups)
        stop_ahead()  # (the child started ahead: it would die with Headroom anyway)
