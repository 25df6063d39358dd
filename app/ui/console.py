"""The console pane: the engine's log, bounded, monospace, selectable. Each launch starts a fresh log at
the top (``start_run``); another model, opened while no engine runs, empties it."""

from __future__ import annotations

from app.text import printable
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
        # Follow the newest line while at the end. Read from the bar before an append, "at the end"
        # went wrong once MAX_LINES trimmed the top (the value moves back by the lines dropped), and
        # the pane stopped following: the bar says where you are whenever you move it instead.
        self._follow = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._moved)
        bar.rangeChanged.connect(self._grew)
        self._appending = False

    def bind(self, state: WindowState) -> None:
        """Another model opened with no engine running: the last run's log was the other model's."""
        state.modelChanged.connect(lambda _m: self.clear() if state.running_engine is None else None)

    def _moved(self, value: int) -> None:
        if not self._appending:  # you (or a resize) moved it: follow only from the end
            self._follow = value >= self.verticalScrollBar().maximum() - 2

    def _grew(self, _low: int, high: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(high)

    def append_lines(self, lines: list[str]) -> None:
        bar = self.verticalScrollBar()
        self._appending = True  # the bar moves as lines come and go; that is not you scrolling
        try:
            held = bar.value()
            for line in lines:
                self.appendPlainText(printable(line.rstrip("\n")))
            bar.setValue(bar.maximum() if self._follow else min(held, bar.maximum()))
        finally:
            self._appending = False

    def start_run(self, command: str) -> None:
        """A new launch: the last run's log goes (its file keeps it), this one starts at the top."""
        self.clear()
        self._follow = True
        self.appendPlainText(f"$ {command}")

    def text(self) -> str:
        return self.toPlainText()
