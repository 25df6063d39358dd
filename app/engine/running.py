"""A launched engine, and the narrow contract the window holds it by.

``RunningEngine`` is all a caller that did not start the engine may ask of it (docs/style.md, "A narrow
contract first": ollama's ``LlamaServer`` interface): its status, where it answers, its process,
its recent log, plan vs actual, and stop. ``LaunchedEngine`` is the one implementation: a
``LaunchSpec`` started for a ``Plan``, supervised by ``ServerProcess`` (app.engine.process); the
code that launches it also gets to start it and to listen to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from app.engine.check import PlanCheck
from app.engine.launch import LaunchSpec, plan_check
from app.engine.process import Listener, ServerStatus
from app.planner.plan_types import Plan


class RunningEngine(Protocol):
    """An engine started for a plan (see the module docstring)."""

    @property
    def plan(self) -> Plan:
        """What it was launched with."""
        ...

    @property
    def status(self) -> ServerStatus: ...

    @property
    def url(self) -> str:
        """Its base URL (``http://127.0.0.1:PORT``)."""
        ...

    @property
    def pid(self) -> int | None:
        """Its process, once spawned (NVML attributes its GPU memory to it)."""
        ...

    @property
    def api_key(self) -> str | None:
        """The key its clients must send (None: it wants none)."""
        ...

    def log_tail(self, n: int | None = None) -> list[str]:
        """Its last log lines (all those kept when ``n`` is None)."""
        ...

    def plan_check(self) -> PlanCheck:
        """Plan vs what it allocated (once it is ready; blocking: it asks the engine)."""
        ...

    def stop(self, grace: float = 10.0) -> int | None:
        """Stop it (SIGTERM, then kill after ``grace`` seconds); its exit code. Blocking."""
        ...


class LaunchedEngine:
    """``spec`` started for ``plan``; a ``RunningEngine``."""

    def __init__(self, plan: Plan, spec: LaunchSpec) -> None:
        self._plan = plan
        self.spec = spec
        self._server = spec.server()

    @property
    def plan(self) -> Plan:
        return self._plan

    @property
    def status(self) -> ServerStatus:
        return self._server.status

    @property
    def url(self) -> str:
        return self._server.base_url

    @property
    def pid(self) -> int | None:
        return self._server.pid

    @property
    def api_key(self) -> str | None:
        return self.spec.api_key

    def log_tail(self, n: int | None = None) -> list[str]:
        return self._server.tail(n)

    def plan_check(self) -> PlanCheck:
        return plan_check(self._plan, self._server, api_key=self.spec.api_key)

    def stop(self, grace: float = 10.0) -> int | None:
        return self._server.stop(grace)

    # -- for the launcher ----------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """``listener(status, detail)`` on every status change (from whichever thread saw it)."""
        self._server.add_listener(listener)

    def add_line_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(line)`` for each log line."""
        self._server.add_line_listener(listener)

    def start(self, timeout: float = 120.0) -> str:
        """Spawn it and wait until it is healthy; its URL. Raises EngineFailed (blocking)."""
        self._server.start()
        self._server.wait_ready(timeout=timeout)
        return self.url

    def running(self) -> bool:
        return self._server.running()
