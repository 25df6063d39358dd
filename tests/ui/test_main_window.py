"""The window end to end (offscreen): pick a model, move the context, see the planner's numbers."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from app.machine.calibrate import machine_speed
from app.planner import words
from app.planner.gguf.model import read_shape
from app.planner.plan_types import Plan, PlanMode
from app.planner.solve.plan import make_plan
from app.planner.units import MiB
from app.ui.budget_view import GPU_PARTS
from app.ui.context_control import ctx_to_pos
from app.ui.main_window import MainWindow
from app.ui.qt import QCheckBox, QLabel, QPushButton, Qt
from app.ui.state import UiState, load_state
from tests.ui.windows import gpus_read

K = 1024
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


def _expected(window: MainWindow, path: Path) -> Plan:
    """What the planner itself says for the window's current inputs (with this machine's speed
    figures, as the window and ``headroom plan`` predict tokens/s with them)."""
    return make_plan(read_shape(path), window.current.inventory, window.settings.settings(),
                     engine_window=False, measurement=None, safety=256 * MiB, vram_target=None,
                     speed=machine_speed(window.current.inventory))


def test_no_driver_is_said_plainly_and_planning_still_works(window, shape_model, qtbot):
    assert not window.devices.notice.isHidden()
    assert "no NVIDIA driver" in window.devices.notice.text()
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))
    plan = sig.args[0]
    assert plan.mode == PlanMode.CPU and plan.gpus == ()
    assert "Host RAM" in window.budget.host_row.title.text()


def test_slider_replans_to_the_planners_numbers(window, shape_model, qtbot):
    path = shape_model(LLAMA8B)
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(path)
    assert "simulated" in window.budget.rows[0].title.text()
    seen = []
    for ctx in (16 * K, 64 * K):
        with qtbot.waitSignal(window.planned) as sig:
            window.settings.context.slider.setValue(ctx_to_pos(ctx))
        plan = sig.args[0]
        expected = _expected(window, path)
        assert plan == expected
        assert plan.launch.n_ctx == ctx
        bar = {s.key: s.size for s in window.budget.rows[0].bar.segments}
        assert bar == {k: expected.gpus[0].part(k) for k, _l, _c in GPU_PARTS if expected.gpus[0].part(k) > 0}
        assert window.budget.window_numbers.text() == words.kv_placement(expected)
        seen.append(expected.gpus[0].kv_resident)
    assert seen[1] > seen[0]  # the KV window segment grew with the context


def test_typed_context_and_tooltips_name_their_source(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(LLAMA8B))
    with qtbot.waitSignal(window.planned) as sig:
        window.settings.context.entry.setText("24k")
        qtbot.keyClick(window.settings.context.entry, Qt.Key.Key_Return)
    assert sig.args[0].launch.n_ctx == 24 * K
    bar = window.budget.rows[0].bar
    tips = {s.key: s.tooltip for s in bar.segments}
    assert "from the GGUF" in tips["weights"]
    assert "estimated" in tips["compute"]  # no pass 1 yet, and it says so
    rect, seg = bar.segment_rects()[1]
    assert bar.segment_at(rect.center().x()) == seg


def test_infeasible_plan_is_red_with_the_reason_and_a_way_out(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    window.settings.set_engine_window(True)  # the rolling window: the tail must fit in host RAM
    assert window.open_model(shape_model(LLAMA8B))
    with qtbot.waitSignal(window.planned) as sig:
        window.settings.context.set_value(1024 * K, emit=True)
    plan = sig.args[0]
    assert not plan.feasible and plan.mode == PlanMode.WINDOW
    assert "Does not fit" in window.budget.verdict.text()
    assert plan.reason in window.budget.verdict.text()
    assert "d62728" in window.budget.verdict.styleSheet()
    assert window.budget.host_row.bar.over  # the host bar is the one drawn over its edge
    assert not window.budget.alternative.isHidden()
    with qtbot.waitSignal(window.planned) as sig2:
        qtbot.mouseClick(window.budget.alternative, Qt.MouseButton.LeftButton)
    fixed = sig2.args[0]
    assert fixed.feasible and fixed.launch.n_ctx < 1024 * K
    assert window.settings.context.value() == fixed.launch.n_ctx
    assert "Fits" in window.budget.verdict.text()


def test_stock_plan_that_moved_away_from_the_settings_says_so(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(LLAMA8B))
    with qtbot.waitSignal(window.planned) as sig:
        window.settings.context.set_value(512 * K, emit=True)
    plan = sig.args[0]
    assert plan.launch.n_ctx != 512 * K  # the planner chose an alternative
    assert "512k does not fit as set" in window.budget.verdict.text()  # and what was planned instead
    with qtbot.waitSignal(window.planned) as sig2:
        qtbot.mouseClick(window.budget.alternative, Qt.MouseButton.LeftButton)
    assert window.settings.settings() == plan.launch
    assert (sig2.args[0].launch, sig2.args[0].gpus) == (plan.launch, plan.gpus)  # same numbers, now as set
    assert window.budget.verdict.text().startswith("<b>Fits</b>")


def test_largest_context_that_fits_is_shown_and_usable(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(LLAMA8B))
    fit = window.current.fit
    assert fit is not None
    assert fit.resident > 0
    with qtbot.waitSignal(window.planned) as sig:
        qtbot.mouseClick(window.settings.context.fits, Qt.MouseButton.LeftButton)
    assert sig.args[0].launch.n_ctx == fit.resident
    assert sig.args[0].feasible


def test_corrupt_gguf_shows_its_message(window, corrupt_gguf, qtbot):
    with qtbot.waitSignal(window.errorShown) as sig:
        assert not window.open_model(corrupt_gguf)
    assert "broken.gguf" in sig.args[0]
    assert not window.error.isHidden()
    assert window.error.text() == sig.args[0]


def test_remembers_geometry_last_model_and_settings(qtbot, tmp_path, shape_model):
    state_file = tmp_path / "state.json"
    path = shape_model(LLAMA8B)
    w = MainWindow(state=UiState(), persist=True, state_file=state_file)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    width = w.minimumSizeHint().width() + 4
    assert width <= 800  # the window fits an 800-pixel-wide screen (the offscreen one is)
    w.resize(width, 640)
    size = (w.width(), w.height())
    assert w.open_model(path)
    w.settings.context.set_value(96 * K, emit=True)
    w.close()
    saved = load_state(state_file)
    assert saved.last_model == str(path)
    assert saved.recent[0] == str(path)
    assert saved.launch_settings().n_ctx == 96 * K
    w2 = MainWindow(state_file=state_file, persist=False)
    gpus_read(qtbot, w2)
    qtbot.addWidget(w2)
    assert w2.settings.context.value() == 96 * K
    assert (w2.width(), w2.height()) == size  # restored from the saved geometry


def test_every_control_is_keyboard_reachable(window):
    s = window.settings
    for w in (s.context.slider, s.context.entry, s.type_k, s.type_v, s.n_parallel, s.n_ubatch,
              s.flash_attn, window.measure.button, window.launch.launch_button):
        assert w.focusPolicy() & Qt.FocusPolicy.TabFocus, w


def test_a_bad_file_is_named_once_and_its_message_goes_when_a_model_opens(window, corrupt_gguf,
                                                                          shape_model):
    assert not window.open_model(corrupt_gguf)
    assert window.error.text().count(corrupt_gguf.name) == 1
    assert window.statusBar().currentMessage() == window.error.text()
    assert window.open_model(shape_model(LLAMA8B))
    assert window.error.isHidden()
    assert window.statusBar().currentMessage() == ""  # the stale error does not linger for 10 s


def test_every_alt_letter_reaches_one_control(window):
    letters: list[str] = [a.text() for a in window.menuBar().actions()]
    letters += [b.text() for kind in (QPushButton, QCheckBox) for b in window.findChildren(kind)]
    letters += [lab.text() for lab in window.findChildren(QLabel) if lab.buddy() is not None]
    found = [m.group(1).lower() for t in letters for m in re.finditer(r"(?<!&)&([A-Za-z0-9])", t)]
    assert len(found) > 15
    assert [k for k, n in Counter(found).items() if n > 1] == []


def test_alt_m_measures_and_alt_i_reaches_the_micro_batch(window, tiny_model, qtbot):
    assert window.open_model(tiny_model)
    window.settings.set_advanced_open(True)  # the flags' mnemonics work where the flags are shown
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_I, Qt.KeyboardModifier.AltModifier)
    assert window.settings.n_ubatch.hasFocus()
    with qtbot.waitSignal(window.measure.button.clicked):
        qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.AltModifier)
    window.measure.cancel()
