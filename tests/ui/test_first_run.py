"""The first run with nothing configured: a guide (an engine, then a model) over the window instead of
an empty picture; shown once; every way out leaves a plan on screen."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.native_build import EngineBuild
from app.ui import demo, first_run
from app.ui.application import open_first
from app.ui.first_run import FirstRunGuide
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures.fake_hub import FakeHub, fake_hub, own_hf_cache  # noqa: F401 (the fixture)
from tests.ui.windows import gpus_read

ENGINES_S = 120_000  # discovery probes each engine's flags: generous on 2 busy cores


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user who never ran Headroom: empty settings and an empty library (their own, empty Hugging
    Face cache), in tmp_path."""
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HEADROOM_DATA_DIR", str(tmp_path / "data"))
    own_hf_cache(monkeypatch, tmp_path)
    return tmp_path


def _window(qtbot, user: Path) -> MainWindow:
    w = MainWindow(state=UiState(), persist=True, state_file=user / "gui-state.json", read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def window(qtbot, user: Path) -> Iterator[MainWindow]:
    w = _window(qtbot, user)
    yield w
    w.close()


def _guide(window: MainWindow) -> FirstRunGuide:
    guide = window.findChild(FirstRunGuide)
    assert isinstance(guide, FirstRunGuide)
    return guide


def test_nothing_configured_opens_the_guide_with_the_engine_found(window, qtbot, engine_build: EngineBuild) -> None:
    assert open_first(window, None, demo=False) is False
    guide = _guide(window)
    assert guide.isVisible() and window.model_path is None
    assert guide.engine_status.text() == first_run.LOOKING
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        window.launch.discover()
    text = guide.engine_status.text()
    assert text.startswith("✓ llama-server") and "llama.cpp 0c1e57098 + 5 Headroom patches" in text
    assert not guide.builder.isVisible()
    assert guide.library.isHidden() and "is empty" in guide.library_note.text()


def test_a_small_model_to_chat_with_is_one_click_from_the_guide(fake_hub: FakeHub, window, qtbot,  # noqa: F811
                                                                  tiny_chat_model: Path) -> None:
    """Walkthrough: a newcomer had no model that could answer (the demo has no weights) and found none
    in the guide or the README. The guide names a small one and lists its repo (the Hub's API on
    loopback here: this machine reaches no Hub)."""
    name = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    fake_hub.add_repo(first_run.FIRST_CHAT_REPO, {name: tiny_chat_model})
    open_first(window, None, demo=False)
    guide = _guide(window)
    assert first_run.FIRST_CHAT_WORDS in guide.library_note.text()
    assert "no weights" in guide.library_note.text()  # (the demo is not what answers)
    dialog = window.open_hub()  # (made first, so its listing can be waited on)
    with qtbot.waitSignal(dialog.listed, timeout=30_000):
        guide.small_button.click()
    assert dialog.isVisible() and dialog.repo.text() == first_run.FIRST_CHAT_REPO
    item = dialog.table.item(0, 0)
    assert dialog.table.rowCount() == 1 and item is not None and item.text() == name


def test_the_demo_closes_the_guide_plans_and_the_guide_is_not_shown_again(window, qtbot, user) -> None:
    open_first(window, None, demo=False)
    guide = _guide(window)
    with qtbot.waitSignal(window.planned):
        guide.demo_button.click()
    assert window.model_path == demo.demo_model_path() and not guide.isVisible()
    assert first_run.done_marker().is_file()
    again = _window(qtbot, user)  # the next start: the demo (nothing else is configured), no guide
    with qtbot.waitSignal(again.planned):
        assert open_first(again, None, demo=False)
    assert again.findChild(FirstRunGuide) is None
    again.close()


def test_a_model_from_the_library_opens_from_the_guide(window, qtbot, user, tiny_model: Path) -> None:
    # the Hugging Face cache's layout: snapshots/<commit>/ holds the files, blobs/ the bytes
    repo = user / "hf-cache" / "models--acme--Tiny-GGUF" / "snapshots" / ("0" * 40)
    repo.mkdir(parents=True)
    shutil.copy(tiny_model, repo / "tiny-Q8_0.gguf")
    (repo / "big-Q4_K_M-00001-of-00002.gguf").write_bytes(b"")
    (repo / "big-Q4_K_M-00002-of-00002.gguf").write_bytes(b"")  # a later part: not a model of its own
    blobs = user / "hf-cache" / "models--acme--Tiny-GGUF" / "blobs"
    blobs.mkdir()
    (blobs / ("a" * 64 + ".incomplete")).write_bytes(b"")  # an unfinished download
    open_first(window, None, demo=False)
    guide = _guide(window)
    names = [guide.library.item(r, 0).text() for r in range(guide.library.rowCount())]  # type: ignore[union-attr]
    assert sorted(names) == ["big-Q4_K_M-00001-of-00002.gguf", "tiny-Q8_0.gguf"]
    row = names.index("tiny-Q8_0.gguf")
    with qtbot.waitSignal(window.planned):
        guide.open_library_row(row)
    assert window.model_path == repo / "tiny-Q8_0.gguf" and not guide.isVisible()
    assert window.state.last_model == str(repo / "tiny-Q8_0.gguf")  # remembered: next time, no guide


def test_no_engine_offers_a_build_and_a_chosen_file(window, qtbot, user, engine_build: EngineBuild) -> None:
    open_first(window, None, demo=False)
    guide = _guide(window)
    window.launch.set_engines([])  # what discovery answers on a machine with no engine at all
    assert guide.engine_status.text() == first_run.NONE_FOUND
    assert guide.builder.isVisible() and guide.builder.button.isEnabled()
    not_engine = user / "notes.txt"
    not_engine.write_text("hello")
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        guide.use_engine(not_engine)
    assert guide.engine_status.text().startswith(f"{not_engine} is not an engine Headroom can run")
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        guide.use_engine(engine_build.server)
    assert guide.engine_status.text().startswith("✓ llama-server")
    assert f"— the one you chose: {engine_build.server}" in guide.engine_status.text()
    assert window.current.engine is not None and Path(window.current.engine.path) == engine_build.server


def test_closing_the_guide_without_a_model_opens_the_demo(window, qtbot) -> None:
    open_first(window, None, demo=False)
    guide = _guide(window)
    with qtbot.waitSignal(window.planned):
        guide.close_button.click()
    assert window.model_path == demo.demo_model_path()
    assert first_run.done_marker().is_file()


def test_a_model_given_on_a_first_start_opens_and_the_guide_asks_for_an_engine(window, qtbot, user,
                                                                                tiny_model: Path) -> None:
    """``headroom gui MODEL`` (or a .gguf opened from the file manager) with nothing configured: the model
    opens and the guide is there for the engine step (issue 29); a second start with it does not show it."""
    with qtbot.waitSignal(window.planned):
        assert open_first(window, tiny_model, demo=False) is True
    assert window.model_path == tiny_model
    guide = _guide(window)
    assert guide.isVisible()
    guide.close_button.click()
    assert first_run.done_marker().is_file()
    again = _window(qtbot, user)
    assert open_first(again, tiny_model, demo=False) is True
    assert again.findChild(FirstRunGuide) is None
    again.close()


def test_a_model_given_on_a_first_start_is_done_in_the_guide(window, qtbot, user, tiny_model: Path) -> None:
    """Finding 10: ``headroom gui MODEL`` in a fresh home: the model step says the model is open, not
    that the library is empty; the engine step names where the engine came from in words."""
    with qtbot.waitSignal(window.planned):
        assert open_first(window, tiny_model, demo=False) is True
    guide = _guide(window)
    assert guide.model_status.isVisible()
    assert guide.model_status.text().startswith(f"✓ {tiny_model.name} is open")
    assert "is empty" not in guide.library_note.text()
    chosen = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/bin/llama-server", "0.5.0-dev", "0c1e570", EngineOrigin.SETTINGS)
    said = first_run.engine_text([chosen])
    assert said.endswith("— the one you chose: /opt/bin/llama-server") and "settings:" not in said
