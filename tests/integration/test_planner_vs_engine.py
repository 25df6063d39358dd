"""The planner's KV and weight bytes against the real engine's own numbers, on every shape fixture.

KV: the engine's ``llama_kv_cache: size = …`` lines from pass 1 (``app.probe.measure``: the
vendored libllama with ``no_alloc``, exactly these context parameters, ``-kvu`` included), equal to
the printed precision (``%.2f`` MiB), with the same cells, layers and streams.
Weights: ``llama-fit-params -fitp on``'s memory breakdown (a CPU build: one host device, whose
model column is split between ``Host`` and ``CPU_REPACK``), with ``--no-repack`` and without; and a
real ``llama-server -lv 4`` start, whose ``CPU_Mapped`` + ``CPU_REPACK`` buffers are the plan's host
weights. The GPU split is checked against the recorded H200 log in tests/unit/planner/test_kv_weights.py.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.check import HOST
from app.engine.discover import discover_engines, engine_cpu_features
from app.engine.launch import plan_check, prepare
from app.engine.native_build import EngineBuild
from app.llamacpp.logs import parse_log
from app.machine.cpu import host_cpu_features
from app.machine.devices import resolve_gpus
from app.planner.errors import PlannerError
from app.planner.gguf.model import read_shape
from app.planner.memory.kv import kv_layout
from app.planner.memory.repack import NO_REPACK, CpuFeatures
from app.planner.memory.weights import weight_split
from app.planner.plan_types import PlanMode
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import MiB
from app.planner.words import REPACKED_COPY
from app.probe.measure import MeasureError, measure, run_worker
from tests.fixtures import shapes

pytestmark = pytest.mark.engine

MODELS = [s.name for s in (shapes.QWEN25_14B_1M, shapes.LLAMA31_8B, shapes.QWEN3_30B_A3B, shapes.GEMMA3_12B,
                           shapes.DEEPSEEK_V2_LITE, shapes.GRANITE4_H_TINY, shapes.QWEN3_30B_A3B_Q8,
                           *shapes.ARCH_2026_SHAPES)]
SETTINGS = {
    "f16-np1": LaunchSettings(n_ctx=8192),
    "q8_0-np4": LaunchSettings(n_ctx=10000, type_k="q8_0", type_v="q8_0", n_parallel=4),
    "q4_0-np4-kvu": LaunchSettings(n_ctx=16384, type_k="q4_0", type_v="q4_0", n_parallel=4, kv_unified=True),
    "f16-np3-fa-off-ub256": LaunchSettings(n_ctx=5000, n_parallel=3, flash_attn=FlashAttn.OFF, n_ubatch=256),
    "q5_1-np2-kvu-swafull": LaunchSettings(n_ctx=3000, type_k="q5_1", type_v="q5_1", n_parallel=2,
                                           kv_unified=True, swa_full=True),
    "iq4_nl-k-f32-v": LaunchSettings(n_ctx=2048, type_k="iq4_nl", type_v="f32"),
    "bf16-k-q5_0-v-np2-ub1024": LaunchSettings(n_ctx=6000, type_k="bf16", type_v="q5_0", n_parallel=2,
                                               n_ubatch=1024),
    "q4_1-np4-kvu-long": LaunchSettings(n_ctx=131072, type_k="q4_1", type_v="q4_1", n_parallel=4,
                                        kv_unified=True),
}


#: Launches llama.cpp 0c1e57098 itself aborts on, after printing its KV caches: Phi-4 (phi3) with a q8_0
#: cache (rotated: attn_rot_k = 1) in four streams overflows the reserve graph's hash set
#: (ggml/src/ggml-impl.h:330 ``ggml_hash_find_or_insert``: "fatal error"). A fixed llama.cpp fails here.
ENGINE_ABORTS = {("phi-4-q4_k_m", "q8_0-np4"): r"ggml-impl\.h:330: fatal error"}


def _mib(n: int) -> str:
    return f"{n / MiB:.2f}"


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("label", list(SETTINGS))
def test_planned_kv_equals_the_engines_kv_lines(name: str, label: str, engine_build: EngineBuild,
                                                shape_model: Callable[[str], Path]) -> None:
    path = shape_model(name)
    settings = SETTINGS[label]
    if settings.type_k != settings.type_v and read_shape(path).is_mla:
        with pytest.raises(PlannerError, match="same K and V"):
            kv_layout(read_shape(path), settings)
        return
    if (name, label) in ENGINE_ABORTS:  # the engine itself cannot create this context: pass 1 says why
        with pytest.raises(MeasureError, match=ENGINE_ABORTS[(name, label)]):
            measure(path, settings)
        return
    lines = parse_log("\n".join(measure(path, settings).kv_lines), expect_buffers=False).kv_caches
    assert lines, "the engine printed no llama_kv_cache size line"
    planned = kv_layout(read_shape(path), settings).caches
    engine = sorted(((ln.cells, ln.layers, ln.n_stream, _mib(ln.k), _mib(ln.v)) for ln in lines), reverse=True)
    ours = sorted(((c.cells, len(c.layers), c.n_stream, _mib(c.k_bytes), _mib(c.v_bytes)) for c in planned),
                  reverse=True)
    assert ours == engine


# llama_memory_recurrent: size =  221.48 MiB (     4 cells,  40 layers,  4 seqs  0 rs_seq), R (f32): ...
# (app/llamacpp/logs.py covers KV caches only; this one line is matched here.)
_RS_RE = re.compile(r"llama_memory_recurrent: size =\s*([0-9.]+) MiB \(\s*(\d+) cells")


@pytest.mark.parametrize("n_parallel", [1, 4])
def test_hybrid_recurrent_state_equals_the_engines(n_parallel: int, engine_build: EngineBuild,
                                                   shape_model: Callable[[str], Path]) -> None:
    path = shape_model(shapes.GRANITE4_H_TINY.name)
    settings = LaunchSettings(n_ctx=8192, n_parallel=n_parallel)
    _, log = run_worker(path, settings, timeout=60)
    m = next(m for m in map(_RS_RE.search, log) if m)
    rs = kv_layout(read_shape(path), settings).recurrent
    assert rs is not None
    assert (_mib(rs.size), rs.cells) == (m.group(1), int(m.group(2)))


def _fit_params_host_rows(build: EngineBuild, path: Path, *extra: str) -> dict[str, int]:
    """The model column (MiB as printed, rounded down) of each host row of the breakdown."""
    out = subprocess.run([str(build.fit_params), "-m", str(path), "-c", "4096", "-fitp", "on", "-ngl", "0", "-v",
                          *extra], capture_output=True, text=True, timeout=120, check=True)
    rows = {r.name: r.model for r in parse_log(out.stderr + out.stdout, expect_buffers=False).breakdown if r.host}
    assert rows, out.stderr[-2000:]
    return rows


@pytest.mark.parametrize("name", MODELS)
def test_planned_host_weights_match_fit_params_without_repack(name: str, engine_build: EngineBuild,
                                                              shape_model: Callable[[str], Path]) -> None:
    path = shape_model(name)
    rows = _fit_params_host_rows(engine_build, path, "--no-repack")
    assert list(rows) == ["Host"]
    ours = weight_split(read_shape(path), 0, [], cpu=NO_REPACK)
    assert ours.repacked == 0
    # The breakdown prints whole MiB, rounded down; fit-params maps nothing (load mode none), so its
    # Host row is the tensors' sum, our mapped range adds the file's alignment padding between them.
    assert 0 <= ours.host / MiB - rows["Host"] < 2


@pytest.mark.parametrize("name", MODELS)
def test_planned_repack_copy_matches_fit_params(name: str, engine_build: EngineBuild,
                                                shape_model: Callable[[str], Path]) -> None:
    """The features the plan repacks by are the engine's own (its system_info line, as the capability
    probe keeps it), the ones its llama-fit-params runs with."""
    path = shape_model(name)
    rows = _fit_params_host_rows(engine_build, path)
    ours = weight_split(read_shape(path), 0, [], cpu=engine_cpu_features(engine_build.server))
    assert ours.repacked // MiB == rows.get("CPU_REPACK", 0)
    # Without a mapping the repacked tensors leave the CPU buffer: the two rows share the weights.
    everything = weight_split(read_shape(path), 0, [], cpu=NO_REPACK).host
    assert 0 <= everything / MiB - sum(rows.values()) < 3


#: The tiny f32 model (nothing to repack) and one Q4_K_M shape (4.6 GiB: page cache and a 3.1 GiB copy).
SERVED = ["tiny-llama", shapes.LLAMA31_8B.name]


@pytest.mark.parametrize("name", SERVED)
def test_a_real_start_allocates_the_planned_host_weights(name: str, engine_build: EngineBuild,
                                                         shape_model: Callable[[str], Path]) -> None:
    path = shape_model(name)
    plan = make_plan(read_shape(path), resolve_gpus([]), LaunchSettings(n_ctx=512, n_parallel=1))
    assert plan.mode == PlanMode.CPU and plan.feasible, plan.reason
    server = prepare(plan, path, discover_engines()).server()
    try:
        server.start()
        server.wait_ready(timeout=180)
        check = plan_check(plan, server)
        lines = server.log_lines()
    finally:
        server.stop()
    row = check.row(HOST, "weights")
    assert row is not None and row.ok, check.table()
    model = check.buffers.model if check.buffers else {}
    assert abs(model.get("CPU_REPACK", 0) - plan.host.weights_repacked) <= MiB, model
    assert abs(model["CPU_Mapped"] - (plan.host.weights_mapped - plan.host.weights_repacked)) <= MiB, model
    # The planner's default features (/proc/cpuinfo) are the native build's, as its log says.
    info = next(ln for ln in lines if "system_info:" in ln)
    engine_cpu, decisive = CpuFeatures.from_system_info(info), {"AVX2", "AVX512", "NEON", "DOTPROD", "MATMUL_INT8"}
    assert engine_cpu.repack and engine_cpu.names & decisive == host_cpu_features().names & decisive, info
    if plan.host.weights_repacked:
        assert REPACKED_COPY in str(plan.host.sources["weights_mapped"])
