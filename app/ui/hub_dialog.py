"""Pick a GGUF from a Hugging Face repo: list the repo, plan a file from its header, or download it.

Every Hub call (``app.hub``) runs on a ``TaskThread``; the worker's progress callbacks become queued
signals, so the dialog repaints while bytes arrive. A ``HubError`` is shown in the dialog as its
message and hint (never a traceback) and the dialog stays usable. ``opened(path)`` hands the window a
header-only copy (plan and pass 1 work on it, Launch does not) or a downloaded file.

Downloads go to the standard Hugging Face cache, where a file another tool fetched is found too
("Open downloaded"). A vision projector beside the chosen model in the repo is offered with it
(``ProjectorOffer``): fetched after the model the same way (its header, or the whole file), so the window
finds it beside the model; when that fails the model opens anyway and the dialog says why. Cancel during a header fetch or a download waits for the worker to stop writing
(the download's ``.incomplete`` is kept: the next Download resumes it); a cancelled listing is dropped
at once.

The Token field (password echo) is passed to every Hub call; it lives in this dialog's memory for the
session only: never saved, logged or shown.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.hub import remote
from app.hub.download import UNVERIFIED, download, downloaded
from app.hub.errors import HubError
from app.hub.preview import fetch_header
from app.hub.refs import HubRef, parse_ref
from app.hub.remote import RemoteGguf, RepoListing, list_ggufs, pick
from app.planner.units import Bytes
from app.ui.hub_progress import TransferClock, hub_message, hub_work, token_placeholder, verify_text
from app.ui.hub_projector import PROGRESS_PREFIX, ProjectorOffer, cancelled_text, failed_text
from app.ui.hub_table import fill_table, make_table
from app.ui.qt import (
    QCloseEvent,
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.shown_text import PlainLabel
from app.ui.workers import Abandon, TaskPool, TaskThread

REF_HELP = "owner/name, hf:owner/name:Q4_K_M or a huggingface.co link"
CANCELLED = "Download cancelled: the partial file is kept, and Download resumes it."
FINISHED_FIRST = "The download had finished before Cancel took effect: Open downloaded opens it."
#: Closing the window waits this long for a worker to stop; a worker still waiting on the network is left
#: to end on its own (every Hub request times out).
SHUTDOWN_WAIT_MS = 2000
#: Bar resolution: byte counts pass 2**31, a QProgressBar holds an int.
BAR_STEPS = 1000


class HubDialog(QDialog):
    listed = Signal(object)  # RepoListing
    opened = Signal(object)  # Path: a header-only copy or a downloaded file, for the window to open
    failed = Signal(str)  # the message shown
    stopped = Signal()  # a cancelled header fetch or download has stopped writing
    progressed = Signal(str)  # the progress line as shown
    _moved = Signal(object, object)  # (done, total) from the worker thread, queued to the GUI
    _verified = Signal(object, object)  # (hashed, kept) while a kept .part is re-hashed

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.pool = pool if pool is not None else TaskPool(self)
        self.setWindowTitle("Open from Hugging Face")
        self.listing: RepoListing | None = None
        self.ref: HubRef | None = None
        self.task: TaskThread | None = None
        self.kind = ""  # "list" | "header" | "download" | "projector header" | "projector" while a task runs
        self.clock = TransferClock()
        self.target: RemoteGguf | None = None  # the file being downloaded
        self.repo = QLineEdit()
        self.repo.setPlaceholderText(REF_HELP)
        self.repo.setAccessibleName("Hugging Face repo")
        self.repo.textChanged.connect(self._ref_changed)
        self.repo.returnPressed.connect(self.list_repo)
        self.revision = QLineEdit()
        self.revision.setPlaceholderText("main")
        self.revision.setAccessibleName("Revision (branch, tag or commit; empty for main)")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText(token_placeholder())
        self.token.setAccessibleName("Hugging Face token (kept for this session only)")
        self.ref_message = PlainLabel()
        self.ref_message.setObjectName("refMessage")
        self.ref_message.setTextFormat(Qt.TextFormat.PlainText)
        self.ref_message.setWordWrap(True)
        self.ref_message.setVisible(False)
        self.list_button = QPushButton("&List")
        self.list_button.setEnabled(False)
        self.list_button.clicked.connect(self.list_repo)
        self.table = make_table()
        self.table.itemSelectionChanged.connect(self._update)
        self.table.itemDoubleClicked.connect(lambda _i: self.plan_header())
        self.projector = ProjectorOffer()
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.status = PlainLabel()
        self.status.setObjectName("hubStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.cancel_button = QPushButton("&Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.error = PlainLabel()
        self.error.setObjectName("hubError")
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # server text, never markup
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728;")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setVisible(False)
        self.header_button = QPushButton("Plan from &header (no download)")
        self.header_button.setToolTip("Fetch only the file's header (a few MiB) and plan it; "
                                      "download it to launch")
        self.header_button.clicked.connect(self.plan_header)
        self.download_button = QPushButton("&Download")
        self.download_button.clicked.connect(self.download_or_open)
        close = QPushButton("Cl&ose")
        close.clicked.connect(self.reject)
        for b in (self.cancel_button, self.header_button, self.download_button, close):
            b.setAutoDefault(False)
        self.list_button.setDefault(True)
        self._layout(close)
        self._moved.connect(self._show_progress)
        self._verified.connect(self._show_verifying)
        self._update()
        self.resize(720, 480)

    def _layout(self, close: QPushButton) -> None:
        repo_label, rev_label, token_label = QLabel("&Repo:"), QLabel("Re&vision:"), QLabel("&Token:")
        repo_label.setBuddy(self.repo)
        rev_label.setBuddy(self.revision)
        token_label.setBuddy(self.token)
        form = QGridLayout()
        form.addWidget(repo_label, 0, 0)
        form.addWidget(self.repo, 0, 1)
        form.addWidget(self.list_button, 0, 2)
        form.addWidget(rev_label, 1, 0)
        form.addWidget(self.revision, 1, 1)
        form.addWidget(token_label, 2, 0)
        form.addWidget(self.token, 2, 1)
        busy = QHBoxLayout()
        busy.addWidget(self.progress, 1)
        busy.addWidget(self.cancel_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.header_button)
        buttons.addWidget(self.download_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.ref_message)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.projector)
        lay.addLayout(busy)
        lay.addWidget(self.status)
        lay.addWidget(self.error)
        lay.addLayout(buttons)

    # ---- state ---------------------------------------------------------------------------------
    def open_ref(self, text: str) -> None:
        """``text`` (owner/name, an hf: ref or a link) in the repo field, listed as if List were pressed."""
        self.repo.setText(text)
        self.list_repo()

    def _ref_changed(self, text: str) -> None:
        self.ref = None
        message = ""
        if text.strip():
            try:
                self.ref = parse_ref(text.strip())
            except HubError as exc:
                message = hub_message(exc)
        self.ref_message.setText(message)
        self.ref_message.setVisible(bool(message))
        self._update()

    def selected(self) -> RemoteGguf | None:
        rows = self.table.selectionModel().selectedRows()
        if self.listing is None or not rows:
            return None
        return self.listing.ggufs[rows[0].row()]  # rows are the listing, in order

    def _update(self) -> None:
        busy = self.task is not None
        chosen = self.selected()
        here = downloaded(chosen) if chosen is not None else None
        self.download_button.setText("&Open downloaded" if here is not None else "&Download")
        self.download_button.setToolTip(f"In the Hugging Face cache: {here}" if here is not None else
                                        "Download the whole file into the Hugging Face cache to launch it "
                                        "(resumes a cancelled one)")
        for w in (self.repo, self.revision, self.token):
            w.setEnabled(not busy)
        self.list_button.setEnabled(not busy and self.ref is not None)
        self.header_button.setEnabled(not busy and chosen is not None)
        self.download_button.setEnabled(not busy and chosen is not None)
        self.table.setEnabled(not busy)
        self.projector.offer(self.listing, chosen)
        self.projector.setEnabled(not busy)

    def _token(self) -> str | None:
        return self.token.text().strip() or None

    def _show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))
        if message:
            self.failed.emit(message)

    # ---- list ----------------------------------------------------------------------------------
    def list_repo(self) -> None:
        ref = self.ref
        if ref is None or self.task is not None:
            return
        revision = self.revision.text().strip() or ref.revision
        self.listing = None
        self.table.setRowCount(0)
        token = self._token()
        self._start("list", f"Listing {ref.repo}…",
                     lambda _c: list_ggufs(ref.repo, revision, token=token), lambda r: self._listed(r, ref))

    def _listed(self, listing: RepoListing, ref: HubRef) -> None:
        self.listing = listing
        fill_table(self.table, listing)
        plain = [g for g in listing.ggufs if not g.is_projector]
        self.status.setText(f"{listing.repo} @ {listing.commit[:10]}: {len(plain)} GGUF model"
                            f"{'' if len(plain) == 1 else 's'}" + (f" — {listing.note}" if listing.note else ""))
        self._preselect(listing, ref)
        self.listed.emit(listing)

    def _preselect(self, listing: RepoListing, ref: HubRef) -> None:
        """The file the ref names (path or quant), or the repo's only model."""
        try:
            chosen = pick(listing, ref)
        except HubError as exc:
            if ref.path or ref.quant:  # it named one that is not there: say which there are
                self._show_error(hub_message(exc))
            return
        for row, g in enumerate(listing.ggufs):
            if g.path == chosen.path and not g.is_projector:
                self.table.selectRow(row)
                self.table.scrollTo(self.table.model().index(row, 0))

    # ---- header / download ---------------------------------------------------------------------
    def plan_header(self) -> None:
        chosen = self.selected()
        if chosen is None or self.task is not None:
            return
        here = downloaded(chosen)
        if here is not None:  # the whole file is here: no header to fetch
            self._done(here)
            return
        token, projector = self._token(), self.projector.chosen()
        self._start("header", f"Fetching the header of {chosen.name}…",
                    lambda c: fetch_header(chosen, token=token, cancel=c, progress=self._moved.emit),
                    lambda path: self._with_projector(path, projector, "projector header"))

    def download_or_open(self) -> None:
        chosen = self.selected()
        if chosen is None or self.task is not None:
            return
        projector = self.projector.to_download()
        here = downloaded(chosen)
        if here is not None:
            self._with_projector(here, projector, "projector")
            return
        self.target = chosen
        self._start("download", f"Downloading {chosen.name}…" + ("" if chosen.verified else f" — {UNVERIFIED}"),
                    self._downloading(chosen), lambda path: self._with_projector(path, projector, "projector"))

    def _downloading(self, gguf: RemoteGguf) -> Callable[[threading.Event], object]:
        token = self._token()
        return lambda c: download(gguf, token=token, cancel=c, progress=self._moved.emit,
                                  verifying=self._verified.emit)

    def _with_projector(self, model: object, projector: RemoteGguf | None, kind: str) -> None:
        """``model`` is here (a header-only copy or the whole file): fetch ``projector`` beside it the same way
        ("projector header", "projector"), then open the model; without one, open it now. A projector that
        fails opens the model anyway and says why; a cancelled one opens nothing."""
        assert isinstance(model, Path)
        if projector is None:
            self._done(model)
            return
        self.target = projector
        if kind == "projector":
            text = f"Downloading the vision projector {projector.name}…"
            work = self._downloading(projector)
        else:
            token = self._token()
            text = f"Fetching the header of the vision projector {projector.name}…"
            work = lambda c: fetch_header(projector, token=token, cancel=c, progress=self._moved.emit)  # noqa: E731
        self._start(kind, text, work, lambda _p: self._done(model),
                    lambda message: self._projector_failed(model, projector, kind, message))

    def _projector_failed(self, model: Path, projector: RemoteGguf, kind: str, message: str) -> None:
        """The model opens without its projector; the dialog stays open, saying why (Download retries)."""
        self.status.setText("")
        self.opened.emit(model)
        self._show_error(failed_text(model.name, projector, "download" if kind == "projector" else "header fetch",
                                     message))

    def _show_progress(self, done: object, total: object) -> None:
        assert isinstance(done, int) and isinstance(total, int)
        if self.task is None or self.task.cancelled:
            return
        if self.kind in ("header", "projector header"):
            whose = "the vision projector's header" if self.kind == "projector header" else "the header"
            self.status.setText(f"Fetching {whose}: {Bytes(done)} fetched")
            self.progressed.emit(self.status.text())
            return
        self.progress.setRange(0, BAR_STEPS)
        self.progress.setValue(done * BAR_STEPS // total if total else 0)
        text = (PROGRESS_PREFIX if self.kind == "projector" else "") + self.clock.text(done, total)
        if self.target is not None and not self.target.verified:
            text += f" — {UNVERIFIED}"
        self.status.setText(text)
        self.progressed.emit(text)

    def _show_verifying(self, hashed: object, kept: object) -> None:
        assert isinstance(hashed, int) and isinstance(kept, int)
        if self.task is None or self.task.cancelled:
            return
        self.clock.verifying()  # hashing is no transfer: the speed counts from its end
        self.status.setText(verify_text(hashed, kept))
        self.progressed.emit(self.status.text())

    def _done(self, path: object) -> None:
        assert isinstance(path, Path)
        self.opened.emit(path)
        self.accept()

    # ---- running -------------------------------------------------------------------------------
    def _start(self, kind: str, text: str, fn: Callable[[threading.Event], object],
               ok: Callable[[Any], None], fail: Callable[[str], None] | None = None) -> None:
        def succeeded(result: object) -> None:
            self._end(task)
            ok(result)

        def failed(message: str) -> None:
            self._end(task)
            (fail or self._failed)(message)

        self.kind, self.clock = kind, TransferClock()
        self._show_error("")
        self.status.setText(text)
        self.progress.setRange(0, 0)  # busy until the first bytes arrive
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        # A worker still waiting on the network when the window closes is left to end on its own
        # (every Hub request times out), never waited for longer than SHUTDOWN_WAIT_MS.
        task = self.pool.run(hub_work(fn), succeeded, failed, owner=self, finished=self._finished,
                             abandon=Abandon(SHUTDOWN_WAIT_MS, remote.longest_wait() + 5))
        self.task = task
        self._update()

    def cancel(self) -> None:
        task = self.task
        if task is None or task.cancelled:
            return
        task.cancel()
        if self.kind == "list":  # nothing written: free at once, drop the late answer
            self.task = None
            self.status.setText("Listing cancelled")
            self._idle()
        else:  # wait until the worker stops writing, so a new Download resumes a whole .part
            self.cancel_button.setEnabled(False)
            self.status.setText("Stopping…")

    def _failed(self, message: str) -> None:
        self.status.setText("")
        self._show_error(message)

    def _end(self, task: TaskThread) -> None:
        """The answer is in (a result or an error): the dialog is free again."""
        if self.task is task:
            self.task = None
            self._idle()

    @property
    def stopping(self) -> bool:
        """A cancelled task has not ended yet (a listing still waiting on the network)."""
        return self.pool.busy(self) and self.task is None

    def _finished(self, task: TaskThread) -> None:
        if self.task is task:  # a cancelled header fetch or download has stopped writing
            self.task = None
            self.status.setText(self._cancelled_text())
            self._idle()
            self.stopped.emit()

    def _cancelled_text(self) -> str:
        if self.kind not in ("download", "projector"):
            return "Header fetch cancelled"
        if self.target is not None and downloaded(self.target) is not None:
            return FINISHED_FIRST
        return cancelled_text(self.target) if self.kind == "projector" and self.target is not None else CANCELLED

    def _idle(self) -> None:
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self._update()

    def reject(self) -> None:
        """Close: a running transfer is cancelled (a download keeps its .part)."""
        self.cancel()
        super().reject()

    def closeEvent(self, e: QCloseEvent) -> None:
        self.cancel()
        super().closeEvent(e)

    def shutdown(self) -> None:
        """The window closes: cancel every worker and wait a little for it; one still waiting on the
        network is left to end on its own (``Abandon``), never waited for long."""
        self.cancel()
        self.hide()
        self.pool.wait(self)
