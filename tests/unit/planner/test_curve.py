"""The context chart's numbers (app/planner/curve.py): each point is the plan's own stacking, the
largest fit is the plan's, pass 1 anchors the curve it was measured for, and each curve says where
its compute came from. Real shape GGUFs; pass 1 replayed from the H200 recording (no GPU here)."""

from __future__ import annotations

import json
from pathlib import Path

from app.machine.devices import resolve_gpus
from app.planner import words
from app.planner.curve import CHART_KV_TYPES, ContextCurve, context_curve, context_grid
from app.planner.devices import GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan_types import ContextFit, Plan, PlanMode
from app.planner.request import PlanRequest
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, price_as_set
from app.planner.sources import SourceKind
from app.planner.units import GiB, MiB
from tests.fixtures import gguf_factory, shapes

K = 1024
PASS1 = Path(__file__).resolve().parents[2] / "fixtures" / "h200" / "pass1.jsonl"


def test_the_grid_runs_from_4k_to_the_training_context_or_1m_with_the_points_it_marks():
    assert context_grid(131072, 32768)[:5] == (4 * K, 6 * K, 8 * K, 12 * K, 16 * K)
    assert context_grid(131072, 32768)[-1] == 128 * K
    assert context_grid(1_010_000, 32768)[-1] == 1_010_000  # Qwen2.5-1M's training context
    assert context_grid(4 * 1024 * K, 32768)[-1] == 1024 * K  # trained past the slider's end: 1M
    assert context_grid(0, 32768)[-1] == 1024 * K  # the model does not say
    grid = context_grid(131072, 40_000, 49_664)
    assert 40_000 in grid and 49_664 in grid and grid == tuple(sorted(set(grid)))
    # Past the training context the axis goes to the slider's end (1M), not to the context asked for.
    assert context_grid(32768, 65536)[-1] == 1024 * K and 64 * K in context_grid(32768, 65536)
    assert context_grid(8192, 600 * K)[-1] == 1024 * K
    assert context_grid(8192, 2048 * K)[-1] == 2048 * K  # past 1M: the context asked for is the end


def test_the_axis_does_not_follow_the_context_below_the_training_context():
    ends = {context_grid(131072, n)[-1] for n in (4 * K, 8 * K, 32 * K, 100_000, 128 * K)}
    assert ends == {128 * K}
    assert context_grid(8192, 8192) == (4 * K, 6 * K, 8 * K)  # an 8k model at 8k: 4k to its training context


def _chart_at(shape: ModelShape, n_ctx: int) -> tuple[Inventory, LaunchSettings, Plan, ContextFit, ContextCurve]:
    """The chart for ``n_ctx`` on a simulated RTX 4090, with the plan's largest contexts, and those."""
    inv = resolve_gpus(["RTX 4090"])
    request = PlanRequest(shape, inv)
    settings = LaunchSettings(n_ctx=n_ctx)
    plan, used = request.plan(settings)
    fit = request.largest_fit(settings, used)
    return inv, settings, plan, fit, context_curve(request, settings, fit=fit)


def test_the_chart_carries_both_largest_contexts_plan_prints_and_decode_speed(qwen14b: ModelShape):
    """The 512k case of issue 30 on a 24 GB card: the largest fully resident and the longest with part
    of the KV in host RAM, the figures ``headroom plan`` prints; each point that fits predicts its
    decode tokens/s with the context full, slower as the context grows; none where it does not fit."""
    inv, settings, _plan, fit, curve = _chart_at(qwen14b, 512 * K)
    assert fit.with_tail > fit.resident > 0
    assert [(r.n_ctx, r.where, r.offered) for r in curve.reaches] == [
        (fit.resident, "fully on GPU", True), (fit.with_tail, "with part of it in host RAM", False)]
    ends = words.context_ends(_plan)  # what the CLI's "largest context" line offers here
    assert ends is not None and (ends[0].launch.n_ctx, ends[1].launch.n_ctx) == (fit.resident, fit.with_tail)
    assert curve.top == qwen14b.n_ctx_train  # 4k to the training context, though 512k is asked
    f16 = curve.current
    assert f16 is not None
    fitting = [p for p in f16.points if p.fits]
    assert fitting and all(p.decode is not None and p.decode > 0 for p in fitting)
    assert all(p.decode is None for p in f16.points if not p.fits)
    speeds = [p.decode or 0.0 for p in fitting]
    assert speeds == sorted(speeds, reverse=True) and speeds[0] > speeds[-1]  # a fuller KV reads more per token
    # The figure is the speed model's for that launch as set, with its context full.
    at_32k = f16.at(32 * K)
    priced = price_as_set(qwen14b, inv, settings.with_(n_ctx=32 * K))
    assert at_32k is not None and priced.alternative.speed is not None
    assert at_32k.decode == priced.alternative.speed.at_fill(1.0).decode


