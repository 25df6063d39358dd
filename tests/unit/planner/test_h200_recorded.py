"""The planner against what the H200 showed (issue 9), replayed from tests/fixtures/h200/.

Recorded there by bench/h200/ on 2026-11-30 (bench/results/h200-2026-11-30.md): CUDA pass 1 for 150
launches of four shape models (32k–512k, f16/q8_0/q4_0, ubatch 512–2048, -np 1/4 ±kvu), 32 launches
through ``headroom serve`` with NVML's reading of the engine process, and one whole engine log. The GPU
cannot run here; everything the planner computes from those readings is recomputed below.

The estimate's terms were fitted to these pass-1 readings: every one is replayed, and the fit is redone
on the first device call's 32 launches alone, holding out the 118 of the second (below): the fit set
recovers the shipped terms (within 0.52 MiB of it), and they predict the held-out launches within
3.4 MiB. Launches outside what was recorded are labelled so in the plan. The CPU side is checked live
against CPU pass 1 (tests/integration/test_estimate_vs_pass1.py, bench/bench_estimate.py).
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.engine.check import check_plan
from app.planner.devices import GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.memory.compute import (
    BASE_MARGIN,
    CUDA_FITTED_ARCHS,
    CUDA_FITTED_CONTEXT,
    CUDA_FITTED_KV,
    CUDA_FITTED_UBATCH,
    CUDA_TERMS,
    CudaTerms,
    cuda_fit_gap,
    estimate_compute,
    ffn_width,
)
from app.planner.memory.kv import context_size, swa_cells
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.solve.plan import make_plan
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


# ---- The fit, and what it was not fitted to (issue 17, §1) --------------------------------------

#: The first device call's launches (rows.jsonl: 128k and 512k, ubatch 512, f16 and q8_0): the fit set.
FIRST_CALL = {(r["model"], json.dumps(r["launch"], sort_keys=True)) for r in ROWS}
FIT = [p for p in PASS1 if (p["model"], json.dumps(p["settings"], sort_keys=True)) in FIRST_CALL]
#: The second call's sweep (32k and 64k, ubatch 1024 and 2048, q4_0, -np 4 without -kvu): held out.
HELD_OUT = [p for p in PASS1 if p not in FIT]
#: Every combination of the CUDA terms' row counts the refit searches.
GRID = tuple(itertools.product(range(1, 6), range(0, 7), range(0, 9), range(1, 7), range(-3, 4)))
HOST_GRID = tuple(range(0, 7))


def _gpu_rows(rec: dict[str, Any], terms: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The GPU estimate before its margin for every row of ``terms`` (columns: ffn_ff, ffn_embd,
    moe_embd, attn_q, moe_attn_embd), the same formula as estimate_compute (checked below)."""
    sh, s = shape(rec["model"]), LaunchSettings(**rec["settings"])
    ctx, ub, e = context_size(s), s.effective_n_ubatch, shape(rec["model"]).n_embd
    mask = (ctx.n_ctx_seq + (swa_cells(sh, s, ctx) if sh.is_swa_any else 0)) * ub * 2
    dense, expert, shared = ffn_width(sh)
    used, q = max(1, sh.n_expert_used), max(sh.n_head) * sh.head_dim_k
    quantized = s.type_k != "f16" or s.type_v != "f16"
    dequant = (ctx.n_ctx if quantized else 0) * (sh.head_dim_k + sh.head_dim_v) * max(sh.n_head_kv) * 2
    t = [terms[:, i] for i in range(5)]
    if expert:
        ffn = ub * 4 * (t[0] * (expert * used + shared) + (used + t[2]) * e)
        attn = ub * 4 * (t[3] * q + (used + t[4]) * e)
    else:
        ffn, attn = ub * 4 * (t[0] * dense + t[1] * e), ub * 4 * t[3] * q
    return mask + np.maximum(ffn, attn + dequant)  # type: ignore[no-any-return]


