"""Issue 20's findings in the window, each as a user met it (real widgets, offscreen): the demo and
what follows it, a huge typed context, escaped text shown raw, contradicting words, stale state,
the layout at 1280×860 and 1920×1080, and the cards "Plan for" offers."""

from __future__ import annotations

from dataclasses import replace

from app.engine.advisories import Advisory, Severity
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner import words
from app.planner.plan_types import PlanMode
from app.planner.settings import MAX_CONTEXT, default_context
from app.planner.units import GiB
from app.ui import demo
from app.ui.budget_view import verdict
from app.ui.qt import QApplication, QLabel, Qt, QTextDocument, QWidget
from app.ui.settings_panel import KV_MODES
from app.ui.window_layout import PLAN_HEIGHT

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
QWEN14B_1M = "qwen2.5-14b-instruct-1m-q8_0"
K = 1024
STOCK = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama.cpp/bin/llama-server", "0.5.0-dev", "0c1e570",
                   EngineOrigin.PATH)
OPENCOTI = EngineInfo(EngineKind.OPENCOTI, "/opt/llamafile/opencoti.llamafile", "0.10.5", "unknown",
                      EngineOrigin.LLAMAFILE_DIR)


def seen(w: QWidget) -> bool:
    return w.isVisible() and not w.visibleRegion().isEmpty()


def shown_text(label: QLabel) -> str:
    """What a label draws: its text as rich text when it is rich, else as it is."""
    if label.textFormat() != Qt.TextFormat.RichText:
        return label.text()
    doc = QTextDocument()
    doc.setHtml(label.text())
    return doc.toPlainText()


def show_at(window, qtbot, width: int, height: int) -> None:
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width and window.height() == height)
    QApplication.processEvents()


# ---- the first run ---------------------------------------------------------------------------------

def test_the_demo_says_it_is_the_demo_and_offers_no_launch(window, qtbot):
    window.launch.set_engines([STOCK])
    with qtbot.waitSignal(window.planned):
        assert window.open_demo()
    assert seen(window.demo_banner) and "Demo" in window.demo_banner.text()
    assert "cannot be launched" in shown_text(window.demo_banner)
    assert not window.launch.launch_button.isEnabled()
    assert window.launch.launch_button.toolTip() == demo.DEMO_LAUNCH


def test_a_model_opened_after_the_demo_starts_within_its_training_and_leaves_the_demo(window, shape_model,
                                                                                      tiny_model, qtbot):
    window.launch.set_engines([OPENCOTI])  # the demo can show its rolling window here
    placement = window.settings.engine_window()  # (an opencoti engine first: the window was chosen)
    assert window.open_demo()
    assert window.plan is not None and window.plan.mode == PlanMode.WINDOW
    assert window.plan.launch.n_ctx == demo.DEMO_CONTEXT and window.devices.simulated_choice() == demo.DEMO_GPU
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(tiny_model)  # trained for 4k
    plan = sig.args[0]
    assert plan.launch.n_ctx == 4096 == default_context(4096)  # not the demo's 512k
    assert window.settings.context.value() == 4096
    assert window.devices.simulated_choice() == ""  # the demo's simulated card is gone with it
    assert plan.mode == PlanMode.CPU and window.settings.engine_window() == placement  # and its placement
    assert window.demo_banner.isHidden() and window.launch.launch_button.isEnabled()
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))  # another model, trained for 128k
    assert sig.args[0].launch.n_ctx == 32 * K


def test_the_same_model_again_or_a_first_one_keeps_the_context_set(window, tiny_model, qtbot):
    window.settings.set_context(2048)  # typed before any model
    assert window.open_model(tiny_model)
    assert window.plan is not None and window.plan.launch.n_ctx == 2048
    assert window.open_model(tiny_model)  # the same file again
    assert window.plan is not None and window.plan.launch.n_ctx == 2048


def test_a_placement_the_engine_cannot_realise_is_greyed_with_why(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(LLAMA8B))
    s = window.settings
    window.launch.set_engines([STOCK])
    item = s.kv_mode.model().item(1)
    assert not item.isEnabled()
    assert "needs the opencoti engine" in item.toolTip() and "llama-server" in item.toolTip()
    assert "needs the opencoti engine" in s.kv_mode.toolTip()
    s.set_engine_window(True)  # asked for (the demo does): not shown, not planned
    assert s.kv_mode.currentIndex() == 0 and window.plan is not None and window.plan.mode == PlanMode.STOCK
    assert "Fits — window" not in window.budget.verdict.text()
    window.launch.set_engines([OPENCOTI, STOCK])  # an engine that can: offered, and what was asked is back
    assert item.isEnabled() and item.text() == KV_MODES[1]
    assert s.kv_mode.currentIndex() == 1 and window.plan is not None and window.plan.mode == PlanMode.WINDOW
    s.engine.setCurrentIndex(1)  # the stock one chosen: the plan goes back to what it can launch
    assert window.plan is not None and window.plan.mode == PlanMode.STOCK and not item.isEnabled()


# ---- a huge typed context --------------------------------------------------------------------------

