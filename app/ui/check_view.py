"""Plan vs actual, visible: once a launched engine is up, one row per device and part (planned,
allocated, the difference and a word for the verdict), a legend for those words, and — for a GPU
plan that ran on the CPU — the sentence that says the GPU plan cannot be checked here. The words
are app.engine.check_report's; this widget only lays them out."""

from __future__ import annotations

from app.engine import check_report
from app.engine.check import PlanCheck
from app.planner.plan_types import Plan
from app.ui.qt import QGridLayout, QGroupBox, QLabel, Qt, QVBoxLayout, QWidget, clear_layout

HEADERS = ("Device", "Part", "Planned", "Allocated", "Difference", "")
#: Verdict word → colour (ok green, a difference amber, the rest the palette's text).
COLOURS = {check_report.OK: "#2e7d32", check_report.DIFFERS: "#c77800"}
TITLE = "Plan vs actual"


class CheckView(QGroupBox):
    """The last check's table; hidden until there is one, and again when it no longer applies."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(TITLE, parent)
        self.setObjectName("checkView")
        self.summary = QLabel()
        self.summary.setObjectName("checkSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.table = QWidget()
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(12)
        self.legend = QLabel(check_report.LEGEND)
        self.legend.setObjectName("checkLegend")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.PlainText)
        self.warnings = QLabel()
        self.warnings.setWordWrap(True)
        self.warnings.setTextFormat(Qt.TextFormat.PlainText)
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(self.table)
        lay.addWidget(self.warnings)
        lay.addWidget(self.legend)
        self.rows: list[tuple[str, str, str, str, str, str]] = []
        self.setVisible(False)

    def show_check(self, check: PlanCheck, plan: Plan) -> None:
        self.setTitle(TITLE)
        self.summary.setText(check_report.summary(check, plan))
        guessed = check_report.estimated_parts(plan)
        self.rows = [check_report.cells(r, (r.device, r.part) in guessed) for r in check.rows]
        clear_layout(self.grid)
        for col, text in enumerate(HEADERS):
            head = QLabel(f"<b>{text}</b>")
            head.setTextFormat(Qt.TextFormat.RichText)
            self.grid.addWidget(head, 0, col)
        for i, row in enumerate(self.rows, start=1):
            for col, text in enumerate(row):
                cell = QLabel(text)
                cell.setTextFormat(Qt.TextFormat.PlainText)
                if col in (2, 3, 4):
                    cell.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if col == 5 and text in COLOURS:
                    cell.setStyleSheet(f"color: {COLOURS[text]};")
                self.grid.addWidget(cell, i, col)
        self.grid.setColumnStretch(len(HEADERS), 1)
        self.warnings.setText("\n".join(f"⚠ {w}" for w in check.warnings))
        self.warnings.setVisible(bool(check.warnings))
        self.setVisible(True)

    def mark_last_run(self) -> None:
        """The engine stopped: the table stays, saying it was the last run."""
        if self.isVisible():
            self.setTitle(f"{TITLE} — last run (stopped)")

    def clear(self) -> None:
        self.rows = []
        self.setVisible(False)
