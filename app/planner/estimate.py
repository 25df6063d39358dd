"""The compute-buffer estimate, for when pass 1 has not measured yet; the plan labels it "estimated".

The compute buffer is ggml-alloc's high-water mark over one ubatch's graph, so it is the KQ mask (an
input, alive for the whole graph) plus the larger of two phases, not their sum:

- the feed-forward phase: ``n_ubatch × 4 × (3·n_ff + 3·n_embd)`` bytes for a dense model (gate, up and
  their product, plus the residual stream); for a MoE ``3·n_ff_exp·n_used + (n_used + 4)·n_embd``;
- the attention phase: ``n_ubatch × 4 × 4·q_dim`` (Q, K, V and the output for the ubatch), and on CUDA
  with a quantized K/V cache the flash-attention kernel's f16 copy of one layer's whole K and V,
  ``n_ctx × (head_dim_k + head_dim_v) × n_head_kv × 2`` — 4 GiB for Gemma-3-12B at 512k q8_0, which is
  why a q8_0 cache needs *more* compute buffer than f16 at long context;
- without flash attention the attention phase materialises the KQ matrix ``n_kv × n_ubatch × n_head``
  f32 (the 10.5 GB seen for Qwen2.5-14B at 131072 context, docs/domain.md §2).

The mask is ``n_ctx_seq × n_ubatch`` f16 (f32 without flash attention), plus the SWA cache's for an iSWA
model; the pinned host side (CUDA_Host) is the mask plus ``n_ubatch × n_embd × 8``.

These terms were fitted to, and checked against, pass 1 on an H200 (CUDA, 118 settings: four models,
32k–512k, f16/q8_0/q4_0, ubatch 512–2048, -np 1/4 ±kvu: every CUDA number within 0.6 MiB except the
MoE's quantized-cache attention phase, fitted here) and on the CPU backend (64 settings, within 40 MiB
before the margin); bench/results/h200-2026-11-30.md has the table. Architectures outside those
(MLA, recurrent hybrids) get the dense formula and the margin: pass 1 replaces all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from app.planner.gguf_model import ModelShape
from app.planner.kv import ContextSize, swa_cells
from app.planner.settings import LaunchSettings
from app.planner.units import MiB

#: What the terms above do not model (norms, rope tables, small inputs, other architectures' extras).
BASE_MARGIN = 64 * MiB
#: K/V cache types the CUDA flash-attention kernels read directly; the rest are dequantized to f16 first.
CUDA_NATIVE_KV = frozenset({"f16"})


@dataclass(frozen=True)
class ComputeEstimate:
    gpu: int  # per GPU that runs layers (CUDA)
    host: int  # the pinned host compute buffer (CUDA_Host) beside a GPU
    cpu: int  # the CPU backend's compute buffer when nothing is offloaded


class FfnWidth(NamedTuple):
    """Layer 0's feed-forward widths (0 where absent)."""

    dense: int  # n_ff of a dense FFN
    expert: int  # n_ff of one expert
    shared: int  # n_ff of the shared expert


@lru_cache(maxsize=64)  # shapes hash by identity; the plan asks once per context it tries
def ffn_width(shape: ModelShape) -> FfnWidth:
    """Dense, expert and shared-expert n_ff read from layer 0's tensor shapes (0 where absent).

    Read from the tensors rather than the metadata, so it holds for every architecture's key names."""
    dense = expert = shared = 0
    for t in shape.tensors:
        if not t.name.startswith("blk.0.") or len(t.shape) < 2:
            continue
        if t.name == "blk.0.ffn_up.weight":
            dense = t.shape[1]
        elif t.name == "blk.0.ffn_up_exps.weight":
            expert = t.shape[1]
        elif t.name == "blk.0.ffn_up_shexp.weight":
            shared = t.shape[1]
    if not (dense or expert):
        dense = 4 * shape.n_embd  # no recognisable FFN in layer 0 (a recurrent or unusual block)
    return FfnWidth(dense, expert, shared)


def estimate_compute(shape: ModelShape, settings: LaunchSettings, ctx: ContextSize) -> ComputeEstimate:
    ub = settings.effective_n_ubatch
    flash = settings.flash_attn != "off"
    mask_cells = ctx.n_ctx_seq + (swa_cells(shape, settings, ctx) if shape.is_swa_any else 0)
    mask = mask_cells * ub * (2 if flash else 4)
    dense, expert, shared = ffn_width(shape)
    used = max(1, shape.n_expert_used)
    q_dim = max(shape.n_head) * shape.head_dim_k
    if expert:
        ffn = ub * 4 * (3 * (expert * used + shared) + (used + 4) * shape.n_embd)
        attn = ub * 4 * (4 * q_dim + (used - 1) * shape.n_embd)
    else:
        ffn = ub * 4 * (3 * dense + 3 * shape.n_embd)
        attn = ub * 4 * 4 * q_dim
    kq = n_kv_total = 0
    if not flash:
        kq = ctx.n_ctx_seq * ub * max(shape.n_head) * 4
    elif settings.type_k not in CUDA_NATIVE_KV or settings.type_v not in CUDA_NATIVE_KV:
        n_kv_total = ctx.n_ctx  # every stream's cells: the kernel sees the whole view
    dequant = n_kv_total * (shape.head_dim_k + shape.head_dim_v) * max(shape.n_head_kv) * 2
    gpu = mask + max(ffn, attn + dequant + kq) + BASE_MARGIN
    # The CPU kernels read quantized K/V as they are (no dequantized copy), but the CPU graph keeps up
    # to one more ubatch-wide row alive than the CUDA one (pass 1 on four models: 0–10 MiB per 512).
    cpu_extra = ub * 4 * max(shape.n_embd, q_dim)
    cpu = mask + max(ffn, attn + kq) + cpu_extra + BASE_MARGIN
    host = mask + ub * shape.n_embd * 8 + BASE_MARGIN
    return ComputeEstimate(gpu, host, cpu)
