"""The Hugging Face dialog's table of a repo's GGUFs: one row per model (a split set is one row), the
vision projectors greyed and not selectable, and what a download is checked by (the Hub's sha256, or
only its size: unverified)."""

from __future__ import annotations

from app.hub.download import UNVERIFIED
from app.hub.remote import RepoListing
from app.planner.units import Bytes
from app.ui.qt import QAbstractItemView, QHeaderView, Qt, QTableWidget
from app.ui.shown_text import table_item

COLUMNS = ("File", "Quant", "Size", "Parts", "Checked by")
PROJECTOR_TIP = "A vision projector (mmproj): used together with a model, not planned on its own"


def make_table() -> QTableWidget:
    table = QTableWidget(0, len(COLUMNS))
    table.setHorizontalHeaderLabels(COLUMNS)
    table.setAccessibleName("GGUF files in the repo")
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return table


def fill_table(table: QTableWidget, listing: RepoListing) -> None:
    """The rows are the listing's GGUFs, in its order (the dialog maps a row back by its index)."""
    table.setRowCount(len(listing.ggufs))
    for row, g in enumerate(listing.ggufs):
        cells = (g.name, g.quant or "—", str(Bytes(g.size)), str(len(g.parts)),
                 "sha256" if g.verified else "size only")
        for col, text in enumerate(cells):
            item = table_item(text)
            item.setToolTip(PROJECTOR_TIP if g.is_projector else "\n".join(
                [*(p.path for p in g.parts), *([] if g.verified else [f"A download is {UNVERIFIED}"])]))
            if col in (2, 3):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if g.is_projector:  # greyed and not selectable: not plannable alone
                item.setFlags(Qt.ItemFlag.NoItemFlags)
            table.setItem(row, col, item)
