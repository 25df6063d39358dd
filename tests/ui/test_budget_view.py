"""The budget bars as a user meets them: hover tooltips per segment, the system palette, drops."""

from __future__ import annotations

from app.planner.units import Bytes
from app.ui.qt import (
    QApplication,
    QColor,
    QDropEvent,
    QEvent,
    QHelpEvent,
    QMimeData,
    QPalette,
    QPointF,
    Qt,
    QToolTip,
    QUrl,
)

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


def _planned(window, shape_model, qtbot):
    window.devices.simulate.setCurrentText("RTX 4090")
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))
    return sig.args[0]


def test_hovering_a_segment_says_its_size_and_where_it_came_from(window, shape_model, qtbot):
    plan = _planned(window, shape_model, qtbot)
    bar = window.budget.rows[0].bar
    rect = next(r for r, s in bar.segment_rects() if s.key == "weights")
    pos = rect.center().toPoint()
    QApplication.sendEvent(bar, QHelpEvent(QEvent.Type.ToolTip, pos, bar.mapToGlobal(pos)))
    qtbot.waitUntil(lambda: QToolTip.isVisible(), timeout=2_000)
    assert QToolTip.text() == f"Weights: {Bytes(plan.gpus[0].weights)}\nfrom the GGUF"
    QToolTip.hideText()


def test_free_space_follows_the_system_palette(window, shape_model, qtbot):
    _planned(window, shape_model, qtbot)
    bar = window.budget.rows[0].bar
    bar.resize(600, 30)
    rect, seg = bar.segment_rects()[-1]
    assert seg.key == "free"
    for base in ("#202124", "#ffffff"):  # a dark and a light theme
        pal = bar.palette()
        pal.setColor(QPalette.ColorRole.Base, QColor(base))
        bar.setPalette(pal)
        img = bar.grab().toImage()
        x = int(rect.right()) - 3
        assert QColor(img.pixel(x, 15)).name() == base


def test_dropping_a_gguf_on_the_window_opens_it(window, shape_model, qtbot):
    path = shape_model(LLAMA8B)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    drop = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.planned):
        window.dropEvent(drop)
    assert window.model_path == path
    assert path.name in window.model_label.text()


def test_recent_models_reopen_from_the_menu(window, shape_model, tiny_model, qtbot):
    big = shape_model(LLAMA8B)
    assert window.open_model(big)
    assert window.open_model(tiny_model)
    actions = window.recent_menu.actions()
    assert [a.text() for a in actions] == [str(tiny_model), str(big)]
    with qtbot.waitSignal(window.planned):
        actions[1].trigger()
    assert window.model_path == big
