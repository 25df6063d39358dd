"""The budget bars as a user meets them: hover tooltips per segment, the system palette, drops."""

from __future__ import annotations

import re

from app.planner.plan_types import PlanMode
from app.planner.units import Bytes, GiB, format_tokens
from app.ui.budget_view import GPU_PARTS, HOST_PARTS, legend_entries
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

QWEN14_1M = "qwen2.5-14b-instruct-1m-q8_0"
#: Five or more digits in a row: a token count printed without thousands separators.
BARE_NUMBER = re.compile(r"(?<![\d,.])\d{5,}(?![\d,.])")
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


def _planned(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
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


def test_no_two_legend_entries_share_a_colour():
    entries = legend_entries()
    assert len(set(entries.values())) == len(entries)
    assert {label for _k, label, _c in GPU_PARTS + HOST_PARTS} | {"Driver reserve"} == set(entries)


def test_without_a_gpu_the_cpu_plan_reads_as_fitting(no_gpu_window, shape_model, qtbot):
    w = no_gpu_window
    with qtbot.waitSignal(w.planned) as sig:
        assert w.open_model(shape_model(LLAMA8B))
    plan = sig.args[0]
    assert plan.mode == PlanMode.CPU and plan.feasible and plan.gpus == ()
    assert w.budget.verdict.text().startswith("<b>Fits</b>")  # not "Does not fit as set"
    assert "no GPU" in w.budget.verdict.text()
    assert w.budget.alternative.isHidden()  # nothing to apply: the CPU is the only way here
    assert w.settings.context.fits.text().endswith("in host RAM")  # not "fully on GPU"
    assert "fully on GPU" not in w.budget.options.rows[0].label
    assert "host tail" not in w.budget.window_numbers.text()
    assert "kv host tail" not in w.budget.host_row.caption.text()
    assert f"kv cache {Bytes(plan.host.kv_tail)}" in w.budget.host_row.caption.text()
    assert w.budget.window_numbers.text() == f"KV cache: all {format_tokens(plan.tail_cells)} cells in host RAM (no GPU)"
    assert w.launch.launch_button.isEnabled()


def test_token_counts_carry_thousands_separators(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(QWEN14_1M))
    assert "trained for 1,010,000 tokens" in window.model_label.text()
    window.settings.set_engine_window(True)
    window.settings.context.entry.setText("1M")
    with qtbot.waitSignal(window.planned):
        window.settings.context.entry.editingFinished.emit()
    assert not window.budget.alternative.isHidden()
    # The label's first line is the file name, whose generated digest may hold a run of digits.
    shown = [window.model_label.text().split("<br>", 1)[1], window.budget.alternative.text(),
             window.budget.window_numbers.text(), window.settings.context.fits.text()]
    assert not [t for t in shown if BARE_NUMBER.search(t)], shown


def test_a_simulated_cards_reserve_is_not_called_other_apps(window, shape_model):
    window.devices.choose_simulated("H200")
    assert window.open_model(shape_model(LLAMA8B))
    reserve = window.plan.gpus[0].other_processes if window.plan else 0
    assert reserve > 0  # the recorded H200: the driver keeps 615 MiB
    caption = window.budget.rows[0].caption.text()
    assert f"driver reserve {Bytes(reserve)}" in caption and "other apps" not in caption
    seg = next(s for s in window.budget.rows[0].bar.segments if s.key == "other_processes")
    assert "kept by the driver" in seg.tooltip


def test_the_vram_target_is_drawn_on_the_bar(window, shape_model, qtbot):
    window.devices.choose_simulated("H200")
    assert window.open_model(shape_model(LLAMA8B))
    with qtbot.waitSignal(window.planned):
        window.settings.vram_target.setValue(40 * 1024)
    row = window.budget.rows[0]
    assert f"VRAM target {Bytes(40 * GiB)}" in row.title.text()
    bar = row.bar
    img = bar.grab().toImage()
    x = int(1.0 + (img.width() - 2.0) * 40 * GiB / bar._scale())
    text = bar.palette().color(QPalette.ColorRole.Text).name()
    assert any(QColor(img.pixel(x, y)).name() == text for y in range(1, img.height() - 1))
    with qtbot.waitSignal(window.planned):
        window.settings.vram_target.setValue(0)
    assert "VRAM target" not in row.title.text() and row.bar.target is None


def test_the_legend_names_only_the_parts_on_the_bars(no_gpu_window, shape_model, qtbot):
    """A CPU plan names no GPU part; a GPU plan names the driver's reserve it draws."""
    w = no_gpu_window
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    text = w.budget.legend.text()
    assert "Mapped weights" in text and "KV cache" in text
    assert "Overhead" not in text and "Safety" not in text and "KV window" not in text
    with qtbot.waitSignal(w.planned):
        w.devices.choose_simulated("H200")
    text = w.budget.legend.text()
    assert "Driver reserve" in text and "Weights" in text and "Overhead" in text


def test_the_speed_column_says_what_it_is_and_how_the_plan_chooses(window, qtbot):
    """A walkthrough saw the planned way at ~2.2 tok/s listed under one at ~3.4: the column is decode
    half-way, and the plan chooses by a whole typical turn (a prompt read, then a reply written)."""
    from app.planner.solve.speed import TURN_PROMPT, TURN_REPLY
    from app.planner.units import round_tokens
    from app.ui.qt import QLabel

    heads = {h.text(): h for h in window.budget.options.findChildren(QLabel) if h.text().startswith("<b>")}
    tip = heads["<b>Speed half-way</b>"].toolTip()
    assert tip.startswith("Decode tokens/s with the context half full.")
    assert f"a {round_tokens(TURN_PROMPT)} prompt read, then {TURN_REPLY} tokens written" in tip
