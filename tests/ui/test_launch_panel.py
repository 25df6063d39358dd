"""The window's second round: Cancel stops the pass-1 child, engine advisories before launch, the
engine build button, the Hugging Face entry, distinct legend colours, the options table."""

from __future__ import annotations

import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.planner.measurement import Measurement
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.probe.measure import measure
from app.ui.budget_view import GPU_PARTS, HOST_PARTS, legend_entries
from app.ui.engine_builder import EngineBuilder, progress_of
from app.ui.qt import QPalette, Qt
from app.ui.settings_panel import NONE_FOUND, tokens_text

LEFT = Qt.MouseButton.LeftButton
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
MARKER = "headroom-test-slow-pass1"


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


def _stock_engine(window, engine_build, qtbot) -> None:
    window.devices.simulate.setCurrentText("RTX 4090")  # the window mode needs a GPU to plan for
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    paths = [e.path for e in found.args[0]]
    window.settings.engine.setCurrentIndex(paths.index(str(engine_build.server)))


@pytest.mark.engine
def test_engine_advisories_show_with_their_action_before_launch(window, tiny_model, engine_build, qtbot):
    _stock_engine(window, engine_build, qtbot)
    assert window.open_model(tiny_model)
    assert window.launch.advice_label.isHidden()  # one session, stock placement: nothing to say
    window.settings.set_engine_window(True)
    window.settings.n_parallel.setValue(2)  # shared sessions on the rolling window
    text = window.launch.advice_label.text()
    assert not window.launch.advice_label.isHidden()
    assert "spilled window: no prompt-cache reuse" in text
    assert "keep sessions short or fit them resident" in text  # what to do, before pressing Launch
    assert window.launch.refusal() is None and window.launch.launch_button.isEnabled()
    assert "no prompt-cache reuse" in window.sessions.advisories.text()  # the sessions panel agrees


@pytest.mark.engine
def test_an_error_advisory_refuses_the_launch_with_its_message(window, tiny_model, engine_build, qtbot):
    _stock_engine(window, engine_build, qtbot)
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


def test_hugging_face_entry_is_live_and_reachable_by_keyboard(window, qtbot):
    hub = window.hub_button
    assert hub.isVisible() and hub.isEnabled() and hub.text() == "Hugging Face repo…"
    assert "later" not in hub.toolTip() and "plan one from its header" in hub.toolTip()
    grey = hub.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText)
    assert hub.palette().color(QPalette.ColorGroup.Active, QPalette.ColorRole.ButtonText) != grey
    window.open_button.setFocus()
    qtbot.waitUntil(window.open_button.hasFocus, timeout=2_000)
    qtbot.keyClick(window.open_button, Qt.Key.Key_Tab)
    qtbot.waitUntil(hub.hasFocus, timeout=2_000)  # Tab from "Open model…" lands on it
    qtbot.keyClick(hub, Qt.Key.Key_Space)
    dialog = window.hub_dialog
    assert dialog is not None and dialog.isVisible()  # the repo picker opens
    assert window.model_path is None  # nothing opened, nothing fetched yet


def test_no_two_legend_entries_share_a_colour():
    entries = legend_entries()
    assert len(set(entries.values())) == len(entries)
    assert {label for _k, label, _c in GPU_PARTS + HOST_PARTS} | {"Driver reserve"} == set(entries)



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
    window.devices.simulate.setCurrentText("RTX 4090")
    window.settings.context.set_value(1024 * 1024)
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(shape_model(LLAMA8B))
    plan = sig.args[0]
    assert plan.alternatives  # stock mode priced -nkvo, a shorter context...
    rows = window.budget.options.rows[-len(plan.alternatives):]
    assert [(r.label, r.fits, r.note) for r in rows] == [(a.label, a.feasible, a.note) for a in plan.alternatives]
