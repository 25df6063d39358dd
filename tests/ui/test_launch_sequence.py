"""Measure, then launch, without a window (app/ui/launch_sequence.py): an estimated plan is measured
first and the plan re-made with pass 1 launches if it still fits; a failed pass 1 refuses the launch in
``headroom serve``'s words (app/engine/launch.py ``pass1_refusal``); a cancel launches nothing."""

from __future__ import annotations

from dataclasses import replace

from app.engine.launch import pass1_refusal
from app.planner.plan_types import HostPlan, Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.sources import Source, SourceKind
from app.ui.launch_sequence import MEASURE_CANCELLED, NO_PLAN_AFTER_PASS1, MeasureThenLaunch, estimated

LAUNCH = LaunchSettings(n_ctx=65536)


def _plan(compute: SourceKind, *, feasible: bool = True) -> Plan:
    host = HostPlan(total=64 << 30, available=60 << 30, weights_mapped=0, kv_tail=0, compute_pinned=1 << 20,
                    free=59 << 30, sources={"compute_pinned": Source(compute)})
    return Plan(launch=LAUNCH, mode=PlanMode.CPU, gpus=(), host=host, feasible=feasible,
                reason="" if feasible else "the KV cache does not fit in host RAM", warnings=(),
                window_cells=0, tail_cells=0, vram_target=None)


def test_an_estimated_plan_is_measured_first_then_the_plan_remade_with_pass_1_launches() -> None:
    sequence, plan = MeasureThenLaunch(), _plan(SourceKind.ESTIMATED)
    assert estimated(plan) and sequence.needs_pass1(plan, measured=False, can_measure=True)
    sequence.measuring(plan.launch)
    assert sequence.waiting == LAUNCH and not sequence.ready(measured=False)  # a re-plan before pass 1 answered
    measured = _plan(SourceKind.MEASURED)
    assert sequence.ready(measured=True)
    assert sequence.after_pass1(measured).plan == measured and sequence.waiting is None


def test_a_measured_plan_or_one_that_cannot_be_measured_launches_at_once() -> None:
    sequence = MeasureThenLaunch()
    assert not estimated(_plan(SourceKind.MEASURED))
    assert not sequence.needs_pass1(_plan(SourceKind.MEASURED), measured=False, can_measure=True)
    assert not sequence.needs_pass1(_plan(SourceKind.ESTIMATED), measured=True, can_measure=True)
    assert not sequence.needs_pass1(_plan(SourceKind.ESTIMATED), measured=False, can_measure=False)


def test_a_failed_pass_1_refuses_the_launch_by_the_clis_rule() -> None:
    sequence = MeasureThenLaunch()
    assert sequence.failed("pass 1 failed: out of memory") is None  # no launch was waiting: nothing said
    sequence.measuring(LAUNCH)
    said = sequence.failed("pass 1 failed: GGML_ASSERT(n_ctx > 0) failed\nbacktrace …")
    assert said == f"Engine: refused: {pass1_refusal('GGML_ASSERT(n_ctx > 0) failed')}"
    assert said.startswith("Engine: refused: pass 1 failed, so the engine is not launched: ")
    assert sequence.waiting is None


def test_pass_1_cancelled_a_plan_that_no_longer_fits_or_none_at_all_launches_nothing() -> None:
    sequence = MeasureThenLaunch()
    sequence.measuring(LAUNCH)
    assert sequence.cancelled() == MEASURE_CANCELLED and sequence.cancelled() is None
    sequence.measuring(LAUNCH)
    after = sequence.after_pass1(replace(_plan(SourceKind.MEASURED), feasible=False,
                                         reason="the KV cache does not fit in host RAM"))
    assert after.plan is None and after.why == ("Engine: not launched: with pass 1's numbers the plan does not fit "
                                                "(the KV cache does not fit in host RAM)")
    sequence.measuring(LAUNCH)
    assert sequence.no_plan() == NO_PLAN_AFTER_PASS1 and sequence.waiting is None
    sequence.measuring(LAUNCH)
    sequence.forget()  # another model opened
    assert sequence.waiting is None and sequence.failed("pass 1 failed: x") is None
