"""The H200 matrix script (bench/h200/): it reads ``headroom serve``'s own plan-vs-actual table,
judges each row by issue 9's bar against NVML, covers the issue's matrix and resumes after a timeout.
The GPU run itself happens on the device; here its parsing and bookkeeping run on real output."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.check import PROCESS_TOLERANCE, ActualSource, CheckPart, CheckRow, PlanCheck
from app.planner.units import MiB
from bench.h200 import matrix
from bench.h200.serve_row import Result, Row, parse_check

ENGINE_PID = 4242


def _serve_output(planned: int, nvml: int) -> list[str]:
    """What ``headroom serve`` prints, made by the real table code (app/engine/check.py)."""
    check = PlanCheck((
        CheckRow("CUDA0", CheckPart.WEIGHTS, 14179_61 * MiB // 100, 14179_61 * MiB // 100),
        CheckRow("CUDA0", CheckPart.KV, 98304 * MiB, 98304 * MiB),
        CheckRow("CUDA0", CheckPart.COMPUTE, 635 * MiB, 700 * MiB),
        CheckRow("host", CheckPart.WEIGHTS, 788_91 * MiB // 100, 788_91 * MiB // 100),
        CheckRow("CUDA0", CheckPart.PROCESS, planned, nvml, PROCESS_TOLERANCE, ActualSource.NVML),
    ))
    return ["plan vs actual:", *check.table().splitlines(), "serving at http://127.0.0.1:1 — Ctrl-C to stop"]


def _result(planned_mib: float, nvml_mib: float, key: str = "row") -> Result:
    result = Result(key)
    result.output = _serve_output(int(planned_mib * MiB), int(nvml_mib * MiB))
    result.check = parse_check(result.output)
    result.nvml = {"engine_pid": ENGINE_PID, "gpus": [{"index": 0, "used": 0, "total": 150754820096,
                   "processes": [{"pid": ENGINE_PID, "used": int(nvml_mib * MiB)}]}]}
    return result


def test_the_serve_table_is_read_back_in_mib() -> None:
    rows = {(c["device"], c["part"]): c for c in parse_check(_serve_output(113_000 * MiB, 113_500 * MiB))}
    assert rows[("CUDA0", "compute")]["error_mib"] == pytest.approx(65.0)
    assert rows[("CUDA0", "compute")]["verdict"] == "OFF"
    assert rows[("CUDA0", "weights")]["planned_mib"] == pytest.approx(14179.61, abs=0.01)
    assert rows[("CUDA0", "process")]["actual_mib"] == pytest.approx(113_500.0)
    assert rows[("host", "weights")]["verdict"] == "ok"


def test_a_big_launch_passes_within_one_percent() -> None:
    result = _result(113_000, 113_900)  # 900 MiB off, 1 % of 113,900 is 1,139
    verdict = matrix.judge(result)
    assert result.status == "ok"
    assert verdict["CUDA0"]["error_mib"] == pytest.approx(900.0)
    assert verdict["CUDA0"]["nvml_source"] == "pynvml per-process"


def test_a_small_launch_is_held_to_64_mib() -> None:
    result = _result(2_000, 2_070)  # 1 % would be 20.7 MiB; the floor is 64
    verdict = matrix.judge(result)
    assert result.status == "off" and verdict["CUDA0"]["tolerance_mib"] == pytest.approx(64.0)


def test_a_row_that_did_not_launch_keeps_its_reason() -> None:
    result = Result("row", status="no fit", note="KV does not fit")
    assert matrix.judge(result) == {} and result.status == "no fit"


def test_the_matrix_is_issue_9s_and_starts_with_the_must_show_case() -> None:
    rows = matrix.h200_rows()
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys)) == 32
    first = rows[0]
    assert (first.model, first.ctx, first.smoke, first.n_parallel, first.kv_unified) == \
        (matrix.QWEN_1M, "512k", True, 4, True)
    assert {r.model for r in rows[:5]} == {matrix.QWEN_1M, matrix.LLAMA_8B, matrix.GEMMA_12B, matrix.QWEN3_MOE}
    assert all((r.n_parallel == 4) == r.kv_unified for r in rows)
    serve = first.serve_argv(Path("m.gguf"), 120)
    assert serve[:2] == ["headroom", "serve"] and "--smoke" in serve and "-kvu" in serve
    assert serve[serve.index("-c") + 1] == "512k" and serve[serve.index("-fa") + 1] == "on"


def test_a_second_call_resumes_after_the_rows_already_done(tmp_path: Path) -> None:
    report = matrix.Report(tmp_path / "state" / "2026-12-01", tmp_path / "out", "t")
    row = Row(matrix.LLAMA_8B, "128k", "f16")
    result = _result(10_000, 10_010, row.key)
    report.add(1, row, result, matrix.judge(result))
    again = matrix.Report(tmp_path / "state" / "2026-12-01", tmp_path / "out2", "t")
    assert again.done() == {row.key}
    table = (tmp_path / "out2" / "h200-2026-12-01.md").read_text()
    assert f"| 1 | {matrix.LLAMA_8B} | 128k | f16 | 1 | 10,000 | 10,010 | +10 | 100 | ok |" in table
    assert (tmp_path / "out2" / "logs.tar.gz").is_file()


def test_without_serves_process_row_nvml_read_here_still_judges() -> None:
    """If Headroom's own NVML poll misses the engine, the bench's pynvml reading still decides,
    against serve's GPU buffers plus the overhead the plan counts."""
    result = _result(113_000, 113_900)
    result.check = [c for c in result.check if c["part"] != "process"]
    result.plan_estimated = {"gpus": [{"overhead": 590 * MiB}]}
    verdict = matrix.judge(result)["CUDA0"]
    assert verdict["planned_mib"] == pytest.approx(14179.61 + 98304 + 635 + 590, abs=0.1)
    assert verdict["planned_source"] == "serve's buffers + plan overhead"
    assert result.status == "ok" and "no NVML process row" in result.note
