"""The window's second round: Cancel stops the pass-1 child, engine advisories before launch, the
engine build button, the Hugging Face entry, distinct legend colours, the options table."""

from __future__ import annotations

import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import psutil

from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner.measurement import Measurement
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.probe.measure import measure
from app.ui.engine_builder import EngineBuilder, progress_of
from app.ui.hub_button import PREVIEW_LAUNCH
from app.ui.main_window import MainWindow
from app.ui.qt import Qt
from app.ui.settings_panel import NONE_FOUND
from app.ui.state import UiState, load_state
from tests.ui.windows import gpus_read

LEFT = Qt.MouseButton.LeftButton
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
MARKER = "headroom-test-slow-pass1"
QWEN14_1M = "qwen2.5-14b-instruct-1m-q8_0"


def _children_with(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def test_cancel_measure_kills_the_pass1_child(window, tiny_model, qtbot):
    """A pass-1 child that would run for a minute: Cancel must end it, not just ignore its result."""
    slow = [sys.executable, "-c", f"import sys, time; sys.stdin.read(); time.sleep(60)  # {MARKER}"]

    def probe(model: Path, settings: LaunchSettings, cancel: threading.Event) -> tuple[Measurement, bool]:
        return measure(model, settings, worker=slow, cancel=cancel), False

    window.measure.probe = probe
    assert window.open_model(tiny_model)
    before = window.plan
    with qtbot.assertNotEmitted(window.measured, wait=0):
        qtbot.mouseClick(window.measure.button, LEFT)
        qtbot.waitUntil(lambda: bool(_children_with(MARKER)), timeout=10_000)
        qtbot.mouseClick(window.measure.cancel_button, LEFT)
        assert window.measure.button.isEnabled() and "cancelled" in window.measure.status_text()
        qtbot.waitUntil(lambda: not _children_with(MARKER) and not window.measure.stopping, timeout=10_000)
    assert window.current.measurement is None and window.plan == before
    assert window.error.isHidden()  # a cancel is not an error


#: An opencoti llamafile as discovery reports one (never started here: these tests stop before launch).
OPENCOTI = EngineInfo(EngineKind.OPENCOTI, "/opt/llamafile/opencoti.llamafile", "0.10.5", "unknown",
                      EngineOrigin.LLAMAFILE_DIR)


def test_engine_advisories_show_with_their_action_before_launch(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")  # the window mode needs a GPU to plan for
    window.launch.set_engines([OPENCOTI])
    assert window.open_model(shape_model(LLAMA8B))
    window.settings.set_context(192 * 1024)
    assert window.launch.advice_label.isHidden()  # one session, stock placement: nothing to say
    window.settings.set_engine_window(True)
    window.settings.n_parallel.setValue(2)  # shared sessions on the rolling window, which spills
    assert window.plan is not None and window.plan.tail_cells > 0
    text = window.launch.advice_label.text()
    assert not window.launch.advice_label.isHidden()
    assert "spilled window: no prompt-cache reuse" in text
    assert "keep sessions short or fit them resident" in text  # what to do, before pressing Launch
    assert window.launch.refusal() is None and window.launch.launch_button.isEnabled()
    assert "no prompt-cache reuse" in window.sessions.advisories.text()  # the sessions panel agrees
    window.settings.set_context(32 * 1024)  # every cell resident: nothing spills, nothing to say
    assert window.plan is not None and window.plan.tail_cells == 0
    assert "spilled" not in window.launch.advice_label.text()


def test_an_error_advisory_refuses_the_launch_with_its_message(window, tiny_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    window.launch.set_engines([OPENCOTI])
    window.settings.set_engine_window(True)
    assert window.open_model(tiny_model)
    assert window.plan is not None and window.plan.mode == PlanMode.WINDOW
    # The planner itself drops -kvu in window mode; a plan that kept it (say, edited by hand) is
    # what the error advisory is for.
    bad = replace(window.plan, launch=window.plan.launch.with_(n_parallel=2, kv_unified=True))
    window.launch.set_plan(bad, tiny_model, "llama")
    assert "#d62728" in window.launch.advice_label.text()
    assert "drop -kvu" in window.launch.advice_label.text()
    with qtbot.waitSignal(window.launch.launchFailed) as failed:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert "the rolling-KV window excludes --kv-unified" in failed.args[0]
    assert "excludes --kv-unified" in window.launch.status.text()
    assert window.current.running_engine is None  # nothing was started


def test_no_engine_found_offers_build_engine_which_streams_progress(window, qtbot, tmp_path):
    window.launch.set_engines([])  # what discovery reports on a fresh machine
    assert window.settings.engine.placeholderText() == NONE_FOUND
    builder = window.launch.builder
    assert not builder.isHidden() and builder.button.isEnabled()
    script = textwrap.dedent("""
        for line in ("-- Configuring done", "[ 10%] Building C object ggml.c.o",
                     "[57/100] Building CXX object llama.cpp.o", "[100%] Built target llama-server"):
            print(line, flush=True)
    """)
    builder.argv = [sys.executable, "-c", script]
    with qtbot.waitSignal(builder.built, timeout=30_000), \
            qtbot.waitSignal(window.launch.enginesFound, timeout=120_000):
        qtbot.mouseClick(builder.button, LEFT)
        assert not builder.progress.isHidden() and not builder.button.isEnabled()
    assert builder.status.text() == "Engine built"
    qtbot.waitUntil(lambda: "[100%] Built target llama-server" in window.console.toPlainText(), timeout=5_000)


def test_a_failing_build_says_why_and_cancel_stops_a_running_one(qtbot):
    b = EngineBuilder([sys.executable, "-c", "print('CMake Error: cmake not found', flush=True); raise SystemExit(2)"])
    qtbot.addWidget(b)
    with qtbot.waitSignal(b.failed, timeout=30_000) as failed:
        b.start()
    assert failed.args[0] == "the build exited with status 2: CMake Error: cmake not found"
    qtbot.waitUntil(lambda: not b.running and b.button.isEnabled(), timeout=5_000)
    b.argv = [sys.executable, "-c", f"import time; print('[ 1%] x', flush=True); time.sleep(60)  # {MARKER}-build"]
    with qtbot.assertNotEmitted(b.built, wait=0), qtbot.assertNotEmitted(b.failed, wait=0):
        b.start()
        qtbot.waitUntil(lambda: b.progress.maximum() == 100 and b.progress.value() == 1, timeout=10_000)
        b.cancel()
        qtbot.waitUntil(lambda: not b.running and not _children_with(f"{MARKER}-build"), timeout=10_000)
    assert b.status.text() == "Build cancelled"


def test_build_progress_lines():
    assert progress_of("[ 45%] Building CXX object src/llama.cpp.o") == 45
    assert progress_of("[12/48] Building CXX object src/llama.cpp.o") == 25
    assert progress_of("-- Configuring done") is None


def test_launch_is_not_offered_for_a_plan_that_does_not_fit(window, shape_model, qtbot):
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(shape_model(QWEN14_1M))
    window.settings.set_engine_window(True)
    window.settings.context.entry.setText("1M")
    with qtbot.waitSignal(window.planned) as sig:
        window.settings.context.entry.editingFinished.emit()
    plan = sig.args[0]
    assert not plan.feasible  # a 1M f16 host tail (184 GiB) is beyond any test machine's RAM
    assert not window.launch.launch_button.isEnabled()
    assert plan.reason in window.launch.launch_button.toolTip()
    with qtbot.waitSignal(window.planned) as sig:
        qtbot.mouseClick(window.budget.alternative, Qt.MouseButton.LeftButton)
    assert sig.args[0].feasible and window.launch.launch_button.isEnabled()
    assert window.launch.launch_button.toolTip() == ""


def test_the_chosen_engine_is_remembered(qtbot, tmp_path):
    engines = [EngineInfo(EngineKind.LLAMA_SERVER, str(tmp_path / n / "llama-server"), "1", "abc", EngineOrigin.PATH)
               for n in ("first", "second")]
    state_file = tmp_path / "state.json"
    w = MainWindow(state=UiState(), state_file=state_file)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.launch.set_engines(engines)
    w.settings.engine.setCurrentIndex(1)
    w.close()
    assert load_state(state_file).engine_path == engines[1].path
    again = MainWindow(state=load_state(state_file), persist=False, state_file=state_file)
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    again.launch.set_engines(engines)
    assert again.launch.engine() == engines[1]  # not the first one found
    again.close()


def test_a_model_that_cannot_be_launched_keeps_saying_why(no_gpu_window, shape_model, qtbot):
    """The Launch button's reason for a header-only preview survives the panel re-enabling itself
    (an engine that failed or stopped) and sits beside a plan's own "does not fit"."""
    w = no_gpu_window
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    model = w.current.model
    assert model is not None
    w.current.set_model(replace(model, preview="acme/X-GGUF/x-Q8_0.gguf"))  # as opening a header-only copy does
    panel, plan = w.launch, w.plan
    assert plan is not None and plan.feasible
    assert not panel.launch_button.isEnabled() and panel.launch_button.toolTip() == PREVIEW_LAUNCH
    panel._failed("the engine exited")  # what an engine failure does to the panel (it re-enables itself)
    assert not panel.launch_button.isEnabled() and panel.launch_button.toolTip() == PREVIEW_LAUNCH
    w.current.set_model(model)  # a real file again: Launch is back, the reason gone
    assert panel.launch_button.isEnabled() and PREVIEW_LAUNCH not in panel.launch_button.toolTip()


def test_the_engine_combo_shows_its_whole_text_or_says_it_on_hover(window):
    engine = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama.cpp/build/bin/llama-server", "0.5.0-dev", "0c1e570",
                        EngineOrigin.HEADROOM_BUILD)
    window.launch.set_engines([engine])
    combo = window.settings.engine
    text = "llama-server 0.5.0-dev (0c1e570) — headroom build"
    assert combo.currentText() == text
    assert text in combo.toolTip() and engine.path in combo.toolTip()
    assert engine.path in combo.itemData(0, Qt.ItemDataRole.ToolTipRole)
    # the combo has a row of its own: the text fits next to the arrow at the default window size
    assert combo.width() - combo.fontMetrics().horizontalAdvance(text) > 30


def test_the_engine_combo_names_headroom_s_patches(window):
    engine = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama.cpp/build/bin/llama-server", "0.5.0-dev", "0c1e57098",
                        EngineOrigin.HEADROOM_BUILD,
                        patches=("0001-kpool-one-graph-shape.patch", "0002-kpool-one-scatter-row-per-rep.patch"))
    window.launch.set_engines([engine])
    combo = window.settings.engine
    text = "llama-server 0.5.0-dev (0c1e57098 + 2 Headroom patches) — headroom build"
    assert combo.currentText() == text and text in combo.toolTip()
    # which llama.cpp, patches included, fits at the default window size; where it was found may be cut
    what = text[: text.index(")") + 1]
    assert combo.width() - combo.fontMetrics().horizontalAdvance(what) > 30


def test_the_command_line_never_widens_the_column(window):
    window.launch._show_command("llama-server " + "-x " * 200, "Command line:")
    assert window.launch.command.minimumSizeHint().width() < 200
    assert window.launch.command.cursorPosition() == 0  # the start of the command shows
