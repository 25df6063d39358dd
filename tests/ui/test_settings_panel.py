"""The context slider and the settings form, driven like a user would."""

from __future__ import annotations

from app.planner.settings import FlashAttn, LaunchSettings
from app.ui.context_control import SNAP_VALUES, ContextControl, ctx_to_pos, snap_ctx
from app.ui.qt import Qt
from app.ui.settings_panel import SettingsPanel
from tests.ui.windows import gpus_read

K = 1024
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


def test_slider_spans_4k_to_1m_on_a_log_scale(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    assert snap_ctx(c.slider.minimum()) == 4 * K
    assert snap_ctx(c.slider.maximum()) == 1024 * K
    # log scale: each doubling is the same slider distance
    assert ctx_to_pos(64 * K) - ctx_to_pos(32 * K) == ctx_to_pos(512 * K) - ctx_to_pos(256 * K)


def test_dragging_snaps_to_sensible_values(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    seen: list[int] = []
    c.contextChanged.connect(seen.append)
    c.slider.setValue(ctx_to_pos(500 * K))  # between 384k and 512k, nearer 512k
    assert c.value() == 512 * K
    assert c.entry.text() == "512k"
    assert seen == [512 * K]
    assert all(v in SNAP_VALUES for v in seen)


def test_keyboard_moves_the_slider_to_the_next_snap_value(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    c.set_value(128 * K)
    qtbot.keyClick(c.slider, Qt.Key.Key_Right)
    assert c.value() == 160 * K
    qtbot.keyClick(c.slider, Qt.Key.Key_Left)
    qtbot.keyClick(c.slider, Qt.Key.Key_Left)
    assert c.value() == 96 * K
    qtbot.keyClick(c.slider, Qt.Key.Key_End)
    assert c.value() == 1024 * K


def test_typed_entry_accepts_512k_and_1m(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    with qtbot.waitSignal(c.contextChanged) as sig:
        c.entry.setText("512k")
        qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert sig.args == [524288]
    c.entry.setText("1M")
    qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert c.value() == 1048576
    c.entry.setText("200000")  # typed values need not be snap values
    qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert c.value() == 200000


def test_typed_nonsense_shows_why_and_keeps_the_value(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    c.set_value(64 * K)
    c.entry.setText("lots")
    qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert c.value() == 64 * K
    assert "not a token count" in c.error.text()


def test_largest_fit_is_one_click_away(qtbot):
    c = ContextControl()
    qtbot.addWidget(c)
    c.set_largest_fit(384 * K, "fully on GPU")
    assert "393,216" in c.fits.text()  # a figure Headroom found: exact (docs/style.md, "Numbers")
    qtbot.mouseClick(c.fits, Qt.MouseButton.LeftButton)
    assert c.value() == 384 * K


def test_panel_round_trips_every_launch_setting(qtbot):
    p = SettingsPanel()
    qtbot.addWidget(p)
    s = LaunchSettings(n_ctx=512 * K, type_k="q8_0", type_v="q4_0", n_parallel=4, kv_unified=True,
                       n_ubatch=1024, flash_attn=FlashAttn.AUTO, n_gpu_layers=20, offload_kqv=False)
    with qtbot.waitSignal(p.changed):
        p.set_settings(s)
    assert p.settings() == s
    p.type_v.setCurrentText("f16")
    assert p.settings() == s.with_(type_v="f16")


def test_a_mistyped_context_says_why_on_its_own_line(window, shape_model, qtbot):
    assert window.open_model(shape_model(LLAMA8B))
    c = window.settings.context
    before = window.plan
    c.entry.selectAll()
    qtbot.keyClicks(c.entry, "abc")
    qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert c.error.isVisible() and "try '131072', '128k' or '1M'" in c.error.text()
    assert c.error.geometry().top() >= c.fits.geometry().bottom()  # below the fits button, not beside it
    assert c.error.geometry().right() <= c.width()  # wraps inside the form, not cut off at its edge
    assert c.error.height() >= c.error.heightForWidth(c.error.width())
    assert before is not None and window.plan is None  # a bad entry: no plan, nothing to launch (round 5)
    assert not window.launch.launch_button.isEnabled()
    c.entry.selectAll()
    with qtbot.waitSignal(window.planned):
        qtbot.keyClicks(c.entry, "64k")
        qtbot.keyClick(c.entry, Qt.Key.Key_Return)
    assert c.error.isHidden()


def test_the_prompt_cache_is_a_setting_the_plan_holds_back_and_the_host_bar_shows(qtbot, tmp_path, shape_model):
    """--cache-ram: auto by default (one full context's KV: 512 MiB for Llama 8B at 4k, not the server's
    8192 MiB), a size the user types is planned as given, shown on the host bar with its source, and
    kept for the next start."""
    from app.ui.main_window import MainWindow
    from app.ui.state import UiState, load_state

    state_file = tmp_path / "s.json"
    w = MainWindow(state=UiState(), persist=True, state_file=state_file, nvml=None, read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.planned, timeout=20_000):
        assert w.open_model(shape_model(LLAMA8B))
    assert w.settings.cache_ram.text().startswith("auto")
    assert w.settings.settings().cache_ram_mib is None
    assert w.plan is not None and w.plan.launch.n_ctx == 4096 and w.plan.cache_ram_mib == 512
    auto = next(s for s in w.budget.host_row.bar.segments if s.key == "prompt_cache")
    assert "room for one full context's KV (4,096 tokens)" in auto.tooltip
    with qtbot.waitSignal(w.planned, timeout=20_000):
        w.settings.cache_ram.setValue(2048)
    plan = w.plan
    assert plan is not None and plan.launch.cache_ram_mib == 2048 and plan.host.prompt_cache == 2048 * 1024 * 1024
    seg = next(s for s in w.budget.host_row.bar.segments if s.key == "prompt_cache")
    assert seg.label == "Prompt cache" and seg.size == 2048 * 1024 * 1024 and "--cache-ram 2048" in seg.tooltip
    w.close()
    assert load_state(state_file).launch_settings().cache_ram_mib == 2048


def test_an_applied_placement_is_shown_said_and_undone_and_not_carried_to_another_model(qtbot, tmp_path,
                                                                                          shape_model):
    """A 17 GiB MoE on a 16 GB card: Apply "--n-cpu-moe N" keeps it (the form has no control for it, so
    a line shows it), the verdict names it instead of "everything resident", "Let the planner place"
    forgets it, and another model opens without it."""
    from app.ui.main_window import MainWindow
    from app.ui.state import UiState

    state = UiState(simulated_gpus=["RTX 5080"])
    w = MainWindow(state=state, persist=False, state_file=tmp_path / "s.json", nvml=None, read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.planned, timeout=20_000):
        assert w.open_model(shape_model("qwen3-30b-a3b-q4_k_m"))
    chosen = w.plan
    assert chosen is not None and chosen.feasible and chosen.launch.n_cpu_moe > 0
    assert not w.settings.placement_row.isVisible()
    assert w.budget.alternative.text() == f"Apply: --n-cpu-moe {chosen.launch.n_cpu_moe}"
    with qtbot.waitSignal(w.planned, timeout=20_000):
        w.budget.alternative.click()
    applied = w.plan
    assert applied is not None and applied.launch == chosen.launch and applied.feasible
    assert w.settings.placement_row.isVisible()
    assert w.settings.placement.text() == f"Placement applied: --n-cpu-moe {chosen.launch.n_cpu_moe}"
    assert "everything resident" not in applied.reason
    assert f"--n-cpu-moe {chosen.launch.n_cpu_moe}" in w.budget.verdict.text()
    with qtbot.waitSignal(w.planned, timeout=20_000):
        w.settings.placement_reset.click()
    assert w.settings.settings().n_cpu_moe == 0 and not w.settings.placement_row.isVisible()
    with qtbot.waitSignal(w.planned, timeout=20_000):
        w.budget.alternative.click()
    assert w.settings.settings().n_cpu_moe > 0
    with qtbot.waitSignal(w.planned, timeout=20_000):
        assert w.open_model(shape_model(LLAMA8B))
    assert w.settings.settings().n_cpu_moe == 0 and not w.settings.placement_row.isVisible()
    w.close()


def test_another_model_opens_with_every_layer_on_the_gpu_not_the_last_models_ngl(qtbot, tmp_path, shape_model):
    """-ngl counts one model's layers: an -ngl 0 applied to the last model is no setting for the next."""
    from app.planner.settings import ALL_LAYERS
    from app.ui.main_window import MainWindow
    from app.ui.state import UiState

    w = MainWindow(state=UiState(simulated_gpus=["RTX 4090"]), persist=False, state_file=tmp_path / "s.json",
                   nvml=None, read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.planned, timeout=20_000):
        assert w.open_model(shape_model(LLAMA8B))
    with qtbot.waitSignal(w.planned, timeout=20_000):
        w.settings.n_gpu_layers.setValue(0)
    assert w.plan is not None and w.plan.launch.n_gpu_layers == 0
    with qtbot.waitSignal(w.planned, timeout=20_000):
        assert w.open_model(shape_model("qwen3-30b-a3b-q4_k_m"))
    assert w.settings.n_gpu_layers.value() == ALL_LAYERS and w.plan is not None
    assert w.plan.feasible and w.plan.launch.n_gpu_layers == ALL_LAYERS  # it fits a 4090 whole
    w.close()
