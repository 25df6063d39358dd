"""The one place the window talks to the planner: a cached plan request and largest contexts.

Re-planning happens on every slider move, so everything slow (reading the GGUF, NVML, pass 1, the
speed calibration) is done elsewhere, once; the stored overhead and speed figures are read once per
inventory. Until the calibration is in (``speed_ready``, set when the window's first GPU reading and
calibration come back) the speeds are the speed model's defaults, and say so. Plans come from the planner's
one ``PlanRequest`` (app.planner.request), as ``headroom plan``'s do: the same overhead (measured
for this GPU and driver when it was), the same pass-1 rule (the plan's own launch, else the settings
as given; then the alternative it chose). No Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from app.engine.rpc import WorkerReading, add_workers
from app.machine.calibrate import calibration
from app.machine.cpu import host_cpu_features
from app.machine.devices import host_memory, resolve_gpus
from app.machine.request import request_for_machine
from app.planner.devices import Inventory
from app.planner.gguf.model import ModelShape
from app.planner.plan_types import ContextFit, Plan
from app.planner.request import MeasurementLookup, PlanRequest
from app.planner.settings import LaunchSettings


class Planner:
    """Plans for the window (``overhead_path``: where measured overheads are kept; None: the cache's)."""

    def __init__(self, overhead_path: Path | None = None, speed_path: Path | None = None) -> None:
        self.overhead_path = overhead_path
        self.speed_path = speed_path
        #: The machine's speed calibration is stored (app/machine/calibrate.py, measured off the GUI
        #: thread): plans use its figures, as ``headroom plan``'s do.
        self.speed_ready = False
        #: The engine Launch would use runs a host-KV layer's attention on the CPU (Headroom's build,
        #: app/engine/attention_runs.py ``host_attention``): its host tail is priced so.
        self.host_attention = False
        #: Counts the CPU-attention engine runs stored since the window opened: a new one prices again.
        self.engine_runs = 0
        self._request: tuple[tuple[object, ...], PlanRequest] | None = None
        self._fits: dict[tuple[object, ...], ContextFit] = {}

    def request(self, shape: ModelShape, inventory: Inventory, *, engine_window: bool, safety: int,
                vram_target: int | None, lookup: MeasurementLookup) -> PlanRequest:
        """The plan request for these inputs (a new one, with the overhead read again, only when
        they changed; the cached one keeps the shape and inventory alive, so their ids stay theirs)."""
        key = (id(shape), id(inventory), engine_window, safety, vram_target, lookup, self.speed_ready,
               self.host_attention, self.engine_runs)
        if self._request is None or self._request[0] != key:
            self._fits.clear()  # the largest contexts were for the last request
            self._request = (key, request_for_machine(
                shape, inventory, engine_window=engine_window, safety=safety, vram_target=vram_target,
                lookup=lookup, calibrated=self.speed_ready, retime=False, host_attention=self.host_attention,
                overhead_path=self.overhead_path, speed_path=self.speed_path))
        return self._request[1]

    def plan(self, shape: ModelShape, inventory: Inventory, settings: LaunchSettings, *, engine_window: bool,
             safety: int, vram_target: int | None, lookup: MeasurementLookup) -> tuple[Plan, ContextFit]:
        """The plan and its largest contexts. Raises PlannerError / ValueError for settings that
        cannot be planned."""
        request = self.request(shape, inventory, engine_window=engine_window, safety=safety,
                               vram_target=vram_target, lookup=lookup)
        plan, measurement = request.plan(settings)
        # The largest contexts, cached (the search tries many contexts). Without pass 1 it is capped
        # by max(n_ctx_train, n_ctx): only that part of n_ctx matters. With it, its compute grows
        # from the context it ran at: all of it does.
        cap = max(shape.n_ctx_train, settings.n_ctx)
        key = (settings if measurement is not None else settings.with_(n_ctx=cap), measurement)
        fit = self._fits.get(key)
        if fit is None:
            fit = request.largest_fit(settings, measurement)
            self._fits[key] = fit
        return plan, fit


def read_machine(read_inventory: Callable[[], Inventory]) -> Inventory:
    """This machine's GPUs (``read_inventory``: NVML) and its speed calibration for them (measured
    the first time, about a second; then read from the cache): for a task off the GUI thread."""
    inventory = read_inventory()
    calibration(inventory)
    return inventory


#: Why there is no real GPU until the first reading is in (NVML is read off the GUI thread).
READING_GPUS = "reading this machine's GPUs…"


def not_read_yet() -> Inventory:
    """The real inventory before NVML's first answer: no GPU yet, this machine's host RAM and CPU
    (psutil and /proc, no NVML)."""
    return Inventory(gpus=(), host=host_memory(), reason=READING_GPUS, cpu=host_cpu_features())


def machine_part(live: Inventory) -> Inventory | None:
    """This machine's part of a live planning inventory, the last reading of its GPUs from now on
    (the RPC workers' devices are added again from their readings); None for simulated cards: only
    their host RAM is live."""
    if any(g.simulated for g in live.gpus):
        return None
    return replace(live, gpus=live.local_gpus, dead_workers=())


def inventory_for(simulated: str, real: Inventory,
                  workers: Sequence[WorkerReading] = ()) -> tuple[Inventory, str]:
    """The planning inventory: the real one, or one simulated card (no NVML call), with the RPC
    workers' devices in front when there are some. Returns it and the reason the machine has no
    real GPU ("" when it has some)."""
    if not simulated:
        inv, reason = real, real.reason
    else:
        inv, reason = resolve_gpus([simulated]), real.reason if not real.gpus else ""
    if workers:
        inv = add_workers(inv, workers)
        reason = reason if not inv.gpus else ""
    return inv, reason
