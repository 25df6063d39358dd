"""The first run: with nothing configured (no model opened yet, no engine chosen, the guide never
finished), the window opens with a short guide over it instead of an empty picture: an engine (the
ones found, a file to choose, or Build engine…), then a model (the library, a file, a Hugging Face
repo, a small model to chat with from the Hub, or the demo).

The guide only steers the window: engines come from the window's state (``enginesChanged``: the
window's own discovery), and every choice goes through the window's methods (``launch.discover``,
``open_model``, ``open_hub``, ``open_demo``). It is shown once: closing it, by any way, writes
``<config dir>/first-run-done``; closed with no model open (and Headroom not quitting), the window
opens the demo.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine.discover import ORIGIN_WORDS, EngineInfo
from app.hub.cache import hub_cache
from app.paths import config_dir
from app.planner.gguf.reader import MODEL_FILTER
from app.ui.engine_builder import EngineBuilder
from app.ui.qt import (
    QApplication,
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    Qt,
    QTableWidget,
    QTimer,
    QVBoxLayout,
)
from app.ui.shown_text import table_item

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

#: The most library models the guide lists (the newest first).
MAX_LIBRARY = 20
#: The parts of a split model after the first (llama.cpp ``llama_split_path``: ``-00002-of-00003``).
_LATER_PART = re.compile(r"-(?!00001)\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
#: A model a newcomer can download and chat with in minutes, offered by the guide ("A small model to chat
#: with…"): the smallest instruct model of a family the planner models (qwen2), published as GGUF by its
#: authors (Q4_K_M about 0.4 GB); a first reply on any CPU.
FIRST_CHAT_REPO = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
FIRST_CHAT_WORDS = "Qwen2.5-0.5B-Instruct, about 0.4 GB"

LOOKING = "Looking for engines…"
NONE_FOUND = ("No engine found. Choose a llama-server or llamafile you have, or build llama-server "
              "here (needs cmake and a C++ compiler; about 6 minutes on 2 cores, once).")


def done_marker() -> Path:
    return config_dir() / "first-run-done"


def wanted(window: MainWindow) -> bool:
    """Nothing configured: no model opened before, no engine chosen, the guide never closed; and a
    window that remembers (a ``persist=False`` window has no next run to spare)."""
    state = window.state
    return (window.persist and not state.last_model and not state.recent and not state.engine_path
            and not done_marker().exists())


def library_models(root: Path | None = None) -> list[Path]:
    """GGUF models in the Hugging Face cache (where Headroom, `hf download` and llama.cpp's `-hf` put them), newest first; a split model by
    its first part; unfinished downloads (``.incomplete`` blobs have no .gguf name) left out."""
    folder = root if root is not None else hub_cache()
    if not folder.is_dir():
        return []
    found = [p for pattern in ("*.gguf", "*.llamafile") for p in folder.rglob(pattern)
             if p.is_file() and not _LATER_PART.search(p.name)]
    found.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return found[:MAX_LIBRARY]


def engine_text(engines: list[EngineInfo] | None) -> str:
    """What the engine step says: still looking, none, or the engine that will be used."""
    if engines is None:
        return LOOKING
    if not engines:
        return NONE_FOUND
    first = engines[0]
    more = f" ({len(engines) - 1} more in the window's Engine list)" if len(engines) > 1 else ""
    return f"✓ {first.kind} {first.version}, {first.llama_cpp} — {ORIGIN_WORDS[first.source]}: {first.path}{more}"


def model_text(window: MainWindow) -> str:
    """What the model step says once a model is open (``headroom gui MODEL``): done; '' when none is."""
    model = window.current.model
    if model is None or model.demo:
        return ""
    return f"✓ {model.path.name} is open ({model.path.parent}): close this guide to see its plan."


class FirstRunGuide(QDialog):
    """Two steps over the window: an engine, then a model. Opening a model closes it."""

    def __init__(self, window: MainWindow, library: Path | None = None) -> None:
        super().__init__(window)
        self.main = window
        self.setWindowTitle("Welcome to Headroom")
        self.setObjectName("firstRunGuide")
        self._chosen: Path | None = None
        intro = QLabel("Headroom shows how a GGUF model and its context fit your GPUs, then starts "
                       "the engine with exactly that plan. Two things to pick:")
        intro.setWordWrap(True)

        self.engine_status = QLabel(engine_text(window.current.engines))
        self.engine_status.setObjectName("firstRunEngine")
        self.engine_status.setWordWrap(True)
        self.engine_status.setTextFormat(Qt.TextFormat.PlainText)
        self.choose_engine_button = QPushButton("Choose an engine &file…")
        self.choose_engine_button.clicked.connect(self._pick_engine)
        self.builder = EngineBuilder()
        self.builder.label.setVisible(False)  # the status above says what a build needs
        self.builder.logLines.connect(window.console.append_lines)
        self.builder.built.connect(lambda: window.launch.discover())
        app = QApplication.instance()
        if app is not None:  # a build still running when Headroom quits is stopped, as the window's is
            app.aboutToQuit.connect(self.builder.shutdown)
        engine_row = QHBoxLayout()
        engine_row.addWidget(self.choose_engine_button)
        engine_row.addStretch(1)
        engine_box = QGroupBox("1 · An engine: llama-server or a llamafile")
        eb = QVBoxLayout(engine_box)
        eb.addWidget(self.engine_status)
        eb.addLayout(engine_row)
        eb.addWidget(self.builder)

        self.library = QTableWidget(0, 2)
        self.library.setObjectName("firstRunLibrary")
        self.library.setHorizontalHeaderLabels(["Model", "Folder"])
        self.library.horizontalHeader().setStretchLastSection(True)
        self.library.verticalHeader().setVisible(False)
        self.library.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.library.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.library.cellDoubleClicked.connect(lambda row, _col: self.open_library_row(row))
        folder = library if library is not None else hub_cache()
        self.models = library_models(folder)
        for path in self.models:
            row = self.library.rowCount()
            self.library.insertRow(row)
            self.library.setItem(row, 0, table_item(path.name))
            self.library.setItem(row, 1, table_item(str(path.parent)))
        self.library.setVisible(bool(self.models))
        self.library_note = QLabel(f"In your library ({folder}), double-click to open:" if self.models else
                              f"Your library ({folder}) is empty: open a file, a Hugging Face repo (for a "
                              f"first reply in minutes, a small one: {FIRST_CHAT_WORDS}), or try the demo (a "
                              "7B model with 1M context on a simulated 24 GB GPU; it plans, but has no weights "
                              "to launch).")
        self.library_note.setWordWrap(True)
        self.model_status = QLabel()
        self.model_status.setObjectName("firstRunModel")
        self.model_status.setWordWrap(True)
        self.model_status.setTextFormat(Qt.TextFormat.PlainText)
        self.open_file_button = QPushButton("&Open a GGUF file…")
        self.open_file_button.clicked.connect(self._pick_model)
        self.hub_button = QPushButton("&Hugging Face repo…")
        self.hub_button.clicked.connect(window.open_hub)
        self.small_button = QPushButton("A &small model to chat with…")
        self.small_button.setToolTip(f"Lists {FIRST_CHAT_REPO} on Hugging Face: download one file (Q4_K_M is "
                                     "about 0.4 GB), then Launch and chat")
        self.small_button.clicked.connect(lambda: window.open_hub().open_ref(FIRST_CHAT_REPO))
        self.demo_button = QPushButton("Try the &demo")
        self.demo_button.clicked.connect(self.open_demo)
        model_row = QHBoxLayout()
        for b in (self.open_file_button, self.hub_button, self.small_button, self.demo_button):
            model_row.addWidget(b)
        model_row.addStretch(1)
        model_box = QGroupBox("2 · A model")
        mb = QVBoxLayout(model_box)
        mb.addWidget(self.model_status)
        mb.addWidget(self.library_note)
        mb.addWidget(self.library)
        mb.addLayout(model_row)

        self.close_button = QPushButton("&Close")
        self.close_button.clicked.connect(self.reject)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.close_button)
        lay = QVBoxLayout(self)
        lay.addWidget(intro)
        lay.addWidget(engine_box)
        lay.addWidget(model_box)
        lay.addLayout(bottom)
        self.setMinimumWidth(640)

        window.current.enginesChanged.connect(self.show_engines)
        window.current.modelChanged.connect(self._model_opened)
        self.builder.failed.connect(lambda msg: self.engine_status.setText(f"Build failed: {msg}"))
        self.finished.connect(self._finished)
        self.show_engines(window.current.engines)
        self.show_model()

    def show_model(self) -> None:
        """A model already open (given on the command line): the model step is done, said first; the
        ways to open another stay under it, the library's "empty" no longer the first thing read."""
        done = model_text(self.main)
        self.model_status.setText(done)
        self.model_status.setVisible(bool(done))
        if done and not self.models:
            self.library_note.setText("Or open another: a file, a Hugging Face repo, or the demo.")

    # ---- step 1: an engine -----------------------------------------------------------------------
    def show_engines(self, engines: object) -> None:
        found = engines if isinstance(engines, list) else None
        text = engine_text(found)
        if found is not None and self._chosen is not None:
            if not any(Path(e.path) == self._chosen for e in found):
                text = f"{self._chosen} is not an engine Headroom can run (no llama.cpp --version).\n" + text
            self._chosen = None
        self.engine_status.setText(text)
        self.builder.setVisible(found == [] or self.builder.running)
        self.adjustSize()  # room for the builder, or none

    def _pick_engine(self) -> None:
        path, _f = QFileDialog.getOpenFileName(self, "Choose llama-server or a llamafile", str(Path.home()))
        if path:
            self.use_engine(Path(path))

    def use_engine(self, path: Path) -> None:
        """Discover again with ``path`` first: the window's Engine list then offers it."""
        self._chosen = path
        self.main.launch.discover(path)

    # ---- step 2: a model -------------------------------------------------------------------------
    def _pick_model(self) -> None:
        path, _f = QFileDialog.getOpenFileName(self, "Open a model (a GGUF or a llamafile)", str(Path.home()),
                                               MODEL_FILTER)
        if path:
            self.main.open_model(Path(path))

    def open_library_row(self, row: int) -> None:
        if 0 <= row < len(self.models):
            self.main.open_model(self.models[row])

    def open_demo(self) -> None:
        self.main.open_demo()

    # ---- the end -----------------------------------------------------------------------------------
    def _model_opened(self, _model: object) -> None:
        if self.isVisible():  # the guide's work is done; once closed, later models are the window's
            self.accept()

    def _finished(self, _result: int) -> None:
        marker = done_marker()
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("the first-run guide was closed; delete this file to see it again\n")
        # Closed without a model: the demo, so the window is never empty. On the next turn of the
        # event loop: when Headroom quits (which closes the guide too), that turn never comes.
        QTimer.singleShot(0, self._never_empty)

    def _never_empty(self) -> None:
        if self.main.model_path is None and self.main.isVisible():
            self.main.open_demo()


def offer(window: MainWindow, *, nothing_configured: bool | None = None) -> FirstRunGuide | None:
    """Show the guide over ``window`` when nothing is configured (``wanted``, or ``nothing_configured``
    as it was found before a model given on the command line was opened); else None."""
    if not (wanted(window) if nothing_configured is None else nothing_configured):
        return None
    guide = FirstRunGuide(window)
    guide.show()
    return guide

