"""From a plan to a launch: pick the engine, refuse what it cannot do, build the argv, check after.

The glue both ``headroom serve`` and the window use, so neither repeats the rules: the window mode
needs the opencoti engine; an engine that lacks a flag the plan needs is refused before launch
(app.engine.capabilities.refusal); beyond 127.0.0.1 only with the stored API key
(app.engine.apikey), which the engine reads from its 0600 file, never from its command line; known
engine issues for this model and engine (app.engine.advisories) are attached to the spec, and an
"error" one refuses the launch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.engine import apikey
from app.engine.advisories import Advisory, EngineVersion, Severity, advisories_for, parse_engine_version
from app.engine.argv import argv_for_plan, shell_line
from app.engine.capabilities import API_KEY_ENV, engine_env, free_port, refusal
from app.engine.check import PlanCheck, check_plan, fetch_props
from app.engine.discover import EngineInfo, EngineOrigin, choose
from app.engine.process import ServerProcess
from app.planner import words
from app.planner.devices import Snapshot
from app.planner.plan_types import Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.text import printable

#: Why a model file cannot be launched at all, or None (passed in by the caller).
ModelCheck = Callable[[Path], str | None]


def pass1_refusal(reason: str) -> str:
    """The one rule for a launch whose pass 1 failed, in ``headroom serve`` and the window alike: it is
    refused (llama.cpp would fail the same way at load, or run with buffers nobody measured), and this
    says so with pass 1's own reason."""
    return f"pass 1 failed, so the engine is not launched: {reason}"


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
    advisories: tuple[Advisory, ...] = ()
    #: The 0600 file the engine reads the key from (``--api-key-file``); None: no key, or the
    #: key is in ``env`` (an engine without that flag).
    api_key_file: Path | None = None

    @property
    def shell_line(self) -> str:
        return shell_line(self.argv)

    def server(self, log_path: Path | None = None) -> ServerProcess:
        return ServerProcess(self.argv, self.host, self.port, log_path=log_path, env=self.env)


def engine_placement(engine: EngineInfo) -> EngineVersion:
    """The build number and commit of the engine's llama.cpp, as far as its ``--version`` told us."""
    build, commit = parse_engine_version(engine.version)
    if commit is None and engine.commit and engine.commit != "unknown":
        commit = engine.commit
    return EngineVersion(build, commit)


def launch_advisories(launch: LaunchSettings, mode: PlanMode, engine: EngineInfo, arch: str, *,
                      spills: bool = True, kv_host_layers: int = 0) -> list[Advisory]:
    """Known engine issues for serving ``arch`` with ``launch`` on ``engine`` (no plan needed, so a
    model the planner does not model still gets them). ``spills``: a window plan's host tail is not 0.
    ``kv_host_layers``: the plan's KV host tail (layers whose KV is in host RAM, their weights on a GPU)."""
    build, commit = engine_placement(engine)
    host_kv = kv_host_layers > 0 or (not launch.offload_kqv and not launch.flash_attn_off)
    return advisories_for(arch, commit, build, launch.n_parallel, launch.kv_unified, mode == PlanMode.WINDOW,
                          patched=engine.fixes, spills=spills, host_kv=host_kv)


def advisories(plan: Plan, engine: EngineInfo, arch: str) -> list[Advisory]:
    """Known engine issues for this plan's launch of an ``arch`` model on ``engine``."""
    return launch_advisories(plan.launch, plan.mode, engine, arch, spills=plan.tail_cells > 0,
                             kv_host_layers=plan.kv_host_layers)


#: The longest name ``served_name`` gives (a client lists it in a menu).
SERVED_NAME_MAX = 64


def served_name(name: str, path: Path) -> str:
    """The name clients list the model by (``--alias``): the GGUF's ``general.name``, printable and on one
    line, else the file's name without ``.gguf`` (or ``.llamafile``)."""
    clean = " ".join(printable(name).split())[:SERVED_NAME_MAX].strip()
    if clean:
        return clean
    stem = path.name
    for suffix in (".gguf", ".llamafile"):
        stem = stem.removesuffix(suffix)
    return stem[:SERVED_NAME_MAX] or "model"


