"""The chosen engine (app/engine/chosen.py): what the window chose, read by the CLI; a state file from a
window before 2026-12-02 still counts, and a choice saved since wins over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.chosen import chosen_engine, remember_chosen_engine


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "config"


def test_none_chosen_in_a_fresh_home(config: Path) -> None:
    assert chosen_engine() is None


def test_an_older_windows_state_file_still_names_the_engine(config: Path) -> None:
    config.mkdir()
    (config / "gui-state.json").write_text(json.dumps({"engine_path": "/opt/llama/llama-server"}))
    assert chosen_engine() == Path("/opt/llama/llama-server")


def test_the_choice_saved_since_wins_and_an_empty_one_means_none(config: Path) -> None:
    config.mkdir()
    (config / "gui-state.json").write_text(json.dumps({"engine_path": "/opt/old/llama-server"}))
    remember_chosen_engine("/opt/new/llama-server")
    assert chosen_engine() == Path("/opt/new/llama-server")
    remember_chosen_engine("")
    assert chosen_engine() is None


def test_an_unreadable_state_file_chooses_nothing(config: Path) -> None:
    config.mkdir()
    (config / "gui-state.json").write_text("{not json")
    assert chosen_engine() is None
