"""The one plan request (app.planner.request): the overhead it plans with, which launches it asks
pass 1 for, and the largest context with the same numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from app.machine.overhead import machine_overhead
from app.machine.request import request_for_machine
from app.planner.devices import DeviceKind, HostMemory, Inventory
from app.planner.gguf.model import ModelShape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.request import DEFAULT_SAFETY, PlanRequest
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.sources import SourceKind
from app.planner.units import GiB, MiB
from tests.unit.planner.test_plan import H200_MEASURED, LONG, h200

DRIVER = "580.159.04"


def _real_h200() -> Inventory:
    """The simulated H200 as if NVML had read it (a driver, not simulated)."""
    inv = h200()
    return replace(inv, gpus=tuple(replace(g, kind=DeviceKind.NVML) for g in inv.gpus), driver=DRIVER)


def _store(tmp_path: Path, bytes_: int) -> Path:
    path = tmp_path / "overhead.json"
    path.write_text(json.dumps({f"NVIDIA H200 | driver {DRIVER}": {"bytes": bytes_, "source": "NVML, pid 42"}}))
    return path


def test_the_overhead_is_given_else_measured_on_this_gpu_and_driver_else_the_default(tmp_path: Path) -> None:
    store = _store(tmp_path, 612 * MiB)
    measured = machine_overhead(_real_h200(), path=store)
    assert measured == 612 * MiB
    assert str(getattr(measured, "source", "")) == "measured on this GPU and driver (NVML, pid 42)"
    assert machine_overhead(_real_h200(), 700 * MiB, path=store) == 700 * MiB  # --overhead wins
    assert machine_overhead(_real_h200(), path=tmp_path / "none.json") is None  # the planner's default
    assert machine_overhead(h200(), path=store) is None  # a simulated card has no driver to measure
    assert machine_overhead(Inventory((), HostMemory(8 * GiB, 8 * GiB)), path=store) is None


def test_a_request_for_this_machine_plans_with_the_measured_overhead(qwen14b: ModelShape, tmp_path: Path) -> None:
    request = request_for_machine(qwen14b, _real_h200(), overhead_path=_store(tmp_path, 612 * MiB))
    assert request.safety == DEFAULT_SAFETY == 256 * MiB
    gpu = request.plan(LONG).plan.gpus[0]
    assert gpu.overhead == 612 * MiB
    assert str(gpu.sources["overhead"]) == "measured on this GPU and driver (NVML, pid 42)"


def test_pass_1_is_asked_for_the_plans_own_launch_then_for_the_alternative_it_chose(qwen14b: ModelShape) -> None:
    # Measured, the compute buffer is far larger than estimated: the settings as given no longer fit.
    big = Measurement((DeviceMeasurement("CUDA0", compute=120 * GiB),
                       DeviceMeasurement("CUDA_Host", compute=532 * MiB, host=True)), "CUDA", "0c1e57098", 1.5)
    asked: list[LaunchSettings] = []

    def lookup(launch: LaunchSettings) -> Measurement | None:
        asked.append(launch)
        return big

    plan, used = PlanRequest(qwen14b, h200(), lookup=lookup).plan(LONG)
    assert plan.launch != LONG  # the measured plan chose an alternative …
    assert asked == [LONG, plan.launch]  # … and pass 1 was asked for it too
    assert used is big and plan.gpus[0].compute == 120 * GiB
    assert plan == make_plan(qwen14b, h200(), LONG, measurement=big)


def test_without_a_lookup_or_a_measurement_the_plan_is_estimated(qwen14b: ModelShape) -> None:
    assert PlanRequest(qwen14b, h200()).plan(LONG) == (make_plan(qwen14b, h200(), LONG), None)
    plan, used = PlanRequest(qwen14b, h200(), lookup=lambda _s: None).plan(LONG)
    assert used is None and plan.gpus[0].sources["compute"].kind == SourceKind.ESTIMATED


def test_a_measurement_of_the_settings_as_given_prices_the_alternative_and_says_so(qwen14b: ModelShape) -> None:
    """The window measures the settings as given: when the plan launches otherwise, those numbers
    are still used, labelled for the settings they were measured at (and `headroom plan` agrees)."""
    small = h200(free_mib=40 * 1024)  # 512k f16 KV (96 GiB) does not fit: an alternative is chosen
    measured = replace(H200_MEASURED, launch=LONG)
    plan, used = PlanRequest(qwen14b, small, lookup=lambda s: measured if s == LONG else None).plan(LONG)
    assert plan.launch != LONG and used is measured
    assert plan.gpus[0].sources["compute"].kind == SourceKind.MEASURED_ELSEWHERE
    assert str(plan.gpus[0].sources["compute"]).startswith("measured by pass 1 for other settings at ")
    assert plan == make_plan(qwen14b, small, LONG, measurement=measured)


def test_a_cpu_plan_uses_a_cpu_measurement_of_the_settings_as_given(qwen14b: ModelShape) -> None:
    settings = LaunchSettings(n_ctx=8192)  # -ngl all; with no GPU the plan launches -ngl 0
    cpu = Measurement((DeviceMeasurement("CPU", compute=300 * MiB, host=True),), "CPU", "0c1e57098", 0.2,
                      launch=settings)
    no_gpu = Inventory((), HostMemory(125 * GiB, 125 * GiB))
    plan, used = PlanRequest(qwen14b, no_gpu, lookup=lambda s: cpu if s == settings else None).plan(settings)
    assert plan.launch == settings.with_(n_gpu_layers=0) and used is cpu
    assert plan.host.sources["compute_pinned"].kind == SourceKind.MEASURED  # nothing could be offloaded anyway


def test_the_largest_context_counts_the_same_overhead_and_measurement(qwen14b: ModelShape, tmp_path: Path) -> None:
    request = request_for_machine(qwen14b, _real_h200(), overhead_path=_store(tmp_path, 4 * GiB))
    measured = replace(H200_MEASURED, launch=LONG)
    fit = request.largest_fit(LONG, measured)
    assert fit == max_context(qwen14b, _real_h200(), LONG, measurement=measured, overhead=4 * GiB)
    assert fit.resident < max_context(qwen14b, _real_h200(), LONG, measurement=measured).resident
