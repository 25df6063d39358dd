"""The window's one state: the model, the settings, the devices, pass 1, the plan and the running
engine, with a signal for each change (docs/style.md, "One state, many views").

Panels subscribe (each has a ``bind(state)``) and write back through the methods here; none reaches
into another's widgets. Every input that changes re-plans at once (``replan``), through the
planner's one ``PlanRequest`` (app.ui.planning); the plan comes back as ``planChanged`` — or, when
the settings cannot be planned, as ``noPlan(reason)``.

Signals (the argument's type after the colon):

- ``modelChanged``: OpenModel — a model was opened (its pass 1, if any, is forgotten)
- ``settingsChanged``: PlanSettings — the launch settings or the planning options changed
- ``inventoryChanged``: Inventory, str — the devices planned for, and why there are no real GPUs
- ``measurementChanged``: Measurement | None — pass 1 ran (None: forgotten with a new model)
- ``enginesChanged``: list[EngineInfo] | None — the engines found (None: still looking)
- ``engineChosen``: EngineInfo | None — the engine Launch would use changed (sent before the re-plan,
  so a panel can first drop what that engine cannot do)
- ``planChanged``: Plan — a new plan for the settings now (``fit``: its largest contexts)
- ``noPlan``: str — the settings give no plan, and why
- ``runningChanged``: Plan | None — an engine was launched with this plan (None: it is gone)
- ``engineReady``: str — the running engine answers at this URL
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.engine.attention_runs import host_attention
from app.engine.discover import EngineInfo
from app.engine.gpu_reach import GpuReach, for_launch
from app.engine.running import RunningEngine
from app.planner.devices import Inventory
from app.planner.errors import PlannerError
from app.planner.gguf.model import ModelShape
from app.planner.law import fit_shape
from app.planner.measurement import Measurement
from app.planner.plan_types import ContextFit, Plan
from app.planner.request import DEFAULT_SAFETY, PlanRequest
from app.planner.settings import LaunchSettings
from app.ui.hub_button import preview_name
from app.ui.planning import Planner
from app.ui.qt import QObject, Signal


@dataclass(frozen=True)
class OpenModel:
    path: Path
    shape: ModelShape
    #: "<repo>/<file>" of a header-only copy from the Hub: planned and measured, never launched.
    preview: str | None = None
    #: The built-in demo (app.ui.demo): a shape with no weights, for planning only.
    demo: bool = False


@dataclass(frozen=True)
class PlanSettings:
    """What the settings panel says: the launch settings and how to plan them."""

    launch: LaunchSettings = field(default_factory=LaunchSettings)
    engine_window: bool = False  # plan for the opencoti rolling KV window
    safety: int = DEFAULT_SAFETY
    vram_target: int | None = None
    #: Why the settings cannot be planned as typed ("" when they can): a mistyped context.
    problem: str = ""


def no_engine_yet(engines: list[EngineInfo] | None, to: str) -> str:
    """What Launch and Measure say when clicked with no engine chosen: a step still to do, not a
    failure (``to``: "launch", "measure")."""
    if engines is None:
        return f"Still looking for engines: {to} once one is found."
    return (f"No engine yet to {to} with: choose one in the Engine list or with File ▸ Choose engine…, "
            "or press Build engine… to build Headroom's own.")


#: How each of ``no_engine_yet``'s sentences begins: none of them holds once an engine is there.
NO_ENGINE_YET = ("Still looking for engines:", "No engine yet to ")


class WindowState(QObject):
    modelChanged = Signal(object)
    settingsChanged = Signal(object)
    inventoryChanged = Signal(object, str)
    measurementChanged = Signal(object)
    enginesChanged = Signal(object)
    engineChosen = Signal(object)
    planChanged = Signal(object)
    noPlan = Signal(str)
    runningChanged = Signal(object)
    engineReady = Signal(str)

    def __init__(self, inventory: Inventory, nvml_reason: str = "", parent: QObject | None = None, *,
                 overhead_path: Path | None = None) -> None:
        super().__init__(parent)
        self.model: OpenModel | None = None
        self.settings = PlanSettings()
        self.inventory = inventory
        self.nvml_reason = nvml_reason  # why there are no real GPUs (shown even while simulating)
        self.measurement: Measurement | None = None
        self.measured_for: LaunchSettings | None = None  # the settings pass 1 ran with
        self.engines: list[EngineInfo] | None = None
        self.engine: EngineInfo | None = None  # the one chosen to launch
        self.plan: Plan | None = None  # what Launch would start now (None: the settings give none)
        self.fit: ContextFit | None = None  # the largest contexts for the settings now
        self.plan_ms = 0.0
        self.running: Plan | None = None  # what the engine starting or running was launched with
        self.running_engine: RunningEngine | None = None
        self._planner = Planner(overhead_path)

    def speed_calibrated(self) -> None:
        """The machine's speed calibration is stored (measured off the GUI thread): the plans from now
        on predict tokens/s with its figures, as ``headroom plan``'s do (the caller re-plans)."""
        self._planner.speed_ready = True

    @property
    def speed_ready(self) -> bool:
        """The machine's speed calibration is stored: plans predict with it."""
        return self._planner.speed_ready

    def engine_runs_stored(self) -> None:
        """A CPU-attention engine run was stored (made off the GUI thread): the plans from now on price
        attention on a CPU with it (the caller re-plans)."""
        self._planner.engine_runs += 1

    # ---- inputs --------------------------------------------------------------------------------
    @staticmethod
    def read_model(path: Path, *, demo: bool = False) -> OpenModel:
        """Read the GGUF header (PlannerError or OSError if it is not a usable model); nothing changes."""
        from app.planner.gguf.model import read_shape

        return OpenModel(path, read_shape(path), preview_name(path), demo)

    def open_model(self, path: Path, *, demo: bool = False) -> OpenModel:
        """Read the GGUF header (PlannerError or OSError if it is not a usable model), then
        ``use_model``."""
        model = self.read_model(path, demo=demo)
        self.use_model(model)
        return model

    def use_model(self, model: OpenModel, settings: PlanSettings | None = None) -> None:
        """A model read by ``read_model``: forget the last pass 1, plan (with ``settings`` when the
        new model comes with its own: one plan, never one for the old model with them)."""
        self.measurement, self.measured_for = None, None
        if settings is not None:
            self.settings = settings
            self.settingsChanged.emit(settings)
        self.set_model(model)
        self.measurementChanged.emit(None)

    def set_model(self, model: OpenModel) -> None:
        self.model = model
        self.modelChanged.emit(model)
        self.replan()

    def set_settings(self, settings: PlanSettings, *, replan: bool = True) -> None:
        """``replan`` False: a plan follows anyway (a panel's answer to ``modelChanged``, before its plan)."""
        self.settings = settings
        self.settingsChanged.emit(settings)
        if replan:
            self.replan()

    def set_inventory(self, inventory: Inventory, nvml_reason: str | None = None, *, replan: bool = True) -> None:
        self.inventory = inventory
        if nvml_reason is not None:
            self.nvml_reason = nvml_reason
        self.inventoryChanged.emit(inventory, self.nvml_reason)
        if replan:
            self.replan()

    def set_measurement(self, measurement: Measurement, settings: LaunchSettings) -> None:
        """Pass 1 ran with ``settings``. For a model the estimate does not know, the first one is its
        measured law (app/planner/law.py): the model's shape is fitted from it once, and every plan after
        (another context, slot count, KV type) comes from that law without measuring again."""
        self.measurement, self.measured_for = measurement, settings
        model = self.model
        if model is not None and not model.shape.modelled and not model.shape.law:
            try:
                self.model = replace(model, shape=fit_shape(model.shape, replace(measurement, launch=settings)))
            except PlannerError as exc:
                self._no_plan(str(exc))
                return
        self.measurementChanged.emit(measurement)
        self.replan()

    def measurement_for(self, settings: LaunchSettings) -> Measurement | None:
        """Pass 1 is only true for the exact settings it ran with (docs/domain.md §1)."""
        return self.measurement if self.measured_for == settings else None

    def set_engines(self, engines: list[EngineInfo] | None) -> None:
        """The engines found (None: looking); the first is chosen until ``choose_engine``."""
        self.engines = engines
        self.engine = engines[0] if engines else None
        self._planner.host_attention = host_attention(self.engine)
        self.enginesChanged.emit(engines)
        self.engineChosen.emit(self.engine)
        self.replan()  # the engine advisories are for the chosen engine

    def choose_engine(self, index: int) -> None:
        engines = self.engines or []
        engine = engines[index] if 0 <= index < len(engines) else None
        if engine is self.engine:
            return
        self.engine = engine
        self._planner.host_attention = host_attention(engine)  # its host tail's speed
        self.engineChosen.emit(engine)
        self.replan()

    # ---- the running engine --------------------------------------------------------------------
    def set_running(self, engine: RunningEngine | None) -> None:
        """An engine was launched (its plan is what the picture shows while it runs), or it is gone
        (stopped or failed): the picture goes back to the settings as they are now."""
        self.running_engine = engine
        self.running = engine.plan if engine is not None else None
        self.runningChanged.emit(self.running)
        if engine is None:
            self.replan()

    def engine_is_ready(self, url: str) -> None:
        self.engineReady.emit(url)

    # ---- planning ------------------------------------------------------------------------------
    def replan(self) -> None:
        """Plan the settings now (nothing before a model is open)."""
        model, settings = self.model, self.settings
        if model is None:
            return
        if settings.problem:  # said under the field already
            self._no_plan(f"context: {settings.problem}")
            return
        started = time.perf_counter()
        try:
            self.plan, self.fit = self._planner.plan(
                model.shape, self.planning_inventory(), settings.launch, engine_window=settings.engine_window,
                safety=settings.safety, vram_target=settings.vram_target, lookup=self.measurement_for)
        except (PlannerError, ValueError) as exc:
            self._no_plan(str(exc))
            return
        self.plan_ms = (time.perf_counter() - started) * 1000
        self.planChanged.emit(self.plan)

    def planning_inventory(self) -> Inventory:
        """The devices, and for a plan without GPUs the chosen engine's CPU features (which host
        weights its CPU code repacks, from its own system_info line)."""
        if self.inventory.gpus or self.engine is None or self.engine.cpu_features is None:
            return self.inventory
        return replace(self.inventory, cpu=self.engine.cpu_features)

    def plan_for_what_runs(self, found: GpuReach) -> Plan | None:
        """The settings shown, planned for the devices the chosen engine will use (``found``,
        app/engine/gpu_reach.py): what Launch starts when that engine cannot use the plan's GPUs (a CPU
        build under a simulated card, a CUDA build without a driver). None before a model is open."""
        model, settings = self.model, self.settings
        if model is None:
            return None
        inventory = for_launch(self.planning_inventory(), found)
        if not inventory.gpus and self.engine is not None and self.engine.cpu_features is not None:
            inventory = replace(inventory, cpu=self.engine.cpu_features)
        plan, _fit = self._planner.plan(model.shape, inventory, settings.launch, engine_window=False,
                                        safety=settings.safety, vram_target=settings.vram_target,
                                        lookup=self.measurement_for)
        return plan

    def plan_request(self) -> PlanRequest | None:
        """The planner's request the plans now come from (None before a model is open): the same
        overhead, safety, VRAM target and engine, for views that price more than the one plan (the
        context chart)."""
        model, settings = self.model, self.settings
        if model is None:
            return None
        return self._planner.request(model.shape, self.planning_inventory(), engine_window=settings.engine_window,
                                     safety=settings.safety, vram_target=settings.vram_target,
                                     lookup=self.measurement_for)

    def _no_plan(self, reason: str) -> None:
        self.plan, self.fit = None, None
        self.noPlan.emit(reason)
