"""Before any process starts: the plan's engine is chosen, and refused with the reason when it can't."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.advisories import Severity
from app.engine.capabilities import PROBES, Capabilities, ProbeResult
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.launch import LaunchRefused, prepare
from app.planner.plan_types import DevicePlan, HostPlan, Plan, PlanMode
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.units import GiB, MiB

MODEL = Path("/models/m.gguf")


def _caps(*rejected: str) -> Capabilities:
    return Capabilities({n: ProbeResult("rejected" if n in rejected else "accepted",
                                        f"error: invalid argument: {n.split()[0]}" if n in rejected else "")
                         for n in PROBES})


STOCK = EngineInfo(EngineKind.LLAMA_SERVER, "/bin/llama-server", "0.5.0", "0c1e570", EngineOrigin.HEADROOM_BUILD,
                   capabilities=_caps("--kv-residency-mode", "--vram-target"))
OLD = EngineInfo(EngineKind.LLAMAFILE, "/bin/llamafile", "0.9.3", "?", EngineOrigin.PATH,
                 capabilities=_caps("--kv-residency-mode", "--vram-target", "-kvu", "-ctk q8_0"))
COTI = EngineInfo(EngineKind.OPENCOTI, "/bin/opencoti.llamafile", "0.10.5", "?", EngineOrigin.LLAMAFILE_DIR, capabilities=_caps())


def _plan(mode: PlanMode, launch: LaunchSettings, feasible: bool = True) -> Plan:
    gpu = DevicePlan(name="CUDA0", label="NVIDIA H200", total=140 * GiB, other_processes=0, weights=14 * GiB,
                     compute=600 * MiB, kv_resident=96 * GiB, overhead=590 * MiB, safety=256 * MiB, free=0)
    host = HostPlan(total=128 * GiB, available=120 * GiB, weights_mapped=800 * MiB, kv_tail=0,
                    compute_pinned=540 * MiB, free=0)
    return Plan(launch=launch, mode=mode, gpus=(gpu,), host=host, feasible=feasible,
                reason="fits" if feasible else "KV needs 12 GiB more", warnings=(), window_cells=0, tail_cells=0,
                vram_target=130 * GiB if mode == PlanMode.WINDOW else None)


def test_window_plans_go_to_opencoti_with_the_vram_target() -> None:
    spec = prepare(_plan(PlanMode.WINDOW, LaunchSettings(n_ctx=1 << 20)), MODEL, [STOCK, COTI], port=8080)
    assert spec.engine is COTI
    assert spec.argv[spec.argv.index("--vram-target") + 1] == str(130 * 1024)


def test_window_without_opencoti_is_refused() -> None:
    with pytest.raises(LaunchRefused, match="opencoti"):
        prepare(_plan(PlanMode.WINDOW, LaunchSettings()), MODEL, [STOCK], port=8080)


def test_an_engine_lacking_a_planned_flag_is_refused_with_the_probe_answer() -> None:
    plan = _plan(PlanMode.STOCK, LaunchSettings(type_k="q8_0", type_v="q8_0", n_parallel=4, kv_unified=True))
    with pytest.raises(LaunchRefused) as err:
        prepare(plan, MODEL, [OLD], port=8080)
    assert "-kvu" in str(err.value) and "-ctk q8_0" in str(err.value) and "/bin/llamafile" in str(err.value)
    assert "error: invalid argument: -kvu" in str(err.value)
    # another engine that can is used instead, unless the user chose the one that cannot
    assert prepare(plan, MODEL, [OLD, STOCK], port=8080).engine is STOCK
    chosen = replace(OLD, source=EngineOrigin.SETTINGS)
    with pytest.raises(LaunchRefused, match="-kvu"):
        prepare(plan, MODEL, [chosen, STOCK], port=8080)


def test_a_plan_that_does_not_fit_is_not_launched() -> None:
    with pytest.raises(LaunchRefused, match="KV needs 12 GiB more"):
        prepare(_plan(PlanMode.STOCK, LaunchSettings(), feasible=False), MODEL, [STOCK], port=8080)


def test_an_error_advisory_refuses_the_launch() -> None:
    # opencoti's window cannot run on one unified pool: refused before any argv is built
    plan = _plan(PlanMode.WINDOW, LaunchSettings(n_parallel=2, kv_unified=True))
    with pytest.raises(LaunchRefused, match=r"\[error\] the rolling-KV window excludes --kv-unified"):
        prepare(plan, MODEL, [COTI], port=8080, arch="llama")


def test_the_engine_headroom_builds_says_fixed_in_this_build_for_glm5_next_with_shared_sessions(
        engine_build: object) -> None:
    from app.engine.discover import discover_engines
    from app.engine.launch import advisories

    (built,) = [e for e in discover_engines() if e.source == "headroom build"]
    assert built.fixes == ("b11412", "43fe9c642", "fork-in-a-full-pool", "host-kv-attention")
    assert built.llama_cpp == "llama.cpp 0c1e57098 + 5 Headroom patches"
    shared = _plan(PlanMode.STOCK, LaunchSettings(n_parallel=2, kv_unified=True))
    spec = prepare(shared, MODEL, [built], port=8080, arch="glm5-next")
    assert [(a.key, a.severity) for a in spec.advisories] == [("kpool-fixed-in-build", Severity.INFO)]
    assert "fixed in this build" in spec.advisories[0].title
    assert advisories(shared, built, "glm5-next") == list(spec.advisories)
    assert prepare(shared, MODEL, [built], port=8080, arch="llama").advisories == ()
    alone = _plan(PlanMode.STOCK, LaunchSettings(n_parallel=1))
    assert prepare(alone, MODEL, [built], port=8080, arch="glm5-next").advisories == ()
    # the same llama.cpp without Headroom's patches (a llama-server built elsewhere): warned twice
    stock = replace(built, source=EngineOrigin.PATH, patches=(), fixes=())
    spec = prepare(shared, MODEL, [stock], port=8080, arch="glm5-next")
    assert [a.key for a in spec.advisories] == ["kpool-b11412", "kpool-43fe9c642"]
    assert all(a.severity == Severity.WARNING and "predates the fix" in a.detail for a in spec.advisories)
    # one sequence: no sharing warning, but on that engine the decode graph still re-reserves
    solo = prepare(alone, MODEL, [stock], port=8080, arch="glm5-next").advisories
    assert [(a.key, a.severity) for a in solo] == [("kpool-single-rereserve", "info")]
    # a KV host tail ("their attention on the CPU"): true in this build (patch 5), warned elsewhere
    tail = replace(alone, kv_host_layers=2)
    assert [a.key for a in prepare(tail, MODEL, [built], port=8080, arch="llama").advisories] == [
        "host-kv-attention-in-build"]
    (warned,) = prepare(tail, MODEL, [stock], port=8080, arch="llama").advisories
    assert warned.key == "host-kv-attention" and warned.severity == Severity.WARNING
    nkvo = _plan(PlanMode.STOCK, LaunchSettings(offload_kqv=False))
    assert [a.key for a in prepare(nkvo, MODEL, [stock], port=8080, arch="llama").advisories] == ["host-kv-attention"]
    # without flash attention, llama.cpp already runs -nkvo's attention on the CPU
    nkvo_no_fa = _plan(PlanMode.STOCK, LaunchSettings(offload_kqv=False, flash_attn=FlashAttn.OFF))
    assert prepare(nkvo_no_fa, MODEL, [stock], port=8080, arch="llama").advisories == ()


def test_an_engine_placed_only_by_build_number() -> None:
    from app.engine.launch import advisories

    newer = replace(STOCK, version="version: 0.6.0 (build 11500, commit abcdef1)", commit="abcdef1")
    keys = [a.key for a in advisories(_plan(PlanMode.STOCK, LaunchSettings(n_parallel=4, kv_unified=True)), newer,
                                      "qwen4exp")]
    assert keys == ["kpool-43fe9c642-unplaced"]  # has b11412 by number; the commit-only fix cannot be placed


@pytest.mark.parametrize(("mode", "says", "not_says"), [
    (PlanMode.WINDOW, "needs the opencoti llamafile", "engine build"),  # building the stock engine would not help
    (PlanMode.STOCK, "run `headroom engine build`", "opencoti"),
])
def test_no_engine_at_all_says_what_would_help(mode: PlanMode, says: str, not_says: str) -> None:
    with pytest.raises(LaunchRefused) as err:
        prepare(_plan(mode, LaunchSettings()), MODEL, [], port=8080)
    assert says in str(err.value) and not_says not in str(err.value)


def test_the_key_reaches_the_engine_by_file_or_by_its_environment_never_by_argument(tmp_path: Path) -> None:
    plan = _plan(PlanMode.STOCK, LaunchSettings())
    spec = prepare(plan, MODEL, [STOCK], host="0.0.0.0", port=8080, key_dir=tmp_path)
    assert spec.api_key and spec.api_key_file == tmp_path / "api_key"
    assert spec.argv[spec.argv.index("--api-key-file") + 1] == str(tmp_path / "api_key")
    assert spec.api_key not in spec.argv and "LLAMA_API_KEY" not in spec.env
    # an engine whose parser lacks --api-key-file reads LLAMA_API_KEY (common/arg.cpp), which only
    # its owner can read in /proc/PID/environ
    older = replace(STOCK, capabilities=_caps("--kv-residency-mode", "--vram-target", "--api-key-file"))
    spec = prepare(plan, MODEL, [older], host="0.0.0.0", port=8080, key_dir=tmp_path)
    assert "--api-key-file" not in spec.argv and spec.api_key not in spec.argv
    assert spec.env["LLAMA_API_KEY"] == spec.api_key and spec.api_key_file is None


def test_a_user_key_file_others_can_read_refuses_the_launch(tmp_path: Path) -> None:
    (tmp_path / "api_key").write_text("mine\n")
    (tmp_path / "api_key").chmod(0o644)
    with pytest.raises(LaunchRefused, match=r"readable by other users.*chmod 600"):
        prepare(_plan(PlanMode.STOCK, LaunchSettings()), MODEL, [STOCK], host="0.0.0.0", port=8080,
                key_dir=tmp_path)
