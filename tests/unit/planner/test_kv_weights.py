"""KV and weight math against the recorded H200 engine log (the headline 512k case)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.llamacpp.logs import parse_log
from app.planner.errors import PlannerError
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.memory.kv import context_size, kv_layout, row_bytes
from app.planner.memory.weights import layer_devices, output_buffer_bytes, weight_split
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.units import MiB
from tests.fixtures import gguf_factory, shapes

H200_LOG = "h200/llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log"
#: The launch that log records: -c 524288 -fa on -ub 512, -np auto (= 4 slots, unified).
H200_SETTINGS = LaunchSettings(n_ctx=524288, n_parallel=4, kv_unified=True)



def test_h200_512k_kv_is_98304_mib_like_the_engine(qwen14b: ModelShape, shared_fixtures: Path) -> None:
    log = parse_log((shared_fixtures / H200_LOG).read_text())
    (line,) = log.kv_caches
    lay = kv_layout(qwen14b, H200_SETTINGS)
    (cache,) = lay.caches
    assert lay.total == 98304 * MiB == line.size
    assert (cache.k_bytes, cache.v_bytes) == (line.k, line.v)
    assert (cache.cells, len(cache.layers), cache.n_stream) == (line.cells, line.layers, line.n_stream)


def test_h200_512k_weights_split_like_the_engine(qwen14b: ModelShape, shared_fixtures: Path) -> None:
    log = parse_log((shared_fixtures / H200_LOG).read_text())
    ws = weight_split(qwen14b, 999, [142629 * MiB])
    assert abs(ws.gpu[0] - log.model["CUDA0"]) < MiB  # 14179.61 MiB
    assert abs(ws.host - log.model["CPU_Mapped"]) < MiB  # 788.91 MiB: the token embedding
    assert ws.n_offloaded == 49  # "offloaded 49/49 layers to GPU"
    assert abs(output_buffer_bytes(qwen14b, H200_SETTINGS) - log.output["CUDA_Host"]) < 0.01 * MiB


def test_context_padding_and_slots() -> None:
    # llama-context.cpp: pad to 256; non-unified slots get n_ctx/np padded, total rounded to slots.
    assert context_size(LaunchSettings(n_ctx=5000)).n_ctx == 5120
    ctx = context_size(LaunchSettings(n_ctx=10000, n_parallel=4))
    assert (ctx.n_ctx_seq, ctx.n_ctx, ctx.n_stream) == (2560, 10240, 4)
    ctx = context_size(LaunchSettings(n_ctx=10000, n_parallel=4, kv_unified=True))
    assert (ctx.n_ctx_seq, ctx.n_ctx, ctx.n_stream) == (10240, 10240, 1)


@pytest.mark.parametrize(("cache_type", "bytes_per_128"), [
    ("f32", 512), ("f16", 256), ("bf16", 256), ("q8_0", 136), ("q4_0", 72), ("q4_1", 80),
    ("iq4_nl", 72), ("q5_0", 88), ("q5_1", 96),
])
def test_row_bytes_for_every_cache_type(cache_type: str, bytes_per_128: int) -> None:
    assert row_bytes(cache_type, 128) == bytes_per_128


def test_gemma3_window_cache_is_n_swa_times_seqs_plus_ubatch() -> None:
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))
    base, swa = kv_layout(s, LaunchSettings(n_ctx=131072, n_parallel=4, kv_unified=True)).caches
    assert (base.cells, len(base.layers)) == (131072, 8)
    assert (swa.cells, len(swa.layers)) == (1024 * 4 + 512, 40)  # 4608 is already a multiple of 256
    base, swa = kv_layout(s, LaunchSettings(n_ctx=131072, swa_full=True)).caches
    assert swa.cells == 131072


def test_mla_caches_only_k() -> None:
    s = read_shape(gguf_factory.ensure(shapes.DEEPSEEK_V2_LITE))
    (c,) = kv_layout(s, LaunchSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0")).caches
    assert c.v_bytes == 0 and c.k_bytes == 27 * 4096 * row_bytes("q8_0", 576)


def test_settings_the_engine_refuses_are_planner_errors() -> None:
    # src/llama-context.cpp llama_init_from_model: these never start, so they get no numbers.
    mla = read_shape(gguf_factory.ensure(shapes.DEEPSEEK_V2_LITE))
    with pytest.raises(PlannerError, match="same K and V cache types"):
        kv_layout(mla, LaunchSettings(type_k="q8_0", type_v="f16"))
    dense = read_shape(gguf_factory.ensure(shapes.LLAMA31_8B))
    with pytest.raises(PlannerError, match="requires flash attention"):
        kv_layout(dense, LaunchSettings(type_v="q4_0", flash_attn=FlashAttn.OFF))
    # "K cache type q8_0 with block size 32 does not divide n_embd_head_k=16": refused before any launch
    tiny = read_shape(gguf_factory.ensure(shapes.TINY))
    assert tiny.head_dim_k == 16
    with pytest.raises(PlannerError, match="q8_0 K cache needs a head size that is a multiple of 32"):
        kv_layout(tiny, LaunchSettings(n_ctx=512, type_k="q8_0"))
    with pytest.raises(PlannerError, match="q4_0 V cache needs a head size"):
        kv_layout(tiny, LaunchSettings(n_ctx=512, type_v="q4_0"))
    assert kv_layout(tiny, LaunchSettings(n_ctx=512, type_k="bf16", type_v="bf16")).total > 0


def test_layer_assignment_mirrors_load_tensors() -> None:
    # -ngl 3 of 4 layers + output: layers 0 and 1 stay on the CPU, the output goes to the GPU.
    assert layer_devices(4, 3, [10]) == (None, None, 0, 0, 0)
    assert layer_devices(4, 0, [10]) == (None,) * 5
    # Two GPUs split by free memory 1:3 over 5 slots.
    assert layer_devices(4, 999, [1, 3]) == (0, 0, 1, 1, 1)
    assert layer_devices(4, 999, []) == (None,) * 5


def test_fewer_layers_on_the_gpu_move_their_weights_to_the_host(qwen14b: ModelShape) -> None:
    full = weight_split(qwen14b, 999, [100])
    part = weight_split(qwen14b, 40, [100])
    assert part.gpu[0] < full.gpu[0] and part.host > full.host
    assert abs(part.total - full.total) < MiB  # only where they live changes
    assert part.n_offloaded == 40


def test_tied_output_duplicates_the_embedding_on_the_gpu() -> None:
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))
    tok = next(t for t in s.tensors if t.name == "token_embd.weight")
    ws = weight_split(s, 999, [100])
    assert ws.gpu[0] + ws.host >= sum(t.n_bytes for t in s.tensors) + tok.n_bytes
