"""The library dialog's two tables: the GGUFs found here (one row per model, a split set one row; the
projectors greyed and not selectable; a file that cannot be read says why, in red, and cannot be opened),
and the Hub's answer to a search (one row per repo)."""

from __future__ import annotations

from pathlib import Path

from app.hub.library import HF_SOURCE, LibraryEntry
from app.hub.search import HubRepo
from app.planner.units import Bytes
from app.text import escape
from app.ui.context_control import tokens_text
from app.ui.hub_table import PROJECTOR_TIP
from app.ui.qt import QAbstractItemView, QBrush, QColor, QHeaderView, Qt, QTableWidget
from app.ui.shown_text import table_item

COLUMNS = ("Model", "Arch", "Quant", "Size", "Trained", "Projector", "Where")
RESULT_COLUMNS = ("Repo", "Downloads", "Updated")
#: The columns an unreadable file's error spans (Arch … Projector).
ERROR_SPAN = (1, 5)
ERROR_COLOR = "#d62728"
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


def _table(columns: tuple[str, ...], name: str, stretch: int) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.setAccessibleName(name)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long folder keeps its last part in sight
    table.verticalHeader().setVisible(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


def make_library_table() -> QTableWidget:
    return _table(COLUMNS, "GGUF models found here", COLUMNS.index("Where"))


def make_results_table() -> QTableWidget:
    return _table(RESULT_COLUMNS, "GGUF repos on the Hub", 0)


def short_path(path: str | Path) -> str:
    """``/home/me/models`` → ``~/models`` (the tooltips keep the whole path)."""
    home, text = str(Path.home()), str(path)
    return "~" + text[len(home):] if home != "/" and (text == home or text.startswith(home + "/")) else text


def entry_cells(e: LibraryEntry) -> tuple[str, ...]:
    """What a row says, column by column (an unreadable file: its name, the error, where it is)."""
    where = e.repo or short_path(e.where)
    if e.error:
        return (e.name, f"cannot read: {e.error}", "", "", "", "", where)
    projector = "is a projector" if e.is_projector else e.projector.name if e.projector else "—"
    trained = tokens_text(e.n_ctx_train) if e.n_ctx_train else "—"
    return (e.name, e.arch or "—", e.quant or "—", str(Bytes(e.size)), trained, projector, where)


def entry_tip(e: LibraryEntry) -> str:
    lines = [f"<b>{escape(e.title or e.name)}</b>", escape(str(e.path))]
    if e.parts > 1:
        lines.append(f"{e.parts} parts (a split model), {escape(str(Bytes(e.size)))} in all")
    if e.source == HF_SOURCE:
        lines.append(f"In the Hugging Face cache, repo {escape(e.repo)}")
    if e.projector is not None:
        lines.append(f"Vision projector beside it: {escape(str(e.projector))}")
    if e.is_projector:
        lines.append(escape(PROJECTOR_TIP))
    if e.error:
        lines.append(f"Cannot be opened: {escape(e.error)}")
    return "<br>".join(lines)


def fill_library(table: QTableWidget, entries: tuple[LibraryEntry, ...]) -> None:
    """The rows are ``entries``, in order (the dialog maps a row back by its index)."""
    table.clearSpans()
    table.setRowCount(len(entries))
    for row, e in enumerate(entries):
        tip = entry_tip(e)
        for col, text in enumerate(entry_cells(e)):
            item = table_item(text)
            item.setToolTip(tip)
            if col in (3, 4):
                item.setTextAlignment(RIGHT)
            if not e.openable:  # greyed and not selectable: a projector, or a file that cannot be read
                item.setFlags(Qt.ItemFlag.NoItemFlags)
            if e.error and col == ERROR_SPAN[0]:
                item.setForeground(QBrush(QColor(ERROR_COLOR)))
                item.setFlags(Qt.ItemFlag.ItemIsEnabled)  # red, not greyed: it is the message
            table.setItem(row, col, item)
        if e.error:
            table.setSpan(row, ERROR_SPAN[0], 1, ERROR_SPAN[1])


def fill_results(table: QTableWidget, repos: list[HubRepo]) -> None:
    table.setRowCount(len(repos))
    for row, r in enumerate(repos):
        cells = (r.repo + (" (gated)" if r.gated else ""), f"{r.downloads:,}", r.updated or "—")
        for col, text in enumerate(cells):
            item = table_item(text)
            item.setToolTip(f"Open {r.repo} in the Hugging Face picker: its GGUF files, planned from "
                            "their headers or downloaded")
            if col == 1:
                item.setTextAlignment(RIGHT)
            table.setItem(row, col, item)
