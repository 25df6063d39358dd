"""The engine log pane follows the newest line while you are at its end, and stays where you put it
when you scroll up (a walkthrough saw it stop following for minutes, until the window was resized)."""

from __future__ import annotations

from app.ui.console import Console

#: An engine log line long enough to wrap in a narrow pane.
LINE = "0.03.068.682 I slot print_timing: id  2 | task 22 | prompt eval time = 101.07 ms / 1504 tokens " * 2


def _batches(console: Console, qtbot, n: int, start: int = 0) -> None:
    for b in range(n):
        console.append_lines([f"{start + b}.{i} {LINE}" for i in range(40)])
        qtbot.wait(5)  # the window's ~100 ms batches, with the event loop running between them


def test_the_log_follows_the_engine_until_you_scroll_up(qtbot) -> None:
    console = Console()
    qtbot.addWidget(console)
    console.resize(420, 240)
    console.show()
    bar = console.verticalScrollBar()
    for n in range(160):  # past MAX_LINES (5,000): the oldest lines go while it follows
        _batches(console, qtbot, 1, n)
        assert bar.value() == bar.maximum() > 0, f"batch {n}: at {bar.value()} of {bar.maximum()}"
    bar.setValue(bar.maximum() // 3)  # you scroll up to read
    held = bar.value()
    _batches(console, qtbot, 5, 100)
    assert bar.value() == held < bar.maximum()  # it stays where you put it
    bar.setValue(bar.maximum())  # back at the end: it follows again
    _batches(console, qtbot, 5, 200)
    assert bar.value() == bar.maximum()
