"""One road to a plan (issue 47): ``headroom plan`` and the window's state build their PlanRequest
through the one function, app/machine/request.py ``request_for_machine``, and nothing else under app/
builds one; what differs between them (the window's speeds before its calibration is in) is an argument."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.machine import request as machine_request
from app.machine.devices import resolve_gpus
from app.planner.request import PlanRequest
from app.planner.settings import LaunchSettings
from app.ui.window_state import PlanSettings, WindowState

APP = Path(__file__).resolve().parents[2] / "app"
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[PlanRequest]:
    """Every PlanRequest the one function builds, in order (the real requests, recorded)."""
    seen: list[PlanRequest] = []
    real = PlanRequest

    def record(*args: Any, **kwargs: Any) -> PlanRequest:
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(machine_request, "PlanRequest", record)
    return seen


def test_headroom_plan_asks_the_one_function(built: list[PlanRequest], shape_model: Callable[[str], Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(shape_model(LLAMA8B)), "--ctx", "32k", "--gpu", "RTX 4090"]) == 0
    assert "mode stock: FITS" in capsys.readouterr().out
    assert built and [g.name for g in built[-1].inventory.gpus] == ["NVIDIA GeForce RTX 4090 (simulated)"]
    assert built[-1].speed is not None  # the CLI prices with this machine's calibration


def test_the_window_asks_the_one_function(qtbot: Any, built: list[PlanRequest],
                                          shape_model: Callable[[str], Path]) -> None:
    state = WindowState(resolve_gpus(["RTX 4090"]))
    state.set_settings(PlanSettings(LaunchSettings(n_ctx=32 * 1024)))
    state.open_model(shape_model(LLAMA8B))
    assert built and state.plan == built[-1].plan(LaunchSettings(n_ctx=32 * 1024)).plan
    assert built[-1].speed is None  # before the window's calibration is in: the speed model's defaults


def test_no_other_module_builds_a_plan_request() -> None:
    found = [str(p.relative_to(APP.parent)) for p in sorted(APP.rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "PlanRequest"]
    assert found == ["app/machine/request.py"]
