"""The window's remembered settings live with the settings (``~/.config/headroom``), not in a cache a
user may clear (issue 29); a file an older Headroom left under the cache is read once and moves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.ui.state import UiState, load_state, save_state
from tests.ui.windows import gpus_read


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    config, cache = tmp_path / "config", tmp_path / "cache"
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(config))
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(cache))
    return config, cache


def test_settings_are_saved_under_the_config_dir_and_survive_a_cleared_cache(dirs: tuple[Path, Path]) -> None:
    config, cache = dirs
    save_state(UiState(last_model="/models/qwen.gguf", engine_path="/opt/llama-server"))
    assert json.loads((config / "gui-state.json").read_text())["engine_path"] == "/opt/llama-server"
    shutil.rmtree(cache, ignore_errors=True)
    assert load_state().last_model == "/models/qwen.gguf"


def test_a_state_file_left_in_the_cache_is_read_then_saved_to_the_config_dir(dirs: tuple[Path, Path]) -> None:
    config, cache = dirs
    cache.mkdir()
    (cache / "gui-state.json").write_text(json.dumps({"last_model": "/models/old.gguf", "simulated_gpus": ["RTX 4090"]}))
    state = load_state()
    assert state.last_model == "/models/old.gguf" and state.simulated_gpus == ["RTX 4090"]
    save_state(state)
    assert json.loads((config / "gui-state.json").read_text())["last_model"] == "/models/old.gguf"
    (cache / "gui-state.json").write_text(json.dumps({"last_model": "/models/stale.gguf"}))
    assert load_state().last_model == "/models/old.gguf"  # the config file wins once it exists


def test_a_window_on_a_read_only_config_closes_cleanly(qtbot, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 31: the window aborted at close when its settings could not be written; now it says so."""
    from app.ui.main_window import MainWindow

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the config folder should be")  # any write under it fails (ENOTDIR)
    window = MainWindow(state=UiState(), persist=True, state_file=blocked / "gui-state.json", read_host=lambda: None)
    gpus_read(qtbot, window)
    qtbot.addWidget(window)
    window.show()
    assert window.open_demo()
    window.close()
    assert "the window's settings were not saved" in capfd.readouterr().err
