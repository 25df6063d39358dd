"""The model library in the window: the GGUFs of a Hugging Face cache and of a folder the user adds
(real generated files, read by the real scanner on its worker thread), opened into the window; a Hub
search against the fake Hub (tests/fixtures/fake_hub.py) that hands a repo to the real Hub picker."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.hub.library import LibraryScan
from app.planner.units import Bytes
from app.ui.library_dialog import LibraryDialog
from app.ui.main_window import MainWindow
from app.ui.qt import QFileDialog, QImage, Qt, QTableWidget, QTableWidgetItem
from app.ui.state import load_state
from app.ui.workers import ABANDONED
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_hub import FakeHub, fake_hub, hf_cache  # noqa: F401 (the fixtures)
from tests.fixtures.library import PROJECTOR, hf_snapshot
from tests.ui.library_screenshot import SIZE
from tests.ui.test_screenshot import ARTIFACT, ROOT, xvfb  # noqa: F401 (the fixture)
from tests.ui.windows import gpus_read

LEFT = Qt.MouseButton.LeftButton
REPO = "acme/tiny-GGUF"
LLAMA_8B = "Llama-3.1-8B-Instruct-Q4_K_M.gguf"


@pytest.fixture(scope="session")
def projector() -> Path:
    return gguf_factory.ensure(PROJECTOR)


@pytest.fixture
def snapshot(hf_cache: Path, tiny_chat_model: Path, projector: Path) -> Path:  # noqa: F811
    """The Hugging Face cache holds one repo: a model and its projector."""
    return hf_snapshot(hf_cache, REPO, {"tiny-chat-F32.gguf": tiny_chat_model, "mmproj-tiny-F16.gguf": projector})


@pytest.fixture
def folder(tmp_path: Path, shape_model) -> Path:
    """A folder of the user's: the shape of Llama-3.1-8B Q4_K_M, a truncated download, a FIFO."""
    models = tmp_path / "my-models"
    models.mkdir()
    (models / LLAMA_8B).symlink_to(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    (models / "half-downloaded.gguf").write_bytes(b"GGUF")
    os.mkfifo(models / "pipe.gguf")  # opened, it would block the scan forever
    return models


@pytest.fixture(autouse=True)
def _own_cache(hf_cache: Path) -> Path:  # noqa: F811  (never the user's Hugging Face cache)
    return hf_cache


def open_library(window: MainWindow, qtbot) -> LibraryDialog:
    """Library… clicked, and its scan (started when it shows) answered."""
    qtbot.mouseClick(window.library_button, LEFT)
    dialog = window.library_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: not dialog.working("scan") and dialog.scan is not None, timeout=30_000)
    return dialog


def cell(table: QTableWidget, row: int, col: int = 0) -> QTableWidgetItem:
    item = table.item(row, col)
    assert item is not None
    return item


