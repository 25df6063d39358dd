"""The window times this CPU's attention for a model's head size it has no figure for (issue 30) in its
task pool, never on the GUI thread: the status bar says what it measures while the engine run goes on,
and the plan is priced again with the figure when it lands (app/ui/main_window.py ``_measure_attention``).
The run replays a recorded ``llama-batched-bench`` table (tests/conftest.py ``replay_bench``) that waits for a gate file,
so the test sees the window while the run is still going."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from app.ui.main_window import REPRICED, MainWindow
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml
from tests.ui.windows import gpus_read


def _window(qtbot, tmp_path: Path) -> MainWindow:  # type: ignore[no-untyped-def]
    """A window without GPUs (NVML missing), its GPUs read."""
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json",
                   nvml=FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), read_host=lambda: None)
    qtbot.addWidget(w)
    w.show()
    gpus_read(qtbot, w)
    return w


def test_a_new_head_size_is_measured_in_the_background_and_the_plan_priced_with_it(
        qtbot, shape_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay_bench: Path) -> None:
    model = shape_model("llama-3.1-8b-instruct-q4_k_m")  # 128-wide heads (in the test models' own cache)
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))  # no figure for this machine yet
    gate = tmp_path / "gate"
    monkeypatch.setenv("REPLAY_BENCH_GATE", str(gate))  # the run waits until the test has looked
    w = _window(qtbot, tmp_path)
    with qtbot.waitSignal(w.planned):
        assert w.open_model(model)
    measuring = "measuring this CPU's attention speed for 128-wide heads (once; up to a minute)…"
    qtbot.waitUntil(lambda: w.statusBar().currentMessage() == measuring, timeout=10_000)
    assert w.attention_status == measuring
    before = w.current.plan
    assert before is not None and before.speed_figures is not None
    assert before.speed_figures.host_cpu_attention == ()  # priced at bandwidth until the figure is in
    with qtbot.waitSignal(w.attentionMeasured, timeout=60_000) as landed:
        gate.touch()
    lines = landed.args[0]
    assert [line.split(": f16 decode")[0] for line in lines] == ["measured: this CPU's flash attention, 128-wide heads"]
    # (the speeds on screen change: the status says why)
    assert w.statusBar().currentMessage() == f"{lines[0]} — {REPRICED}" and w.attention_status == ""
    after = w.current.plan
    assert after is not None and after is not before and after.speed_figures is not None
    rates = after.speed_figures.host_cpu_attention
    assert {(r.kv_type, r.head_dim) for r in rates} == {("f16", 128), ("q8_0", 128)}
    assert all(r.decode.calibrated for r in rates)
    w.close()


def test_a_model_opened_before_an_engine_is_found_is_measured_once_one_is(
        qtbot, shape_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay_bench: Path) -> None:
    """The engines are found in the background: the first plan has nothing to time with. That plan must
    not use up the model's turn (a walkthrough found the window never measured in the usual flow)."""
    model = shape_model("llama-3.1-8b-instruct-q4_k_m")
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HEADROOM_BATCHED_BENCH", str(tmp_path / "no-bench-yet"))  # nothing to time with
    w = _window(qtbot, tmp_path)
    with qtbot.waitSignal(w.planned):
        assert w.open_model(model)
    assert w.attention_status == ""  # nothing measured, nothing said
    monkeypatch.setenv("HEADROOM_BATCHED_BENCH", str(replay_bench))  # an engine (its bench) is found
    with qtbot.waitSignal(w.attentionMeasured, timeout=60_000) as landed:
        w.current.replan()
    assert landed.args[0][0].startswith("measured: this CPU's flash attention, 128-wide heads: f16 decode ")
    w.close()
