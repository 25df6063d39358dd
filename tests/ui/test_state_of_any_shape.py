"""The window opens with a state file of any shape (issue 31): a hand-edited or older file with values of
the wrong type, or of the right type that cannot be used, resets those settings and says so once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.ui.main_window import MainWindow
from app.ui.state import UiState, ignored_fields, load_state
from tests.ui.windows import gpus_read

BAD = {"simulated_gpus": "RTX 4090", "engine_path": 7, "safety_mib": "256", "recent": [1, 2],
       "engine_window": "yes", "settings": {"n_ctx": "lots"}, "server": {"port": "abc"}, "geometry": None,
       "last_model": "/models/a.gguf", "unknown_future_field": 3}


def test_a_state_of_the_wrong_types_keeps_what_it_can_and_names_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "gui-state.json"
    path.write_text(json.dumps(BAD))
    state = load_state(path)
    assert state.last_model == "/models/a.gguf" and state.simulated_gpus == [] and state.engine_path == ""
    assert state.safety_mib == UiState().safety_mib and state.recent == [] and state.engine_window is False
    assert sorted(ignored_fields(path)) == ["engine_path", "engine_window", "geometry", "recent", "safety_mib",
                                            "simulated_gpus"]


@pytest.mark.parametrize("extra", [{}, {"simulated_gpus": ["No Such Card"]}], ids=["wrong-types", "unknown-card"])
def test_the_window_opens_whatever_the_state_file_holds(qtbot, tmp_path: Path, extra: dict[str, object]) -> None:
    path = tmp_path / "gui-state.json"
    path.write_text(json.dumps(BAD | extra))
    window = MainWindow(persist=False, state_file=path, read_host=lambda: None)
    gpus_read(qtbot, window)
    qtbot.addWidget(window)
    window.show()
    said = window.statusBar().currentMessage()
    assert said.startswith("Some remembered settings could not be used and start from their defaults: ")
    assert "simulated_gpus" in said
    assert window.open_demo()  # and it plans
    window.close()
