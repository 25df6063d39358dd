"""From a plan to a launch: pick the engine, refuse what it cannot do, build the argv, check after.

The glue both ``headroom serve`` and the window use, so neither repeats the rules: the window mode
needs the opencoti engine; an engine that lacks a flag the plan needs is refused before launch
(app.engine.capabilities.refusal); beyond 127.0.0.1 only with the stored API key
(app.engine.apikey).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.engine import apikey
from app.engine.argv import argv_for_plan, shell_line
from app.engine.capabilities import engine_env, free_port, refusal
from app.engine.check import PlanCheck, check_plan, fetch_props
from app.engine.discover import EngineInfo, choose
from app.engine.process import ServerProcess
from app.planner.devices import Snapshot
from app.planner.plan_types import Plan


class LaunchRefused(Exception):
    """The plan cannot be launched with the engines at hand; the message says why."""


@dataclass(frozen=True)
class LaunchSpec:
    engine: EngineInfo
    argv: list[str]
    host: str
    port: int
    api_key: str | None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def shell_line(self) -> str:
        return shell_line(self.argv)

    def server(self, log_path: Path | None = None) -> ServerProcess:
        return ServerProcess(self.argv, self.host, self.port, log_path=log_path, env=self.env)


def prepare(plan: Plan, model: Path, engines: Sequence[EngineInfo], *, host: str = "127.0.0.1",
            port: int | None = None, require_key: bool = False, extra: Sequence[str] = (),
            env: dict[str, str] | None = None, key_dir: Path | None = None) -> LaunchSpec:
    """Everything needed to start the engine for ``plan``, or LaunchRefused with the reason."""
    if not plan.feasible:
        raise LaunchRefused(f"the plan does not fit: {plan.reason}")
    engine = _pick(plan, list(engines))
    key = apikey.load_or_create(key_dir) if require_key else apikey.key_for_host(host, key_dir)
    chosen_port = port or free_port("127.0.0.1" if apikey.is_loopback(host) else host)
    argv = argv_for_plan(engine, plan, model, host, chosen_port, api_key=key, extra=extra)
    return LaunchSpec(engine, argv, host, chosen_port, key, {**engine_env(), **(env or {})})


def _why_not(engine: EngineInfo, plan: Plan) -> str | None:
    if engine.capabilities is None:
        return None
    why = refusal(engine.capabilities, plan.launch, plan.mode)
    return f"{engine.path}: {why}" if why else None


def _pick(plan: Plan, engines: list[EngineInfo]) -> EngineInfo:
    """The engine the user chose (strictly: refused if it cannot), else the first one that can."""
    first = choose(engines, plan.mode)
    if first is None:
        need = "the opencoti llamafile (for the KV window)" if plan.mode == "window" else "an engine"
        raise LaunchRefused(f"no engine found: this plan needs {need}. Run `headroom engine build` "
                            "or choose one with --engine")
    if first.source != "settings":
        for engine in engines:
            if choose([engine], plan.mode) is engine and _why_not(engine, plan) is None:
                return engine
    why = _why_not(first, plan)
    if why:
        raise LaunchRefused(why)
    return first


def plan_check(plan: Plan, server: ServerProcess, *, snapshot: Snapshot | None = None,
               api_key: str | None = None) -> PlanCheck:
    """Plan vs actual for a ready engine (its whole log, NVML when given, /props)."""
    props = fetch_props(server.base_url, api_key)
    return check_plan(plan, server.log_lines(), snapshot=snapshot, props=props)
