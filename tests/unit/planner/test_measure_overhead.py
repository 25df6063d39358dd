"""Per-process overhead from NVML, measured once per GPU and driver (NVML replayed: no GPU here)."""

from __future__ import annotations

from pathlib import Path

from app.machine.overhead import DEFAULT_OVERHEAD, known_overhead, measure_overhead
from tests.fixtures.fake_nvml import FakeNvml

#: The recorded process holding a CUDA context on the H200 (tests/fixtures/h200/nvml-readings.txt).
PID, USED = 419, 543162368


def test_without_a_measurement_the_planner_gets_the_h200_default(tmp_path: Path) -> None:
    o = known_overhead("NVIDIA H200", "580.159.04", path=tmp_path / "overhead.json")
    assert (o.bytes, o.measured) == (DEFAULT_OVERHEAD, False)
    assert "H200" in o.source


def test_measured_once_then_reused_per_gpu_and_driver(tmp_path: Path) -> None:
    store = tmp_path / "overhead.json"
    nvml = FakeNvml(state="torch_ctx")
    nvml.nvmlInit()
    o = measure_overhead(nvml, 0, PID, buffers=0, driver="580.159.04", path=store)
    assert (o.bytes, o.measured) == (USED, True)
    assert "NVIDIA H200" in o.source
    # later: the stored figure, without asking NVML again
    calls = nvml.calls["nvmlDeviceGetComputeRunningProcesses"]
    assert measure_overhead(nvml, 0, PID, buffers=0, driver="580.159.04", path=store).bytes == USED
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == calls
    assert known_overhead("NVIDIA H200", "580.159.04", path=store).bytes == USED
    # a new driver is measured again; buffers the process logged are not overhead
    o2 = measure_overhead(nvml, 0, PID, buffers=100 * 1024 * 1024, driver="590.10", path=store)
    assert o2.bytes == USED - 100 * 1024 * 1024


def test_a_process_nvml_does_not_list_leaves_the_default(tmp_path: Path) -> None:
    nvml = FakeNvml(state="idle")
    nvml.nvmlInit()
    o = measure_overhead(nvml, 0, 12345, buffers=0, driver="580.159.04", path=tmp_path / "o.json")
    assert (o.bytes, o.measured) == (DEFAULT_OVERHEAD, False)
    assert not (tmp_path / "o.json").exists()
