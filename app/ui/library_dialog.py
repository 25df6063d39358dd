"""The model library: every GGUF in the Hugging Face cache and in the folders the user added, with its
architecture, quantization, size, training context and the projector beside it (``app.hub.library``),
and a search of the Hub by name (``app.hub.search``) that hands a repo to the Hugging Face picker.

Scans and searches run on a ``TaskThread``; a scan reads headers only, once per file version, so the
list is read again each time the dialog is shown (a download made meanwhile appears). A newer scan or
search replaces a running one (the old one's answer is dropped). The folders are the window's
``UiState.library_folders``: added and removed here, remembered with the rest of its state.
Offline (HF_HUB_OFFLINE) the search says so and is off; the local list works the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.hub import remote
from app.hub.cache import hub_cache
from app.hub.library import HF_SOURCE, LibraryEntry, LibraryScan, scan_library
from app.hub.search import OFFLINE, HubRepo, search_repos
from app.ui.hub_dialog import SHUTDOWN_WAIT_MS
from app.ui.hub_progress import hub_work
from app.ui.library_table import (
    fill_library,
    fill_results,
    make_library_table,
    make_results_table,
    short_path,
)
from app.ui.qt import (
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QShowEvent,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.shown_text import PlainLabel
from app.ui.state import UiState
from app.ui.workers import Abandon, TaskPool

SEARCH_HELP = "A model's name, e.g. qwen2.5 7b instruct"
STILL_WORKS = "the models found here are listed all the same"


def offline() -> bool:
    from huggingface_hub import is_offline_mode

    return bool(is_offline_mode())


def _models(n: int) -> str:
    return f"{n} model{'' if n == 1 else 's'}"


def scan_text(scan: LibraryScan) -> str:
    """The status line under the list: how many models, from where."""
    cache = f"the Hugging Face cache ({short_path(hub_cache())})"
    if not scan.entries:
        return (f"No GGUF file in {cache}{' or your folders' if scan.folders else ''}: add a folder, "
                "or search the Hub below")
    cached = sum(1 for e in scan.models if e.source == HF_SOURCE)
    text = f"{_models(cached)} in {cache}"
    if scan.folders:
        text += f", {_models(len(scan.models) - cached)} in your folders"
    return f"{text}; double-click one to open it"


def _label(name: str, *, error: bool = False) -> QLabel:
    label = PlainLabel()
    label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)  # file names and server text, never markup
    label.setWordWrap(True)
    if error:
        label.setStyleSheet("color: #d62728;")
        label.setVisible(False)
    return label


class LibraryDialog(QDialog):
    chosen = Signal(object)  # Path: a model to open
    hubRepoChosen = Signal(str)  # owner/name: for the Hugging Face picker
    scanned = Signal(object)  # LibraryScan, as shown
    searched = Signal(object)  # list[HubRepo], as shown
    failed = Signal(str)  # a search's error, as shown

    def __init__(self, state: UiState, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.pool = pool if pool is not None else TaskPool(self)
        self.setWindowTitle("Model library")
        self.state = state
        self.scan: LibraryScan | None = None
        self.repos: list[HubRepo] = []
        self.table = make_library_table()
        self.table.itemSelectionChanged.connect(self._update)
        self.table.cellDoubleClicked.connect(lambda row, _c: self.open_row(row))
        self.status = _label("libraryStatus")
        self.notes = _label("libraryNotes", error=True)
        self.folders = QListWidget()
        self.folders.setAccessibleName("Folders searched for GGUF files")
        self.folders.setMaximumHeight(self.fontMetrics().height() * 4 + 8)
        self.folders.itemSelectionChanged.connect(self._update)
        self.add_button = QPushButton("&Add folder…")
        self.add_button.clicked.connect(self._pick_folder)
        self.remove_button = QPushButton("&Remove folder")
        self.remove_button.clicked.connect(self._remove_selected)
        self.rescan_button = QPushButton("Sc&an again")
        self.rescan_button.clicked.connect(self.rescan)
        self.query = QLineEdit()
        self.query.setPlaceholderText(SEARCH_HELP)
        self.query.setAccessibleName("Search the Hugging Face Hub for GGUF repos")
        self.query.textChanged.connect(self._update)
        self.query.returnPressed.connect(self.search)
        self.search_button = QPushButton("&Search")
        self.search_button.clicked.connect(self.search)
        self.search_status = _label("searchStatus")
        self.search_error = _label("searchError", error=True)
        self.results = make_results_table()
        self.results.itemSelectionChanged.connect(self._update)
        self.results.cellDoubleClicked.connect(lambda row, _c: self.open_result(row))
        self.results.setVisible(False)
        self.hub_button = QPushButton("Open in the &Hugging Face picker")
        self.hub_button.clicked.connect(lambda: self.open_result(self._row(self.results)))
        self.open_button = QPushButton("&Open")
        self.open_button.clicked.connect(lambda: self.open_row(self._row(self.table)))
        close = QPushButton("Cl&ose")
        close.clicked.connect(self.reject)
        for b in (self.add_button, self.remove_button, self.rescan_button, self.search_button, self.hub_button,
                  self.open_button, close):
            b.setAutoDefault(False)
        self._layout(close)
        self._show_folders()
        if offline():
            self.search_status.setText(f"{OFFLINE[0]}; {STILL_WORKS}")
        self.resize(1000, 640)
        self._update()

    def _layout(self, close: QPushButton) -> None:
        folder_buttons = QVBoxLayout()
        for b in (self.add_button, self.remove_button, self.rescan_button):
            folder_buttons.addWidget(b)
        folder_buttons.addStretch(1)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folders, 1)
        folder_row.addLayout(folder_buttons)
        here = QGroupBox("Found here: the Hugging Face cache and your folders")
        lay = QVBoxLayout(here)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.status)
        lay.addWidget(self.notes)
        lay.addWidget(QLabel("Your folders (searched a few levels deep):"))
        lay.addLayout(folder_row)
        search_row = QHBoxLayout()
        search_row.addWidget(self.query, 1)
        search_row.addWidget(self.search_button)
        hub = QGroupBox("Search the Hugging Face Hub")
        hl = QVBoxLayout(hub)
        hl.addLayout(search_row)
        hl.addWidget(self.search_status)
        hl.addWidget(self.search_error)
        hl.addWidget(self.results, 1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.hub_button)
        buttons.addStretch(1)
        buttons.addWidget(self.open_button)
        buttons.addWidget(close)
        outer = QVBoxLayout(self)
        outer.addWidget(here, 3)
        outer.addWidget(hub, 2)
        outer.addLayout(buttons)

    # ---- state ---------------------------------------------------------------------------------
    @staticmethod
    def _row(table: Any) -> int:
        rows = table.selectionModel().selectedRows()
        return int(rows[0].row()) if rows else -1

    def selected(self) -> LibraryEntry | None:
        row = self._row(self.table)
        if self.scan is None or not 0 <= row < len(self.scan.entries):
            return None
        return self.scan.entries[row]  # rows are the scan's entries, in order

    def _update(self) -> None:
        chosen = self.selected()
        self.open_button.setEnabled(chosen is not None and chosen.openable)
        self.remove_button.setEnabled(bool(self.folders.selectedItems()))
        searching = self.working("search")
        self.query.setEnabled(not offline())
        self.search_button.setEnabled(not offline() and not searching and bool(self.query.text().strip()))
        self.hub_button.setEnabled(0 <= self._row(self.results) < len(self.repos))

    # ---- the folders ---------------------------------------------------------------------------
    def folder_list(self) -> list[str]:
        """The remembered folders (a hand-edited state file's stray values left out)."""
        given = self.state.library_folders
        return [f for f in given if isinstance(f, str) and f] if isinstance(given, list) else []

    def _show_folders(self) -> None:
        self.folders.clear()
        for folder in self.folder_list():
            self.folders.addItem(short_path(folder))
            self.folders.item(self.folders.count() - 1).setToolTip(folder)

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models", str(Path.home()))
        if path:
            self.add_folder(Path(path))

    def add_folder(self, folder: Path) -> None:
        """Remember ``folder`` (once) and scan again."""
        text = str(folder.expanduser())
        if text not in self.folder_list():
            self.state.library_folders = [*self.folder_list(), text]
            self._show_folders()
        self.rescan()

    def remove_folder(self, folder: str) -> None:
        self.state.library_folders = [f for f in self.folder_list() if f != folder]
        self._show_folders()
        self.rescan()

    def _remove_selected(self) -> None:
        for item in self.folders.selectedItems():
            self.remove_folder(item.toolTip())  # the whole path (the row may read ~/…)

    # ---- the list --------------------------------------------------------------------------------
    def showEvent(self, e: QShowEvent) -> None:
        super().showEvent(e)
        self.rescan()

    def rescan(self) -> None:
        folders = self.folder_list()
        self.status.setText("Looking for GGUF files…")
        self._start("scan", lambda c: scan_library(folders, cancel=c), self._scanned)

    def _scanned(self, scan: LibraryScan) -> None:
        self.scan = scan
        fill_library(self.table, scan.entries)
        self.status.setText(scan_text(scan))
        self.notes.setText("\n".join(scan.notes))
        self.notes.setVisible(bool(scan.notes))
        self._update()
        self.scanned.emit(scan)

    def open_row(self, row: int) -> None:
        if self.scan is None or not 0 <= row < len(self.scan.entries) or not self.scan.entries[row].openable:
            return
        self.chosen.emit(self.scan.entries[row].path)
        self.accept()

    # ---- the Hub ---------------------------------------------------------------------------------
    def search(self) -> None:
        text = self.query.text().strip()
        if not text or offline():
            return
        self.search_error.setVisible(False)
        self.search_status.setText(f"Searching the Hub for {text!r}…")
        self._start("search", hub_work(lambda _c: search_repos(text)), self._searched, self._search_failed)

    def _searched(self, repos: list[HubRepo]) -> None:
        self.repos = repos
        fill_results(self.results, repos)
        self.results.setVisible(bool(repos))
        self.search_status.setText(f"{len(repos)} GGUF repo{'' if len(repos) == 1 else 's'} on the Hub; "
                                   "double-click one to see its files" if repos else
                                   "No GGUF repo on the Hub has that in its name")
        self._update()
        self.searched.emit(repos)

    def _search_failed(self, message: str) -> None:
        self.search_status.setText("")
        self.search_error.setText(f"{message} — {STILL_WORKS}")
        self.search_error.setVisible(True)
        self.failed.emit(self.search_error.text())

    def open_result(self, row: int) -> None:
        if 0 <= row < len(self.repos):
            self.hubRepoChosen.emit(self.repos[row].repo)
            self.accept()

    # ---- running ---------------------------------------------------------------------------------
    def working(self, kind: str) -> bool:
        """A "scan" or "search" runs whose answer is wanted."""
        return self.pool.current(self, kind) is not None

    def _start(self, kind: str, fn: Callable[[threading.Event], object], ok: Callable[[Any], None],
               failed: Callable[[str], None] | None = None) -> None:
        """Run ``kind``'s task (one before it is replaced: its answer is dropped). One still waiting on
        a disk or the network when the window closes is left to end on its own (a search times out)."""
        def fail(message: str) -> None:
            (failed or self._scan_failed)(message)
            self._update()

        self.pool.run(fn, ok, fail, owner=self, key=kind,
                      abandon=Abandon(SHUTDOWN_WAIT_MS, remote.longest_wait() + 5))
        self._update()

    def _scan_failed(self, message: str) -> None:
        self.status.setText(f"The library could not be read: {message}")

    def shutdown(self) -> None:
        """The window closes: stop every scan and search, waited for a little (``Abandon``)."""
        self.hide()
        self.pool.wait(self)
