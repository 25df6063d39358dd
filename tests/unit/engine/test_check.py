"""Plan vs actual on the recorded H200 start-up log: the right per-device actuals, judged within 1 MiB."""

from __future__ import annotations

import json
from pathlib import Path

from app.engine.check import HOST, ActualSource, CheckPart, CheckRow, PlanCheck, actuals, check_plan, describe
from app.llamacpp.logs import mib_to_bytes, parse_log
from app.planner.devices import GpuProcess, GpuSample, Snapshot
from app.planner.plan_types import DevicePlan, HostPlan, KvSummary, Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.units import GiB, MiB

LOG = "h200/llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log"


def _log(shared: Path) -> list[str]:
    return (shared / LOG).read_text().splitlines()


def _plan(weights: float = 14179.61, kv: float = 98304.0, compute: float = 623.01) -> Plan:
    gpu = DevicePlan(name="CUDA0", label="NVIDIA H200", total=140 * GiB, other_processes=0,
                     weights=mib_to_bytes(weights), compute=mib_to_bytes(compute), kv_resident=mib_to_bytes(kv),
                     overhead=590 * MiB, safety=256 * MiB, free=0)
    host = HostPlan(total=128 * GiB, available=120 * GiB, weights_mapped=mib_to_bytes(788.91), kv_tail=0,
                    compute_pinned=mib_to_bytes(532.01), free=0, output_buffer=mib_to_bytes(2.32),
                    prompt_cache=8192 * MiB)
    return Plan(launch=LaunchSettings(n_ctx=524288, n_parallel=4, kv_unified=True), mode=PlanMode.STOCK,
                gpus=(gpu,), host=host, feasible=True, reason="", warnings=(), window_cells=524288, tail_cells=0,
                vram_target=None)


def test_recorded_h200_log_gives_the_per_device_actuals(shared_fixtures: Path) -> None:
    buffers = parse_log("\n".join(_log(shared_fixtures)))
    assert buffers.model == {"CPU_Mapped": mib_to_bytes(788.91), "CUDA0": mib_to_bytes(14179.61)}
    assert buffers.kv == {"CUDA0": mib_to_bytes(98304.00)}
    assert buffers.compute == {"CUDA0": mib_to_bytes(623.01), "CUDA_Host": mib_to_bytes(532.01)}
    got = actuals(buffers)
    assert got[("CUDA0", CheckPart.WEIGHTS)] == mib_to_bytes(14179.61)
    assert got[("CUDA0", CheckPart.KV)] == mib_to_bytes(98304.00)
    assert got[("CUDA0", CheckPart.COMPUTE)] == mib_to_bytes(623.01)
    assert got[(HOST, CheckPart.WEIGHTS)] == mib_to_bytes(788.91)
    # pinned compute, and the 2.32 MiB logits buffer as its own part
    assert got[(HOST, CheckPart.COMPUTE)] == mib_to_bytes(532.01)
    assert got[(HOST, CheckPart.OUTPUT)] == mib_to_bytes(2.32)


def test_a_plan_that_held_is_ok_row_by_row_and_nvml_counts_the_cuda_context(shared_fixtures: Path) -> None:
    # What NVML would show for this engine: the breakdown's self (113106 MiB) + unaccounted (602 MiB).
    engine = GpuProcess(4242, 113708 * MiB, is_engine=True)
    snap = Snapshot((GpuSample(0, "NVIDIA H200", 140 * GiB, 20 * GiB, 120 * GiB, 0, (engine,)),), ok=True)
    check = check_plan(_plan(), _log(shared_fixtures), snapshot=snap)
    assert check.ok, check.table()
    kv = check.row("CUDA0", "kv")
    assert kv is not None and kv.error == 0
    proc = check.row("CUDA0", "process")
    assert proc is not None and proc.source is ActualSource.NVML and abs(proc.error or 0) < 16 * MiB
    rows = json.loads(json.dumps(check.to_json()))["rows"]  # the JSON names sources as before
    assert [r["source"] for r in rows if r["part"] == "process"] == ["NVML"] and rows[0]["source"] == "engine log"
    assert "every buffer within 1 MiB" in describe(check)
    table = check.table()
    assert "98,304.00 MiB" in table and "CUDA0" in table


def test_a_plan_that_missed_by_more_than_a_mib_is_flagged(shared_fixtures: Path) -> None:
    check = check_plan(_plan(compute=600.0), _log(shared_fixtures))
    bad = check.row("CUDA0", "compute")
    assert bad is not None and not bad.ok
    assert not check.ok
    assert "CUDA0 compute 23 MiB over" in describe(check)


def test_a_log_without_buffer_lines_warns_instead_of_passing() -> None:
    check = check_plan(_plan(), ["I srv  llama_server: listening on http://127.0.0.1:8080"])
    assert not check.ok
    assert any("verbosity 4" in w for w in check.warnings)


def test_opencoti_props_block_adds_the_window_row(shared_fixtures: Path) -> None:
    props = {"opencoti": {"fully_resident": True, "n_cells_resident": 524288, "n_layers_spilling": 0}}
    check = check_plan(_plan(), _log(shared_fixtures), props=props)
    row = check.row("all", "window cells")
    assert row is not None and row.ok and row.unit == "cells"
    assert check.opencoti == props["opencoti"]


