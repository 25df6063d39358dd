"""The speed row after launch: the running plan's predicted tokens/s, and after each chat
reply what the engine measured beside them (app/sessions/reply_speed.py). The reply's timings come
with the reply; ``/metrics`` is read in the window's task pool, never on the GUI thread."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from app.engine.speed_check import Timings
from app.planner.devices import Inventory
from app.planner.plan_types import Plan
from app.sessions.chat import ChatOutcome
from app.sessions.reply_speed import WAITING, ReplySpeed, predicted_line, reply_speed, timings_of
from app.ui.qt import QLabel, Qt, QWidget
from app.ui.workers import TaskPool

if TYPE_CHECKING:
    from app.ui.window_state import WindowState


class SpeedCheckRow(QLabel):
    """Hidden until an engine runs; then its prediction, and after a reply the measured figures."""

    def __init__(self, pool: TaskPool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pool = pool
        self.setObjectName("speedCheck")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setVisible(False)
        self._state: WindowState | None = None
        self._plan: Plan | None = None
        self._url = ""
        self._key: str | None = None
        self._inventory: Inventory | None = None  # the devices the running plan was made for
        self._model = ""  # and the model (what a learned ratio belongs to, with the devices)
        #: The last reply measured (None: none yet on this engine).
        self.last: ReplySpeed | None = None

    def bind(self, state: WindowState) -> None:
        self._state = state
        state.engineReady.connect(self._ready)
        state.runningChanged.connect(self._running)
        state.modelChanged.connect(self._model_changed)

    def _model_changed(self, _model: object) -> None:
        """Another model opened: the last run's speeds were about the one before (while an engine runs,
        they stay: they are about it)."""
        if self._state is not None and self._state.running is None:
            self.setVisible(False)
            self.clear()
            self.setToolTip("")
            self.last = None

    def _ready(self, url: str) -> None:
        state = self._state
        if state is None or state.running is None:
            return
        engine = state.running_engine
        self._plan, self._url, self._key = state.running, url, engine.api_key if engine is not None else None
        self._inventory = state.planning_inventory()
        self._model = state.model.shape.name if state.model is not None else ""
        self.last = None
        self.setText(f"{predicted_line(state.running)}; {WAITING}")
        self.setVisible(True)

    def _running(self, plan: object) -> None:
        self.pool.cancel(self, "measure")
        self._url = ""
        if plan is None and self.text() and not self.text().startswith("Last run"):
            self.setText(f"Last run (stopped): {self.text()}")
        elif plan is not None:  # a launch starting: nothing measured on it yet
            self.setVisible(False)
            self.clear()
            self.setToolTip("")

    def reply_done(self, outcome: object) -> None:
        """A chat reply finished: measure its speed against the plan (one reply, not a fork's K)."""
        plan, url = self._plan, self._url
        if plan is None or not url or not isinstance(outcome, ChatOutcome) or len(outcome.replies) != 1:
            return
        timings = timings_of(outcome.replies[0])
        if timings is None:
            return
        key, inventory, model = self._key, self._inventory, self._model
        self.pool.run(lambda _cancel: _measured_and_learned(plan, timings, url, key, inventory, model), self._show,
                      self._failed, owner=self, key="measure")

    def _show(self, result: object) -> None:
        if not isinstance(result, ReplySpeed) or self._plan is None:
            return
        self.last = result
        # two lines (the whole sentence pushed the form's command line below the fold at 1366×768);
        # the reply's token counts, /metrics and what was learned in the tooltip
        self.setText(f"{predicted_line(self._plan)}\n{result.short()}")
        self.setToolTip(result.text().replace(". ", ".\n"))  # (a sentence a line, not one screen-wide line)

    def _failed(self, message: str) -> None:
        self.setText(f"{self.text()}\nSpeed not measured: {message}")


def _measured_and_learned(plan: Plan, timings: Timings, url: str, key: str | None,
                          inventory: Inventory | None, model: str) -> ReplySpeed:
    """The reply beside the prediction (``/metrics`` read now), and the calibration taught measured ÷
    predicted for these devices, as ``headroom serve``'s speed line does. In the task pool: both block."""
    from app.machine.calibrate import learn

    result = reply_speed(plan, timings, url, key)
    check = result.check
    if check is None or inventory is None or (check.decode_ratio is None and check.prefill_ratio is None):
        return result
    return replace(result, learned=learn(inventory, check.decode_ratio, check.prefill_ratio, model=model))
