"""The console pane: the engine's log, bounded, monospace, selectable. Each launch starts a fresh log at
the top (``start_run``); another model, opened while no engine runs, empties it."""

from __future__ import annotations

from app.ui.qt import QFont, QPlainTextEdit, QWidget
from app.ui.window_state import WindowState

#: Lines kept in the pane; the full log is in the engine's log file.
MAX_LINES = 5000


class Console(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setMaximumBlockCount(MAX_LINES)
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(font)
        self.setPlaceholderText("The engine's log appears here when you launch it.")
        self.setAccessibleName("Engine log")

    def bind(self, state: WindowState) -> None:
        """Another model opened with no engine running: the last run's log was the other model's."""
        state.modelChanged.connect(lambda _m: self.clear() if state.running_engine is None else None)

    def append_lines(self, lines: list[str]) -> None:
        bar = self.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 2  # at the end: stay there (scrolled up: stay put)
        for line in lines:
            self.appendPlainText(line.rstrip("\n"))
        if follow:
            bar.setValue(bar.maximum())

    def start_run(self, command: str) -> None:
        """A new launch: the last run's log goes (its file keeps it), this one starts at the top."""
        self.clear()
        self.appendPlainText(f"$ {command}")

    def text(self) -> str:
        return self.toPlainText()
