"""Live while serving: the running engine's memory now against its plan, other apps', what is free
and the safety margin, per device of the plan and for host RAM, from the window's ~1 s device poll;
a warning, in red, when free VRAM or available host RAM falls under the margin.

The numbers and the sentences are app.planner.live's; this widget lays them out. Shown from a
launch on; after Stop (or a failure) it keeps the last reading and says the engine stopped, until
the next launch or another model.
"""

from __future__ import annotations

import time

from app.engine import check_report
from app.engine.check import PlanCheck
from app.planner.devices import Snapshot
from app.planner.live import HOST, LiveReport, LiveRow, RowState, live_report
from app.planner.plan_types import Plan
from app.planner.units import Bytes
from app.ui.qt import QGridLayout, QGroupBox, QLabel, Qt, QVBoxLayout, QWidget, Signal, clear_layout
from app.ui.window_state import WindowState

TITLE = "Live: the engine's memory now"
STOPPED_TITLE = "Live — engine stopped"
HEADERS = ("Device", "Planned", "Engine now", "Others now", "Free now", "Safety margin")
#: Under the margin: the free cell and the warnings (the window's error red).
LOW_COLOUR = "#d62728"
#: A frozen reading (the engine stopped): greyed.
STOPPED_COLOUR = "#777777"
NO_NUMBER = "—"


def _amount(value: int | None) -> str:
    return NO_NUMBER if value is None else str(Bytes(value))


def row_cells(row: LiveRow) -> tuple[str, ...]:
    """The row as the table shows it; an unread GPU: its plan, then why there is no reading."""
    device = "host RAM" if row.device == HOST else row.device
    if row.state is RowState.UNREAD and row.device != HOST:
        return device, _amount(row.planned), f"cannot be read: {row.why}"
    return (device, _amount(row.planned), _amount(row.engine), _amount(row.others), _amount(row.free),
            _amount(row.margin))


def _tooltip(row: LiveRow) -> str:
    if row.device == HOST:
        lines = ["host RAM: the engine's resident set (psutil RSS, children included) against the plan's "
                 "mapped weights, KV tail and pinned compute; available RAM against the safety margin",
                 "others: not told apart on the host (the page cache holding the engine's mapped model "
                 "counts as available)"]
        if row.prompt_cache:
            lines.append(f"the prompt cache may add up to {Bytes(row.prompt_cache)} (--cache-ram) as "
                         "conversations come")
        if row.why:
            lines.append(row.why)
        return "\n".join(lines)
    lines = [f"{row.device} ({row.label}): NVML's reading of the engine's process against the plan's "
             "weights, compute, KV and overhead there"]
    if row.planned_others is not None:
        lines.append(f"other apps and the driver held {Bytes(row.planned_others)} when it was planned")
    if row.why:
        lines.append(row.why)
    return "\n".join(lines)


