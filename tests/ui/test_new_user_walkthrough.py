"""What a new user's walkthrough found, on the real engine (the CPU build, the tiny models): Launch
measures an estimated plan first (pass 1) and a pass 1 that fails refuses the launch, as ``headroom
serve`` does; Cancel during that pass 1 launches nothing; another model opened
after a run starts with an empty chat, no fork replies, no sessions and an empty console."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings
from app.probe.measure import measure
from app.ui.chat_panel import ANOTHER_MODEL, FORK_LINES, lines_tall
from app.ui.launch_sequence import MEASURE_CANCELLED, MEASURING_FIRST
from app.ui.qt import Qt

LEFT = Qt.MouseButton.LeftButton


def _engine(window, engine_build, qtbot) -> None:
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000):
        window.launch.discover()
    window.settings.engine.setCurrentIndex(window.settings.engine.findData(str(engine_build.server)))


def _launched_and_greeted(window, engine_build, qtbot, model: Path, *, n_parallel: int, max_tokens: int,
                          unified: bool = True):
    """``model`` launched on Headroom's engine with ``n_parallel`` slots (over one pool: ``unified``),
    and one chat turn ("Hello") answered; the chat panel."""
    _engine(window, engine_build, qtbot)
    window.settings.n_parallel.setValue(n_parallel)
    window.settings.kv_unified.setChecked(unified)
    assert window.open_model(model)
    with qtbot.waitSignal(window.launch.engineReady, timeout=180_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    chat = window.chat
    chat.max_tokens.setValue(max_tokens)
    chat.message.setText("Hello")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000):
        qtbot.mouseClick(chat.send_button, LEFT)
    return chat


def _child_probe(code: str):
    """Pass 1 through a real child process running ``code`` instead of the probe worker."""
    worker = [sys.executable, "-c", code]

    def probe(model: Path, settings: LaunchSettings, cancel: threading.Event) -> tuple[Measurement, bool]:
        return measure(model, settings, worker=worker, cancel=cancel), False

    return probe


@pytest.mark.engine
def test_a_failed_pass_1_refuses_the_launch_as_serve_does(window, tiny_model, engine_build, qtbot):
    """One rule for the CLI and the window (issue 28/29): ``headroom serve`` refuses a launch whose pass 1
    failed, and so does Launch, with the same sentence and pass 1's reason; nothing runs."""
    _engine(window, engine_build, qtbot)
    # pass 1 unavailable: its child exits at once without a word (as a missing probe library would)
    window.measure.probe = _child_probe("import sys; sys.stdin.read(); sys.exit(3)")
    assert window.open_model(tiny_model)
    assert window.plan is not None
    with qtbot.waitSignal(window.measure.failed, timeout=180_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
        assert window.launch.status.text() == MEASURING_FIRST and not window.measure.busy.isHidden()
        assert not window.launch.progress.isHidden() and not window.measure.cancel_button.isHidden()
        assert not window.launch.launch_button.isEnabled()  # one Launch at a time
    assert window.error_message.startswith("Pass 1 failed")  # said where pass 1's errors are said
    status = window.launch.status.text()
    assert status.startswith("Engine: refused: pass 1 failed, so the engine is not launched: "), status
    assert "the probe exited with status 3" in status
    assert window.current.running is None and window.launch.progress.isHidden()
    assert window.launch.launch_button.isEnabled()  # the user can change a setting and try again


@pytest.mark.engine
def test_cancel_during_launchs_pass_1_launches_nothing(window, tiny_model, engine_build, qtbot):
    _engine(window, engine_build, qtbot)
    window.measure.probe = _child_probe("import sys, time; sys.stdin.read(); time.sleep(60)")
    assert window.open_model(tiny_model)
    with qtbot.assertNotEmitted(window.launch.runStarted, wait=0):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
        assert window.measure.running
        qtbot.mouseClick(window.measure.cancel_button, LEFT)
    assert window.launch.status.text() == MEASURE_CANCELLED and window.launch.progress.isHidden()
    assert window.current.running_engine is None and window.launch.launch_button.isEnabled()
    qtbot.waitUntil(lambda: not window.measure.stopping, timeout=30_000)


@pytest.mark.engine
def test_another_model_starts_with_an_empty_chat_sessions_and_console(window, tiny_chat_model, tiny_model,
                                                                       engine_build, qtbot):
    chat = _launched_and_greeted(window, engine_build, qtbot, tiny_chat_model, n_parallel=2, max_tokens=4)
    chat.message.setText("Fork me")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000):
        qtbot.mouseClick(chat.fork_button, LEFT)
    window.sessions.prompt.setText("Once upon a time")
    with qtbot.waitSignal(window.sessions.turnDone, timeout=120_000):
        qtbot.mouseClick(window.sessions.fork_button, LEFT)
    assert chat.columns and "Hello" in chat.view.toPlainText() and window.sessions.chosen.count() == 2
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert "Launch again to continue it" in chat.status.text()  # the same model: the chat is kept
    assert "llama" in window.console.text()
    assert window.open_model(tiny_model)  # another model, no engine running
    assert chat.view.toPlainText() == "" and not chat.columns and chat.forks.isHidden()
    assert chat.status.text() == ANOTHER_MODEL and "continue" not in chat.status.text().lower()
    assert window.sessions.chosen.count() == 0 and window.sessions.text.toPlainText() == ""
    assert "continue" not in window.sessions.result.text().lower()
    assert window.console.text() == ""  # the last run's log was the other model's


