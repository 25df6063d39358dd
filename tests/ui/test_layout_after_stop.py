"""The window at 1366×768 keeps its place across a launch and a Stop: the left column grows no scrollbar
and the Measure / Launch / Stop buttons do not move (a newcomer's walkthrough saw both after Stop)."""

from __future__ import annotations

from app.ui.qt import QApplication, Qt, QWidget
from tests.ui.test_plan_pane import show_at
from tests.ui.windows import choose_engine

LEFT = Qt.MouseButton.LeftButton


def _where(w: QWidget, window: QWidget) -> tuple[int, int]:
    p = w.mapTo(window, w.rect().topLeft())
    return p.x(), p.y()


def test_a_launch_and_stop_leave_the_left_column_and_its_buttons_where_they_were(window, tiny_model, engine_build,
                                                                                   qtbot):
    choose_engine(qtbot, window, engine_build.server)
    assert window.open_model(tiny_model)
    window.settings.context.set_value(4096, emit=True)
    show_at(window, qtbot, 1366, 768)
    buttons = (window.measure.button, window.launch.launch_button, window.launch.stop_button)
    before = [_where(b, window) for b in buttons]
    bar_before = window.left_scroll.verticalScrollBar().isVisible()
    with qtbot.waitSignal(window.launch.checked, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    QApplication.processEvents()
    qtbot.wait(200)
    after = [_where(b, window) for b in buttons]
    assert window.left_scroll.verticalScrollBar().isVisible() == bar_before
    assert after == before
