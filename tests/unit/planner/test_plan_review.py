"""Review findings (round 3) on the solver: each test is a bug a user hit or would hit."""

from __future__ import annotations

from pathlib import Path

from app.engine.argv import argv_for_plan
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner.devices import HostMemory, Inventory
from app.planner.gguf_model import ModelShape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.plan import make_plan, max_context
from app.planner.settings import LaunchSettings
from app.planner.units import GiB
from tests.unit.planner.test_plan import H200_MEASURED, h200

OPENCOTI = EngineInfo(EngineKind.OPENCOTI, "/home/u/.llamafile/opencoti.llamafile", "0.10.5", "unknown", EngineOrigin.LLAMAFILE_DIR,
                      via_sh=True)



def test_window_plan_with_one_slot_and_unified_ticked_can_be_launched(qwen14b: ModelShape) -> None:
    # "unified pool" ticked with one session: the window engine cannot take -kvu, so the plan must not
    # hand the argv builder a unified cache (it refused: "Cannot launch this plan").
    settings = LaunchSettings(n_ctx=524288, n_parallel=1, kv_unified=True)
    plan = make_plan(qwen14b, h200(free_mib=48 * 1024), settings, engine_window=True, measurement=H200_MEASURED)
    assert plan.feasible and not plan.launch.kv_unified
    argv = argv_for_plan(OPENCOTI, plan, Path("/m/qwen.gguf"), "127.0.0.1", 8080)
    assert "-kvu" not in argv and "--kv-residency-mode" in argv
    # With one slot unified or not is the same cache: nothing to warn about.
    assert not any("--kv-unified" in w for w in plan.warnings)
    assert plan.window_cells == make_plan(qwen14b, h200(free_mib=48 * 1024), settings.with_(kv_unified=False),
                                          engine_window=True, measurement=H200_MEASURED).window_cells


def test_a_context_below_one_batch_clamps_the_ubatch_as_llama_cpp_does() -> None:
    # src/llama-context.cpp: n_batch = min(n_ctx, n_batch) (causal models); n_ubatch = min(n_batch, n_ubatch).
    s = LaunchSettings(n_ctx=300, n_batch=2048, n_ubatch=512)
    assert (s.effective_n_batch, s.effective_n_ubatch) == (300, 300)
    assert LaunchSettings(n_ctx=4096, n_batch=256, n_ubatch=512).effective_n_ubatch == 256


def test_a_cpu_plan_short_of_host_ram_warns_like_the_gpu_plans(qwen14b: ModelShape) -> None:
    # Issue 3 asks for a "host RAM short" warning; the GPU plans list it, the CPU plan only had it
    # in its reason, so the warnings list the window and `headroom plan` show was empty.
    inv = Inventory((), HostMemory(16 * GiB, 12 * GiB), reason="no NVIDIA driver found")
    plan = make_plan(qwen14b, inv, LaunchSettings(n_ctx=32768))
    assert not plan.feasible and plan.host.free < 0
    assert any(w.startswith("host RAM is short by") for w in plan.warnings)


def test_largest_resident_context_counts_the_compute_growth_past_the_measured_context(
        qwen14b: ModelShape) -> None:
    # Pass 1 measured at 4k with flash attention off (here: a perfect measurement, equal to the
    # estimate, which reproduces the 10.5 GB seen at 131072 within a few percent). The compute buffer
    # grows with the context, so "largest context fully resident" may not reuse the 4k number for 660k.
    s = LaunchSettings(n_ctx=4096, flash_attn="off")
    at_4k = make_plan(qwen14b, h200(), s).gpus[0].compute
    measured = Measurement((DeviceMeasurement("CUDA0", compute=at_4k),), backend="CUDA",
                           llama_commit="0c1e57098", seconds=1.5)
    fit = max_context(qwen14b, h200(), s, measurement=measured)
    assert make_plan(qwen14b, h200(), s.with_(n_ctx=fit.resident)).alternatives[0].feasible
    assert fit.resident == max_context(qwen14b, h200(), s).resident
