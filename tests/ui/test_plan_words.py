"""The plan pane's words as a new-user walkthrough met them: "fully on GPU" only when it is, a
largest context that never loses its number, no "does not fit as set" for a machine without a GPU,
one sentence said once, and a q8_0 note that says the rule the planner follows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from app.machine import devices
from app.planner import words
from app.planner.devices import HostMemory
from app.planner.plan_types import AlternativeKind, PlanMode
from app.planner.units import GiB, format_tokens
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_nvml import FakeNvml
from tests.ui.test_window_findings import STOCK, shown_text
from tests.ui.windows import gpus_read

QWEN30B = "qwen3-30b-a3b-q4_k_m"
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
K = 1024


def _window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kw) -> MainWindow:
    # Host RAM held at a desktop's 32 GiB: what the MoE's experts on the CPU need is there on any machine.
    monkeypatch.setattr(devices, "host_memory", lambda: HostMemory(32 * GiB, 30 * GiB))
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", read_host=lambda: None, **kw)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def desktop(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    w = _window(qtbot, tmp_path, monkeypatch)
    yield w
    w.close()


@pytest.fixture
def no_gpu_desktop(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    """A machine without an NVIDIA driver, whatever machine the test runs on."""
    w = _window(qtbot, tmp_path, monkeypatch, nvml=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    yield w
    w.close()


def _open(window: MainWindow, qtbot, path: Path, n_ctx: int | None = None):
    """Open ``path`` and plan it at ``n_ctx`` (typed into the context control, as a user would)."""
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(path)
    if n_ctx is not None and window.current.settings.launch.n_ctx != n_ctx:
        window.settings.context.entry.setText(str(n_ctx))
        with qtbot.waitSignal(window.planned) as sig:
            window.settings.context.entry.editingFinished.emit()
    assert window.current.settings.launch.n_ctx == (n_ctx or window.current.settings.launch.n_ctx)
    return sig.args[0]


def test_with_every_layer_on_the_cpu_the_largest_context_is_in_host_ram(desktop, shape_model, qtbot):
    """-ngl 0 (what "Apply: planned settings" set on a machine without a GPU), then a simulated card."""
    desktop.devices.choose_simulated("RTX 4060")
    desktop.settings.n_gpu_layers.setValue(0)
    plan = _open(desktop, qtbot, shape_model(QWEN30B), 32 * K)
    assert plan.mode == PlanMode.STOCK and plan.feasible and plan.launch.n_gpu_layers == 0
    fits = desktop.settings.context.fits.text()
    assert fits.endswith("in host RAM") and "fully on GPU" not in fits, fits
    row = desktop.budget.options.rows[0]
    assert row.label.startswith("Largest context in host RAM: ")
    assert row.note.startswith("-ngl 0: every layer and its KV in host RAM") and "every KV cell resident" not in row.note
    assert "GPU" not in row.label and row.fits  # the largest context in host RAM, not one fully on the card
    desktop.settings.n_gpu_layers.setValue(999)
    desktop.settings.nkvo.setChecked(True)  # -nkvo: the KV in host RAM, the layers on the card
    assert "fully on GPU" not in desktop.settings.context.fits.text()


def test_when_no_context_fits_as_set_the_label_says_none_fits(desktop, shape_model, qtbot):
    """The 30B's 17 GiB of weights on an 8 GB card: the plan moves experts to the CPU; as set, nothing fits."""
    desktop.devices.choose_simulated("RTX 4060")
    plan = _open(desktop, qtbot, shape_model(QWEN30B), 32 * K)
    assert plan.feasible and plan.launch.n_cpu_moe > 0
    fits = desktop.settings.context.fits
    assert fits.text() == "largest that fits: none fits fully on GPU" and not fits.isEnabled()


