"""A newcomer's walkthrough (fresh home, the tiny chat model, CPU only) met these in the window; each
test is one finding as the user saw it (real widgets, offscreen)."""

from __future__ import annotations

from tests.ui.test_window_findings import shown_text


def test_three_slots_at_the_trained_context_fit_in_every_place_the_window_says_it(no_gpu_window, tiny_chat_model,
                                                                                  qtbot):
    """-np 3 without -kvu at 4,096 (finding 2): the verdict said Fits while "largest that fits: ≥ 3,840"
    and the options row "Trained context: 4,096 — does not fit" said otherwise."""
    window = no_gpu_window
    window.settings.n_parallel.setValue(3)
    window.settings.set_context(4096)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)
    plan = window.plan
    assert plan is not None and plan.feasible and plan.launch.n_ctx == 4096 and plan.launch.n_parallel == 3
    assert shown_text(window.budget.verdict).startswith("Fits")
    assert window.settings.context.fits.text().startswith("largest that fits: 4,096 in host RAM")
    trained = next(r for r in window.budget.options.rows if r.label.startswith("Trained context"))
    assert trained.fits


def test_without_a_gpu_the_advanced_summary_shows_the_ngl_it_launches(no_gpu_window, window, tiny_chat_model, qtbot):
    """Finding 6: "-ngl all" beside a CPU plan that launches -ngl 0; with a GPU, the setting as set."""
    with qtbot.waitSignal(no_gpu_window.planned):
        assert no_gpu_window.open_model(tiny_chat_model)
    plan = no_gpu_window.plan
    assert plan is not None and plan.launch.n_gpu_layers == 0
    summary = no_gpu_window.settings.advanced_toggle.text()
    assert "-ngl 0 (no GPU)" in summary and "-ngl all" not in summary
    window.devices.choose_simulated("RTX 4090")
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)
    assert "-ngl all" in window.settings.advanced_toggle.text()


def test_launch_and_measure_with_no_engine_say_what_to_do_not_that_it_failed(window, tiny_chat_model, qtbot):
    """Finding 11: with no engine, Launch said "Engine failed: No engine to launch" though nothing
    failed. Both stay clickable (a newcomer learns the next step by clicking) and say it."""
    window.launch.set_engines([])  # what discovery reports on a fresh machine
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)
    assert window.launch.launch_button.isEnabled() and window.measure.button.isEnabled()
    with qtbot.assertNotEmitted(window.launch.launchFailed, wait=0):
        window.launch.launch_button.click()
    said = window.launch.status.text()
    assert said.startswith("No engine yet to launch with: choose one") and "Build engine…" in said
    assert "failed" not in said.lower() and window.launch.launch_button.isEnabled()
    window.measure.button.click()
    assert window.measure.status_text().startswith("No engine yet to measure with: choose one")
    assert not window.measure.running


def test_the_speeds_shown_together_quote_one_fill_and_the_plan_s_own_rows_have_its_speed(no_gpu_window,
                                                                                          tiny_chat_model, qtbot):
    """Finding 9: the Expected speed line said "when you start / at a full context" beside a "~N tok/s"
    quoted at half context, and the options rows for the very launch planned said "not predicted"."""
    from app.planner import words

    window = no_gpu_window
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)
    plan = window.plan
    assert plan is not None and plan.speed is not None and not plan.alternatives
    half = words.row_short_speed(plan.speed)  # "~N tok/s": decode half-way
    line = shown_text(window.budget.speed)
    assert f"{half.removesuffix(' tok/s')} half-way" in line
    view = window.budget.options
    mine = [(row, w) for row, w in zip(view.rows, view._widgets, strict=False) if row.settings == plan.launch]
    assert mine and all(w.cost.text() == half and "half context" in w.cost.toolTip() for _r, w in mine)
    assert "not predicted" not in [w.cost.text() for _r, w in mine]


def test_a_fork_on_a_1366x768_laptop_gives_the_chat_and_each_reply_several_lines(window, qtbot):
    """Finding 7 without an engine: the window a 1366×768 screen opens (first_size: 1326×708) with a
    fork of 3 on screen; each reply's box and the chat above are more than FORK_LINES lines tall."""
    from app.ui.chat_panel import FORK_LINES, lines_tall
    from app.ui.qt import QApplication, QSize
    from app.ui.window_layout import first_size

    assert window.open_demo()
    width, height = first_size(QSize(1366, 768))
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.height() == height)
    chat = window.chat
    chat._show_forks(3)
    QApplication.processEvents()
    tall = lines_tall(chat.view, FORK_LINES + 1)
    qtbot.waitUntil(lambda: chat.view.height() >= tall and all(c.text.height() >= tall for c in chat.columns))


def test_the_devices_fill_the_forms_gap_where_it_has_room_and_never_make_it_scroll(window, qtbot):
    """Finding 16: at 1366×768 "Other ways to run it" needed scrolling while the form's column had a
    large empty gap above Measure. The devices to plan for sit in the form under the model where it
    has room for them, else over the plan: the form never scrolls for them, and no gap is left as
    large as they are."""
    from app.ui.qt import QApplication

    assert window.open_demo()
    scroll = window.left_scroll
    form = scroll.widget().layout()

    def settled(width: int, height: int) -> None:
        window.resize(width, height)
        qtbot.waitUntil(lambda: window.height() == height)
        QApplication.processEvents()

    settled(1920, 1080)  # room to spare: in the form
    qtbot.waitUntil(lambda: scroll.isAncestorOf(window.devices))
    in_form = window.devices.minimumSizeHint().height()
    assert not scroll.verticalScrollBar().isVisible()

    def placed_right() -> bool:
        """In the form without making it scroll, or over the plan because the form has no room."""
        gap = int(scroll.viewport().height() - form.minimumSize().height())
        if scroll.isAncestorOf(window.devices):
            return gap >= 0 and not scroll.verticalScrollBar().isVisible()
        return gap < int(in_form)

    for width, height in ((1366, 768), (1280, 860), (1024, 700)):
        settled(width, height)
        # the move follows the resize through queued layout events: wait for the layout to settle
        qtbot.waitUntil(placed_right, timeout=5_000)
    settled(1280, 860)
    window.settings.set_advanced_open(True)  # every flag: no room for them in the form at 1280×860
    # (a widget moved to another layout is shown again by a queued event: it is over the plan, shown)
    qtbot.waitUntil(lambda: not scroll.isAncestorOf(window.devices) and window.devices.isVisible())
    window.settings.set_advanced_open(False)
    qtbot.waitUntil(lambda: scroll.isAncestorOf(window.devices))  # room again
