"""Widgets that show text from outside (a file name, a server's message, an engine's log line) as
``app.text`` escapes it for every output: a control character, an escape sequence or a bidirectional
override is shown as its escape (``\\x1b``, ``\\u202e``), never acted on or drawn reversed."""

from __future__ import annotations

from app.text import printable, printable_lines
from app.ui.qt import QLabel, Qt, QTableWidgetItem, QWidget


class PlainLabel(QLabel):
    """A plain-text label (never markup) whose text is ``printable_lines``-escaped."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    def setText(self, text: str) -> None:
        super().setText(printable_lines(text))


def table_item(text: str) -> QTableWidgetItem:
    """A table cell showing ``text`` on one line, escaped."""
    return QTableWidgetItem(printable(text))
