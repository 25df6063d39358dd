"""Helpers for tests that make their own MainWindow."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from app.ui.main_window import MainWindow


def gpus_read(qtbot: QtBot, w: MainWindow) -> MainWindow:
    """``w`` once NVML's first reading is in (the window reads it off the GUI thread and plans for no
    GPU until then), so a test sees the GPUs the window will plan for."""
    qtbot.waitUntil(lambda: not w.reading_gpus, timeout=10_000)
    return w


def choose_engine(qtbot: QtBot, w: MainWindow, server: Path | str) -> MainWindow:
    """The window after finding its engines, with ``server`` (the engine the tests build) chosen."""
    with qtbot.waitSignal(w.launch.enginesFound, timeout=120_000) as found:
        w.launch.discover()
    paths = [e.path for e in found.args[0]]
    assert str(server) in paths
    w.settings.engine.setCurrentIndex(paths.index(str(server)))
    return w
