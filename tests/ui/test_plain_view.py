"""Issue 29, "a plain view first": the window opens on the model, its context, fits or not, the bars and
the expected speed in words; every flag is under "Advanced" (closed, remembered); the choice the plan
made is one sentence with its cost and the other end one click away; and "how far can I go" has the
CLI's figures (words.context_reach, the same as `headroom plan`'s "largest context" line)."""

from __future__ import annotations

from pathlib import Path

from app.commands.plan import _largest_lines
from app.planner import words
from app.planner.plan_types import AlternativeKind
from app.planner.units import format_tokens
from app.ui.chat_panel import lines_tall
from app.ui.main_window import MainWindow
from app.ui.qt import QApplication, QScrollArea, Qt, QWidget
from app.ui.state import UiState
from tests.ui.test_window_findings import seen, show_at, shown_text

LEFT = Qt.MouseButton.LeftButton


def flags(window: MainWindow) -> list[QWidget]:
    s = window.settings
    return [s.type_k, s.type_v, s.n_parallel, s.kv_unified, s.n_ubatch, s.flash_attn, s.n_gpu_layers, s.nkvo,
            s.cache_ram, s.safety, s.vram_target, s.kv_mode, s.extras.toggle]


def demo_on(window: MainWindow, qtbot, card: str):
    with qtbot.waitSignal(window.planned):
        assert window.open_demo()  # 512k of Qwen2.5-7B-1M's shape
    if window.settings.engine_window():  # stock llama.cpp's placements (the speed model prices those)
        with qtbot.waitSignal(window.planned):
            window.settings.set_engine_window(False)
    if card:
        with qtbot.waitSignal(window.planned):
            assert window.devices.choose_simulated(card)
    plan, fit = window.plan, window.current.fit
    assert plan is not None and fit is not None
    return plan, fit


def test_the_window_opens_plain_with_every_flag_under_a_closed_advanced_section(window, qtbot):
    s = window.settings
    assert not s.advanced_open() and s.advanced.isHidden()
    assert seen(s.context) and seen(s.engine) and seen(s.advanced_toggle)
    assert not any(w.isVisible() for w in flags(window))
    # closed, it still says what every flag is set to
    assert s.advanced_toggle.text() == "Advanced: K f16 V f16 · -np 1 · -ub 512 · -fa on · -ngl all"
    s.type_k.setCurrentText("q8_0")
    s.nkvo.setChecked(True)
    assert s.advanced_toggle.text().startswith("Advanced: K q8_0 V f16 ·") and "-nkvo" in s.advanced_toggle.text()
    qtbot.mouseClick(s.advanced_toggle, LEFT)
    assert s.advanced_open()
    window.left_scroll.ensureWidgetVisible(s.kv_mode)
    QApplication.processEvents()
    assert all(w.isVisible() for w in flags(window))


def test_advanced_open_is_remembered_in_the_window_state(qtbot, tmp_path: Path):
    state_file = tmp_path / "gui-state.json"
    first = MainWindow(state=None, persist=True, state_file=state_file, read_host=lambda: None)
    qtbot.addWidget(first)
    first.settings.set_advanced_open(True)
    first.close()
    again = MainWindow(state=None, persist=True, state_file=state_file, read_host=lambda: None)
    qtbot.addWidget(again)
    assert again.settings.advanced_open() and not again.settings.advanced.isHidden()
    again.settings.set_advanced_open(False)
    again.close()
    third = MainWindow(state=None, persist=False, state_file=state_file, read_host=lambda: None)
    qtbot.addWidget(third)
    assert not third.settings.advanced_open()
    third.close()


def test_the_expected_speed_is_said_in_words(window, qtbot):
    plan, _fit = demo_on(window, qtbot, "")
    assert plan.speed is not None and plan.feasible
    text = shown_text(window.budget.speed)
    assert text == f"Expected speed: {words.speed_sentence(plan.speed)}"
    assert "tokens/s when you start" in text and "at a full context; reads a 2k prompt in ~" in text
    assert seen(window.budget.speed)


def test_a_smaller_kv_type_chosen_is_said_with_its_speed_and_the_settings_as_set_one_click_away(window, qtbot):
    plan, fit = demo_on(window, qtbot, "")  # 512k f16 on 24 GB: q8_0 chosen
    chosen = next(a for a in plan.alternatives if a.chosen)
    assert chosen.kind is AlternativeKind.SMALLER_KV_TYPE
    text = shown_text(window.budget.verdict)
    assert text.startswith("512k does not fit as set (CUDA0 is short by ")
    # its gist and its predicted speed (the rule is in its row of "Other ways to run it")
    gist = chosen.note.split(":")[0]
    assert f"planned -ctk q8_0 -ctv q8_0 — {gist} ({words.short_speed(chosen)})" in text
    resident = words.context_reach(plan, fit)[0]
    assert resident.resident and f"As set, at most: {words.end_words(resident)}." in text
    button = window.budget.other_way
    assert seen(button) and button.text() == f"Use this: {words.end_words(resident)}"
    with qtbot.waitSignal(window.planned):
        qtbot.mouseClick(button, LEFT)
    s = window.settings.settings()
    assert (s.n_ctx, s.type_k, s.type_v) == (resident.n_ctx, "f16", "f16")
    assert window.plan is not None and window.plan.feasible and window.plan.launch.n_ctx == resident.n_ctx
    assert shown_text(window.budget.verdict).startswith("Fits")


