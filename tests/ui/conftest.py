"""Fixtures for the window tests: a real MainWindow with its state in tmp_path (never the user's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml
from tests.ui.windows import gpus_read

#: The offscreen platform cannot propagate size hints or raise a window (a tooltip); it says so each
#: time. That is the test platform's limit, not the app's: every other Qt warning still fails a test.
OFFSCREEN_NOISE = r"This plugin does not support (propagateSizeHints|raise)\(\)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ui/" in item.nodeid:
            item.add_marker(pytest.mark.qt_log_ignore(OFFSCREEN_NOISE))


@pytest.fixture(autouse=True)
def own_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The API key and anything else a window keeps in the config directory: this test's, never the user's."""
    folder = tmp_path / "config"
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def own_measurements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stored pass 1s a window finds by itself when a model opens (app/ui/measure_bar.py): this test's,
    never what another test (or ``headroom measure``) left in the shared cache."""
    from app.probe import cache

    folder = tmp_path / "measurements"
    monkeypatch.setattr(cache, "measurements_dir", lambda: folder)
    return folder


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    # Host RAM held still: on a shared box psutil's reading moves by GiBs between polls, and a live
    # re-plan would race the test's own (tests/ui/test_live_replan_host.py tests that path).
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "gui-state.json", read_host=lambda: None)
    qtbot.addWidget(w)
    w.show()
    gpus_read(qtbot, w)
    yield w
    w.close()


@pytest.fixture
def corrupt_gguf(tmp_path: Path) -> Path:
    """A file that starts like a GGUF and then is nonsense (a truncated download)."""
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**62).to_bytes(8, "little") + b"\xff" * 40)
    return path


@pytest.fixture
def no_gpu_window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    """A machine without an NVIDIA driver, whatever machine the test runs on."""
    nvml = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml,
                   read_host=lambda: None)  # host RAM held still, as in conftest's window
    qtbot.addWidget(w)
    w.show()
    gpus_read(qtbot, w)
    yield w
    w.close()
