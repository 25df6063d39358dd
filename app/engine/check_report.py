"""Plan vs actual as a user reads it: a word for each row's verdict, a legend for those words, the
one sentence for a check as a whole — and for a launch that ran on the CPU although the plan was for
GPUs (a CPU engine build, or a simulated card), where nothing on a GPU can be compared.

The check itself (what was planned, what the engine allocated) is app.engine.check; this module only
says it, for the window's table and status line alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine.check import BUFFER_TOLERANCE, PROCESS_TOLERANCE, CheckRow, PlanCheck, describe
from app.planner.units import Bytes, MiB

if TYPE_CHECKING:
    from app.planner.plan_types import Plan

#: A row's verdict, in words (never "?" or "OFF").
OK = "ok"
DIFFERS = "differs"
NOT_LOGGED = "not allocated"
NOT_PLANNED = "not planned"
#: What the verdict words mean (shown under the table).
LEGEND = (f"{OK}: within {Bytes(BUFFER_TOLERANCE)} of the plan ({Bytes(PROCESS_TOLERANCE)} for NVML's whole-process "
          f"row, which also holds the CUDA context); {DIFFERS}: outside that; {NOT_LOGGED}: planned, but the "
          f"engine's log shows no such buffer; {NOT_PLANNED}: allocated, but not in the plan")
RAN_ON_CPU = "this launch ran on the CPU: the GPU plan cannot be checked here"
#: A table cell with no number (the other side has one).
NO_NUMBER = "—"


def ran_on_cpu(check: PlanCheck, plan: Plan) -> bool:
    """The plan put parts on GPUs, but the engine allocated nothing on any of them."""
    gpus = {g.name for g in plan.gpus}
    return bool(gpus) and not any(r.device in gpus and r.actual for r in check.rows)


def verdict(row: CheckRow) -> str:
    if row.planned is None:
        return NOT_PLANNED
    if row.actual is None:
        return NOT_LOGGED
    return OK if row.ok else DIFFERS


def _amount(row: CheckRow, value: int | None) -> str:
    if value is None:
        return NO_NUMBER
    return f"{value / MiB:,.2f} MiB" if row.unit == "bytes" else f"{value:,}"


def cells(row: CheckRow) -> tuple[str, str, str, str, str, str]:
    """device, part, planned, actual, difference, verdict — as the table shows them."""
    err = row.error
    if err is None:
        diff = NO_NUMBER
    elif row.unit == "bytes":
        diff = f"{round(err / MiB, 2) + 0.0:+,.2f} MiB"  # + 0.0: a sub-resolution -0.00 reads +0.00
    else:
        diff = f"{err:+,}"
    return (row.device, row.part, _amount(row, row.planned), _amount(row, row.actual), diff, verdict(row))


def summary(check: PlanCheck, plan: Plan) -> str:
    """The check in one sentence."""
    if ran_on_cpu(check, plan):
        host_ok = all(r.ok for r in check.rows if r.device not in {g.name for g in plan.gpus} and r.error is not None)
        return f"{RAN_ON_CPU[0].upper()}{RAN_ON_CPU[1:]}" + (
            "." if not host_ok else "; what it allocated in host RAM is what the plan said.")
    return describe(check)
