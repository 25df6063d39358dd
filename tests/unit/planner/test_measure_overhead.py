"""Per-process overhead, measured once per GPU and driver by the first `headroom serve` on it: NVML's
reading of the engine process less the buffers its log shows (the H200 run replayed: no GPU here)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.commands.serve import learn_overhead
from app.engine.check import PROCESS_TOLERANCE, ActualSource, CheckPart, CheckRow, PlanCheck
from app.machine.overhead import DEFAULT_OVERHEAD, known_overhead, record_overhead
from app.planner.plan_types import DevicePlan
from app.planner.units import MiB
from tests.fixtures.fake_nvml import FakeNvml, load_readings

ROWS = Path(__file__).resolve().parents[2] / "fixtures" / "h200" / "rows.jsonl"


def recorded_check() -> tuple[PlanCheck, DevicePlan]:
    """`headroom serve`'s plan-vs-actual on the H200 run's first row (Qwen2.5-14B-1M at -c 512k):
    the engine's logged buffers and NVML's reading of the engine process, as serve printed them."""
    row = json.loads(ROWS.read_text().splitlines()[0])
    rows = tuple(CheckRow(r["device"], CheckPart(r["part"]), round(r["planned_mib"] * MiB), round(r["actual_mib"] * MiB),
                          *((PROCESS_TOLERANCE, ActualSource.NVML) if r["part"] == "process" else ()))
                 for r in row["check"])
    gpu = DevicePlan(name="CUDA0", label="NVIDIA H200", total=row["gpu_total"], other_processes=row["gpu_not_free"],
                     weights=0, compute=0, kv_resident=0, overhead=DEFAULT_OVERHEAD, safety=0, free=0)
    return PlanCheck(rows), gpu


def test_without_a_measurement_the_planner_gets_the_h200_default(tmp_path: Path) -> None:
    o = known_overhead("NVIDIA H200", "580.159.04", path=tmp_path / "overhead.json")
    assert (o.bytes, o.measured) == (DEFAULT_OVERHEAD, False)
    assert "H200" in o.source


def test_the_engine_process_beyond_its_logged_buffers_is_the_overhead() -> None:
    check, _ = recorded_check()
    # 113,698 MiB for the process; 14,179.61 + 98,304 + 623.01 MiB of buffers on CUDA0
    assert check.process_overhead("CUDA0") == round(113698 * MiB) - sum(
        round(v * MiB) for v in (14179.61, 98304.0, 623.01))
    assert 588 * MiB <= (check.process_overhead("CUDA0") or 0) <= 595 * MiB  # bench/results/h200-2026-11-30.md
    assert check.process_overhead("host") is None  # no NVML row: nothing to learn


def test_the_first_serve_on_a_gpu_and_driver_keeps_it_for_later_plans(tmp_path: Path) -> None:
    store = tmp_path / "overhead.json"
    check, gpu = recorded_check()
    nvml = FakeNvml(state="idle")  # the recorded H200's driver
    lines = learn_overhead([gpu], check, nvml=nvml, path=store)
    beyond = check.process_overhead("CUDA0")
    assert lines == [f"overhead: 591 MiB per engine process, measured on NVIDIA H200 (driver "
                     f"{load_readings().driver}) with NVML; plans for this GPU and driver use it"]
    kept = known_overhead("NVIDIA H200", load_readings().driver, path=store)
    assert (kept.bytes, kept.measured) == (beyond, True)
    # the next serve keeps the first figure and says nothing; another driver is measured again
    assert learn_overhead([gpu], check, nvml=nvml, path=store) == []
    assert record_overhead("NVIDIA H200", "590.10", 600 * MiB, path=store) is not None
    assert known_overhead("NVIDIA H200", load_readings().driver, path=store).bytes == beyond


@pytest.mark.parametrize("where", ["simulated", "rpc"])
def test_a_simulated_card_or_a_workers_device_teaches_nothing(tmp_path: Path, where: str) -> None:
    check, gpu = recorded_check()
    other = replace(gpu, simulated=True) if where == "simulated" else replace(gpu, remote="10.0.0.2:50052")
    assert learn_overhead([other], check, nvml=FakeNvml(state="idle"), path=tmp_path / "o.json") == []
    assert not (tmp_path / "o.json").exists()


def test_a_cache_that_cannot_be_written_keeps_the_default(tmp_path: Path) -> None:
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder should be")  # mkdir fails, as on a read-only cache
    assert record_overhead("NVIDIA H200", "580.159.04", 591 * MiB, path=blocked / "overhead.json") is None
    assert not known_overhead("NVIDIA H200", "580.159.04", path=blocked / "overhead.json").measured
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing half-written beside it
