"""The compute estimate (what a plan shows before pass 1) against real pass 1 on this machine's CPU engine.

The CUDA side is replayed from the H200 recording (tests/unit/planner/test_h200_recorded.py); the CPU
backend runs here, so it is measured live: llama.cpp's allocator (no_alloc) on the shape fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.estimate import BASE_MARGIN, estimate_compute
from app.planner.gguf_model import read_shape
from app.planner.kv import context_size
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.measure import measure

pytestmark = [pytest.mark.engine]

#: On the CPU backend the estimate keeps one more ubatch-wide row than some graphs need (app/planner/estimate.py).
CPU_SLACK = 48 * MiB

CASES = {
    "llama8b-f16-ub2048": ("llama-3.1-8b-instruct-q4_k_m", LaunchSettings(n_ctx=32768, n_ubatch=2048)),
    "qwen14b-q8_0-np4": ("qwen2.5-14b-instruct-1m-q8_0",
                         LaunchSettings(n_ctx=32768, n_parallel=4, type_k="q8_0", type_v="q8_0")),
    "qwen3-moe-q8_0-ub2048": ("qwen3-30b-a3b-q4_k_m",
                              LaunchSettings(n_ctx=32768, n_ubatch=2048, type_k="q8_0", type_v="q8_0")),
    "gemma3-iswa-q8_0-np4-kvu": ("gemma-3-12b-it-q4_k_m", LaunchSettings(n_ctx=32768, n_parallel=4, kv_unified=True,
                                                                         type_k="q8_0", type_v="q8_0")),
    "gemma3-iswa-fa-off": ("gemma-3-12b-it-q4_k_m", LaunchSettings(n_ctx=16384, flash_attn="off")),
    "deepseek-mla": ("deepseek-v2-lite-chat-q8_0", LaunchSettings(n_ctx=32768, n_ubatch=2048)),
    "granite-hybrid": ("granite-4.0-h-tiny-q8_0", LaunchSettings(n_ctx=32768, n_parallel=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cpu_estimate_covers_pass1(engine_build: EngineBuild, shape_model: Callable[[str], Path], case: str) -> None:
    name, settings = CASES[case]
    model = shape_model(name)
    probe = measure(model, settings)
    assert probe.backend == "CPU"
    got = sum(d.compute for d in probe.devices)
    est = estimate_compute(read_shape(model), settings, context_size(settings)).cpu
    assert got <= est <= got + BASE_MARGIN + CPU_SLACK, f"estimate {est / MiB:.1f} MiB, pass 1 {got / MiB:.1f} MiB"