def test_each_point_is_the_launch_as_set_and_the_largest_fit_is_the_plans(qwen14b: ModelShape):
    inv, settings, _plan, fit, curve = _chart_at(qwen14b, 128 * K)
    assert curve.mode is PlanMode.STOCK and curve.devices == ("CUDA0",)
    assert [k.label for k in curve.curves] == list(CHART_KV_TYPES)
    f16 = curve.current
    assert f16 is not None and f16.label == "f16"
    assert curve.largest == fit.resident == 49_664 and curve.largest_where == "fully on GPU"
    # The usable line: the 24 GiB card less the 256 MiB safety margin, as the plan counts it.
    assert curve.gpu_usable == (24 * GiB - 256 * MiB,)
    # At a context that fits as set, the point is what the plan puts on the card.
    at_32k = f16.at(32 * K)
    plan_32k = make_plan(qwen14b, inv, settings.with_(n_ctx=32 * K))
    assert at_32k is not None and plan_32k.feasible
    assert at_32k.gpu == (plan_32k.gpus[0].used,) and at_32k.fits
    # Up to the largest fit every point fits; past it none does (the curve crosses the usable line there).
    for p in f16.points:
        assert p.fits == (p.n_ctx <= fit.resident), p.n_ctx
        assert (p.gpu_total <= curve.gpu_usable_total) == p.fits
    # A smaller KV type costs less at the same context, and fits further.
    q4 = next(k for k in curve.curves if k.label == "q4_0")
    # (its curve has a point per doubling, each on the f16 curve's grid too)
    pairs = [(f16.at(b.n_ctx), b) for b in q4.points if b.n_ctx >= f16.points[6].n_ctx]
    assert len(pairs) >= 4 and all(a is not None and b.gpu_total < a.gpu_total for a, b in pairs)
    assert max(p.n_ctx for p in q4.points if p.fits) > fit.resident
    assert f16.source.kind is SourceKind.ESTIMATED  # no pass 1: the estimate, and it says so


def test_pass_1_for_the_settings_now_anchors_their_curve_and_no_other(qwen14b: ModelShape):
    rec = next(json.loads(line) for line in PASS1.read_text().splitlines()
               if json.loads(line)["model"] == "qwen2.5-14b-instruct-1m-q8_0")
    settings = LaunchSettings(**rec["settings"])
    measurement = Measurement(tuple(DeviceMeasurement(d["name"], compute=d["compute"], host=d["host"])
                                    for d in rec["devices"]), "CUDA", rec["llama_commit"], 1.0, launch=settings)
    inv = Inventory((GpuDevice(0, "NVIDIA H200", 143 * GiB, 142 * GiB),), HostMemory(125 * GiB, 124 * GiB))
    request = PlanRequest(qwen14b, inv)
    curve = context_curve(request, settings, measurement=measurement)
    f16 = curve.current
    assert f16 is not None and f16.label == "f16"
    assert f16.source.kind is SourceKind.MEASURED and "at 524,288;" in str(f16.source)
    now = f16.at(settings.n_ctx)
    assert now is not None and now.compute_source.kind is SourceKind.MEASURED
    exact = make_plan(qwen14b, inv, settings, measurement=measurement)
    assert now.gpu == (exact.gpus[0].used,)  # the measured plan's own numbers
    assert exact.gpus[0].compute == rec["devices"][0]["compute"]
    # The estimate's curve at the same context differs from the measured one by the compute only.
    estimated = context_curve(request, settings).current
    assert estimated is not None and estimated.source.kind is SourceKind.ESTIMATED
    est_now = estimated.at(settings.n_ctx)
    assert est_now is not None and est_now.gpu != now.gpu
    for other in (k for k in curve.curves if not k.current):  # measured for f16, not for them
        assert other.source.kind is SourceKind.ESTIMATED


def test_a_kv_type_the_model_cannot_use_says_why_and_draws_nothing():
    tiny = read_shape(gguf_factory.ensure(shapes.TINY))  # head size 16: q8_0's 32-blocks do not divide it
    request = PlanRequest(tiny, resolve_gpus(["RTX 4090"]))
    curve = context_curve(request, LaunchSettings(n_ctx=4096))
    q8 = next(k for k in curve.curves if k.label == "q8_0")
    assert q8.points == () and "multiple of 32" in q8.problem
    f16 = curve.current
    assert f16 is not None and f16.points and not f16.problem


def test_without_a_gpu_the_chart_is_host_ram_and_the_window_engine_fills_the_card_first(qwen14b: ModelShape):
    host_only = Inventory((), HostMemory(64 * GiB, 60 * GiB), reason="no NVIDIA driver found")
    curve = context_curve(PlanRequest(qwen14b, host_only), LaunchSettings(n_ctx=32 * K))
    assert curve.mode is PlanMode.CPU and curve.devices == () and curve.host_usable == 60 * GiB
    f16 = curve.current
    assert f16 is not None and all(p.gpu == () for p in f16.points)
    assert f16.points[-1].host > f16.points[0].host  # the KV grows in host RAM
    window = PlanRequest(qwen14b, resolve_gpus(["RTX 4090"]), engine_window=True)
    settings = LaunchSettings(n_ctx=32 * K)
    fit = window.largest_fit(settings)
    curve = context_curve(window, settings, fit=fit)
    assert curve.mode is PlanMode.WINDOW and curve.largest == fit.with_tail
    current = curve.current
    assert current is not None
    top = current.points[-1]
    assert top.gpu_total <= curve.gpu_usable_total  # the window stops at the card
    assert top.host > current.points[0].host  # and the tail goes to host RAM
