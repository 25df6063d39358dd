"""One plan request: everything a plan depends on besides the launch settings, and the one way from
them to a plan. ``headroom plan``/``serve`` and the window both plan through it, so the same model,
settings and GPUs plan the same everywhere.

It owns
- the per-process GPU overhead, resolved already: given (``--overhead``), else measured for this GPU
  and driver, else None = the planner's default (docs/domain.md §2; ``app.machine.request.
  request_for_machine`` resolves it);
- the safety margin, the VRAM target and the engine (stock, or one with a KV position window);
- pass 1: a lookup ``launch -> Measurement | None`` handed in by the caller (the CLI passes the
  probe's cache, or pass 1 run through it; the window its own last measurement; the planner runs
  nothing itself), asked for the plan's *own* launch (else the settings as given), and asked again
  when the measured plan chose another launch (an ``-ngl`` alternative);
- the largest context that fits, with the same measurement;
- the files the launch loads beside the model (LoRAs, a draft, a projector): a lookup ``launch ->
  Beside`` handed in by the caller (``app.machine.request`` gives ``app.planner.gguf.beside.read_beside``),
  asked once per plan, so the solver prices their shapes and reads no file.

Pure: no I/O of its own (``app.machine.request.request_for_machine`` builds one with the stored overhead
and the readers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from app.planner.devices import Inventory
from app.planner.errors import NotModelled, PlannerError
from app.planner.gguf.beside import NOTHING, Beside
from app.planner.gguf.model import ModelShape
from app.planner.law import fit_shape
from app.planner.measurement import Measurement
from app.planner.plan_types import ContextFit, Plan
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.solve.speed import SpeedFigures
from app.planner.units import MiB

#: Default margin kept free per GPU: the opencoti two-pass's 256 MiB (docs/domain.md §4).
DEFAULT_SAFETY = 256 * MiB

#: How many times a plan is redone with pass 1 for its own launch before it stands: a measured
#: plan may choose another ``-ngl`` or ``-ts`` than the estimated one, and that launch is measured too.
MEASURE_ROUNDS = 4

#: Pass 1 for one launch, or None when there is none (the caller's cache, or its last measurement).
MeasurementLookup = Callable[[LaunchSettings], Measurement | None]
#: The shapes of the files a launch loads beside its model (app/planner/gguf/beside.py ``read_beside``).
BesideLookup = Callable[[LaunchSettings], Beside]


class MeasuredPlan(NamedTuple):
    """A plan and the pass-1 measurement it used (None: compute buffers estimated)."""

    plan: Plan
    measurement: Measurement | None


@dataclass(frozen=True)
class PlanRequest:
    """A model on some devices, with everything but the launch settings (see the module docstring)."""

    shape: ModelShape
    inventory: Inventory
    engine_window: bool = False
    safety: int = DEFAULT_SAFETY
    vram_target: int | None = None
    #: Resolved already: ``machine_overhead``'s answer (None: the planner's default).
    overhead: int | None = None
    lookup: MeasurementLookup | None = None
    #: The machine's speed figures (app/machine/calibrate.py; None: the speed model's defaults).
    speed: SpeedFigures | None = None
    #: The readers of the files beside the model (None: a request for launches with none).
    beside: BesideLookup | None = None

    def beside_for(self, settings: LaunchSettings) -> Beside:
        """The shapes of the files ``settings`` loads beside the model, through the lookup."""
        if self.beside is not None:
            return self.beside(settings)
        if settings.lora or settings.draft_model or settings.mmproj:
            raise PlannerError("this plan request cannot read the files beside the model (--lora, -md, --mmproj)")
        return NOTHING

    def _make(self, settings: LaunchSettings, measurement: Measurement | None,
              known: dict[LaunchSettings, Measurement] | None = None, beside: Beside = NOTHING) -> Plan:
        return make_plan(self.shape, self.inventory, settings, engine_window=self.engine_window,
                         measurement=measurement, safety=self.safety, vram_target=self.vram_target,
                         overhead=self.overhead, measured=known, speed=self.speed, beside=beside)

    def measurement_for(self, launch: LaunchSettings, asked: LaunchSettings) -> Measurement | None:
        """Pass 1 for ``launch``; when the lookup has none, the one for the settings as ``asked``.
        The planner says whose numbers those are: "measured by pass 1 for other settings at …", or,
        for a plan without GPUs (``-ngl 0``) and a probe that saw none either, simply measured
        (nothing could be offloaded)."""
        if self.lookup is None:
            return None
        found = self.lookup(launch)
        if found is None and launch != asked:
            found = self.lookup(asked)
        return found

    def fitted(self, settings: LaunchSettings) -> PlanRequest:
        """This request, for a model the estimate does not know with its shape fitted from pass 1 at
        ``settings`` (the measured law, app/planner/law.py); NotModelled, saying what to run, when the
        lookup has no pass 1 for it."""
        if self.shape.modelled or self.shape.law:
            return self
        m = self.lookup(settings) if self.lookup is not None else None
        if m is None:
            raise NotModelled(self.shape.arch, "the estimate does not know it and no pass 1 measured it: it is "
                                               "planned from pass 1 (headroom plan --measure, or Measure in the window)")
        return replace(self, shape=fit_shape(self.shape, m))

    def plan(self, settings: LaunchSettings) -> MeasuredPlan:
        """The plan for ``settings``, with pass 1 for the plan's *own* launch when the lookup has one.
        When the measured plan chooses another launch (a ``-ngl`` alternative), that one is looked up
        too; the plan's warnings say when the numbers are for the settings as given. A model the
        estimate does not know is first fitted from pass 1 (``fitted``)."""
        request = self.fitted(settings)
        if request is not self:
            return request.plan(settings)
        beside = self.beside_for(settings)
        plan = self._make(settings, None, beside=beside)
        used: Measurement | None = None
        if self.lookup is None:
            return MeasuredPlan(plan, None)
        known: dict[LaunchSettings, Measurement] = {}
        if self.inventory.rpc_devices and plan.alternatives and not plan.alternatives[0].feasible:
            # The estimate is fitted to CUDA; a worker's device may be anything (often a CPU). Measure
            # the settings as given first, so the fallback is chosen on measured numbers.
            first = plan.alternatives[0].launch
            m = self.lookup(first)
            if m is not None:
                known[first] = m
                used, plan = m, self._make(settings, m, known, beside)
        for _ in range(MEASURE_ROUNDS):
            if plan.launch in known:  # priced with its own pass 1 already
                return MeasuredPlan(plan, known[plan.launch])
            m = self.measurement_for(plan.launch, settings)
            if m is None:
                break
            used = m
            if m.launch is not None:
                known[m.launch] = m
            measured = self._make(settings, m, known, beside)
            if measured.launch == plan.launch:
                return MeasuredPlan(measured, m)
            plan = measured
        return MeasuredPlan(plan, known.get(plan.launch, used))

    def largest_fit(self, settings: LaunchSettings, measurement: Measurement | None = None) -> ContextFit:
        """``max_context`` for everything but n_ctx (``measurement``: the one the plan used)."""
        request = self.fitted(settings)
        if request is not self:
            return request.largest_fit(settings, measurement)
        return max_context(self.shape, self.inventory, settings, engine_window=self.engine_window,
                           measurement=measurement, safety=self.safety, vram_target=self.vram_target,
                           overhead=self.overhead, speed=self.speed, beside=self.beside_for(settings))
