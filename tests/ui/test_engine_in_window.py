"""Measure and launch from the window, with the real engine built by native/ (CPU here)."""

from __future__ import annotations

import os
import urllib.request

import pytest

from app.engine.check import describe
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.process import pid_alive
from app.planner.gguf.model import read_shape
from app.planner.plan_types import PlanMode
from app.ui.qt import QLabel, Qt
from tests.fixtures.plans import plan_with_files
from tests.ui.windows import choose_engine

LEFT = Qt.MouseButton.LeftButton
K = 1024


@pytest.mark.engine
def test_launch_the_real_engine_see_it_healthy_then_stop_it(window, tiny_model, engine_build, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    paths = [e.path for e in found.args[0]]
    assert str(engine_build.server) in paths
    window.settings.engine.setCurrentIndex(paths.index(str(engine_build.server)))
    assert "llama-server" in window.settings.engine.currentText()
    assert window.open_model(tiny_model)
    assert window.plan is not None and window.plan.mode == PlanMode.CPU  # no GPU on this machine
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000) as ready:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
        assert not window.launch.progress.isHidden()  # loading → healthy is shown
    url = ready.args[0]
    assert url.startswith("http://127.0.0.1:")
    assert window.launch.endpoint.text() == url
    assert "healthy" in window.launch.status.text()
    assert window.launch.progress.isHidden()
    assert "-ngl 0" in window.launch.command.text()
    with urllib.request.urlopen(url + "/health", timeout=5) as resp:
        assert resp.status == 200
    with qtbot.waitSignal(window.launch.checked, timeout=30_000) as chk:
        pass
    check = chk.args[0]
    assert window.launch.check.text() == describe(check)
    kv = check.row("host", "kv")
    assert kv is not None and kv.ok, check.table()  # the KV cache the engine allocated is the planned one
    qtbot.waitUntil(lambda: "llama" in window.console.text(), timeout=5_000)  # the log reached the pane
    window.launch.copy_endpoint()
    assert window.launch.endpoint.text() == url
    engine = window.current.running_engine
    assert engine is not None and engine.pid is not None
    pid = engine.pid
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert not pid_alive(pid)
    assert window.launch.endpoint.text() == ""
    assert window.launch.launch_button.isEnabled()


def test_missing_engine_binary_shows_its_message(window, tiny_model, qtbot, tmp_path):
    gone = tmp_path / "gone" / "llama-server"
    window.launch.set_engines([EngineInfo(EngineKind.LLAMA_SERVER, str(gone), "unknown", "unknown", EngineOrigin.SETTINGS)])
    assert window.open_model(tiny_model)
    with qtbot.waitSignal(window.launch.launchFailed, timeout=30_000) as sig:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert str(gone) in sig.args[0] and "does not exist" in sig.args[0]
    assert sig.args[0] in window.launch.status.text()
    assert window.current.running_engine is None and window.launch.launch_button.isEnabled()


def test_no_engine_at_all_is_said_plainly(window, tiny_model, qtbot):
    """Walkthrough finding 11: Launch with no engine is a step still to take, not "Engine failed"."""
    window.launch.set_engines([])
    assert "No engine found" in window.launch.status.text()
    assert window.open_model(tiny_model)
    with qtbot.assertNotEmitted(window.launch.launchFailed, wait=0):  # nothing failed: a step to do
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert window.launch.status.text().startswith("No engine yet to launch with")
    assert "Build engine…" in window.launch.status.text() and "…." not in window.launch.status.text()
    assert window.current.running_engine is None
    # an engine found after that: the sentence that there is none goes (walkthrough of issue 46, item 11)
    window.launch.set_engines([EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama.cpp/bin/llama-server", "0.5.0-dev",
                                          "0c1e570", EngineOrigin.PATH)])
    assert not window.launch.status.text().startswith("No engine yet")


@pytest.mark.engine
def test_measure_runs_in_the_background_and_the_plan_uses_it(window, tiny_model, engine_build, qtbot):
    assert window.open_model(tiny_model)
    settings = window.settings.settings()
    with qtbot.waitSignal(window.measured, timeout=120_000) as sig:
        qtbot.mouseClick(window.measure.button, LEFT)
        assert not window.measure.busy.isHidden() and not window.measure.cancel_button.isHidden()
        assert not window.measure.button.isEnabled()
    m = sig.args[0]
    assert window.measure.busy.isHidden() and window.measure.button.isEnabled()
    assert "measured by pass 1" in window.measure.status_text()
    expected = plan_with_files(read_shape(tiny_model), window.current.inventory, settings, measurement=m)
    assert window.plan is not None
    assert window.plan.host == expected.host
    assert "measured by pass 1" in [str(s) for s in window.plan.host.sources.values()]


@pytest.mark.engine
def test_cancel_measure_returns_at_once_and_keeps_the_estimate(window, tiny_model, engine_build, qtbot):
    assert window.open_model(tiny_model)
    before = window.plan
    with qtbot.assertNotEmitted(window.measured, wait=0):
        qtbot.mouseClick(window.measure.button, LEFT)
        qtbot.mouseClick(window.measure.cancel_button, LEFT)
        assert window.measure.busy.isHidden() and window.measure.button.isEnabled()
        assert "cancelled" in window.measure.status_text()
        qtbot.waitUntil(lambda: not window.measure.running, timeout=120_000)
    assert window.current.measurement is None
    assert window.plan == before