def test_on_8_gib_both_ends_are_offered_with_the_clis_figures(window, qtbot):
    plan, fit = demo_on(window, qtbot, "RTX 4060")  # 512k on 8 GiB: fits no way
    ends = words.context_ends(plan)
    assert ends is not None
    fast, longest = ends
    text = shown_text(window.budget.verdict)
    assert f"planned {format_tokens(fast.launch.n_ctx)} fully on GPU ({words.short_speed(fast)})" in text
    assert (f"Longest: {format_tokens(longest.launch.n_ctx)} with {longest.placement} "
            f"({words.short_speed(longest)})") in text
    # The same two figures as `headroom plan`'s "largest context" line, on the context control
    cli = _largest_lines(plan, fit)[0]
    assert f"{format_tokens(fast.launch.n_ctx)} fully resident" in cli
    assert f"{format_tokens(longest.launch.n_ctx)} with {longest.placement}" in cli
    c = window.settings.context
    assert c.fits.text() == f"largest that fits: {format_tokens(fast.launch.n_ctx)} fully on GPU ({words.short_speed(fast)})"
    assert seen(c.longest)
    drawn = shown_text(c.longest).replace("\u2060", "").replace("\xa0", " ")  # (the speed kept on one line)
    assert drawn == f"longest: {words.end_words(words.context_reach(plan, fit)[1])}"
    with qtbot.waitSignal(window.planned):
        c.longest.linkActivated.emit("longest")  # a click on its link
    assert window.settings.settings().n_ctx == longest.launch.n_ctx
    assert window.plan is not None and window.plan.feasible and window.plan.launch == longest.launch


def test_the_one_click_other_end_on_8_gib_is_the_longest(window, qtbot):
    plan, _fit = demo_on(window, qtbot, "RTX 4060")
    ends = words.context_ends(plan)
    assert ends is not None
    with qtbot.waitSignal(window.planned):
        qtbot.mouseClick(window.budget.other_way, LEFT)
    assert window.plan is not None and window.plan.launch == ends[1].launch


def test_every_control_is_reachable_and_the_chat_has_room_on_small_screens(window, qtbot):
    demo_on(window, qtbot, "")
    window.settings.set_advanced_open(True)
    for width, height in ((1024, 700), (1366, 768)):
        show_at(window, qtbot, width, height)
        for w in [*flags(window), window.settings.context, window.settings.engine, window.server]:
            window.left_scroll.ensureWidgetVisible(w)
            QApplication.processEvents()
            assert seen(w), (width, height, w.accessibleName() or type(w).__name__)
        for w in (window.measure.button, window.launch.launch_button, window.chat.message):
            assert seen(w), (width, height, type(w).__name__)
        # the chat's history: five lines at least, not the ~100 px (one reply line) it had
        assert window.chat.view.height() >= lines_tall(window.chat.view, 5), (width, height, window.chat.view.height())


def test_switching_to_shared_sessions_does_not_move_the_splitters(window, qtbot):
    demo_on(window, qtbot, "")
    show_at(window, qtbot, 1366, 768)
    QApplication.processEvents()  # the layout after the resize settles first
    before = (window.vsplit.sizes(), window.bottom.sizes())
    for tab in (1, 0):
        window.talk.setCurrentIndex(tab)
        QApplication.processEvents()
        assert (window.vsplit.sizes(), window.bottom.sizes()) == before, tab


def test_a_new_state_starts_plain():
    assert UiState().advanced_open is False


def test_opening_advanced_does_not_move_the_splitter_beside_the_form(window, qtbot):
    demo_on(window, qtbot, "")
    show_at(window, qtbot, 1366, 768)
    QApplication.processEvents()
    closed = window.centralWidget().sizes()
    window.settings.set_advanced_open(True)
    QApplication.processEvents()
    assert window.centralWidget().sizes() == closed


def test_a_long_sessions_status_wraps_and_is_reachable_at_1024x700(window, qtbot):
    demo_on(window, qtbot, "")
    show_at(window, qtbot, 1024, 700)
    window.talk.setCurrentIndex(1)
    result = window.sessions.result
    said = ("Forked into 3 sessions: prompt evaluated once, shared by 3 (412-token prompt; /metrics: "
            "412 prompt tokens read, 824 taken from the cache); continue one of them with the prompt above.")
    result.setText(said)
    QApplication.processEvents()
    page = window.talk.currentWidget()
    assert isinstance(page, QScrollArea)
    page.ensureWidgetVisible(result)
    QApplication.processEvents()
    assert seen(result)
    # the whole status is drawn: as wide as the page at most, as tall as its wrapped lines need
    assert result.width() <= page.viewport().width()
    assert result.height() >= result.heightForWidth(result.width())
