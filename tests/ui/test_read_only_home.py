"""The window on a read-only disk under its cache and settings (issue 46): it opens on the demo and its
status bar says, in one sentence, that nothing is kept. A real read-only tmpfs (the suite runs as root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.ui.application import open_first
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures.tmpfs import tmpfs


def test_the_window_opens_the_demo_and_says_the_cache_is_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  qtbot: object) -> None:
    with tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        monkeypatch.setenv("HEADROOM_CACHE_DIR", str(ro / "cache"))
        monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(ro / "config"))
        window = MainWindow(state=UiState(), persist=False, state_file=ro / "config" / "state.json")
        qtbot.addWidget(window)  # type: ignore[attr-defined]
        with qtbot.waitSignal(window.planned):  # type: ignore[attr-defined]
            open_first(window, None, demo=True)
        assert window.current.model is not None and window.current.model.demo
        assert window.statusBar().currentMessage() == window.storage_problem == (
            f"The cache folder {ro / 'cache'} is on a read-only disk: Headroom goes on without it (nothing it "
            "measures, downloads or chooses is kept until it can be written).")
        assert list(ro.iterdir()) == []
        window.close()
