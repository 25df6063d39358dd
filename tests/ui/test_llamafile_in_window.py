"""A llamafile in the window: the Open dialog offers it, a drop opens it, the library lists it named from
the GGUF inside, the plan starts from its .args with its projector, and Launch on Headroom's engine copies
the GGUF out once with the bar showing how far (then plan vs actual as for any GGUF)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.planner.gguf.reader import MODEL_FILTER
from app.ui.qt import QDropEvent, QFileDialog, QMimeData, QPointF, Qt, QUrl
from tests.fixtures import gguf_factory, shapes
from tests.fixtures import llamafile_factory as lf
from tests.fixtures.fake_hub import hf_cache  # noqa: F401  (the fixture)
from tests.ui.test_library_dialog import double_click, open_library, row_of, rows

LEFT = Qt.MouseButton.LeftButton


@pytest.fixture(autouse=True)
def own_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_cache: Path) -> Path:  # noqa: F811
    """This test's folders for the copy out of the llamafile and pass 1's views, never the user's (the
    rest of the cache stays: the engine Headroom built is found there)."""
    folder = tmp_path / "cache"
    monkeypatch.setattr("app.llamafile.extract.extracted_dir", lambda: folder / "llamafile-gguf")
    monkeypatch.setattr("app.llamafile.views.views_dir", lambda: folder / "llamafile-views")
    return folder


@pytest.fixture
def llamafile(tmp_path: Path) -> Path:
    model, projector = gguf_factory.ensure(shapes.TINY_CHAT), gguf_factory.ensure(shapes.TINY_MMPROJ)
    folder = tmp_path / "downloads"
    folder.mkdir()
    return lf.zip_llamafile(folder / "TinyChat.llamafile", lf.items(
        ("tiny-chat.gguf", model), ("mmproj-tiny.gguf", projector),
        (".args", lf.args_text("-m", "/zip/tiny-chat.gguf", "--mmproj", "/zip/mmproj-tiny.gguf", "-c", "2048", "..."))))


def test_open_model_offers_llamafiles_and_opens_one_where_its_args_start(window, llamafile, qtbot, monkeypatch):
    asked: list[str] = []

    def pick(_parent, _title, _folder, filters):
        asked.append(filters)
        return str(llamafile), ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", pick)
    with qtbot.waitSignal(window.planned, timeout=30_000):
        window.choose_model()
    assert asked == [MODEL_FILTER] and "*.llamafile" in MODEL_FILTER
    assert "TinyChat.llamafile: tiny-chat.gguf" in window.model_label.text()
    plan = window.plan
    assert plan is not None and plan.launch.n_ctx == 2048  # its .args' -c
    assert plan.launch.mmproj == str(llamafile / "zip" / "mmproj-tiny.gguf") and plan.projector is not None
    assert "the llamafile's .args asks" in window.statusBar().currentMessage()


def test_dropping_a_llamafile_opens_it(window, llamafile, qtbot):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(llamafile))])
    drop = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, LEFT, Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.planned, timeout=30_000):
        window.dropEvent(drop)
    assert window.model_path == llamafile


def test_the_library_lists_a_llamafile_by_the_gguf_inside_and_opens_it(window, llamafile, qtbot, monkeypatch):
    dialog = open_library(window, qtbot)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_a, **_k: str(llamafile.parent))
    with qtbot.waitSignal(dialog.scanned, timeout=30_000):
        qtbot.mouseClick(dialog.add_button, LEFT)
    name = "TinyChat.llamafile: tiny-chat.gguf"
    found = rows(dialog)
    assert found[name][1:3] == ["llama", "F32"] and found[name][5] == "mmproj-tiny.gguf"
    with qtbot.waitSignal(window.planned, timeout=30_000):
        double_click(dialog.table, row_of(dialog, name), qtbot)
    assert window.model_path == llamafile


@pytest.mark.engine
def test_launch_on_headrooms_engine_copies_the_gguf_out_once_then_checks_the_plan(
        window, llamafile, engine_build, own_copies, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000):  # the llamafile first, if it runs here
        assert window.open_model(llamafile)
    window.settings.engine.setCurrentIndex(
        [e.path for e in window.launch.engines].index(str(engine_build.server)))  # Headroom's, not the llamafile
    seen: list[int] = []
    window.launch.progress.valueChanged.connect(seen.append)
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert seen and max(seen) == 100  # the bar went to the end of the copy
    copies = list((own_copies / "llamafile-gguf").rglob("tiny-chat.gguf"))
    assert len(copies) == 1 and str(copies[0]) in window.launch.command.text()
    with qtbot.waitSignal(window.launch.checked, timeout=30_000) as chk:
        pass
    check = chk.args[0]
    assert check.ok, check.table()
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