def test_an_moe_at_long_context_is_offered_a_shorter_context_with_its_experts_on_the_cpu(desktop, shape_model, qtbot):
    desktop.devices.choose_simulated("RTX 4060")
    plan = _open(desktop, qtbot, shape_model(QWEN30B), 256 * K)
    shorter = next(a for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT)
    assert shorter.chosen and plan.feasible and plan.launch == shorter.launch
    assert shorter.launch.n_ctx < 256 * K and shorter.label == f"-c {shorter.launch.n_ctx} {shorter.placement}"
    assert shorter.placement.startswith("--n-cpu-moe") or "KV of" in shorter.placement
    text = shown_text(desktop.budget.verdict)
    assert text.startswith("256k does not fit as set (CUDA0 is short by ")
    assert f"planned {format_tokens(shorter.launch.n_ctx)} with {shorter.placement} ({words.short_speed(shorter)})" in text
    assert desktop.budget.alternative.text() == f"Apply: {shorter.label}"


def test_a_planned_alternative_is_said_once_in_the_window(desktop, shape_model, qtbot):
    desktop.devices.choose_simulated("RTX 4060")
    plan = _open(desktop, qtbot, shape_model(QWEN30B), 32 * K)
    chose = words.chose_instead_of(plan)
    assert chose and chose in plan.warnings  # the CLI prints it as a warning
    verdict, warnings = shown_text(desktop.budget.verdict), shown_text(desktop.budget.warnings)
    why = plan.alternatives[0].note
    assert verdict.startswith(f"32k does not fit as set ({why}): planned --n-cpu-moe ")
    assert "the settings as given do not fit" not in warnings and why not in warnings


def test_the_demo_on_stock_llama_cpp_says_the_rule_for_q8_0_and_says_it_once(window, qtbot):
    window.launch.set_engines([STOCK])
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_demo()
    plan = sig.args[0]
    if plan.mode is not PlanMode.STOCK:  # the demo's own rolling window: plan it for stock llama.cpp
        with qtbot.waitSignal(window.planned) as sig:
            window.settings.set_engine_window(False)
        plan = sig.args[0]
    chosen = next(a for a in plan.alternatives if a.chosen)
    assert chosen.kind is AlternativeKind.SMALLER_KV_TYPE and plan.launch.n_ctx == 512 * K
    row = next(r for r in window.budget.options.rows if r.label == chosen.label)
    assert "chosen only when nothing else fits" not in row.note  # a shorter context fits: that read as false
    assert "chosen only when nothing that keeps the asked context and KV type fits" in row.note
    assert window.budget.options.rows[0].label.startswith("Largest context fully on GPU: ")
    said = shown_text(window.budget.verdict) + shown_text(window.budget.warnings)
    # over the bars its gist and its speed, once; the rule itself in its row of "Other ways to run it"
    assert said.count("a smaller KV cache type, everything resident (~") == 1 and chosen.note not in said


def test_without_a_gpu_a_model_with_a_projector_is_not_called_does_not_fit(no_gpu_desktop, qtbot, tmp_path):
    """A vision projector beside the model: the CPU plan moves it to the CPU too, still the only way."""
    (tmp_path / "vl").mkdir()
    model = tmp_path / "vl" / "model.gguf"
    os.symlink(gguf_factory.ensure(shapes.TINY_CHAT), model)
    os.symlink(gguf_factory.ensure(shapes.TINY_MMPROJ), tmp_path / "vl" / "mmproj-f16.gguf")
    w = no_gpu_desktop
    plan = _open(w, qtbot, model)
    assert plan.mode == PlanMode.CPU and plan.feasible and plan.projector is not None and plan.projector.device == "host"
    assert w.settings.settings().mmproj  # offered and planned
    text = shown_text(w.budget.verdict)
    assert text.startswith("Fits") and "no GPU" in text and "Does not fit as set" not in text, text
    assert w.budget.alternative.isHidden()  # no "Apply: planned settings" that only sets -ngl 0
    assert w.settings.context.fits.text().endswith("in host RAM")
