"""While an engine serves: its memory now against its plan, other apps' memory, what is free, and a
warning when free VRAM or available host RAM falls under the safety margin.

Pure: the plan the engine was launched with, one live ``Snapshot`` (NVML per GPU and per process,
psutil's host RAM and the engine's RSS, read by ``app.machine.devices.snapshot`` on the window's
~1 s poll) and whether the plan check found the launch on the CPU → one ``LiveRow`` per device of
the plan and one for host RAM, and the warnings. The window lays them out (app/ui/live_view.py).

Per GPU (the plan's ``CUDA<n>`` is NVML's device ``n``):

- ``engine``: what NVML attributes to the engine's process and its children on that GPU, against
  ``planned`` = the plan's weights + compute + KV + overhead there (``DevicePlan.used``);
- ``others``: total − free − engine (other apps and the driver's reserve; the plan's
  ``other_processes`` counts the same way, total − free, before the launch);
- ``free`` against ``margin`` = the safety margin the plan kept free on that device.

For host RAM: the engine's resident set (RSS, children included) against the plan's host total
(mapped weights + KV tail + pinned compute; the prompt cache, a limit it fills over time, apart),
and psutil's available RAM against the safety margin.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.planner.devices import GpuSample, Snapshot
from app.planner.plan_types import DevicePlan, HostPlan, Plan
from app.planner.units import Bytes

HOST = "host"


class RowState(Enum):
    OK = "ok"
    LOW = "under the margin"  # free VRAM / available host RAM under the safety margin
    UNREAD = "cannot be read"  # nothing live to compare (``why`` says what)


@dataclass(frozen=True)
class LiveRow:
    """One device now. A number is None when it cannot be read (``why`` says so)."""

    device: str  # "CUDA0", "host"
    label: str  # "NVIDIA H200", "host RAM"
    planned: int  # what the plan gives the engine there
    engine: int | None  # what the engine holds there now
    others: int | None  # what everything else holds now (None for the host: psutil cannot say)
    planned_others: int | None  # what others held when the plan was made
    free: int | None  # free VRAM / available host RAM now
    margin: int  # the safety margin
    state: RowState
    why: str = ""  # for UNREAD: why there is no reading
    prompt_cache: int = 0  # host only: the server's prompt-cache limit, beside ``planned``

    @property
    def low(self) -> bool:
        return self.state is RowState.LOW


@dataclass(frozen=True)
class LiveReport:
    rows: tuple[LiveRow, ...]
    warnings: tuple[str, ...]
    #: A sentence above the rows ("" when none): the launch ran on the CPU, NVML is not usable.
    note: str = ""


#: A GPU plan the engine ran on the CPU (the plan check says so): NVML has nothing of it to show.
CPU_RUN_WHY = "the engine runs on the CPU: it holds nothing on this GPU"
CPU_RUN_NOTE = ("This launch ran on the CPU: the GPU rows cannot be read (the engine holds nothing on any "
                "GPU). The host row still can.")


def gpu_low_warning(row: LiveRow) -> str:
    assert row.free is not None
    others = "" if row.others is None else f"; other apps hold {Bytes(row.others)}" + (
        f", {Bytes(row.others - row.planned_others)} more than when it was planned"
        if row.planned_others is not None and row.others > row.planned_others else "")
    return (f"{row.device} ({row.label}): free VRAM {Bytes(row.free)} is under the {Bytes(row.margin)} "
            f"safety margin{others}. The engine may fail to allocate as its context fills: close what took "
            "the memory, or stop the engine and plan again with the memory there is now.")


def host_low_warning(row: LiveRow) -> str:
    assert row.free is not None
    held = "" if row.engine is None else f" (the engine holds {Bytes(row.engine)})"
    return (f"host RAM: available {Bytes(row.free)} is under the {Bytes(row.margin)} safety margin{held}. "
            "The system may swap or stop the engine: close other programs, or stop the engine and plan "
            "again with less in host RAM.")


def _index(device: DevicePlan) -> int | None:
    """NVML's index of a local GPU (``CUDA3`` → 3); None for a worker's device or another name."""
    if device.remote or not device.name.startswith("CUDA"):
        return None
    digits = device.name.removeprefix("CUDA")
    return int(digits) if digits.isdigit() else None


def _unread(device: DevicePlan, why: str) -> LiveRow:
    return LiveRow(device=device.name, label=device.label, planned=device.used, engine=None, others=None,
                   planned_others=device.other_processes, free=None, margin=device.safety,
                   state=RowState.UNREAD, why=why)


def gpu_row(device: DevicePlan, snap: Snapshot, *, ran_on_cpu: bool = False) -> LiveRow:
    """One GPU of the plan against the snapshot."""
    if device.simulated:
        return _unread(device, "a simulated card: nothing to read")
    if device.remote:
        return _unread(device, f"a device of the RPC worker {device.remote}: this machine's NVML cannot read it")
    if not snap.ok:
        return _unread(device, f"no NVML reading ({snap.reason or 'NVML unusable'})")
    index = _index(device)
    sample: GpuSample | None = next((s for s in snap.gpus if s.index == index), None)
    if sample is None:
        return _unread(device, "NVML did not read this GPU now")
    engine = sample.engine_used if sample.processes_known else None
    if ran_on_cpu and not engine:  # the check found nothing on the GPUs, and NVML lists nothing
        return _unread(device, CPU_RUN_WHY)
    others = None if engine is None else max(sample.total - sample.free - engine, 0)
    state = RowState.LOW if sample.free < device.safety else RowState.OK
    why = "" if engine is not None else "this driver does not list processes: the engine's share is unknown"
    return LiveRow(device=device.name, label=device.label, planned=device.used, engine=engine, others=others,
                   planned_others=device.other_processes, free=sample.free, margin=device.safety,
                   state=state, why=why)


def host_planned(host: HostPlan) -> int:
    """What the plan puts in host RAM for the engine (the prompt cache apart: a limit it fills)."""
    return host.allocated


def host_row(host: HostPlan, snap: Snapshot, margin: int) -> LiveRow:
    free = snap.host.available if snap.host is not None else None
    state = (RowState.UNREAD if free is None and snap.engine_rss is None
             else RowState.LOW if free is not None and free < margin else RowState.OK)
    why = "" if free is not None else "host RAM was not read"
    return LiveRow(device=HOST, label="host RAM", planned=host_planned(host), engine=snap.engine_rss,
                   others=None, planned_others=None, free=free, margin=margin, state=state, why=why,
                   prompt_cache=host.prompt_cache)


def live_report(plan: Plan, snap: Snapshot, *, host_margin: int, ran_on_cpu: bool = False) -> LiveReport:
    """The rows (the plan's GPUs in its order, then host RAM) and a warning per row under its margin.
    ``host_margin``: the safety margin the plan was made with; ``ran_on_cpu``: the plan check found
    nothing of a GPU plan on any GPU."""
    gpus = tuple(gpu_row(g, snap, ran_on_cpu=ran_on_cpu) for g in plan.gpus)
    host = host_row(plan.host, snap, host_margin)
    warnings = tuple(gpu_low_warning(r) for r in gpus if r.low) + ((host_low_warning(host),) if host.low else ())
    note = CPU_RUN_NOTE if any(r.why == CPU_RUN_WHY for r in gpus) else ""
    if not note and plan.gpus and not snap.ok:
        note = f"NVML cannot be read ({snap.reason or 'unusable'}): only the host row is live."
    return LiveReport(rows=(*gpus, host), warnings=warnings, note=note)