# Recorded from `headroom`'s CPU plan of the Llama-3.1-8B Q4_K_M shape served by the CPU build
# (llama.cpp 0c1e57098, native AVX2/AVX512, -c 512 -np 1 -lv 4): Q4_K matmul weights are copied into
# CPU_REPACK while the mapping still spans the whole file.
CPU_REPACK_LOG = [
    "0.00.157.649 I load_tensors:   CPU_Mapped model buffer size =  4685.30 MiB",
    "0.00.157.650 I load_tensors:   CPU_REPACK model buffer size =  3204.00 MiB",
    "0.03.063.527 I llama_context:        CPU  output buffer size =     0.49 MiB",
    "0.03.063.636 I llama_kv_cache:        CPU KV buffer size =    64.00 MiB",
    "0.03.100.298 I sched_reserve:        CPU compute buffer size =   116.51 MiB",
]


def _cpu_plan(weights_mib: float, repacked_mib: float) -> Plan:
    host = HostPlan(total=24 * GiB, available=22 * GiB, weights_mapped=mib_to_bytes(weights_mib), kv_tail=64 * MiB,
                    compute_pinned=mib_to_bytes(116.51), free=0, weights_repacked=mib_to_bytes(repacked_mib),
                    output_buffer=mib_to_bytes(0.49))
    return Plan(launch=LaunchSettings(n_ctx=512), mode=PlanMode.CPU, gpus=(), host=host, feasible=True, reason="",
                warnings=(), window_cells=0, tail_cells=512, vram_target=None)


def test_host_weights_are_the_mapped_file_plus_the_repacked_copy() -> None:
    check = check_plan(_cpu_plan(4685.30 + 3204.00, 3204.00), CPU_REPACK_LOG)
    row = check.row(HOST, "weights")
    assert row is not None and row.actual == mib_to_bytes(4685.30) + mib_to_bytes(3204.00)
    assert row.ok and check.ok, check.table()


def test_a_plan_that_forgot_the_repacked_copy_is_off_by_it() -> None:
    check = check_plan(_cpu_plan(4685.30, 0), CPU_REPACK_LOG)
    row = check.row(HOST, "weights")
    assert row is not None and not row.ok and row.error == mib_to_bytes(3204.00)
    assert "host weights 3.1 GiB over" in describe(check)


def test_a_part_planned_at_zero_that_the_engine_allocated_is_not_ok() -> None:
    # the reviewer's "host kv 0.00 MiB planned / 1.00 MiB actual ok": the KV went somewhere the plan
    # did not put it, which no MiB-rounding tolerance should hide
    check = PlanCheck((CheckRow(HOST, CheckPart.KV, 0, 1 * MiB), CheckRow(HOST, CheckPart.COMPUTE, 0, 2 * 1024)))
    lines = check.table().splitlines()
    kv = next(line for line in lines if " kv " in line)
    assert kv.endswith("+1.00 MiB  OFF"), kv
    rounding = next(line for line in lines if " compute " in line)  # 2 KiB logs as 0.00 MiB: same launch
    assert rounding.endswith("ok"), rounding
    assert not check.ok and "host kv 1 MiB over" in describe(check)


def test_an_error_below_the_log_resolution_reads_plus_zero() -> None:
    table = PlanCheck((CheckRow("CUDA0", CheckPart.WEIGHTS, 100 * MiB, 100 * MiB - 100),)).table()
    assert "+0.00 MiB" in table and "-0.00" not in table


def test_the_opencoti_engines_window_is_shown_beside_the_plans() -> None:
    """The engine's own account (its boot line's last re-sizing, its /props block: recordings, see
    tests/fixtures/opencoti/README.md) row by row beside the planned window, host tail and spilling layers."""
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "opencoti"
    log = [ln for ln in (fixtures / "window-boot-two-pass.log").read_text().splitlines() if not ln.startswith("#")]
    props = json.loads((fixtures / "props-window.json").read_text())
    kv = KvSummary(total=6144 * MiB, bytes_per_cell=192 * 1024, n_ctx=32768, n_ctx_seq=32768, n_seq=1,
                   caches=({"swa": False, "cells": 32768, "n_stream": 1, "layers": 48, "size": 6144 * MiB},))

    def plan(window: int, tail: int) -> Plan:
        host = HostPlan(total=24 * GiB, available=22 * GiB, weights_mapped=0, kv_tail=0, compute_pinned=0, free=0)
        return Plan(launch=LaunchSettings(n_ctx=32768), mode=PlanMode.WINDOW, gpus=(), host=host, feasible=True,
                    reason="", warnings=(), window_cells=window, tail_cells=tail, vram_target=None, kv=kv)

    check = check_plan(plan(24576, 8192), log, props=props)
    rows = {r.part: r for r in check.rows if r.device == "all"}
    assert {p: (r.planned, r.actual, r.ok) for p, r in rows.items()} == {
        CheckPart.WINDOW_CELLS: (24576, 24576, True), CheckPart.TAIL_CELLS: (8192, 8192, True),
        CheckPart.SPILLING_LAYERS: (48, 48, True)}
    off = {r.part: r for r in check_plan(plan(32768, 0), log, props=props).rows if r.device == "all"}
    assert not off[CheckPart.TAIL_CELLS].ok and off[CheckPart.TAIL_CELLS].error == 8192
    assert not off[CheckPart.SPILLING_LAYERS].ok and off[CheckPart.SPILLING_LAYERS].planned == 0