def _worst(recs: list[dict[str, Any]], terms: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    worst = np.zeros(len(terms))
    for rec in recs:
        worst = np.maximum(worst, np.abs(_gpu_rows(rec, terms) - measured(rec, False)))
    return worst


def _host_worst(recs: list[dict[str, Any]], host_embd: int) -> float:
    errs = []
    for rec in recs:
        settings = LaunchSettings(**rec["settings"])
        est = estimate_compute(shape(rec["model"]), settings, context_size(settings),
                               CudaTerms(host_embd=host_embd)).host - BASE_MARGIN
        errs.append(abs(est - measured(rec, True)))
    return max(errs)


def test_the_fit_set_alone_gives_the_shipped_terms_and_they_predict_the_held_out_launches() -> None:
    """Refit the CUDA terms' row counts on the first device call's 32 launches only (every
    combination in a grid; the one with the smallest worst error): they are the shipped ones, and on
    the 118 launches of the second call — contexts, ubatch sizes and a cache type the fit never saw —
    they are as good. Fit set: within 0.6 MiB; held out: within 4 MiB (before the 64 MiB margin)."""
    assert len(FIT) == 32 and len(HELD_OUT) == 118
    assert {p["settings"]["n_ctx"] for p in FIT} == {131072, 524288} and {p["settings"]["n_ubatch"] for p in FIT} == {512}
    terms = np.array(GRID)
    shipped = (CUDA_TERMS.ffn_ff, CUDA_TERMS.ffn_embd, CUDA_TERMS.moe_embd, CUDA_TERMS.attn_q, CUDA_TERMS.moe_attn_embd)
    # The mirror above is estimate_compute's formula, term for term.
    for rec in PASS1:
        settings = LaunchSettings(**rec["settings"])
        est = estimate_compute(shape(rec["model"]), settings, context_size(settings)).gpu - BASE_MARGIN
        assert _gpu_rows(rec, np.array([shipped]))[0] == est
    fit_err = _worst(FIT, terms)
    best = np.flatnonzero(fit_err <= fit_err.min() + MiB / 1024)
    assert [GRID[i] for i in best] == [shipped]  # one best fit, and it is what estimate.py ships
    held_err = _worst(HELD_OUT, np.array([shipped]))[0]
    assert fit_err[best[0]] <= 0.6 * MiB, fit_err[best[0]] / MiB
    assert held_err <= 4 * MiB, held_err / MiB
    host_fit = {h: _host_worst(FIT, h) for h in HOST_GRID}
    assert min(host_fit, key=host_fit.__getitem__) == CUDA_TERMS.host_embd
    assert host_fit[CUDA_TERMS.host_embd] <= 0.6 * MiB and _host_worst(HELD_OUT, CUDA_TERMS.host_embd) <= 4 * MiB


def test_the_fitted_range_is_the_recordings() -> None:
    """The launches estimate.py says its CUDA terms were compared with are exactly those recorded."""
    s = [p["settings"] for p in PASS1]
    assert (min(x["n_ctx"] for x in s), max(x["n_ctx"] for x in s)) == CUDA_FITTED_CONTEXT
    assert tuple(sorted({x["n_ubatch"] for x in s})) == CUDA_FITTED_UBATCH
    assert {x["type_k"] for x in s} | {x["type_v"] for x in s} == CUDA_FITTED_KV
    assert {shape(p["model"]).arch for p in PASS1} == CUDA_FITTED_ARCHS
    assert {x["flash_attn"] for x in s} == {"on"}
    assert not any(cuda_fit_gap(shape(p["model"]), LaunchSettings(**p["settings"])) for p in PASS1)


@pytest.mark.parametrize(("launch", "says"), [
    (LaunchSettings(n_ctx=16384), "never compared with CUDA below 32,768 context"),
    (LaunchSettings(n_ctx=131072, n_ubatch=4096, n_batch=4096), "never compared with CUDA at -ub 4096"),
    (LaunchSettings(n_ctx=8192, n_ubatch=256), "never compared with CUDA below 32,768 context, at -ub 256"),
    (LaunchSettings(n_ctx=131072, flash_attn=FlashAttn.OFF), "never compared with CUDA with flash attention off"),
    (LaunchSettings(n_ctx=1048576), "never compared with CUDA above 524,288 context"),
])
def test_a_plan_outside_the_fit_says_so_beside_the_number_and_in_its_warnings(launch: LaunchSettings,
                                                                              says: str) -> None:
    model = shape("llama-3.1-8b-instruct-q4_k_m")
    plan = make_plan(model, h200(ROWS[0]), launch)
    (gpu,) = plan.gpus
    assert str(gpu.sources["compute"]) == f"estimated ({says})"
    assert str(plan.host.sources["compute_pinned"]) == f"estimated ({says})"
    assert any(w.startswith(f"compute buffers are an estimate ({says})") for w in plan.warnings), plan.warnings


def test_a_plan_inside_the_fit_is_plainly_estimated() -> None:
    plan = make_plan(shape("llama-3.1-8b-instruct-q4_k_m"), h200(ROWS[0]), LaunchSettings(n_ctx=65536, n_ubatch=1024))
    assert str(plan.gpus[0].sources["compute"]) == "estimated"
    assert "compute buffers are an estimate: run pass 1 (headroom measure) for measured numbers" in plan.warnings