def test_corrupt_model_cannot_be_measured_or_planned(window, corrupt_gguf, qtbot):
    assert not window.open_model(corrupt_gguf)
    assert window.model_path is None
    assert os.path.basename(str(corrupt_gguf)) in window.error.text()


@pytest.mark.engine
def test_settings_the_engine_rejects_show_both_messages(window, tiny_model, engine_build, qtbot):
    assert window.open_model(tiny_model)
    window.settings.type_v.setCurrentText("q8_0")
    with qtbot.waitSignal(window.errorShown) as planning:
        window.settings.flash_attn.setCurrentText("off")
    assert planning.args[0] == "Cannot plan: a quantized V cache (q8_0) requires flash attention"
    with qtbot.waitSignal(window.errorShown, timeout=120_000) as probing:
        qtbot.mouseClick(window.measure.button, LEFT)
    assert probing.args[0].startswith("Pass 1 failed:")
    assert "flash attention" in probing.args[0]
    assert "<s>" in window.error.text() or "BOS" in window.error.text() or "flash" in window.error.text()
    assert window.measure.status_text() == "Measurement failed"
    # flash attention on: the tiny model's head size (16) is still no multiple of q8_0's block (32),
    # which the engine refuses too (llama_init_from_model) — the window says so before any launch
    window.settings.flash_attn.setCurrentText("on")
    assert "q8_0 V cache needs a head size that is a multiple of 32" in window.error.text()
    window.settings.type_v.setCurrentText("f16")  # fixed: the plan comes back, the error goes
    assert window.error.isHidden()


@pytest.mark.engine
def test_the_picture_stays_on_the_running_plan_and_session_texts_outlive_the_engine(window, tiny_model,
                                                                                    engine_build, qtbot):
    choose_engine(qtbot, window, engine_build.server)
    window.settings.n_parallel.setValue(2)
    window.settings.kv_unified.setChecked(True)
    assert window.open_model(tiny_model)
    window.settings.context.set_value(4 * K, emit=True)
    assert window.plan is not None and window.plan.launch.n_ctx == 4 * K
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    running = window.current.running  # the plan re-made with pass 1, which Launch ran first
    assert running is not None and running.launch.n_ctx == 4 * K and running is window.plan
    assert "fork it into up to 2 sessions" in window.sessions.result.text()  # not "Launch the engine…"
    note = window.budget.running
    assert not note.isHidden() and "Engine running" in note.text() and "New settings" not in note.text()
    with qtbot.waitSignal(window.planned) as sig:  # new settings while it runs
        window.settings.context.set_value(8 * K, emit=True)
    assert sig.args[0].launch.n_ctx == 8 * K
    assert window.budget.plan is running  # the bars still show what runs
    assert "4,096 tokens" in note.text() and "New settings" in note.text() and "8,192 tokens" in note.text()
    assert not window.launch.launch_button.isEnabled() and window.launch.stop_button.isEnabled()
    window.sessions.prompt.setText("Once upon a time")
    with qtbot.waitSignal(window.sessions.turnDone, timeout=120_000) as done:
        qtbot.mouseClick(window.sessions.fork_button, LEFT)
    assert done.args[0].ok, done.args[0].error
    assert window.sessions.chosen.count() == 2
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert note.isHidden()
    assert window.budget.plan is window.plan and window.plan.launch.n_ctx == 8 * K  # now the new settings
    assert window.launch.launch_button.isEnabled()
    texts = {s.name: s.text for s in done.args[0].sessions}
    panel = window.sessions
    assert panel.chosen.count() == 2  # stopping the engine keeps what the sessions said
    assert "\n".join(panel.text.toPlainText().splitlines()) == "\n".join(texts[panel.chosen.currentText()].splitlines())
    assert "Engine stopped" in panel.result.text() and "s1, s2" in panel.result.text()
    assert "KV cache went with the engine" in panel.result.text()
    assert not panel.continue_button.isEnabled() and not panel.fork_button.isEnabled()


@pytest.mark.engine
def test_pass_1_on_the_cpu_says_gpu_compute_is_still_estimated_once(window, tiny_model, qtbot):
    window.devices.choose_simulated("H200")
    assert window.open_model(tiny_model)
    with qtbot.waitSignal(window.measured, timeout=120_000):
        qtbot.mouseClick(window.measure.button, LEFT)
    status = window.measure.status_text()
    assert status.startswith("Pass 1 ran on the CPU — GPU compute is still estimated")
    assert "pip install" not in status and "pip install" in window.measure.status_tip()
    shown = [lab.text() for lab in window.findChildren(QLabel) if lab.isVisible()]
    assert sum(t.count("pip install") for t in shown) == 1  # the plan's warning; not twice


@pytest.mark.engine
def test_after_stop_the_check_and_command_say_they_were_the_last_run(window, tiny_model, engine_build,
                                                                     qtbot):
    choose_engine(qtbot, window, engine_build.server)
    assert window.open_model(tiny_model)
    window.settings.context.set_value(4096, emit=True)
    with qtbot.waitSignal(window.launch.checked, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    command = window.launch.command
    assert "-c 4096" in command.text() and command.toolTip() == command.text()
    assert window.launch.command_caption.text() == "Command line:"
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    window.settings.context.set_value(65536, emit=True)
    assert window.launch.check.text().startswith("Last run (stopped): ")
    assert window.launch.command_caption.text().startswith("Last run (stopped)")
    assert not window.launch.command_caption.isHidden() and "-c 4096" in command.text()
