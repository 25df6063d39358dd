"""The one place the window talks to the planner: cached shape, inventory and measurement.

Re-planning happens on every slider move, so everything slow (reading the GGUF, NVML, pass 1) is
done once and kept here. Plans come from the planner's one ``PlanRequest`` (app.planner.request),
as ``headroom plan``'s do: the same overhead (measured for this GPU and driver when it was), the
same pass-1 rule (the plan's own launch, then the alternative it chose). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from app.planner.devices import Inventory, resolve_gpus
from app.planner.gguf_model import ModelShape, read_shape
from app.planner.measurement import Measurement
from app.planner.plan import ContextFit, Plan
from app.planner.request import DEFAULT_SAFETY, MeasuredPlan, PlanRequest
from app.planner.settings import LaunchSettings


@dataclass
class PlanInputs:
    """Everything a plan depends on besides the launch settings."""

    inventory: Inventory
    shape: ModelShape | None = None
    measurement: Measurement | None = None
    measured_for: LaunchSettings | None = None  # the settings pass 1 ran with
    engine_window: bool = False
    safety: int = DEFAULT_SAFETY
    vram_target: int | None = None
    nvml_reason: str = ""  # why there are no real GPUs (shown even while simulating)
    overhead_path: Path | None = None  # where measured overheads are kept (None: the cache's; tests)
    _request: tuple[tuple[object, ...], PlanRequest] | None = None
    _fits: dict[tuple[object, ...], ContextFit] = field(default_factory=dict)

    def load_model(self, path: Path) -> ModelShape:
        """Read the GGUF header (PlannerError if it is not a usable model); forget old measurements."""
        self.shape = read_shape(path)
        self.measurement = None
        self.measured_for = None
        self._fits.clear()
        return self.shape

    def set_inventory(self, inv: Inventory) -> None:
        self.inventory = inv
        self._fits.clear()

    def measurement_for(self, settings: LaunchSettings) -> Measurement | None:
        """Pass 1 is only true for the exact settings it ran with (DOMAIN.md §1)."""
        return self.measurement if self.measured_for == settings else None

    def request(self) -> PlanRequest:
        """The plan request for the inputs now (the overhead read once per inventory)."""
        if self.shape is None:
            raise ValueError("no model loaded")
        key = (id(self.shape), id(self.inventory), self.engine_window, self.safety, self.vram_target)
        if self._request is None or self._request[0] != key:
            self._fits.clear()  # the largest contexts were for the last request
            self._request = (key, PlanRequest.for_machine(
                self.shape, self.inventory, engine_window=self.engine_window, safety=self.safety,
                vram_target=self.vram_target, lookup=self.measurement_for, overhead_path=self.overhead_path))
        return self._request[1]

    def measured_plan(self, settings: LaunchSettings) -> MeasuredPlan:
        return self.request().plan(settings)

    def plan(self, settings: LaunchSettings) -> Plan:
        return self.measured_plan(settings).plan

    def largest_fit(self, settings: LaunchSettings, measurement: Measurement | None = None) -> ContextFit:
        """``max_context`` for everything but n_ctx, cached (it searches over many contexts).
        ``measurement``: the one the plan used (``measured_plan``)."""
        request = self.request()  # (a new request forgets the old one's largest contexts)
        assert self.shape is not None
        # Without pass 1 the search is capped by max(n_ctx_train, n_ctx): only that part of n_ctx
        # matters. With it, its compute grows from the context it ran at: all of it does.
        cap = max(self.shape.n_ctx_train, settings.n_ctx)
        key = (settings if measurement is not None else settings.with_(n_ctx=cap), measurement)
        fit = self._fits.get(key)
        if fit is None:
            fit = request.largest_fit(settings, measurement)
            self._fits[key] = fit
        return fit


def real_inventory(nvml: ModuleType | None = None) -> Inventory:
    """This machine's GPUs through NVML (``nvml``: a pynvml stand-in for tests)."""
    return resolve_gpus(["auto"], nvml)


def inventory_for(simulated: str, real: Inventory) -> tuple[Inventory, str]:
    """The planning inventory: the real one, or one simulated card (no NVML call). Returns it and
    the reason the machine has no real GPU ("" when it has some)."""
    if not simulated:
        return real, real.reason
    sim = resolve_gpus([simulated])
    return sim, real.reason if not real.gpus else ""
