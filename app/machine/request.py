"""The plan request for this machine: the one road from a model and its devices to a ``PlanRequest``
(app/planner/request.py), for ``headroom plan``/``serve`` and the window alike.

It resolves what the planner is handed rather than reads: the per-process GPU overhead (given, else
measured for this GPU and driver, app/machine/overhead.py) and the speed figures (this machine's
calibration, app/machine/calibrate.py, or the speed model's defaults until it is in). What differs
between the CLI and the window is an argument: the window asks with ``calibrated`` False until its
first calibration is in and never retimes on its own thread (``retime``); the CLI gives ``--overhead``.
"""

from __future__ import annotations

from pathlib import Path

from app.machine.calibrate import machine_speed
from app.machine.overhead import machine_overhead
from app.planner.devices import Inventory
from app.planner.gguf.beside import read_beside
from app.planner.gguf.model import ModelShape
from app.planner.request import DEFAULT_SAFETY, MeasurementLookup, PlanRequest


def request_for_machine(shape: ModelShape, inventory: Inventory, *, engine_window: bool = False,
                        safety: int = DEFAULT_SAFETY, vram_target: int | None = None,
                        overhead: int | None = None, lookup: MeasurementLookup | None = None,
                        calibrated: bool = False, retime: bool = True, host_attention: bool = False,
                        overhead_path: Path | None = None, speed_path: Path | None = None) -> PlanRequest:
    """The plan request for ``shape`` on ``inventory``: ``overhead`` (the one given, else this GPU and
    driver's measured one); ``calibrated``: speeds from this machine's calibration (timed first when it
    is missing or stale and ``retime``), else the speed model's defaults; ``host_attention``: the engine
    that will launch attends to host KV on the CPU (app/engine/attention_runs.py). ``overhead_path`` and
    ``speed_path``: the stores (tests; None: the cache's). The files beside the model are read with
``read_beside`` (cached by path, size and mtime)."""
    speed = machine_speed(inventory, path=speed_path, host_attention=host_attention, model=shape.name,
                          retime=retime) if calibrated else None
    return PlanRequest(shape, inventory, engine_window, safety, vram_target,
                       machine_overhead(inventory, overhead, path=overhead_path), lookup, speed, read_beside)
