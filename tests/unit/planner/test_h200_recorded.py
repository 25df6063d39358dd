"""The planner against what the H200 showed (issue 9), replayed from tests/fixtures/h200/.

Recorded there by bench/h200/ on 2026-11-30 (bench/results/h200-2026-11-30.md): CUDA pass 1 for 150
launches of four shape models (32k–512k, f16/q8_0/q4_0, ubatch 512–2048, -np 1/4 ±kvu), 32 launches
through ``headroom serve`` with NVML's reading of the engine process, and one whole engine log. The GPU
cannot run here; everything the planner computes from those readings is recomputed below.

The estimate's terms were fitted to these same pass-1 readings, so here they guard against regressions;
the CPU side is checked live against pass 1 on shapes the fit never saw (tests/integration/
test_estimate_vs_pass1.py: MLA, a recurrent hybrid, flash attention off).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from app.engine.check import check_plan
from app.planner.devices import GpuDevice, HostMemory, Inventory
from app.planner.estimate import BASE_MARGIN, estimate_compute
from app.planner.gguf_model import ModelShape, read_shape
from app.planner.kv import context_size
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan import make_plan
from app.planner.settings import LaunchSettings
from app.planner.sources import SourceKind
from app.planner.units import GiB, MiB
from tests.fixtures import gguf_factory, shapes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
SHOWCASE = "qwen2.5-14b-instruct-1m-q8_0-c512k-f16-np4-kvu-smoke"


def _jsonl(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


PASS1 = _jsonl("pass1.jsonl")
ROWS = _jsonl("rows.jsonl")


@cache
def shape(name: str) -> ModelShape:
    return read_shape(gguf_factory.ensure(shapes.BY_NAME[name]))


def measured(rec: dict[str, Any], device_is_host: bool) -> int:
    return sum(d["compute"] for d in rec["devices"] if d["host"] == device_is_host)


def measurement(rec: dict[str, Any]) -> Measurement:
    return Measurement(tuple(DeviceMeasurement(d["name"], compute=d["compute"], host=d["host"]) for d in rec["devices"]),
                       backend=rec["backend"], llama_commit=rec["llama_commit"], seconds=1.0,
                       launch=LaunchSettings(**rec["settings"]))


def h200(row: dict[str, Any]) -> Inventory:
    """The H200 as NVML showed it before the row's launch (total; what was not free: the driver's reserve)."""
    total = row["gpu_total"]
    return Inventory((GpuDevice(0, "NVIDIA H200", total, total - row["gpu_not_free"]),), HostMemory(125 * GiB, 124 * GiB))


def issue9_tolerance(mib: float) -> float:
    return max(0.01 * mib, 64.0)


def test_the_recording_covers_what_issue_9_asks() -> None:
    models = {r["model"] for r in ROWS}
    assert models == {"qwen2.5-14b-instruct-1m-q8_0", "llama-3.1-8b-instruct-q4_k_m", "gemma-3-12b-it-q4_k_m",
                      "qwen3-30b-a3b-q4_k_m"}
    combos = {(r["launch"]["n_ctx"], r["launch"]["type_k"], r["launch"]["n_parallel"], r["launch"]["kv_unified"])
              for r in ROWS}
    assert combos == {(c, t, n, n > 1) for c in (131072, 524288) for t in ("f16", "q8_0") for n in (1, 4)}
    assert all(r["launch"]["flash_attn"] == "on" for r in ROWS) and len(PASS1) >= 150


@pytest.mark.parametrize("rec", PASS1, ids=lambda r: "{model}-{n_ctx}-{type_k}-ub{n_ubatch}-np{n_parallel}".format(
    model=r["model"], **r["settings"]))
def test_estimate_is_never_under_cuda_pass1_and_at_most_its_margin_over(rec: dict[str, Any]) -> None:
    """Before pass 1 the plan prices compute with the estimate: on every recorded CUDA launch it is at
    least what llama.cpp's allocator reserved, and no more than the margin above it."""
    settings = LaunchSettings(**rec["settings"])
    est = estimate_compute(shape(rec["model"]), settings, context_size(settings))
    for got, want in ((est.gpu, measured(rec, False)), (est.host, measured(rec, True))):
        assert want - 4 * MiB <= got - BASE_MARGIN <= want + 4 * MiB, (got / MiB, want / MiB)


