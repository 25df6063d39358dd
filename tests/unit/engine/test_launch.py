"""Before any process starts: the plan's engine is chosen, and refused with the reason when it can't."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.capabilities import PROBES, Capabilities, ProbeResult
from app.engine.discover import EngineInfo
from app.engine.launch import LaunchRefused, prepare
from app.planner.plan_types import DevicePlan, HostPlan, Plan
from app.planner.settings import LaunchSettings
from app.planner.units import GiB, MiB

MODEL = Path("/models/m.gguf")


def _caps(*rejected: str) -> Capabilities:
    return Capabilities({n: ProbeResult("rejected" if n in rejected else "accepted",
                                        f"error: invalid argument: {n.split()[0]}" if n in rejected else "")
                         for n in PROBES})


STOCK = EngineInfo("llama-server", "/bin/llama-server", "0.5.0", "0c1e570", "headroom build",
                   capabilities=_caps("--kv-residency-mode", "--vram-target"))
OLD = EngineInfo("llamafile", "/bin/llamafile", "0.9.3", "?", "PATH",
                 capabilities=_caps("--kv-residency-mode", "--vram-target", "-kvu", "-ctk q8_0"))
COTI = EngineInfo("opencoti", "/bin/opencoti.llamafile", "0.10.5", "?", "~/.llamafile", capabilities=_caps())


def _plan(mode: str, launch: LaunchSettings, feasible: bool = True) -> Plan:
    gpu = DevicePlan("CUDA0", "NVIDIA H200", 140 * GiB, 0, 14 * GiB, 600 * MiB, 96 * GiB, 590 * MiB, 256 * MiB, 0)
    host = HostPlan(128 * GiB, 120 * GiB, 800 * MiB, 0, 540 * MiB, 0)
    return Plan(launch, mode, (gpu,), host, feasible, "fits" if feasible else "KV needs 12 GiB more", (),
                0, 0, 130 * GiB if mode == "window" else None)


def test_window_plans_go_to_opencoti_with_the_vram_target() -> None:
    spec = prepare(_plan("window", LaunchSettings(n_ctx=1 << 20)), MODEL, [STOCK, COTI], port=8080)
    assert spec.engine is COTI
    assert spec.argv[spec.argv.index("--vram-target") + 1] == str(130 * 1024)


def test_window_without_opencoti_is_refused() -> None:
    with pytest.raises(LaunchRefused, match="opencoti"):
        prepare(_plan("window", LaunchSettings()), MODEL, [STOCK], port=8080)


def test_an_engine_lacking_a_planned_flag_is_refused_with_the_probe_answer() -> None:
    plan = _plan("stock", LaunchSettings(type_k="q8_0", type_v="q8_0", n_parallel=4, kv_unified=True))
    with pytest.raises(LaunchRefused) as err:
        prepare(plan, MODEL, [OLD], port=8080)
    assert "-kvu" in str(err.value) and "-ctk q8_0" in str(err.value) and "/bin/llamafile" in str(err.value)
    assert "error: invalid argument: -kvu" in str(err.value)
    # another engine that can is used instead, unless the user chose the one that cannot
    assert prepare(plan, MODEL, [OLD, STOCK], port=8080).engine is STOCK
    chosen = replace(OLD, source="settings")
    with pytest.raises(LaunchRefused, match="-kvu"):
        prepare(plan, MODEL, [chosen, STOCK], port=8080)


def test_a_plan_that_does_not_fit_is_not_launched() -> None:
    with pytest.raises(LaunchRefused, match="KV needs 12 GiB more"):
        prepare(_plan("stock", LaunchSettings(), feasible=False), MODEL, [STOCK], port=8080)


def test_an_error_advisory_refuses_the_launch() -> None:
    # opencoti's window cannot run on one unified pool: refused before any argv is built
    plan = _plan("window", LaunchSettings(n_parallel=2, kv_unified=True))
    with pytest.raises(LaunchRefused, match=r"\[error\] the rolling-KV window excludes --kv-unified"):
        prepare(plan, MODEL, [COTI], port=8080, arch="llama")


def test_the_engine_headroom_builds_says_fixed_in_this_build_for_glm5_next_with_shared_sessions(
        engine_build: object) -> None:
    from app.engine.discover import discover_engines
    from app.engine.launch import advisories

    (built,) = [e for e in discover_engines() if e.source == "headroom build"]
    assert built.fixes == ("b11412", "43fe9c642")
    assert built.llama_cpp == "llama.cpp 0c1e57098 + 2 Headroom patches"
    shared = _plan("stock", LaunchSettings(n_parallel=2, kv_unified=True))
    spec = prepare(shared, MODEL, [built], port=8080, arch="glm5-next")
    assert [(a.key, a.severity) for a in spec.advisories] == [("kpool-fixed-in-build", "info")]
    assert "fixed in this build" in spec.advisories[0].title
    assert advisories(shared, built, "glm5-next") == list(spec.advisories)
    assert prepare(shared, MODEL, [built], port=8080, arch="llama").advisories == ()
    alone = _plan("stock", LaunchSettings(n_parallel=1))
    assert prepare(alone, MODEL, [built], port=8080, arch="glm5-next").advisories == ()
    # the same llama.cpp without Headroom's patches (a llama-server built elsewhere): warned twice
    stock = replace(built, source="PATH", patches=(), fixes=())
    spec = prepare(shared, MODEL, [stock], port=8080, arch="glm5-next")
    assert [a.key for a in spec.advisories] == ["kpool-b11412", "kpool-43fe9c642"]
    assert all(a.severity == "warning" and "predates the fix" in a.detail for a in spec.advisories)
    # one sequence: no sharing warning, but on that engine the decode graph still re-reserves
    solo = prepare(alone, MODEL, [stock], port=8080, arch="glm5-next").advisories
    assert [(a.key, a.severity) for a in solo] == [("kpool-single-rereserve", "info")]


def test_an_engine_placed_only_by_build_number() -> None:
    from app.engine.launch import advisories

    newer = replace(STOCK, version="version: 0.6.0 (build 11500, commit abcdef1)", commit="abcdef1")
    keys = [a.key for a in advisories(_plan("stock", LaunchSettings(n_parallel=4, kv_unified=True)), newer,
                                      "qwen4exp")]
    assert keys == ["kpool-43fe9c642-unplaced"]  # has b11412 by number; the commit-only fix cannot be placed


@pytest.mark.parametrize(("mode", "says", "not_says"), [
    ("window", "needs the opencoti llamafile", "engine build"),  # building the stock engine would not help
    ("stock", "run `headroom engine build`", "opencoti"),
])
def test_no_engine_at_all_says_what_would_help(mode: str, says: str, not_says: str) -> None:
    with pytest.raises(LaunchRefused) as err:
        prepare(_plan(mode, LaunchSettings()), MODEL, [], port=8080)
    assert says in str(err.value) and not_says not in str(err.value)
