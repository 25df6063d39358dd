"""Other ways to run the model: the largest contexts that fit and the alternatives the planner priced.

Shown under the budget bars. Every row comes from the plan (``Plan.alternatives``) or from
``max_context`` (``ContextFit``); nothing is computed here. Each row has a "Use" button that applies
its settings, so the table is keyboard reachable and one click from the picture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.planner import words
from app.planner.settings import LaunchSettings
from app.planner.solve.speed import TURN_PROMPT, TURN_REPLY
from app.planner.units import round_tokens
from app.ui.context_control import tokens_text
from app.ui.qt import QGridLayout, QGroupBox, QLabel, QPushButton, Qt, QWidget, Signal

if TYPE_CHECKING:
    from app.planner.plan_types import Alternative, ContextFit, Plan
    from app.planner.solve.speed import SpeedRow

GREEN = "#2e7d32"
RED = "#d62728"
#: The speed column: decode at half context, as the Expected speed line's "half-way" figure.
SPEED_HEADER = "Speed half-way"
HEADERS = ("Option", "Fits", SPEED_HEADER, "Note", "")
SPEED_HEADER_TIP = (f"Decode tokens/s with the context half full. The plan chooses the way with the shortest "
                    f"typical turn (a {round_tokens(TURN_PROMPT)} prompt read, then {TURN_REPLY} tokens written, "
                    "half-way), so a way that writes faster but reads prompts much slower can rank below it.")


@dataclass(frozen=True)
class Option:
    """One row: what it is, whether it fits, how fast it should run, and the settings it applies."""

    label: str
    fits: bool
    speed: str  # the predicted decode speed at half context ("~45 tok/s"); "" when the plan did not price it
    note: str
    settings: LaunchSettings
    current: bool = False
    priced: Alternative | None = None  # the plan's alternative for these settings, with its speed
    #: The predicted speed of these settings: the alternative's, or the plan's own when they are the plan.
    predicted: SpeedRow | None = None


def cap_text(fit: ContextFit) -> str:
    """Why a largest context equals the search's cap: the search stopped there, not the memory."""
    cap, trained = tokens_text(fit.searched_to), tokens_text(fit.n_ctx_train)
    if fit.searched_to <= fit.n_ctx_train:
        return f"all of its trained {trained} fits; searched no further (more than it was trained for is not offered)"
    return f"all of the asked {cap} fits, beyond its trained {trained}; searched no further, more may fit"


def options(plan: Plan, fit: ContextFit | None, engine_window: bool) -> list[Option]:
    """The rows for ``plan``: largest contexts first (as the user would reach for them), then the
    planner's alternatives in its own order (best first). The largest contexts are searched for the
    settings as given (not the alternative a stock plan chose): their rows apply those."""
    rows: list[Option] = []
    n_ctx = plan.launch.n_ctx
    as_set = words.as_set_launch(plan)
    if fit is not None:
        if fit.resident > 0:
            _n, where, _tail = words.largest_where(plan, fit.resident, fit.with_tail, False)
            note = words.resident_note(as_set) if plan.gpus else "no GPU: runs on the CPU"
            if fit.resident_capped:
                note += f"; {cap_text(fit)}"
            launch = as_set.with_(n_ctx=fit.resident)
            speed = _speed(plan, launch) or fit.resident_speed
            rows.append(Option(f"Largest context {where}: {tokens_text(fit.resident)}", True,
                               words.row_short_speed(speed), note, launch,
                               fit.resident == n_ctx and as_set == plan.launch, _priced(plan, launch), speed))
        if engine_window and fit.with_tail > fit.resident:
            rows.append(Option(f"Largest context with a host tail: {tokens_text(fit.with_tail)}", True, "",
                               "rolling KV window; the tail streams from host RAM"
                               + (f"; {cap_text(fit)}" if fit.tail_capped else ""),
                               plan.launch.with_(n_ctx=fit.with_tail), fit.with_tail == n_ctx))
        if fit.n_ctx_train > 0:
            fits_train = fit.n_ctx_train <= (fit.with_tail if engine_window else fit.resident)
            launch = as_set.with_(n_ctx=fit.n_ctx_train)
            speed = _speed(plan, launch)
            rows.append(Option(f"Trained context: {tokens_text(fit.n_ctx_train)}", fits_train,
                               words.row_short_speed(speed), "what the model was trained for", launch,
                               fit.n_ctx_train == n_ctx and as_set == plan.launch, _priced(plan, launch), speed))
    for alt in plan.alternatives:
        rows.append(Option(alt.label, alt.feasible, words.short_speed(alt), alt.note, alt.launch, alt.chosen,
                           alt if alt.speed is not None else None, alt.speed))
    return rows


