"""The CPU backend's repacked copy of the weights (CPU_REPACK): which tensors, on which CPUs, in which plans.

Engine numbers here were read from the CPU build (llama.cpp 0c1e57098) on these shape files:
``llama-fit-params -fitp on -ngl 0`` and ``llama-server -lv 4`` (tests/integration/test_planner_vs_engine.py
repeats both against the live engine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.llamacpp.logs import mib_to_bytes
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import read_shape
from app.planner.memory import repack as rp
from app.planner.memory.repack import NO_REPACK, CpuFeatures, is_repacked, parse_cpuinfo, repack_bytes
from app.planner.memory.weights import weight_split
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import GiB, MiB
from app.planner.words import REPACKED_COPY
from tests.fixtures import gguf_factory, shapes

Q4_0, Q2_K, Q4_K, Q6_K, Q8_0, IQ4_NL = rp.Q4_0, rp.Q2_K, rp.Q4_K, rp.Q6_K, rp.Q8_0, rp.IQ4_NL
AVX2 = CpuFeatures(frozenset({"AVX2"}))
AVX512 = CpuFeatures(frozenset({"AVX2", "AVX512"}))
NEON_DOTPROD = CpuFeatures(frozenset({"NEON", "DOTPROD"}))
#: The system_info line of this machine's CPU build (a llama-server -lv 4 start).
CPU_BUILD_INFO = ("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | "
                  "AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | "
                  "AVX512_BF16 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
H200_LOG = "h200/llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log"


def test_features_come_from_the_engines_system_info_line(shared_fixtures: Path) -> None:
    here = CpuFeatures.from_system_info(CPU_BUILD_INFO)
    assert here.repack and {"AVX2", "AVX512"} <= here.names
    h200_line = next(ln for ln in (shared_fixtures / H200_LOG).read_text().splitlines() if "system_info" in ln)
    h200 = CpuFeatures.from_system_info(h200_line)  # its build has AVX2 but no AVX512
    assert h200.repack and "AVX2" in h200.names and "AVX512" not in h200.names
    assert not CpuFeatures.from_system_info("CPU : AVX2 = 1 | LLAMAFILE = 1 |").repack  # -DGGML_CPU_REPACK=OFF


def test_features_from_proc_cpuinfo_on_x86_and_arm() -> None:
    x86 = parse_cpuinfo("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw\n")
    assert x86.names == {"AVX2", "AVX512"}
    graviton3 = parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd aes asimddp sve svei8mm i8mm bf16\n")
    assert graviton3.names == {"NEON", "DOTPROD", "MATMUL_INT8", "SVE"}
    assert parse_cpuinfo("processor\t: 0\n").names == frozenset()


@pytest.mark.parametrize(("qtype", "ne1", "cpu", "expected"), [
    (Q4_K, 4096, AVX2, True),
    (Q4_K, 4100, AVX2, False),  # rows must divide by 8
    (Q4_0, 1024, AVX2, True),
    (IQ4_NL, 1024, AVX2, True),
    (Q2_K, 1024, AVX2, False),  # Q2_K needs AVX512
    (Q2_K, 1024, AVX512, True),
    (Q6_K, 1024, AVX512, False),  # Q6_K and Q8_0: ARM layouts only
    (Q8_0, 1024, AVX512, False),
    (Q6_K, 1024, NEON_DOTPROD, True),
    (Q8_0, 1020, NEON_DOTPROD, True),  # rows by 4 on ARM
    (Q4_K, 4096, NO_REPACK, False),
    (Q4_K, 4096, CpuFeatures(frozenset()), False),  # no SIMD: no layout
])
def test_repack_layouts_by_type_rows_and_cpu(qtype: int, ne1: int, cpu: CpuFeatures, expected: bool) -> None:
    assert cpu.repacks(qtype, ne1) is expected


@pytest.mark.parametrize(("name", "shape", "expected"), [
    ("blk.0.attn_q.weight", (4096, 4096), True),
    ("output.weight", (4096, 128256), True),
    ("token_embd.weight", (4096, 128256), False),  # GET_ROWS, not a matmul
    ("blk.0.ffn_up_exps.weight", (2048, 768, 128), True),  # MUL_MAT_ID on a 3-D weight
    ("blk.0.ffn_up_exps.weight", (2048, 768), False),
    ("blk.0.attn_k_b.weight", (128, 512, 16), False),  # a 3-D MUL_MAT weight has no layout
    ("blk.0.attn_q.weight", (4096, 4096, 1), True),  # trailing 1s do not count as dimensions
    ("blk.0.attn_q.bias", (4096, 8), False),
    ("blk.0.ssm_conv1d.weight", (4, 4096), False),
])
def test_only_matmul_weights_are_repacked(name: str, shape: tuple[int, ...], expected: bool) -> None:
    assert is_repacked(name, shape, Q4_K, AVX2) is expected


def test_the_llama_8b_q4_k_m_copy_is_its_q4_k_matmul_weights() -> None:
    s = read_shape(gguf_factory.ensure(shapes.LLAMA31_8B))
    ws = weight_split(s, 0, [], cpu=AVX2)
    q4k = [t for t in s.tensors if t.ggml_type == Q4_K and t.name != "token_embd.weight"]
    assert ws.repacked == sum(repack_bytes(t.n_bytes) for t in q4k) and ws.repacked // MiB == 3204
    # The mapping still spans the file (the first and last tensors are not repacked): nothing leaves it.
    assert ws.host == weight_split(s, 0, [], cpu=NO_REPACK).host
    assert ws.host_weights == ws.host + ws.repacked and round(ws.host_weights / MiB, 2) == 4685.30 + 3204.00
    assert weight_split(s, 0, [], cpu=CpuFeatures(frozenset({"AVX2"}), repack=False)).repacked == 0


def test_a_tied_output_on_the_cpu_is_repacked_from_the_embedding() -> None:
    """llama-model-loader.cpp: a TENSOR_DUPLICATED token_embd is loaded as LLM_TENSOR_OUTPUT (a MUL_MAT);
    the GET_ROWS original stays mapped, so a repackable type gets a second, repacked copy."""
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))  # no output.weight; token_embd is Q6_K
    tok = next(t for t in s.tensors if t.name == "token_embd.weight")
    k_quants = sum(repack_bytes(t.n_bytes) for t in s.tensors
                   if t.ggml_type in (Q4_K, Q6_K) and t.name != "token_embd.weight")
    assert weight_split(s, 0, [], cpu=NEON_DOTPROD).repacked == k_quants + repack_bytes(tok.n_bytes)
    # On x86 Q6_K has no layout: only the Q4_K layers are copied.
    assert weight_split(s, 0, [], cpu=AVX2).repacked == sum(
        repack_bytes(t.n_bytes) for t in s.tensors if t.ggml_type == Q4_K)


#: The server's prompt cache off: these host budgets are about the weights and their repacked copy.
NO_PROMPT_CACHE = LaunchSettings(n_ctx=4096, cache_ram_mib=0)


def _host(gib: int = 64) -> HostMemory:
    return HostMemory(gib * GiB, gib * GiB)


def test_a_cpu_plan_counts_the_repacked_copy_in_host_ram() -> None:
    """The review's case: Gemma-3 12B Q4_K_M on CPU, 6956 MiB planned vs 11867 MiB the engine used."""
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))
    plan = make_plan(s, Inventory((), _host(), cpu=AVX2), NO_PROMPT_CACHE)
    assert plan.mode == PlanMode.CPU
    assert round(plan.host.weights_mapped / MiB) == 11867
    assert round(plan.host.weights_repacked / MiB, 2) == 4910.62
    mapped = str(plan.host.sources["weights_mapped"])
    assert mapped == f"from the GGUF (mapped file + 4.8 GiB {REPACKED_COPY})"
    assert plan.host.free == (plan.host.available - plan.host.weights_mapped - plan.host.kv_tail
                              - plan.host.compute_pinned - plan.host.output_buffer)
    assert plan.to_json()["host"]["weights_repacked"] == plan.host.weights_repacked


