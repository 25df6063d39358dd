"""The window as a user met it in review (round 3): a machine without a GPU reads as "fits on the
CPU", not "does not fit"; token counts carry separators; a bad file is named once and its message
leaves the status bar with it; two simulated cards; a simulated card's driver reserve; the VRAM
target on the bar; one Alt letter per control; no Launch for a plan that does not fit; no Fork on
a one-slot engine; the chosen engine remembered; a mistyped context explained in full."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner.plan_types import PlanMode
from app.planner.units import Bytes, GiB
from app.ui.hub_button import PREVIEW_LAUNCH
from app.ui.main_window import MainWindow
from app.ui.qt import QCheckBox, QColor, QLabel, QPalette, QPushButton, Qt
from app.ui.state import UiState, load_state
from tests.fixtures.fake_nvml import FakeNvml

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
QWEN14_1M = "qwen2.5-14b-instruct-1m-q8_0"
#: Five or more digits in a row: a token count printed without thousands separators.
BARE_NUMBER = re.compile(r"(?<![\d,.])\d{5,}(?![\d,.])")


@pytest.fixture
def no_gpu_window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    """A machine without an NVIDIA driver, whatever machine the test runs on."""
    nvml = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml,
                   read_host=lambda: None)  # host RAM held still, as in conftest's window
    qtbot.addWidget(w)
    w.show()
    yield w
    w.close()


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
    assert f"{plan.tail_cells:,}" in w.budget.window_numbers.text()
    assert w.launch.launch_button.isEnabled()


def test_token_counts_carry_thousands_separators(window, shape_model, qtbot):
    window.devices.simulate.setCurrentText("RTX 4090")
    assert window.open_model(shape_model(QWEN14_1M))
    assert "trained for 1,010,000 tokens" in window.model_label.text()
    window.settings.set_engine_window(True)
    window.settings.context.entry.setText("1M")
    with qtbot.waitSignal(window.planned):
        window.settings.context.entry.editingFinished.emit()
    assert not window.budget.alternative.isHidden()
    shown = [window.model_label.text(), window.budget.alternative.text(),
             window.budget.window_numbers.text(), window.settings.context.fits.text()]
    assert not [t for t in shown if BARE_NUMBER.search(t)], shown


def test_a_bad_file_is_named_once_and_its_message_goes_when_a_model_opens(window, corrupt_gguf,
                                                                          shape_model):
    assert not window.open_model(corrupt_gguf)
    assert window.error.text().count(corrupt_gguf.name) == 1
    assert window.statusBar().currentMessage() == window.error.text()
    assert window.open_model(shape_model(LLAMA8B))
    assert window.error.isHidden()
    assert window.statusBar().currentMessage() == ""  # the stale error does not linger for 10 s


def test_two_simulated_cards_plan_a_split_and_are_remembered(no_gpu_window, shape_model, qtbot, tmp_path):
    window = no_gpu_window
    assert window.open_model(shape_model(QWEN14_1M))
    with qtbot.waitSignal(window.planned) as sig:
        window.devices.simulate.setCurrentText("2 × H200")
    plan = sig.args[0]
    assert [g.name for g in plan.gpus] == ["CUDA0", "CUDA1"]
    assert all(g.weights > 0 for g in plan.gpus)  # the weights are split over both
    assert len(window.budget.rows) == 2 and len(window.devices.cards) == 2
    assert "simulated GPUs below" in window.devices.notice.text()
    again = MainWindow(state=window.state, persist=False, state_file=tmp_path / "again.json")
    qtbot.addWidget(again)
    assert again.devices.simulate.currentText() == "2 × H200"
    assert len(again.current.inventory.gpus) == 2
    again.close()


def test_a_simulated_cards_reserve_is_not_called_other_apps(window, shape_model):
    window.devices.simulate.setCurrentText("H200")
    assert window.open_model(shape_model(LLAMA8B))
    reserve = window.plan.gpus[0].other_processes if window.plan else 0
    assert reserve > 0  # the recorded H200: the driver keeps 615 MiB
    caption = window.budget.rows[0].caption.text()
    assert f"driver reserve {Bytes(reserve)}" in caption and "other apps" not in caption
    seg = next(s for s in window.budget.rows[0].bar.segments if s.key == "other_processes")
    assert "kept by the driver" in seg.tooltip


def test_the_vram_target_is_drawn_on_the_bar(window, shape_model, qtbot):
    window.devices.simulate.setCurrentText("H200")
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


def test_every_alt_letter_reaches_one_control(window):
    letters: list[str] = [a.text() for a in window.menuBar().actions()]
    letters += [b.text() for kind in (QPushButton, QCheckBox) for b in window.findChildren(kind)]
    letters += [lab.text() for lab in window.findChildren(QLabel) if lab.buddy() is not None]
    found = [m.group(1).lower() for t in letters for m in re.finditer(r"(?<!&)&([A-Za-z0-9])", t)]
    assert len(found) > 15
    assert [k for k, n in Counter(found).items() if n > 1] == []


def test_alt_m_measures_and_alt_i_reaches_the_micro_batch(window, tiny_model, qtbot):
    assert window.open_model(tiny_model)
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_I, Qt.KeyboardModifier.AltModifier)
    assert window.settings.n_ubatch.hasFocus()
    with qtbot.waitSignal(window.measure.button.clicked):
        qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.AltModifier)
    window.measure.cancel()


def test_launch_is_not_offered_for_a_plan_that_does_not_fit(window, shape_model, qtbot):
    window.devices.simulate.setCurrentText("RTX 4090")
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


@pytest.mark.engine
def test_an_engine_with_one_slot_offers_no_fork_and_says_why(window, tiny_model, engine_build, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    window.settings.engine.setCurrentIndex([e.path for e in found.args[0]].index(str(engine_build.server)))
    assert window.open_model(tiny_model)
    assert window.settings.n_parallel.value() == 1
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, Qt.MouseButton.LeftButton)
    panel = window.sessions
    assert panel.prompt.isEnabled()  # the engine is up
    assert not panel.fork_button.isEnabled() and not panel.smoke_button.isEnabled()
    assert not panel.continue_button.isEnabled()  # no session yet to continue
    assert "has 1 slot" in panel.result.text() and "Parallel sessions" in panel.result.text()
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, Qt.MouseButton.LeftButton)
    assert "Launch the engine" in panel.result.text()


def test_the_chosen_engine_is_remembered(qtbot, tmp_path):
    engines = [EngineInfo(EngineKind.LLAMA_SERVER, str(tmp_path / n / "llama-server"), "1", "abc", EngineOrigin.PATH)
               for n in ("first", "second")]
    state_file = tmp_path / "state.json"
    w = MainWindow(state=UiState(), state_file=state_file)
    qtbot.addWidget(w)
    w.launch.set_engines(engines)
    w.settings.engine.setCurrentIndex(1)
    w.close()
    assert load_state(state_file).engine_path == engines[1].path
    again = MainWindow(state=load_state(state_file), persist=False, state_file=state_file)
    qtbot.addWidget(again)
    again.launch.set_engines(engines)
    assert again.launch.engine() == engines[1]  # not the first one found
    again.close()


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


def test_the_legend_names_only_the_parts_on_the_bars(no_gpu_window, shape_model, qtbot):
    """A CPU plan names no GPU part; a GPU plan names the driver's reserve it draws."""
    w = no_gpu_window
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    text = w.budget.legend.text()
    assert "Mapped weights" in text and "KV cache" in text
    assert "Overhead" not in text and "Safety" not in text and "KV window" not in text
    with qtbot.waitSignal(w.planned):
        w.devices.simulate.setCurrentText("H200")
    text = w.budget.legend.text()
    assert "Driver reserve" in text and "Weights" in text and "Overhead" in text


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