def test_a_huge_typed_context_is_bounded_and_leaves_no_plan_to_launch(window, tiny_model, qtbot):
    assert window.open_model(tiny_model)
    c = window.settings.context
    c.entry.setText("5000000000")
    c.entry.editingFinished.emit()  # no OverflowError: pytest-qt fails a test on an exception in a slot
    assert c.error.isVisible() and f"at most {MAX_CONTEXT:,}" in c.error.text()
    assert window.plan is None and not window.launch.launch_button.isEnabled()
    assert window.budget.notice.text().startswith("<b>No plan</b>") and not window.budget.verdict.isEnabled()
    c.entry.setText(f"{MAX_CONTEXT + 1}")
    c.entry.editingFinished.emit()
    assert window.plan is None and "at most" in c.error.text()
    with qtbot.waitSignal(window.planned):
        c.entry.setText("4k")
        c.entry.editingFinished.emit()
    assert c.error.isHidden()


# ---- escaped text --------------------------------------------------------------------------------

def test_one_warning_with_quotes_reads_as_written(window, tiny_model, qtbot):
    assert window.open_model(tiny_model)
    plan = window.plan
    assert plan is not None
    said = "the CPU backend's copy is \"repacked\" <per layer>"
    window.budget.show_plan(replace(plan, warnings=(said,)))  # one warning: no <br> in its text
    assert shown_text(window.budget.warnings) == f"⚠ {said}"
    one = Advisory("x", Severity.INFO, "the engine's \"cache\"", "it's <kept>", "don't")
    window.sessions.set_advisories([one])
    assert shown_text(window.sessions.advisories) == "the engine's \"cache\": it's <kept> — don't"


# ---- contradictions --------------------------------------------------------------------------------

def test_a_stock_plan_never_speaks_of_a_window(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))
    plan = sig.args[0]
    assert plan.mode == PlanMode.STOCK
    b = window.budget
    assert b.window_numbers.text() == f"KV cache: all {plan.launch.n_ctx:,} cells on the GPU"
    labels = [seg.label for row in b.rows for seg in row.bar.segments]
    assert "KV cache" in labels and "KV window" not in labels
    assert "window" not in shown_text(b.legend).lower() and "window" not in b.rows[0].caption.text().lower()