@pytest.mark.engine
def test_a_fork_of_3_at_1366x768_leaves_each_reply_and_the_chat_room_to_read(window, tiny_chat_model, engine_build,
                                                                              qtbot):
    """The walkthrough's fork (-np 3, no -kvu) at 1366×768: each reply box showed one line of reply (its
    numbers took the other four), the chat ~80 px. Now the plan gives way while the fork shows: the chat
    and each reply get more than FORK_LINES lines, the numbers under the box, the plan back after."""
    window.resize(1366, 768)
    chat = _launched_and_greeted(window, engine_build, qtbot, tiny_chat_model, n_parallel=3, max_tokens=8,
                                 unified=False)
    chat.k.setValue(3)
    chat.message.setText("Tell me three ways")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000):
        qtbot.mouseClick(chat.fork_button, LEFT)
    qtbot.waitUntil(lambda: len(chat.columns) == 3 and all(c.isVisible() for c in chat.columns))
    tall = lines_tall(chat.view, FORK_LINES + 1)
    qtbot.waitUntil(lambda: chat.view.height() >= tall and all(c.text.height() >= tall for c in chat.columns))
    for col in chat.columns:
        assert "tokens/s" not in col.text.toPlainText()  # the box holds the reply; its numbers under it
        assert col.stats.text().endswith(" tok/s") and "prompt tokens reused" in col.stats.toolTip()
    plan_height = window.vsplit.sizes()[0]
    chat.keep_reply(0)
    qtbot.waitUntil(lambda: window.vsplit.sizes()[0] > plan_height)  # no fork: the plan has its room back
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)


@pytest.mark.engine
def test_a_fork_at_1400x900_leaves_the_chat_and_each_reply_room_to_read(window, tiny_chat_model, engine_build,
                                                                         qtbot):
    window.resize(1400, 900)
    chat = _launched_and_greeted(window, engine_build, qtbot, tiny_chat_model, n_parallel=3, max_tokens=8)
    chat.k.setValue(3)
    chat.message.setText("Tell me three ways")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000):
        qtbot.mouseClick(chat.fork_button, LEFT)
    qtbot.waitUntil(lambda: len(chat.columns) == 3 and all(c.isVisible() for c in chat.columns))
    tall = lines_tall(chat.view, FORK_LINES)
    assert chat.view.height() >= tall, (chat.view.height(), tall)
    assert all(c.text.height() >= tall for c in chat.columns), [c.text.height() for c in chat.columns]
    assert window.vsplit.widget(0).height() >= 300  # the plan above keeps a readable share
    chat.keep_reply(0)
    assert chat.view.minimumHeight() < tall  # no fork on screen: the chat gives the room back
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)


def test_the_budget_legend_wraps_between_entries_at_1280x800(no_gpu_window, shape_model, qtbot):
    window = no_gpu_window
    window.resize(1280, 800)
    window.devices.choose_simulated("RTX 4090")
    with qtbot.waitSignal(window.planned):
        assert window.open_model(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    legend = window.budget.legend
    qtbot.waitUntil(legend.isVisible)
    text = legend.text()
    assert text.count("■</span>&nbsp;") == text.count("■") >= 8  # each swatch held to its label
    right = legend.mapTo(window.plan_scroll.viewport(), legend.rect().topRight()).x()
    assert right <= window.plan_scroll.viewport().width()  # not cut at the right edge