def rows(dialog: LibraryDialog) -> dict[str, list[str]]:
    t = dialog.table
    return {cell(t, r).text(): [cell(t, r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())}


def row_of(dialog: LibraryDialog, name: str) -> int:
    return next(r for r in range(dialog.table.rowCount()) if cell(dialog.table, r).text() == name)


def double_click(table, row: int, qtbot) -> None:
    """As a user does it: QTest's double-click alone (press, release, double-click) leaves a Qt 6 item view
    without the press it pairs the double-click with, so the first click comes first."""
    rect = table.visualRect(table.model().index(row, 0))
    qtbot.mouseClick(table.viewport(), LEFT, pos=rect.center())
    qtbot.mouseDClick(table.viewport(), LEFT, pos=rect.center())


def test_the_library_lists_the_cache_and_an_added_folder_and_opens_a_model(
        window, snapshot, folder, tiny_chat_model, shape_model, qtbot, monkeypatch):
    dialog = open_library(window, qtbot)
    assert rows(dialog) == {
        "tiny-chat-F32.gguf": ["tiny-chat-F32.gguf", "llama", "F32", str(Bytes(tiny_chat_model.stat().st_size)), "4,096",
                               "mmproj-tiny-F16.gguf", REPO],
        "mmproj-tiny-F16.gguf": ["mmproj-tiny-F16.gguf", "clip", "F16",
                                 str(Bytes(gguf_factory.ensure(PROJECTOR).stat().st_size)), "—", "is a projector", REPO],
    }
    assert dialog.status.text().startswith("1 model in the Hugging Face cache")

    # Add folder… (the real button; the folder picker answers with the folder)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_a, **_k: str(folder))
    with qtbot.waitSignal(dialog.scanned, timeout=30_000):
        qtbot.mouseClick(dialog.add_button, LEFT)
    assert window.state.library_folders == [str(folder)]
    found = rows(dialog)
    assert set(found) == {"tiny-chat-F32.gguf", "mmproj-tiny-F16.gguf", LLAMA_8B, "half-downloaded.gguf"}  # no FIFO
    big = shape_model("llama-3.1-8b-instruct-q4_k_m").stat().st_size
    assert found[LLAMA_8B] == [LLAMA_8B, "llama", "Q4_K_M", str(Bytes(big)), "131,072", "—", str(folder)]
    assert found["half-downloaded.gguf"][1] == "cannot read: not a GGUF file: only 4 bytes"
    assert dialog.status.text().startswith("1 model in the Hugging Face cache")
    assert ", 1 model in your folders; double-click one to open it" in dialog.status.text()

    # A broken file and a projector cannot be chosen; Open is for a model.
    for name in ("half-downloaded.gguf", "mmproj-tiny-F16.gguf"):
        dialog.table.selectRow(row_of(dialog, name))
        assert dialog.selected() is None and not dialog.open_button.isEnabled()
    dialog.table.selectRow(row_of(dialog, LLAMA_8B))
    assert dialog.open_button.isEnabled()

    with qtbot.waitSignal(window.planned, timeout=30_000):
        double_click(dialog.table, row_of(dialog, "tiny-chat-F32.gguf"), qtbot)
    assert window.model_path == snapshot / "tiny-chat-F32.gguf" and not dialog.isVisible()
    assert "tiny-chat-F32.gguf" in window.model_label.text()


def test_removing_a_folder_drops_its_models(window, folder, qtbot):
    window.state.library_folders = [str(folder)]
    dialog = open_library(window, qtbot)
    assert LLAMA_8B in rows(dialog)
    dialog.folders.setCurrentRow(0)
    with qtbot.waitSignal(dialog.scanned, timeout=30_000):
        qtbot.mouseClick(dialog.remove_button, LEFT)
    assert rows(dialog) == {} and window.state.library_folders == []
    assert dialog.status.text().startswith("No GGUF file in the Hugging Face cache")


def test_the_folders_are_remembered_and_an_old_state_file_still_loads(qtbot, tmp_path, folder):
    state_file = tmp_path / "gui-state.json"
    state_file.write_text(json.dumps({"last_model": "", "recent": [], "safety_mib": 512}))  # before the library
    assert load_state(state_file).library_folders == [] and load_state(state_file).safety_mib == 512
    w = MainWindow(state=load_state(state_file), persist=True, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    dialog = open_library(w, qtbot)
    with qtbot.waitSignal(dialog.scanned, timeout=30_000):
        dialog.add_folder(folder)
    w.close()
    assert load_state(state_file).library_folders == [str(folder)]
    again = MainWindow(state_file=state_file, persist=False, read_host=lambda: None)
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    again.show()
    assert LLAMA_8B in rows(open_library(again, qtbot))
    again.close()


def test_the_menu_entry_opens_the_same_library(window, qtbot):
    entry = next(a for a in window.menuBar().actions()[0].menu().actions() if "library" in a.text().lower())
    entry.trigger()
    assert window.library_dialog is not None and window.library_dialog.isVisible()
    qtbot.mouseClick(window.library_button, LEFT)  # the same dialog, not a second one
    assert window.findChildren(LibraryDialog) == [window.library_dialog]


def test_a_hub_search_lists_repos_and_one_opens_in_the_hub_picker(window, fake_hub, snapshot, tiny_model, qtbot):  # noqa: F811
    fake_hub.add_repo(REPO, {"tiny-F32.gguf": tiny_model}).downloads = 40
    fake_hub.add_repo("bob/Tiny-Chat-GGUF", {"chat-F32.gguf": tiny_model}).downloads = 900
    fake_hub.add_repo("carol/unrelated-GGUF", {"x-F32.gguf": tiny_model})
    dialog = open_library(window, qtbot)
    assert not dialog.search_button.isEnabled()  # nothing typed yet
    qtbot.keyClicks(dialog.query, "tiny")
    with qtbot.waitSignal(dialog.searched, timeout=30_000):
        qtbot.mouseClick(dialog.search_button, LEFT)
    t = dialog.results
    assert [[cell(t, r, c).text() for c in range(3)] for r in range(t.rowCount())] == [
        ["bob/Tiny-Chat-GGUF", "900", "2026-11-30"], [REPO, "40", "2026-11-30"]]
    assert dialog.search_status.text().startswith("2 GGUF repos on the Hub")

    window.open_hub().hide()  # made now, so its listing can be waited for
    with qtbot.waitSignal(window.hub_dialog.listed, timeout=30_000):
        double_click(t, 1, qtbot)
    hub = window.hub_dialog
    assert hub.isVisible() and not dialog.isVisible()
    assert hub.listing is not None and hub.listing.repo == REPO
    assert [g.name for g in hub.listing.ggufs] == ["tiny-F32.gguf"]


def test_offline_the_search_says_so_and_the_list_still_works(window, snapshot, monkeypatch, qtbot):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    dialog = open_library(window, qtbot)
    assert "offline mode is on" in dialog.search_status.text()
    assert "listed all the same" in dialog.search_status.text()
    assert not dialog.query.isEnabled() and not dialog.search_button.isEnabled()
    assert "tiny-chat-F32.gguf" in rows(dialog)


def test_an_unreachable_hub_is_said_and_the_list_stays(window, snapshot, monkeypatch, qtbot):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    dialog = open_library(window, qtbot)
    dialog.query.setText("tiny")
    with qtbot.waitSignal(dialog.failed, timeout=30_000) as sig:
        qtbot.mouseClick(dialog.search_button, LEFT)
    assert sig.args[0].startswith(f"cannot reach http://127.0.0.1:{port}") and "listed all the same" in sig.args[0]
    assert dialog.search_error.isVisible() and dialog.search_button.isEnabled()
    assert "tiny-chat-F32.gguf" in rows(dialog)


def test_a_download_made_meanwhile_is_listed_when_the_library_opens_again(window, hf_cache, tiny_model, qtbot):  # noqa: F811
    dialog = open_library(window, qtbot)
    assert rows(dialog) == {}
    dialog.hide()
    hf_snapshot(hf_cache, REPO, {"tiny-F32.gguf": tiny_model})
    with qtbot.waitSignal(dialog.scanned, timeout=30_000) as sig:
        window.open_library()
    assert isinstance(sig.args[0], LibraryScan) and list(rows(dialog)) == ["tiny-F32.gguf"]


def test_the_library_button_sits_in_the_open_row(window):
    assert window.library_button.isVisible() and window.library_button.text() == "Library…"
    assert window.library_button.y() == window.open_button.y() == window.hub_button.y()


def test_a_copied_projector_in_a_folder_is_named_beside_its_model(window, tmp_path, tiny_model, projector, qtbot):
    models = tmp_path / "vision"
    models.mkdir()
    shutil.copyfile(tiny_model, models / "tiny-Q8_0.gguf")
    shutil.copyfile(projector, models / "mmproj-tiny-f16.gguf")
    window.state.library_folders = [str(models)]
    dialog = open_library(window, qtbot)
    row = row_of(dialog, "tiny-Q8_0.gguf")
    assert cell(dialog.table, row, 5).text() == "mmproj-tiny-f16.gguf"
    assert str(models / "mmproj-tiny-f16.gguf") in cell(dialog.table, row).toolTip()


@pytest.mark.slow
def test_screenshot_of_the_library(xvfb, tmp_path):  # noqa: F811 (the fixture)
    """docs/screenshot-library.png: the real dialog under Xvfb (xcb), drawn by tests/ui/library_screenshot.py."""
    out = tmp_path / "library.png"
    # HOME is the test's folder: the picture reads ~/models and ~/hf-cache, whoever runs it; the
    # generated models stay in the usual test cache.
    env = dict(os.environ, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb", HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               HEADROOM_CONFIG_DIR=str(tmp_path / "config"), HOME=str(tmp_path),
               HEADROOM_CACHE_DIR=str(gguf_factory.models_dir().parent))
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, "-m", "tests.ui.library_screenshot", str(out), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 files, 5 models, 3 Hub repos" in proc.stdout  # 2 in the cache, 3 in the folder (a llamafile); a projector, a cut file
    img = QImage(str(out))
    assert (img.width(), img.height()) == SIZE
    ARTIFACT.parent.mkdir(exist_ok=True)
    shutil.copyfile(out, ARTIFACT.with_name("screenshot-library.png"))


def test_closing_the_window_while_a_search_waits_on_a_silent_hub_does_not_hang(window, fake_hub, monkeypatch,  # noqa: F811
                                                                                qtbot):
    monkeypatch.setattr("app.hub.search.SEARCH_TIMEOUT", 3.0)
    fake_hub.stall()
    dialog = open_library(window, qtbot)
    dialog.query.setText("tiny")
    qtbot.mouseClick(dialog.search_button, LEFT)
    assert dialog.search_status.text() == "Searching the Hub for 'tiny'…" and not dialog.search_button.isEnabled()
    qtbot.waitUntil(lambda: any(p == "/api/models" for _, p, _ in fake_hub.requests), timeout=10_000)
    window.close()  # waits a little, then leaves the search to time out on its own
    assert not window.isVisible() and not dialog.isVisible()
    qtbot.waitUntil(lambda: all(t.isFinished() for t in ABANDONED), timeout=20_000)


def test_the_projector_column_names_a_projector_only_beside_a_model_it_fits(window, tmp_path, tiny_chat_model,
                                                                           shape_model, qtbot):
    models = tmp_path / "mixed"
    models.mkdir()
    shutil.copyfile(tiny_chat_model, models / "tiny-chat.gguf")
    (models / "mmproj-tiny.gguf").symlink_to(gguf_factory.ensure(shapes.TINY_MMPROJ))  # built for n_embd 64
    (models / "Llama-3.1-8B-Instruct-Q4_K_M.gguf").symlink_to(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    window.state.library_folders = [str(models)]
    dialog = open_library(window, qtbot)
    assert cell(dialog.table, row_of(dialog, "tiny-chat.gguf"), 5).text() == "mmproj-tiny.gguf"
    assert cell(dialog.table, row_of(dialog, "Llama-3.1-8B-Instruct-Q4_K_M.gguf"), 5).text() == "—"