class LiveView(QGroupBox):
    """Bound to the window state (``bind``); fed every device snapshot (``show_snapshot``) and the
    plan check (``show_check``). ``updated`` carries each new ``LiveReport``."""

    updated = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(TITLE, parent)
        self.setObjectName("liveView")
        self._state: WindowState | None = None
        self._plan: Plan | None = None  # the running plan (kept, frozen, after a stop)
        self._margin = 0
        self._ran_on_cpu = False
        self._running = False
        self._last: Snapshot | None = None
        self._read_at = ""
        self.report: LiveReport | None = None
        self.rows: list[tuple[str, ...]] = []
        self.note = QLabel()
        self.note.setObjectName("liveNote")
        self.table = QWidget()
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(12)
        self.warnings = QLabel()
        self.warnings.setObjectName("liveWarnings")
        self.status = QLabel()
        self.status.setObjectName("liveStatus")
        for label in (self.note, self.warnings, self.status):
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.PlainText)
        lay = QVBoxLayout(self)
        lay.addWidget(self.note)
        lay.addWidget(self.table)
        lay.addWidget(self.warnings)
        lay.addWidget(self.status)
        self.setVisible(False)

    def bind(self, state: WindowState) -> None:
        self._state = state
        state.runningChanged.connect(self._running_changed)
        state.modelChanged.connect(lambda _m: self.clear() if not self._running else None)

    # ---- inputs ---------------------------------------------------------------------------------
    def _running_changed(self, plan: object) -> None:
        if isinstance(plan, Plan):
            margin = self._state.settings.safety if self._state is not None else 0
            self.start(plan, margin)
        elif self._running:
            self.freeze()

    def start(self, plan: Plan, margin: int) -> None:
        """An engine was launched with ``plan`` (``margin``: the safety margin it was planned with)."""
        self._plan, self._margin, self._ran_on_cpu, self._running = plan, margin, False, True
        self._last, self.report, self.rows = None, None, []
        clear_layout(self.grid)
        self.setTitle(TITLE)
        self.note.setVisible(False)
        self.warnings.setVisible(False)
        self.status.setStyleSheet("")
        self.status.setText("Waiting for the first reading of the engine…")
        self.setVisible(True)

    def show_snapshot(self, snap: object) -> None:
        """A device poll (about once a second): the running engine's readings, if it is the one polled."""
        if not isinstance(snap, Snapshot) or not self._running or snap.engine_pid is None:
            return
        engine = self._state.running_engine if self._state is not None else None
        if engine is not None and engine.pid != snap.engine_pid:
            return  # taken for an engine before this one
        self._last = snap
        self._read_at = time.strftime("%H:%M:%S")
        self._render()

    def show_check(self, check: object) -> None:
        """The plan check: a GPU plan the engine ran on the CPU has no GPU rows to read."""
        if not isinstance(check, PlanCheck) or not self._running or self._plan is None:
            return
        self._ran_on_cpu = check_report.ran_on_cpu(check, self._plan)
        if self._last is not None:
            self._render()

    def freeze(self) -> None:
        """The engine stopped or failed: the last reading stays, greyed, saying so (none: hidden)."""
        self._running = False
        if self._last is None:  # gone before its first reading (a failed launch): nothing to keep
            self.clear()
            return
        self.setTitle(STOPPED_TITLE)
        self.status.setText(f"Engine stopped: the last reading ({self._read_at}) stays until the next launch.")
        self.status.setStyleSheet("")
        for label in self.table.findChildren(QLabel):
            label.setStyleSheet(f"color: {STOPPED_COLOUR};")
        self.warnings.setStyleSheet(f"color: {STOPPED_COLOUR};")

    def clear(self) -> None:
        self._running, self._plan, self._last, self.report, self.rows = False, None, None, None, []
        clear_layout(self.grid)
        self.setVisible(False)

    @property
    def running(self) -> bool:
        """It follows a running engine (False: hidden, or frozen after a stop)."""
        return self._running

    # ---- layout ---------------------------------------------------------------------------------
    def _render(self) -> None:
        plan, snap = self._plan, self._last
        if plan is None or snap is None:
            return
        report = live_report(plan, snap, host_margin=self._margin, ran_on_cpu=self._ran_on_cpu)
        self.report = report
        self.rows = [row_cells(r) for r in report.rows]
        self._fill(report)
        self.note.setText(report.note)
        self.note.setVisible(bool(report.note))
        self.warnings.setText("\n".join(f"⚠ {w}" for w in report.warnings))
        self.warnings.setStyleSheet(f"color: {LOW_COLOUR};")
        self.warnings.setVisible(bool(report.warnings))
        self.status.setText(f"Read at {self._read_at}, about every second.")
        self.updated.emit(report)

    def _fill(self, report: LiveReport) -> None:
        clear_layout(self.grid)
        for col, text in enumerate(HEADERS):
            head = QLabel(f"<b>{text}</b>")
            head.setTextFormat(Qt.TextFormat.RichText)
            self.grid.addWidget(head, 0, col)
        for i, (row, cells) in enumerate(zip(report.rows, self.rows, strict=True), start=1):
            tip = _tooltip(row)
            for col, text in enumerate(cells):
                cell = QLabel(text)
                cell.setTextFormat(Qt.TextFormat.PlainText)
                cell.setToolTip(tip)
                span = len(HEADERS) - col if col == len(cells) - 1 else 1
                if len(cells) < len(HEADERS) and col == len(cells) - 1:
                    cell.setWordWrap(True)
                elif col > 0:
                    cell.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if col == 4 and row.low:
                    cell.setStyleSheet(f"color: {LOW_COLOUR}; font-weight: bold;")
                self.grid.addWidget(cell, i, col, 1, span)
        self.grid.setColumnStretch(len(HEADERS), 1)
