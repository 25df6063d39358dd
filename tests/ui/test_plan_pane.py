"""The window as the round-5 UX review met it: a settings error leaves no plan to launch (the last
picture greyed under "No plan: …"); Measure / Launch / Stop and the whole plan pane stay in view at
1024×700; pass 1 on the CPU says the GPU compute is still estimated, its caveat said once; after Stop
the check and the command say they were the last run; an empty window says how to start."""

from __future__ import annotations

from app.planner.plan_types import PlanMode
from app.ui.budget_view import EMPTY_HINT
from app.ui.context_control import tokens_text
from app.ui.main_window import MainWindow
from app.ui.qt import (
    QApplication,
    QLabel,
    Qt,
    QWidget,
)
from app.ui.window_layout import PLAN_SHARE

GEMMA = "gemma-3-12b-it-q4_k_m"
LEFT = Qt.MouseButton.LeftButton
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
QWEN14_1M = "qwen2.5-14b-instruct-1m-q8_0"


def seen(w: QWidget) -> bool:
    """On screen and not scrolled or cut away: some of it is drawn."""
    return w.isVisible() and not w.visibleRegion().isEmpty()


def plan_gemma_on_h200(window: MainWindow, shape_model) -> None:
    window.devices.choose_simulated("H200")
    assert window.open_model(shape_model(GEMMA))
    window.settings.type_k.setCurrentText("q8_0")
    window.settings.type_v.setCurrentText("q8_0")
    assert window.plan is not None and window.plan.feasible
    assert window.launch.launch_button.isEnabled()


def assert_no_plan(window: MainWindow, why: str) -> None:
    budget = window.budget
    assert seen(budget.notice) and budget.notice.text().startswith("<b>No plan</b>")
    assert why in budget.notice.text()
    assert "Fits" not in budget.verdict.text() and not budget.verdict.isEnabled()
    assert not budget.options.isEnabled()  # "as set (planned) fits" is greyed, its Use buttons off
    assert not any(b.isEnabled() for b in budget.options.buttons)
    assert not budget.rows[0].bar.isEnabled() and budget.alternative.isHidden()
    assert not window.launch.launch_button.isEnabled()
    assert why in window.launch.launch_button.toolTip()
    assert window.plan is None


def test_a_settings_error_leaves_nothing_to_launch_until_it_is_fixed(window, shape_model, corrupt_gguf,
                                                                      qtbot):
    plan_gemma_on_h200(window, shape_model)
    window.settings.flash_attn.setCurrentText("off")  # a quantized V cache needs flash attention
    assert "requires flash attention" in window.error.text()
    assert_no_plan(window, "requires flash attention")
    assert not window.open_model(corrupt_gguf)  # the error line now names the file …
    assert corrupt_gguf.name in window.error.text()
    assert_no_plan(window, "requires flash attention")  # … and the pane still says the settings plan nothing
    with qtbot.waitSignal(window.planned):
        window.settings.flash_attn.setCurrentText("on")
    assert window.budget.notice.isHidden() and window.budget.verdict.text().startswith("<b>Fits</b>")
    assert window.budget.options.isEnabled() and window.launch.launch_button.isEnabled()
    assert window.launch.launch_button.toolTip() == ""


def test_a_context_that_is_not_a_number_plans_nothing(window, shape_model, qtbot):
    plan_gemma_on_h200(window, shape_model)
    window.settings.context.entry.setText("abc")
    window.settings.context.entry.editingFinished.emit()
    assert_no_plan(window, "context")
    with qtbot.waitSignal(window.planned):  # the same context as before, typed again: planned again
        window.settings.context.entry.setText("32k")
        window.settings.context.entry.editingFinished.emit()
    assert window.budget.notice.isHidden() and window.launch.launch_button.isEnabled()


def show_at(window: MainWindow, qtbot, width: int, height: int) -> None:
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width and window.height() == height)
    QApplication.processEvents()


def test_at_1024x700_launch_stop_and_the_plan_pane_are_all_in_view(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(QWEN14_1M))
    with qtbot.waitSignal(window.planned):
        window.settings.context.set_value(1 << 20, emit=True)  # long warnings, a long verdict, options
    show_at(window, qtbot, 1024, 700)
    for w in (window.measure.button, window.launch.launch_button, window.launch.stop_button,
              window.launch.endpoint, window.launch.copy_button):
        qtbot.waitUntil(lambda w=w: seen(w))
    scroll = window.plan_scroll
    assert not scroll.horizontalScrollBar().isVisible()
    assert window.budget.width() <= scroll.viewport().width()  # nothing cut off to the right
    bar = window.budget.rows[0].bar
    assert bar.mapTo(window.budget, bar.rect().topRight()).x() < scroll.viewport().width()  # the free end
    assert not window.left_scroll.horizontalScrollBar().isVisible()
    form = window.left_scroll.widget()
    assert form.width() >= form.minimumSizeHint().width()  # the form is not cut off at the right
    top, bottom = window.vsplit.sizes()  # the engine log and sessions take the lesser part
    assert top >= PLAN_SHARE * (top + bottom)
    # the option notes wrap at sentence width, not one word per line
    note = next(lab for lab in window.budget.options.findChildren(QLabel) if lab.text().startswith("every KV"))
    assert note.width() > note.fontMetrics().horizontalAdvance("every KV cell")


