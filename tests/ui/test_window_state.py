"""The window's one state on its own: each input re-plans through the planner's PlanRequest and says
so with its signal; a running engine is held by the narrow RunningEngine contract only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.engine.check import PlanCheck
from app.engine.process import ServerStatus
from app.machine.devices import resolve_gpus
from app.machine.request import request_for_machine
from app.planner.gguf.model import read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan_types import Plan
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.sources import SourceKind
from app.planner.units import MiB
from app.ui.window_state import PlanSettings, WindowState

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
K = 1024


class Recorder:
    """Every signal of a state, in order, with its arguments."""

    NAMES = ("modelChanged", "settingsChanged", "inventoryChanged", "measurementChanged", "enginesChanged",
             "planChanged", "noPlan", "runningChanged", "engineReady")

    def __init__(self, state: WindowState) -> None:
        self.seen: list[tuple[str, tuple[Any, ...]]] = []
        for name in self.NAMES:
            getattr(state, name).connect(lambda *args, n=name: self.seen.append((n, args)))

    def names(self) -> list[str]:
        names, self.seen = [n for n, _a in self.seen], []
        return names


class FakeEngine:
    """Only what RunningEngine promises (mypy checks it is enough to hold one)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.status = ServerStatus.READY
        self.url = "http://127.0.0.1:1"
        self.pid: int | None = 4242
        self.api_key: str | None = None

    def log_tail(self, n: int | None = None) -> list[str]:
        return []

    def plan_check(self) -> PlanCheck:
        raise NotImplementedError

    def stop(self, grace: float = 10.0) -> int | None:
        return 0


def _state(qtbot: Any, shape_model: Callable[[str], Path]) -> tuple[WindowState, Recorder, Path]:
    state = WindowState(resolve_gpus(["RTX 4090"]))
    state.set_settings(PlanSettings(LaunchSettings(n_ctx=32 * K)))  # no model yet: no plan
    assert state.plan is None
    rec = Recorder(state)
    path = shape_model(LLAMA8B)
    state.open_model(path)
    return state, rec, path


def test_a_model_plans_through_the_plan_request(qtbot, shape_model) -> None:
    state, rec, path = _state(qtbot, shape_model)
    assert rec.names() == ["modelChanged", "planChanged", "measurementChanged"]
    assert state.model is not None and state.model.path == path and state.model.preview is None
    request = request_for_machine(read_shape(path), state.inventory, lookup=state.measurement_for)
    assert state.plan == request.plan(LaunchSettings(n_ctx=32 * K)).plan
    assert state.fit == request.largest_fit(LaunchSettings(n_ctx=32 * K))


def test_settings_that_cannot_be_planned_give_no_plan_and_say_why(qtbot, shape_model) -> None:
    state, rec, _path = _state(qtbot, shape_model)
    rec.names()
    state.set_settings(PlanSettings(LaunchSettings(n_ctx=32 * K), problem="not a token count: 'abc'"))
    assert rec.seen == [("settingsChanged", (state.settings,)), ("noPlan", ("context: not a token count: 'abc'",))]
    assert state.plan is None and state.fit is None
    rec.names()
    state.set_settings(PlanSettings(LaunchSettings(n_ctx=32 * K, type_v="q8_0", flash_attn=FlashAttn.OFF)))
    assert rec.seen[-1] == ("noPlan", ("a quantized V cache (q8_0) requires flash attention",))


def test_pass_1_counts_for_exactly_the_settings_it_ran_with(qtbot, shape_model) -> None:
    state, rec, _path = _state(qtbot, shape_model)
    settings = state.settings.launch
    m = Measurement((DeviceMeasurement("CUDA0", compute=700 * MiB),
                     DeviceMeasurement("CUDA_Host", compute=40 * MiB, host=True)), "CUDA", "0c1e57098", 1.2,
                    launch=settings)
    rec.names()
    state.set_measurement(m, settings)
    assert rec.names() == ["measurementChanged", "planChanged"]
    assert state.plan is not None and state.plan.gpus[0].compute == 700 * MiB
    state.set_settings(replace(state.settings, launch=settings.with_(n_ctx=64 * K)))  # other settings
    assert state.plan is not None and state.plan.gpus[0].sources["compute"].kind == SourceKind.ESTIMATED


def test_the_running_engine_is_held_by_its_contract_and_its_plan_shown_until_it_is_gone(qtbot, shape_model) -> None:
    state, rec, _path = _state(qtbot, shape_model)
    launched = state.plan
    assert launched is not None
    rec.names()
    state.set_running(FakeEngine(launched))
    assert rec.seen == [("runningChanged", (launched,))] and state.running is launched
    state.engine_is_ready("http://127.0.0.1:1")
    assert rec.seen[-1] == ("engineReady", ("http://127.0.0.1:1",))
    rec.names()
    state.set_running(None)  # stopped or failed: the picture goes back to the settings now
    assert rec.names() == ["runningChanged", "planChanged"]
    assert state.running is None and state.running_engine is None