def test_a_cpu_plan_that_only_fits_without_the_copy_is_refused() -> None:
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))
    tight = HostMemory(10 * GiB, 10 * GiB)  # holds the 6.8 GiB file, not the file plus a 4.8 GiB copy
    assert not make_plan(s, Inventory((), tight, cpu=AVX2), NO_PROMPT_CACHE).feasible
    assert make_plan(s, Inventory((), tight, cpu=NO_REPACK), NO_PROMPT_CACHE).feasible
    assert make_plan(s, Inventory((), tight), NO_PROMPT_CACHE).feasible  # features unknown: nothing repacked


def test_a_gpu_plan_with_layers_on_the_host_repacks_nothing() -> None:
    """With a GPU, its pinned host type precedes CPU_REPACK and the mapped load swaps it for plain CPU."""
    s = read_shape(gguf_factory.ensure(shapes.LLAMA31_8B))
    gpu = GpuDevice(0, "NVIDIA RTX 4060", 8 * GiB, 8 * GiB, kind=DeviceKind.SIMULATED)
    plan = make_plan(s, Inventory((gpu,), _host(), cpu=AVX2), LaunchSettings(n_ctx=4096, n_gpu_layers=10))
    assert plan.mode == PlanMode.STOCK and plan.host.weights_repacked == 0
    assert plan.host.weights_mapped == weight_split(s, plan.launch.n_gpu_layers, [8 * GiB], cpu=NO_REPACK).host
    assert plan.host.weights_mapped > mib_to_bytes(3000)  # most layers stay on the host, mapped



#: The portable engine's own system_info lines on two older CPUs (qemu-x86_64 -cpu Haswell: its haswell
#: variant; -cpu Nehalem: its x64 variant, no AVX).
HASWELL_INFO = ("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | "
                "AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
X64_INFO = ("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : LLAMAFILE = 1 | "
            "OPENMP = 1 | REPACK = 1 | ")


def test_a_cpu_plan_repacks_what_the_engine_it_launches_repacks() -> None:
    """The host weights follow the engine's CPU code (``Inventory.cpu``, from its system_info line), not
    this machine's /proc/cpuinfo (which the planner never reads): the portable engine's haswell variant repacks the Q4_K layers, its x64
    variant (a CPU without AVX2) has no layout for them, and an AMX engine, launched with -nr, none."""
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))

    def plan(cpu: CpuFeatures) -> int:
        return make_plan(s, Inventory((), _host(), cpu=cpu), NO_PROMPT_CACHE).host.weights_repacked

    assert plan(CpuFeatures.from_system_info(HASWELL_INFO)) == weight_split(s, 0, [], cpu=AVX2).repacked > 0
    assert plan(CpuFeatures.from_system_info(X64_INFO)) == 0
    assert plan(CpuFeatures(frozenset({"AVX2", "AVX512", "AMX_INT8"}), repack=False)) == 0
