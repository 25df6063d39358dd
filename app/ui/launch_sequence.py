"""Measure, then launch: the window's one sequence for Launch, by the rules ``headroom serve`` follows.

A plan whose compute buffers are the planner's estimate is measured first (pass 1, for the plan's own
launch); the plan re-made with pass 1's numbers is what launches, if it still fits. A failed pass 1
refuses the launch with pass 1's own reason, in the CLI's words (app/engine/launch.py
``pass1_refusal``); a cancelled one launches nothing. No Qt: ``LaunchPanel`` asks at each step and
shows the answer (tests/ui/test_launch_sequence.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.launch import pass1_refusal
from app.planner.plan_types import Plan
from app.planner.settings import LaunchSettings
from app.planner.sources import SourceKind

MEASURING_FIRST = "Engine: measuring the compute buffers first (pass 1), then launching…"
MEASURE_CANCELLED = "Engine: not launched (pass 1 was cancelled)"
NO_PLAN_AFTER_PASS1 = "Engine: not launched: with pass 1's numbers the settings give no plan"


def estimated(plan: Plan) -> bool:
    """The plan's compute buffers are the planner's estimate (pass 1 has not measured this launch)."""
    sources = [g.sources.get("compute") for g in plan.gpus] + [plan.host.sources.get("compute_pinned")]
    return any(s is not None and s.kind is SourceKind.ESTIMATED for s in sources)


@dataclass(frozen=True)
class AfterPass1:
    """What a Launch waiting on pass 1 does now that the plan is re-made: launch ``plan``, or not (``why``)."""

    plan: Plan | None
    why: str = ""


class MeasureThenLaunch:
    """One Launch press, from pass 1 to the engine: ``waiting`` is the launch pass 1 runs for."""

    def __init__(self) -> None:
        self.waiting: LaunchSettings | None = None

    def needs_pass1(self, plan: Plan, *, measured: bool, can_measure: bool) -> bool:
        """Launch pressed: True when pass 1 must run first (an estimated plan not measured yet, with
        an engine and nothing refusing it); the caller starts it and calls ``measuring``."""
        return can_measure and estimated(plan) and not measured

    def measuring(self, launch: LaunchSettings) -> None:
        self.waiting = launch

    def ready(self, measured: bool) -> bool:
        """A new plan: True once pass 1 ran for the launch waiting (its plan is re-made with it)."""
        return self.waiting is not None and measured

    def after_pass1(self, plan: Plan | None) -> AfterPass1:
        """Pass 1 ran and the plan is re-made with it: launch it, unless it no longer fits."""
        self.waiting = None
        if plan is None or not plan.feasible:
            return AfterPass1(None, "Engine: not launched: with pass 1's numbers the plan does not fit "
                                    f"({plan.reason if plan else 'no plan'})")
        return AfterPass1(plan)

    def failed(self, message: str) -> str | None:
        """Pass 1 failed: the launch waiting is refused with its reason, as ``headroom serve`` refuses it
        (None: no launch was waiting on it)."""
        if self.waiting is None:
            return None
        self.waiting = None
        reason = next((ln.strip() for ln in message.splitlines() if ln.strip()), "no reason given")
        return f"Engine: refused: {pass1_refusal(reason.removeprefix('pass 1 failed: '))}"

    def cancelled(self) -> str | None:
        """Pass 1 was cancelled (or another model opened): nothing launches."""
        if self.waiting is None:
            return None
        self.waiting = None
        return MEASURE_CANCELLED

    def no_plan(self) -> str | None:
        """With pass 1's numbers the settings give no plan: nothing launches."""
        if self.waiting is None:
            return None
        self.waiting = None
        return NO_PLAN_AFTER_PASS1

    def forget(self) -> None:
        """Another model: the launch waiting was for the one before."""
        self.waiting = None