def _speed(plan: Plan, launch: LaunchSettings) -> SpeedRow | None:
    """The predicted speed of ``launch``: its alternative's, or the plan's own (``Plan.speed``) when
    ``launch`` is what the plan launches (a CPU plan has no alternatives, and its speed is this)."""
    priced = _priced(plan, launch)
    if priced is not None:
        return priced.speed
    return plan.speed if launch == plan.launch and plan.feasible else None


def _priced(plan: Plan, launch: LaunchSettings) -> Alternative | None:
    """The plan's alternative for ``launch`` when it priced it (its speed), else None."""
    return next((a for a in plan.alternatives if a.launch == launch and a.speed is not None), None)


class _Row:
    """The widgets of one table row, reused across re-plans (a drag re-plans many times a second)."""

    def __init__(self, view: OptionsView, i: int) -> None:
        self.label, self.fits, self.cost, self.note = (view.plain() for _ in range(4))
        for label in (self.label, self.cost, self.note):  # wrap: the plan pane never scrolls sideways
            label.setWordWrap(True)
        self.use = QPushButton("Use")
        self.use.clicked.connect(lambda _c=False: view.choose(i))
        for col, w in enumerate((self.label, self.fits, self.cost, self.note, self.use)):
            view.grid.addWidget(w, i + 1, col)

    def show(self, row: Option | None) -> None:
        for w in (self.label, self.fits, self.cost, self.note, self.use):
            w.setVisible(row is not None)
        if row is None:
            return
        self.label.setText(row.label + (" (planned)" if row.current else ""))
        self.fits.setText("fits" if row.fits else "does not fit")
        self.fits.setStyleSheet(f"color: {GREEN if row.fits else RED};")
        # a way that does not fit has no speed to show; the whole prediction (prefill too) on hover
        self.cost.setText((row.speed or "not predicted") if row.fits else "")
        self.cost.setToolTip(words.row_speed_words(row.predicted) if row.predicted is not None and row.fits else "")
        self.note.setText(row.note)
        self.use.setAccessibleName(f"Use {row.label}")
        self.use.setEnabled(row.fits and not row.current)


class OptionsView(QGroupBox):
    """The rows as a grid of labels with a "Use" button each; ``settingsChosen`` on a click."""

    settingsChosen = Signal(object)  # LaunchSettings

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Other ways to run it", parent)
        self.rows: list[Option] = []
        self.grid = QGridLayout(self)
        self.grid.setColumnStretch(0, 2)
        self.grid.setColumnStretch(3, 2)
        for col, text in enumerate(HEADERS):
            head = QLabel(f"<b>{text}</b>")
            head.setWordWrap(True)
            if text == SPEED_HEADER:  # what the figure is, and that the plan chooses by a whole turn
                head.setToolTip(SPEED_HEADER_TIP)
            self.grid.addWidget(head, 0, col)
        self._widgets: list[_Row] = []

    @property
    def buttons(self) -> list[QPushButton]:
        """The "Use" buttons of the rows shown, in order."""
        return [w.use for w in self._widgets[:len(self.rows)]]

    def show_options(self, plan: Plan, fit: ContextFit | None, engine_window: bool) -> None:
        rows = options(plan, fit, engine_window)
        if rows == self.rows:
            return  # nothing changed: nothing to redraw
        self.rows = rows
        while len(self._widgets) < len(rows):
            self._widgets.append(_Row(self, len(self._widgets)))
        for i, w in enumerate(self._widgets):
            w.show(rows[i] if i < len(rows) else None)
        self.setVisible(bool(rows))

    def choose(self, i: int) -> None:
        if i < len(self.rows):
            self.settingsChosen.emit(self.rows[i].settings)

    @staticmethod
    def plain() -> QLabel:
        label = QLabel()
        label.setTextFormat(Qt.TextFormat.PlainText)
        return label
