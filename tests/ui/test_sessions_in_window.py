"""Shared sessions from the window, on the real engine (tiny model, CPU): fork, continue, smoke."""

from __future__ import annotations

import pytest

from app.sessions.store import Session, SessionStore
from app.ui.qt import Qt, QTabWidget

LEFT = Qt.MouseButton.LeftButton


def _shown(text: str) -> str:
    """The text as a text box shows it: line breaks of any kind (the tiny model's random bytes
    include \r) are one break."""
    return "\n".join(text.splitlines())


@pytest.mark.engine
def test_fork_three_sessions_then_continue_one(window, tiny_model, engine_build, qtbot):
    assert not window.sessions.fork_button.isEnabled()  # no engine yet, and it says why
    assert "Launch the engine" in window.sessions.result.text()
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    paths = [e.path for e in found.args[0]]
    window.settings.engine.setCurrentIndex(paths.index(str(engine_build.server)))
    window.settings.n_parallel.setValue(3)
    window.settings.kv_unified.setChecked(True)
    assert window.open_model(tiny_model)
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert window.sessions.fork_button.isEnabled()
    assert window.sessions.k.maximum() == 3
    # A session the CLI makes on this engine meanwhile (the window's store is the CLI's file)
    cli = SessionStore(window.sessions.base_url, window.state_file.parent)
    cli.put(Session("cli1", None, "made in a terminal"))
    tabs = window.chat.parentWidget().parentWidget()
    assert isinstance(tabs, QTabWidget) and tabs.tabText(1) == "Shared sessions"
    tabs.setCurrentIndex(1)  # the tab shown: what the store holds now
    assert "cli1" in [window.sessions.chosen.itemText(i) for i in range(window.sessions.chosen.count())]
    window.sessions.prompt.setText("Once upon a time")
    window.sessions.k.setValue(3)
    with qtbot.waitSignal(window.sessions.turnDone, timeout=120_000) as done:
        qtbot.mouseClick(window.sessions.fork_button, LEFT)
    result = done.args[0]
    assert result.ok, result.error
    assert [s.name for s in result.sessions] == ["s1", "s2", "s3"]
    assert window.sessions.chosen.count() == 4  # s1–s3 and the CLI's
    assert str(result.proof) in window.sessions.result.text()
    assert "prompt evaluated once, shared by 3" in window.sessions.result.text()
    assert _shown(window.sessions.text.toPlainText()) == _shown(result.sessions[0].text)
    window.sessions.chosen.setCurrentText("s2")
    window.sessions.prompt.setText(" and then")
    with qtbot.waitSignal(window.sessions.turnDone, timeout=120_000) as cont:
        qtbot.mouseClick(window.sessions.continue_button, LEFT)
    s2 = cont.args[0].sessions[0]
    assert s2.name == "s2" and s2.turns == 2
    assert s2.text.startswith(result.sessions[1].text + " and then")
    assert _shown(window.sessions.text.toPlainText()) == _shown(s2.text)
    cli.reload()  # the window's fork and continue kept the CLI's session
    assert set(cli.sessions) == {"cli1", "s1", "s2", "s3"} and cli.sessions["s2"].turns == 2
    # A store file broken meanwhile: the fork says so before it sends anything, and the window does
    # not write over a file it cannot read.
    cli.path.write_text("{not json")
    window.sessions.prompt.setText("Once more")
    qtbot.mouseClick(window.sessions.fork_button, LEFT)
    assert "is unreadable" in window.sessions.result.text() and "move it aside" in window.sessions.result.text()
    assert cli.path.read_text() == "{not json" and window.sessions.fork_button.isEnabled()
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert not window.sessions.fork_button.isEnabled()


@pytest.mark.engine
def test_an_engine_with_one_slot_offers_no_fork_and_says_why(window, tiny_model, engine_build, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    window.settings.engine.setCurrentIndex([e.path for e in found.args[0]].index(str(engine_build.server)))
    assert window.open_model(tiny_model)
    assert window.settings.n_parallel.value() == 1
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, Qt.MouseButton.LeftButton)
    panel = window.sessions
    assert panel.prompt.isEnabled()  # the engine is up
    assert not panel.fork_button.isEnabled() and not panel.smoke_button.isEnabled()
    assert not panel.continue_button.isEnabled()  # no session yet to continue
    assert "has 1 slot" in panel.result.text() and "Parallel sessions" in panel.result.text()
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, Qt.MouseButton.LeftButton)
    assert "Launch the engine" in panel.result.text()
