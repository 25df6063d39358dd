"""The one place the window talks to the planner: cached shape, inventory and measurement.

Re-planning happens on every slider move, so everything slow (reading the GGUF, NVML, pass 1) is
done once and kept here; ``plan()`` only calls ``make_plan`` (designed to take < 10 ms). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from app.planner.devices import Inventory, resolve_gpus
from app.planner.gguf_model import ModelShape, read_shape
from app.planner.measurement import Measurement
from app.planner.plan import ContextFit, Plan, make_plan, max_context
from app.planner.settings import LaunchSettings
from app.planner.units import MiB


@dataclass
class PlanInputs:
    """Everything a plan depends on besides the launch settings."""

    inventory: Inventory
    shape: ModelShape | None = None
    measurement: Measurement | None = None
    measured_for: LaunchSettings | None = None  # the settings pass 1 ran with
    engine_window: bool = False
    safety: int = 256 * MiB
    vram_target: int | None = None
    nvml_reason: str = ""  # why there are no real GPUs (shown even while simulating)
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
        """Pass 1 is only true for the exact settings it ran with (docs/domain.md §1)."""
        return self.measurement if self.measured_for == settings else None

    def plan(self, settings: LaunchSettings) -> Plan:
        if self.shape is None:
            raise ValueError("no model loaded")
        return make_plan(self.shape, self.inventory, settings, engine_window=self.engine_window,
                         measurement=self.measurement_for(settings), safety=self.safety,
                         vram_target=self.vram_target)

    def largest_fit(self, settings: LaunchSettings) -> ContextFit:
        """``max_context`` for everything but n_ctx, cached (it searches over many contexts)."""
        if self.shape is None:
            raise ValueError("no model loaded")
        # The search is capped by max(n_ctx_train, n_ctx): only that part of n_ctx matters.
        cap = max(self.shape.n_ctx_train, settings.n_ctx)
        key = (self.shape.path, settings.with_(n_ctx=cap), self.engine_window, self.safety,
               self.vram_target, id(self.inventory))
        fit = self._fits.get(key)
        if fit is None:
            fit = max_context(self.shape, self.inventory, settings, engine_window=self.engine_window,
                              safety=self.safety, vram_target=self.vram_target)
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