def test_largest_fit_says_host_tail_only_when_a_tail_buys_more(window, tiny_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    window.launch.set_engines([OPENCOTI])
    window.settings.set_engine_window(True)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    fit = window.current.fit
    assert fit is not None and fit.with_tail == fit.resident  # every cell fits on the card
    text = window.settings.context.fits.text()
    assert "host tail" not in text and text.endswith("fully on GPU")


def test_the_window_with_kvu_is_not_called_does_not_fit(window, tiny_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    s = window.settings
    s.n_parallel.setValue(2)
    s.kv_unified.setChecked(True)  # set for stock llama.cpp
    assert window.open_model(tiny_model)
    window.launch.set_engines([OPENCOTI])  # an opencoti engine first: the rolling window is chosen
    assert s.engine_window()
    assert not s.kv_unified.isEnabled() and not s.kv_unified.isChecked()  # greyed, with why
    assert words.KVU_NOT_WITH_WINDOW in s.kv_unified.toolTip()
    plan = window.plan
    assert plan is not None and plan.mode == PlanMode.WINDOW and plan.feasible
    text = window.budget.verdict.text()
    assert text.startswith("<b>Fits</b>") and "Does not fit" not in text
    # a plan for -kvu as asked (a profile, an older state) says the engine's reason, not "does not fit"
    said = verdict(plan, plan.launch.with_(kv_unified=True), window.current.fit)
    assert said.text.startswith("<b>Fits</b>") and "cannot be combined with -kvu" in said.text
    assert said.settings is None  # nothing to apply: it is already what can run
    s.set_engine_window(False)  # back to stock: -kvu as it was set
    assert s.kv_unified.isEnabled() and s.kv_unified.isChecked()


def test_other_ways_show_their_predicted_speed_and_no_dash_stands_for_nothing(window, shape_model, qtbot):
    """The options table prices each way in tokens/s (issue 30), the whole prediction on hover; a row
    the plan did not price says so, one that does not fit says nothing."""
    window.devices.choose_simulated("RTX 4090")
    window.settings.set_context(1024 * K)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(shape_model(LLAMA8B))
    view = window.budget.options
    shown = list(zip(view.rows, view._widgets, strict=False))
    priced = [(row, w) for row, w in shown if row.predicted is not None and row.fits]
    assert priced and all(w.cost.text().startswith("~") and w.cost.text().endswith(" tok/s") for _r, w in priced)
    assert all("prefill at half context" in w.cost.toolTip() for _r, w in priced)
    assert all(w.cost.text() == "not predicted" for row, w in shown if row.predicted is None and row.fits)
    assert all(w.cost.text() == "" for row, w in shown if not row.fits)
    costs = [w.cost.text() for _r, w in shown]
    assert "–" not in costs and "–" not in window.settings.context.fits.text()


def test_other_apps_says_when_it_was_read(window, shape_model, qtbot):
    assert window.open_model(shape_model(LLAMA8B))
    assert " when planned" in window.budget.host_row.caption.text()
    assert "now" in window.devices.host_card.caption.text()


# ---- layout ----------------------------------------------------------------------------------------

def test_at_1280x860_the_session_text_has_room_and_its_status_sits_below_it(window, qtbot):
    show_at(window, qtbot, 1280, 860)
    panel = window.sessions
    assert panel.text.height() >= 4 * panel.text.fontMetrics().lineSpacing()
    assert panel.text.geometry().bottom() < panel.result.geometry().top()  # below, not over it
    assert panel.result.height() >= panel.result.fontMetrics().lineSpacing()


def test_at_1920x1080_the_extra_height_goes_to_the_log_and_sessions(window, qtbot):
    show_at(window, qtbot, 1280, 860)
    plan_860, log_860 = window.vsplit.sizes()
    show_at(window, qtbot, 1920, 1080)
    plan_1080, log_1080 = window.vsplit.sizes()
    assert plan_860 < plan_1080 <= PLAN_HEIGHT  # the plan up to what it needs, no more …
    assert log_1080 == window.vsplit.height() - window.vsplit.handleWidth() - PLAN_HEIGHT  # … the rest below
    assert log_1080 - log_860 >= 100
    assert not window.left_scroll.verticalScrollBar().isVisible()  # the form is never cut at this size


def test_an_error_does_not_push_the_form_down(window, corrupt_gguf, qtbot):
    show_at(window, qtbot, 1280, 860)
    y = window.settings.mapTo(window, window.settings.rect().topLeft()).y()
    assert not window.open_model(corrupt_gguf)
    QApplication.processEvents()
    assert seen(window.error) and corrupt_gguf.name in window.error.text()
    assert window.settings.mapTo(window, window.settings.rect().topLeft()).y() == y


# ---- plan for ----------------------------------------------------------------------------------------

def test_plan_for_offers_8_to_16_gb_cards_and_takes_a_typed_size(window, tiny_model, qtbot):
    combo = window.devices.simulate
    texts = [combo.itemText(i) for i in range(combo.count())]
    assert any("8.0 GiB" in t for t in texts) and any("12.0 GiB" in t for t in texts)
    assert any("16.0 GiB" in t for t in texts)
    assert window.open_model(tiny_model)
    spec = window.devices.spec
    with qtbot.waitSignal(window.planned) as sig:
        spec.setText("MyCard:12GiB")
        qtbot.keyClick(spec, Qt.Key.Key_Return)
    assert [(g.label, g.total) for g in sig.args[0].gpus] == [("MyCard (simulated)", 12 * GiB)]
    before = window.plan
    spec.setText("MyCard:12")  # a size without a unit, as the CLI refuses it
    qtbot.keyClick(spec, Qt.Key.Key_Return)
    error = window.devices.spec_error
    assert seen(error) and "give a unit" in error.text()
    assert window.plan is before and window.devices.simulated_choice() == "MyCard:12GiB"


def test_a_plan_the_chosen_engine_cannot_run_is_said_before_launch(window, tiny_model, qtbot):
    from app.engine.capabilities import PROBES, Capabilities, ProbeResult

    results = {name: ProbeResult("accepted") for name in PROBES}
    results["-ctk bf16"] = ProbeResult("rejected", "error while handling argument \"-ctk\": Unsupported cache type")
    old = replace(STOCK, capabilities=Capabilities(results))
    window.launch.set_engines([old])
    assert window.open_model(tiny_model)
    assert window.launch.launch_button.isEnabled()
    window.settings.type_k.setCurrentText("bf16")  # this engine build does not take it
    panel = window.launch
    assert window.plan is not None and not panel.launch_button.isEnabled()
    assert "cannot launch this plan" in panel.launch_button.toolTip() and "-ctk bf16" in panel.launch_button.toolTip()
    assert panel.advice_label.isVisible() and "-ctk bf16" in shown_text(panel.advice_label)
    window.settings.type_k.setCurrentText("f16")
    assert panel.launch_button.isEnabled() and panel.launch_button.toolTip() == ""


def test_the_largest_context_row_is_priced_when_the_plan_fits_as_set(window, shape_model, qtbot):
    """Walkthrough finding: at 128k the "Largest context fully on GPU" row read ~37 tok/s (the plan priced
    that context as an alternative); at 32k, which fits as set and prices no alternative, the same row
    read "not predicted". It is priced with the settings as given either way."""
    window.devices.choose_simulated("RTX 4090")
    window.settings.set_context(128 * K)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(shape_model(QWEN14B_1M))

    def largest() -> str:
        view = window.budget.options
        return next(str(w.cost.text()) for r, w in zip(view.rows, view._widgets, strict=False)
                    if r.label.startswith("Largest context fully on GPU"))

    at_128k = largest()
    assert at_128k.startswith("~") and at_128k.endswith(" tok/s")
    with qtbot.waitSignal(window.planned):
        window.settings.set_context(32 * K)
    assert window.current.plan is not None and window.current.plan.feasible  # fits as set: no alternatives
    assert largest() == at_128k