def test_an_empty_window_says_how_to_start_and_shows_no_legend(window, tiny_model, qtbot):
    budget = window.budget
    assert seen(budget.notice) and budget.notice.text() == EMPTY_HINT
    assert "Open a GGUF model" in EMPTY_HINT and "Hugging Face" in EMPTY_HINT and "demo" in EMPTY_HINT
    assert budget.legend.isHidden() and budget.host_row.isHidden()  # no empty bar, no 10-item legend
    assert not window.launch.launch_button.isEnabled()  # nothing to launch yet, and it says so
    assert "Open a model first" in window.launch.launch_button.toolTip()
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    assert budget.notice.isHidden() and seen(budget.legend) and seen(budget.host_row)
    assert window.launch.launch_button.isEnabled()


def test_every_jargon_setting_and_legend_entry_explains_itself(window, shape_model, qtbot):
    s = window.settings
    for w, word in ((s.type_k, "quality"), (s.type_v, "flash attention"), (s.kv_unified, "shared"),
                    (s.nkvo, "host RAM"), (s.n_ubatch, "prompt tokens"), (s.flash_attn, "attention"),
                    (s.safety, "free"), (s.vram_target, "VRAM"), (s.n_parallel, "requests")):
        assert word in w.toolTip(), w.accessibleName()
    assert "DOMAIN" not in window.sessions.smoke_button.toolTip()
    window.devices.choose_simulated("H200")
    with qtbot.waitSignal(window.planned):
        assert window.open_model(shape_model(GEMMA))
    tip = window.budget.legend.toolTip()
    for entry in ("Overhead: ", "Driver reserve: ", "Pinned compute: "):
        assert entry in tip
    safety = next(seg for seg in window.budget.rows[0].bar.segments if seg.key == "safety")
    assert safety.tooltip.endswith("your setting") and "given" not in safety.tooltip


def test_a_largest_context_at_the_trained_context_says_all_of_it_fits(window, tiny_model, qtbot):
    """The search stops at the trained context: "largest that fits: 4,096", not "≥ 4,096" (more than
    the model was trained for is no use); why it stopped there on hover."""
    window.devices.choose_simulated("H200")
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    fits = window.settings.context.fits
    trained = tokens_text(window.current.fit.n_ctx_train)
    assert fits.text().startswith(f"largest that fits: {trained} ") and fits.text().endswith("fully on GPU")
    said = f"all of its trained {trained} fits; searched no further"  # not "fits beyond its trained"
    assert said in fits.toolTip()
    row = window.budget.options.rows[0]
    assert row.label.startswith("Largest context fully on GPU") and said in row.note and "beyond" not in row.note


def test_options_table_lists_largest_contexts_and_applies_one(window, qtbot):
    window.open_demo()  # Qwen2.5-7B-1M shape, simulated 24 GB card, 512k, rolling window
    plan = window.plan
    assert plan is not None
    assert plan.mode == PlanMode.WINDOW and plan.launch.n_ctx == 512 * 1024
    fit = window.current.fit
    assert fit is not None
    view = window.budget.options
    assert not view.isHidden()
    assert [(r.label, r.fits) for r in view.rows] == [
        (f"Largest context fully on GPU: {tokens_text(fit.resident)}", True),
        (f"Largest context with a host tail: {tokens_text(fit.with_tail)}", True),
        (f"Trained context: {tokens_text(fit.n_ctx_train)}", fit.n_ctx_train <= fit.with_tail)]
    assert [b.isEnabled() for b in view.buttons] == [True, True, fit.n_ctx_train <= fit.with_tail]
    with qtbot.waitSignal(window.planned) as again:
        qtbot.mouseClick(view.buttons[1], LEFT)  # the largest context with a host tail
    assert again.args[0].launch.n_ctx == fit.with_tail and again.args[0].feasible
    assert window.settings.context.value() == fit.with_tail
    assert view.rows[1].current and not view.buttons[1].isEnabled()  # it is the plan now


def test_options_table_lists_the_planners_alternatives(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    window.settings.context.set_value(1024 * 1024)
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))
    plan = sig.args[0]
    assert plan.alternatives  # stock mode priced -nkvo, a shorter context...
    rows = window.budget.options.rows[-len(plan.alternatives):]
    assert [(r.label, r.fits, r.note) for r in rows] == [(a.label, a.feasible, a.note) for a in plan.alternatives]