def test_quantized_cache_costs_compute_at_long_context() -> None:
    """q8_0 halves the KV cache but CUDA's flash attention dequantizes a whole layer's K and V to f16:
    at 512k Gemma-3-12B reserved 4641 MiB of compute with q8_0 against 627 MiB with f16. The
    estimate shows that before any measurement (it used to say ~1 GiB for both)."""
    gemma = shape("gemma-3-12b-it-q4_k_m")
    f16, q8 = (LaunchSettings(n_ctx=524288, type_k=t, type_v=t) for t in ("f16", "q8_0"))
    est_f16 = estimate_compute(gemma, f16, context_size(f16)).gpu
    est_q8 = estimate_compute(gemma, q8, context_size(q8)).gpu
    assert est_q8 >= 4641 * MiB and est_q8 - est_f16 >= 4000 * MiB


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["key"])
def test_plan_without_pass1_meets_the_issue_9_bar(row: dict[str, Any]) -> None:
    """``headroom plan`` before any measurement: its GPU total (weights + KV + estimated compute +
    overhead) within 1 % or 64 MiB of what NVML reported for the engine process, never below it."""
    plan = make_plan(shape(row["model"]), h200(row), LaunchSettings(**row["launch"]))
    (gpu,) = plan.gpus
    assert plan.feasible and gpu.sources["compute"].kind is SourceKind.ESTIMATED
    nvml = row["nvml_engine_mib"]
    assert abs(gpu.used / MiB - nvml) <= issue9_tolerance(nvml)
    assert gpu.used / MiB >= nvml  # the estimate errs on the side of room


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["key"])
def test_plan_with_pass1_matches_nvml(row: dict[str, Any]) -> None:
    """With the row's own CUDA pass 1, the plan is what serve printed there, and within the bar of NVML."""
    launch = LaunchSettings(**row["launch"])
    rec = next(p for p in PASS1 if p["model"] == row["model"] and LaunchSettings(**p["settings"]) == launch)
    plan = make_plan(shape(row["model"]), h200(row), launch, measurement=measurement(rec))
    (gpu,) = plan.gpus
    assert gpu.used / MiB == pytest.approx(row["planned_with_pass1_mib"], abs=0.01)
    nvml = row["nvml_engine_mib"]
    assert abs(gpu.used / MiB - nvml) <= issue9_tolerance(nvml)


def test_recorded_512k_engine_log_is_what_the_plan_said() -> None:
    """The must-show launch (Qwen2.5-14B-1M, 512k, -np 4 -kvu): every buffer the engine's log reports
    is the plan's within 1 MiB, and the forked smoke produced tokens on both sequences."""
    row = next(r for r in ROWS if r["key"] == SHOWCASE)
    launch = LaunchSettings(**row["launch"])
    rec = next(p for p in PASS1 if p["model"] == row["model"] and LaunchSettings(**p["settings"]) == launch)
    plan = make_plan(shape(row["model"]), h200(row), launch, measurement=measurement(rec))
    lines = (FIXTURES / f"{SHOWCASE}.engine.log").read_text().splitlines()
    check = check_plan(plan, (ln for ln in lines if not ln.startswith("# ")))
    assert check.ok, check.table()
    assert {(r.device, r.part) for r in check.rows} >= {("CUDA0", "weights"), ("CUDA0", "kv"), ("CUDA0", "compute"),
                                                       ("host", "weights"), ("host", "compute")}
    assert check.row("CUDA0", "kv").actual == 98304 * MiB  # type: ignore[union-attr]
    assert row["smoke"].startswith("ok")