def prepare(plan: Plan, model: Path, engines: Sequence[EngineInfo], *, host: str = "127.0.0.1",
            port: int | None = None, require_key: bool = False, extra: Sequence[str] = (),
            env: dict[str, str] | None = None, key_dir: Path | None = None,
            arch: str | None = None, unlaunchable: ModelCheck | None = None, alias: str | None = None) -> LaunchSpec:
    """Everything needed to start the engine for ``plan``, or LaunchRefused with the reason.

    With the model's ``arch``, the engine advisories ride along on the spec; one of severity
    "error" refuses the launch. ``unlaunchable(model)``: why this file cannot be launched, or None
    (the caller's knowledge, e.g. ``app.hub.preview.preview_refusal``: a header-only copy's weights
    are zeros); the engine itself knows nothing of where a file came from."""
    why = unlaunchable(model) if unlaunchable is not None else None
    if why:
        raise LaunchRefused(why)
    if not plan.feasible:
        raise LaunchRefused(words.plan_does_not_fit(plan.reason))
    engine = pick_engine(plan, list(engines))
    found = tuple(advisories(plan, engine, arch)) if arch else ()
    errors = [a for a in found if a.severity == Severity.ERROR]
    if errors:
        raise LaunchRefused("; ".join(str(a) for a in errors))
    try:
        key = apikey.load_or_create(key_dir) if require_key else apikey.key_for_host(host, key_dir)
    except apikey.ApiKeyError as exc:
        raise LaunchRefused(str(exc)) from None
    chosen_port = port or free_port("127.0.0.1" if apikey.is_loopback(host) else host)
    key_file, key_env = _key_passing(engine, key, apikey.key_path(key_dir))
    given = "--alias" in extra  # (an --unplanned launch's own --engine-arg --alias wins)
    argv = argv_for_plan(engine, plan, model, host, chosen_port, api_key_file=key_file, extra=extra,
                         alias=None if given else alias)
    return LaunchSpec(engine, argv, host, chosen_port, key, {**engine_env(), **(env or {}), **key_env}, found,
                      key_file)


def _key_passing(engine: EngineInfo, key: str | None, stored: Path) -> tuple[Path | None, dict[str, str]]:
    """How the engine gets the key without a command line that shows it: ``--api-key-file`` on the
    stored 0600 file, or, for an engine without that flag, the environment (``/proc/PID/environ`` is
    readable by its owner only)."""
    if key is None:
        return None, {}
    if engine.capabilities is None or engine.capabilities.accepts("--api-key-file"):
        return stored, {}
    return None, {API_KEY_ENV: key}


def _why_not(engine: EngineInfo, plan: Plan) -> str | None:
    if engine.capabilities is None:
        return None
    why = refusal(engine.capabilities, plan.launch, plan.mode)
    return f"{engine.path}: {why}" if why else None


def pick_engine(plan: Plan, engines: list[EngineInfo]) -> EngineInfo:
    """The engine the user chose (strictly: refused if it cannot), else the first one that can.
    Raises LaunchRefused with the reason when none can."""
    first = choose(engines, plan.mode)
    if first is None:
        if plan.mode == PlanMode.WINDOW:  # `headroom engine build` builds the stock engine, not this one
            raise LaunchRefused("no engine found: this plan needs the opencoti llamafile (for the KV window); "
                                "put it in ~/.llamafile, choose it in the window (File ▸ Choose engine…) or give it "
                                "with --engine")
        raise LaunchRefused("no engine found: run `headroom engine build`, choose one in the window (File ▸ "
                            "Choose engine…) or give one with --engine")
    if first.source != EngineOrigin.SETTINGS:
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
