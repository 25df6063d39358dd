"""The same model, settings and GPU plan the same in ``headroom plan`` and in the window: both go
through the planner's one ``PlanRequest`` (app.planner.request), with the overhead measured on this
GPU and driver and the same pass 1.

NVML is the recorded H200 (tests/fixtures/fake_nvml.py) for both: the window gets it as its
``nvml``, the CLI as the ``pynvml`` it imports. Host RAM is held still, so both read the same
machine. The overhead is the recorded CUDA-context process's NVML figure (it holds no buffers), kept
as ``headroom serve`` keeps it after the first launch on a GPU and driver
(``app.machine.overhead.record_overhead``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.cli import build_parser
from app.commands.common import settings_from_args
from app.machine import devices
from app.machine.overhead import record_overhead
from app.planner.devices import HostMemory
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan_types import Plan
from app.planner.settings import LaunchSettings
from app.planner.sources import SourceKind
from app.planner.units import GiB, MiB
from app.probe import measure as probe
from app.ui.main_window import MainWindow
from app.ui.qt import Qt
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml, load_readings
from tests.ui.windows import gpus_read

#: NVML's figure for the recorded process holding a CUDA context on the H200 (pid 419,
#: tests/fixtures/h200/nvml-readings.txt).
USED = 543162368
HOST = HostMemory(total=125 * GiB, available=100 * GiB)
#: Pass 1 as the H200 run recorded it (the sched_reserve lines of tests/fixtures/h200/*.log).
RECORDED = Measurement((DeviceMeasurement("CUDA0", compute=round(623.01 * MiB)),
                        DeviceMeasurement("CUDA_Host", compute=round(532.01 * MiB), host=True)),
                       backend="CUDA", llama_commit="0c1e57098", seconds=1.5)

CASES = {
    # fits as asked, compute estimated
    "estimated": ("llama-3.1-8b-instruct-q4_k_m", ["-c", "64k", "-np", "2", "-kvu"], False),
    # fits as asked, pass 1 cached for exactly this launch
    "measured": ("llama-3.1-8b-instruct-q4_k_m", ["-c", "64k", "-np", "2", "-kvu"], True),
    # does not fit as asked (1M f16 KV): the plan chooses an alternative, priced with the
    # measurement of the settings as given
    "alternative": ("qwen2.5-14b-instruct-1m-q8_0", ["-c", "1M"], True),
}


@pytest.fixture
def h200_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeNvml:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))  # overheads and pass 1: this test's
    recorded = load_readings()
    measured = record_overhead(recorded.name, recorded.driver, USED)
    assert measured is not None and measured.bytes == USED
    nvml = FakeNvml(state="idle")  # the process is gone; the GPU is the idle recording
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # what `headroom plan` imports
    monkeypatch.setattr(devices, "host_memory", lambda: HOST)
    # Pass 1's child replaced by the recorded numbers; the probe's own cache is used as it is.
    monkeypatch.setattr(probe, "measure", lambda _path, settings, **_kw: replace(RECORDED, launch=settings))
    return nvml


def _cli_plan(capsys: pytest.CaptureFixture[str], model: Path, flags: list[str]) -> dict[str, Any]:
    assert cli.main(["plan", str(model), *flags, "--json"]) in (0, 1)
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _window_plan(qtbot: Any, tmp_path: Path, nvml: FakeNvml, model: Path, settings: LaunchSettings,
                 measure: bool) -> tuple[MainWindow, Plan]:
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml,
                   read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.settings.set_settings(settings)
    with qtbot.waitSignal(w.planned):
        assert w.open_model(model)
    if measure:  # the Measure button: pass 1 through the same cache (the one stored above)
        with qtbot.waitSignal(w.planned, timeout=30_000):
            qtbot.mouseClick(w.measure.button, Qt.MouseButton.LeftButton)
    assert w.plan is not None
    return w, w.plan


@pytest.mark.parametrize("case", sorted(CASES))
def test_headroom_plan_and_the_window_plan_the_same(case: str, h200_machine: FakeNvml,
                                                    shape_model: Callable[[str], Path], qtbot: Any,
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, flags, measured = CASES[case]
    model = shape_model(name)
    settings = settings_from_args(build_parser().parse_args(["plan", str(model), *flags]))
    if measured:  # as `headroom measure` with the same flags would have left it
        assert probe.measure_cached(model, settings) == (replace(RECORDED, launch=settings), False)
    data = _cli_plan(capsys, model, flags)
    w, plan = _window_plan(qtbot, tmp_path, h200_machine, model, settings, measured)
    expected = plan.to_json()
    assert {k: data[k] for k in expected} == expected  # field by field
    assert w.current.fit is not None and data["max_context"] == w.current.fit.to_json()
    cli_gpu, gpu = data["gpus"][0], plan.gpus[0]  # the overhead measured on this GPU and driver, in both
    assert cli_gpu["overhead"] == gpu.overhead == USED
    assert cli_gpu["sources"]["overhead"] == str(gpu.sources["overhead"])
    assert gpu.sources["overhead"].kind == SourceKind.MEASURED_HERE
    assert str(gpu.sources["overhead"]).startswith("measured on this GPU and driver (measured on NVIDIA H200")
    compute = plan.gpus[0].sources["compute"]
    assert (data["measurement"] is not None) == measured
    if case == "alternative":
        assert plan.launch != settings and compute.kind == SourceKind.MEASURED_ELSEWHERE
    else:
        assert plan.launch == settings and compute.kind == (SourceKind.MEASURED if measured else SourceKind.ESTIMATED)
    w.close()
