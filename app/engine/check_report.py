"""Plan vs actual as a user reads it: a word for each row's verdict, a legend for those words, the
one sentence for a check as a whole — and for a launch that ran on the CPU although the plan was for
GPUs (a CPU engine build, or a simulated card), where nothing on a GPU can be compared.

The check itself (what was planned, what the engine allocated) is app.engine.check; this module only
says it, for the window's table and status line alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine.check import (
    BUFFER_TOLERANCE,
    HOST,
    PROCESS_TOLERANCE,
    CheckPart,
    CheckRow,
    PlanCheck,
    describe,
)
from app.planner.sources import Source, SourceKind
from app.planner.units import Bytes, MiB

if TYPE_CHECKING:
    from app.planner.plan_types import Plan

#: A row's verdict, in words (never "?" or "OFF").
OK = "ok"
DIFFERS = "differs"
NOT_LOGGED = "not allocated"
NOT_PLANNED = "not planned"
#: A row outside the tolerance whose planned number was the planner's estimate (pass 1 did not run):
#: the estimate was off, not the launch.
ESTIMATE = "estimate"
#: What the verdict words mean (shown under the table).
LEGEND = (f"{OK}: within {Bytes(BUFFER_TOLERANCE)} of the plan ({Bytes(PROCESS_TOLERANCE)} for NVML's whole-process "
          f"row, which also holds the CUDA context); {DIFFERS}: outside that; {ESTIMATE}: outside that, but the "
          f"plan's number was an estimate (pass 1 did not measure it); {NOT_LOGGED}: planned, but the "
          f"engine's log shows no such buffer; {NOT_PLANNED}: allocated, but not in the plan")
RAN_ON_CPU = "this launch ran on the CPU: the GPU plan cannot be checked here"
#: A table cell with no number (the other side has one).
NO_NUMBER = "—"


def ran_on_cpu(check: PlanCheck, plan: Plan) -> bool:
    """The plan put parts on GPUs, but the engine allocated nothing on any of them."""
    gpus = {g.name for g in plan.gpus}
    return bool(gpus) and not any(r.device in gpus and r.actual for r in check.rows)


def estimated_parts(plan: Plan) -> frozenset[tuple[str, CheckPart]]:
    """The (device, part) rows whose planned number is the planner's estimate, not pass 1's."""

    def estimated(source: Source | None) -> bool:
        return source is not None and source.kind is SourceKind.ESTIMATED

    out: set[tuple[str, CheckPart]] = set()
    devices = [(g.name, g.sources, "compute") for g in plan.gpus] + [(HOST, plan.host.sources, "compute_pinned")]
    for name, sources, compute in devices:
        out |= {(name, part) for part, key in ((CheckPart.COMPUTE, compute),
                                                     (CheckPart.DRAFT_COMPUTE, CheckPart.DRAFT_COMPUTE.plan_field))
                if estimated(sources.get(key))}
    proj = plan.projector
    if proj is not None and estimated(proj.sources.get("compute")):
        out.add((proj.device, CheckPart.PROJECTOR_COMPUTE))
    return frozenset(out)


def verdict(row: CheckRow, estimated: bool = False) -> str:
    """``estimated``: the plan's number for this row was an estimate (``estimated_parts``)."""
    if row.planned is None:
        return NOT_PLANNED
    if row.actual is None:
        return NOT_LOGGED
    return OK if row.ok else ESTIMATE if estimated else DIFFERS


def alarming(check: PlanCheck, plan: Plan) -> bool:
    """A row differs from a number the plan did not merely estimate (what the window shows in amber)."""
    guessed = estimated_parts(plan)
    return any(verdict(r, (r.device, r.part) in guessed) == DIFFERS for r in check.rows)


def _amount(row: CheckRow, value: int | None) -> str:
    if value is None:
        return NO_NUMBER
    return f"{value / MiB:,.2f} MiB" if row.unit == "bytes" else f"{value:,}"


def cells(row: CheckRow, estimated: bool = False) -> tuple[str, str, str, str, str, str]:
    """device, part, planned, actual, difference, verdict — as the table shows them."""
    err = row.error
    if err is None:
        diff = NO_NUMBER
    elif row.unit == "bytes":
        diff = f"{round(err / MiB, 2) + 0.0:+,.2f} MiB"  # + 0.0: a sub-resolution -0.00 reads +0.00
    else:
        diff = f"{err:+,}"
    return (row.device, row.part, _amount(row, row.planned), _amount(row, row.actual), diff,
            verdict(row, estimated))


def summary(check: PlanCheck, plan: Plan) -> str:
    """The check in one sentence."""
    if ran_on_cpu(check, plan):
        host_ok = all(r.ok for r in check.rows if r.device not in {g.name for g in plan.gpus} and r.error is not None)
        return f"{RAN_ON_CPU[0].upper()}{RAN_ON_CPU[1:]}" + (
            "." if not host_ok else "; what it allocated in host RAM is what the plan said.")
    guessed = estimated_parts(plan)
    off = [r for r in check.rows if r.error is not None and not r.ok]
    if off and not alarming(check, plan) and all((r.device, r.part) in guessed for r in off):
        parts = ", ".join(f"{r.device} {r.part}" for r in off)
        return (f"The plan's {parts} {'was an estimate' if len(off) == 1 else 'were estimates'} (pass 1 did not "
                "measure it) and the engine allocated otherwise; every other buffer compared is within 1 MiB of the plan.")
    return describe(check)
