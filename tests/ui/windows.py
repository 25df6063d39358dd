"""Helpers for tests that make their own MainWindow."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from app.ui.main_window import MainWindow


def gpus_read(qtbot: QtBot, w: MainWindow) -> MainWindow:
    """``w`` once NVML's first reading is in (the window reads it off the GUI thread and plans for no
    GPU until then), so a test sees the GPUs the window will plan for."""
    qtbot.waitUntil(lambda: not w.reading_gpus, timeout=10_000)
    return w
