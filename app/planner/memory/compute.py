"""The compute-buffer estimate, for when pass 1 has not measured yet; the plan labels it "estimated".

The compute buffer is ggml-alloc's high-water mark over one ubatch's graph, so it is the KQ mask (an
input, alive for the whole graph) plus the larger of the graph's phases, not their sum. The mask is
``n_ctx_seq × n_ubatch`` f16 (f32 without flash attention), plus the SWA cache's for an iSWA model.

**CUDA** (``ComputeEstimate.gpu``; the pinned host side, ``host``, is the mask plus ``n_ubatch ×
n_embd × 8``):

- the feed-forward phase: ``n_ubatch × 4 × (3·n_ff + 3·n_embd)`` bytes for a dense model (gate, up and
  their product, plus the residual stream); for a MoE ``3·n_ff_exp·n_used + (n_used + 4)·n_embd``;
- the attention phase: ``n_ubatch × 4 × 4·q_dim`` (Q, K, V and the output for the ubatch), and with a
  quantized K/V cache the flash-attention kernel's f16 copy of one layer's whole K and V,
  ``n_ctx × (head_dim_k + head_dim_v) × n_head_kv × 2`` — 4 GiB for Gemma-3-12B at 512k q8_0, which is
  why a q8_0 cache needs *more* compute buffer than f16 at long context;
- without flash attention the attention phase materialises the KQ matrix ``n_kv × n_ubatch × n_head``
  f32 (the 10.5 GB seen for Qwen2.5-14B at 131072 context, docs/domain.md §2).

Fitted to, and checked against, CUDA pass 1 on an H200 (tests/fixtures/h200/pass1.jsonl: 150 launches
of four models, 32k–512k context, f16/q8_0/q4_0, ubatch 512/1024/2048, -np 1/4 ±kvu, flash attention
on; every number within 4 MiB, the MoE's quantized-cache attention phase fitted here;
bench/results/h200-2026-11-30.md). Never compared with CUDA outside that: :func:`cuda_fit_gap` names
such a launch, and the plan says so beside the number and in its warnings.

**CPU** (``ComputeEstimate.cpu``, :func:`_cpu`): the CPU graph's phases differ from CUDA's (its flash
attention reads a quantized cache as it is, and some rows outlive their CUDA counterparts), so it has
its own terms, each fitted to CPU pass 1 on this project's shape fixtures (bench/bench_estimate.py:
2880 launches, 4k–1M context, ubatch 256–4096, -np 1–8 ±kvu, flash attention on and off,
f16/q8_0/q4_0, nine models from a 259-token to a 262k-token vocabulary): before the margin, never
below pass 1 and within max(1 %, 64 MiB) of it on every launch (bench/results/cpu-estimate-*.md).
Architectures outside those shapes get the nearest family's terms and the margin: pass 1 replaces
all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from app.planner.gguf.model import ModelShape
from app.planner.memory.kv import ContextSize, swa_cells
from app.planner.settings import LaunchSettings
from app.planner.units import MiB, format_tokens

#: What the terms above do not model (norms, rope tables, small inputs, other architectures' extras).
BASE_MARGIN = 64 * MiB
#: K/V cache types the CUDA flash-attention kernels read directly; the rest are dequantized to f16 first.
CUDA_NATIVE_KV = frozenset({"f16"})
#: K/V cache types that are not block-quantized.
UNQUANTIZED_KV = frozenset({"f16", "bf16", "f32"})


#: The launches the CUDA terms were fitted to (tests/fixtures/h200/pass1.jsonl; tests/unit/planner/
#: test_h200_recorded.py checks these against the recording).
CUDA_FITTED_CONTEXT = (32768, 524288)
CUDA_FITTED_UBATCH = (512, 1024, 2048)
CUDA_FITTED_KV = frozenset({"f16", "q8_0", "q4_0"})
CUDA_FITTED_ARCHS = frozenset({"llama", "qwen2", "gemma3", "qwen3moe"})


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
    """The widest dense, expert and shared-expert n_ff of any layer, read from the tensor shapes (0
    where absent): a model may mix dense and expert layers (DeepSeek-V2's leading dense block).

    Read from the tensors rather than the metadata, so it holds for every architecture's key names."""
    dense = expert = shared = 0
    names = {t.name for t in shape.loaded}
    for t in shape.loaded:
        if not t.name.startswith("blk.") or len(t.shape) < 2:
            continue
        kind = t.name.split(".", 2)[2] if t.name.count(".") >= 2 else ""
        if kind == "ffn_down.weight":  # (its input: n_ff, also where gate and up are one fused tensor: phi3)
            dense = max(dense, t.shape[0])
        elif kind == "ffn_up.weight" and t.name.replace("ffn_up", "ffn_down") not in names:
            dense = max(dense, t.shape[1])
        elif kind == "ffn_up_exps.weight":
            expert = max(expert, t.shape[1])
        elif kind == "ffn_up_shexp.weight":
            shared = max(shared, t.shape[1])
    if not (dense or expert):
        dense = 4 * shape.n_embd  # no recognisable FFN (a recurrent or unusual block)
    return FfnWidth(dense, expert, shared)


def cuda_fit_gap(shape: ModelShape, settings: LaunchSettings) -> str:
    """How this launch lies outside what the CUDA terms were compared with ("" when inside), in words
    that follow "never compared with CUDA": "below 32k context, at -ub 4096"."""
    lo, hi = CUDA_FITTED_CONTEXT
    gaps = []
    if settings.n_ctx < lo:
        gaps.append(f"below {format_tokens(lo)} context")
    elif settings.n_ctx > hi:
        gaps.append(f"above {format_tokens(hi)} context")
    if settings.effective_n_ubatch not in CUDA_FITTED_UBATCH:
        gaps.append(f"at -ub {settings.effective_n_ubatch}")
    if settings.flash_attn_off:
        gaps.append("with flash attention off")
    odd = sorted({settings.type_k, settings.type_v} - CUDA_FITTED_KV)
    if odd:
        gaps.append(f"with a {'/'.join(odd)} cache")
    if shape.arch not in CUDA_FITTED_ARCHS:
        gaps.append(f"for {shape.arch} models")
    return ", ".join(gaps)


@dataclass(frozen=True)
class CudaTerms:
    """The rows (f32, ``n_ubatch`` tokens wide) the CUDA graph holds at each phase's peak: the numbers
    fitted to CUDA pass 1 (tests/unit/planner/test_h200_recorded.py refits them on part of the
    recording and checks the rest)."""

    ffn_ff: int = 3  # dense FFN: gate, up and their product, n_ff wide
    ffn_embd: int = 3  # dense FFN: residual stream rows, n_embd wide
    moe_embd: int = 4  # MoE FFN: n_used + this many n_embd rows beside the routed experts'
    attn_q: int = 4  # attention: Q, K, V and the output, q_dim wide
    moe_attn_embd: int = -1  # MoE attention: n_used + this many n_embd rows beside them
    host_embd: int = 2  # the pinned host buffer: the mask plus this many n_embd rows


CUDA_TERMS = CudaTerms()


def estimate_compute(shape: ModelShape, settings: LaunchSettings, ctx: ContextSize,
                     terms: CudaTerms = CUDA_TERMS) -> ComputeEstimate:
    ub = settings.effective_n_ubatch
    flash = not settings.flash_attn_off
    mask_cells = ctx.n_ctx_seq + (swa_cells(shape, settings, ctx) if shape.is_swa_any else 0)
    mask = mask_cells * ub * (2 if flash else 4)
    dense, expert, shared = ffn_width(shape)
    used = max(1, shape.n_expert_used)
    q_dim = max(shape.n_head) * shape.head_dim_k
    e = shape.n_embd
    if expert:
        ffn = ub * 4 * (terms.ffn_ff * (expert * used + shared) + (used + terms.moe_embd) * e)
        attn = ub * 4 * (terms.attn_q * q_dim + (used + terms.moe_attn_embd) * e)
    else:
        ffn = ub * 4 * (terms.ffn_ff * dense + terms.ffn_embd * e)
        attn = ub * 4 * terms.attn_q * q_dim
    kq = n_kv_total = 0
    if not flash:
        kq = ctx.n_ctx_seq * ub * max(shape.n_head) * 4
    elif settings.type_k not in CUDA_NATIVE_KV or settings.type_v not in CUDA_NATIVE_KV:
        n_kv_total = ctx.n_ctx  # every stream's cells: the kernel sees the whole view
    dequant = n_kv_total * (shape.head_dim_k + shape.head_dim_v) * max(shape.n_head_kv) * 2
    gpu = mask + max(ffn, attn + dequant + kq) + BASE_MARGIN
    host = mask + ub * e * 4 * terms.host_embd + BASE_MARGIN
    return ComputeEstimate(gpu, host, _cpu(shape, settings, ctx, mask) + BASE_MARGIN)


#: The CPU graph's small inputs (positions, token and output ids, rope and norm scratch) per ubatch
#: token, and the constant beside them (a quantized cache's conversion buffers: up to 0.6 MiB seen).
CPU_INPUTS_PER_TOKEN = 64
CPU_INPUTS = 1 * MiB


def _cpu(shape: ModelShape, settings: LaunchSettings, ctx: ContextSize, mask: int) -> int:
    """The CPU backend's compute buffer before the margin: the mask plus the largest of the
    feed-forward, attention and output phases, plus a recurrent model's state copies and the small
    inputs. Each phase counts the f32 rows of ``n_ubatch`` tokens alive at its peak; the counts are
    those CPU pass 1 showed (module docstring), per family where the families differ."""
    ub = settings.effective_n_ubatch
    flash = not settings.flash_attn_off
    e = shape.n_embd
    dense, expert, _ = ffn_width(shape)
    used = max(1, shape.n_expert_used)
    n_head = max(shape.n_head)
    q = n_head * shape.head_dim_k
    kv = max(shape.n_head_kv) * max(shape.head_dim_k, shape.head_dim_v)
    post_norms = has_post_norms(shape)
    f16_cache = settings.type_k in UNQUANTIZED_KV and settings.type_v in UNQUANTIZED_KV

    # Feed-forward: gate, up and their product (3·n_ff) beside three residual-stream rows; one more
    # max(n_embd, q) row with an f16 cache or post-norms (Gemma 3), a second with post-norms and flash
    # attention off; none for MLA. A MoE: the routed experts' rows beside (n_used + 5) n_embd rows
    # (n_used + 1 for MLA); the shared expert runs after them and is smaller.
    ffn = 0
    if expert:
        ffn = 3 * expert * used + (used + (1 if shape.is_mla else 5)) * e
    if dense:
        rows = 0 if shape.is_mla else int(f16_cache or post_norms) + int(post_norms and not flash)
        ffn = max(ffn, 3 * dense + 3 * e + rows * max(e, q))
    # Attention: residual, norm and output (3·n_embd), Q twice (three times with post-norms), K and V
    # twice; MLA absorbs Q into the latent (kv_lora_rank + rope) space: 4 such rows with flash
    # attention, else two plus the latent and value outputs. Without flash attention the KQ matrix
    # (n_kv × n_ubatch × n_head f32), and for MLA the transposed latent V of every cell (f16).
    kq = extra = 0
    if shape.is_mla:
        lora = shape.kv_lora_rank
        attn = 4 * q + 4 * e + lora if flash else 2 * q + n_head * lora + attn_output_width(shape) + e
        if not flash:
            extra = ctx.n_ctx * lora * 2
    else:  # (a Q wider than two residual rows, GLM-4.5-Air's 96 heads over 4096: the residual beside three Q rows)
        attn = max(3 * e + (3 if post_norms else 2) * q, e + 3 * q) + 2 * kv
    if not flash:
        kq = ctx.n_ctx_seq * ub * n_head * 4
    # The output layer: the normed stream, and the logits of the outputs the server reserves
    # (n_outputs_max = -np, app/probe/worker.py: llama-server's, not llama-fit-params' n_batch).
    out = 4 * (2 * ub * e + min(ub, settings.n_parallel) * shape.n_vocab)
    # A recurrent layer's conv and SSM states of every sequence, gathered and written back.
    states = 2 * settings.n_parallel * (shape.n_embd_r + shape.n_embd_s) * 4 if any(shape.recr_layers) else 0
    return (mask + max(4 * ub * ffn, 4 * ub * attn + kq + extra, out) + states
            + CPU_INPUTS_PER_TOKEN * ub + CPU_INPUTS)


@lru_cache(maxsize=64)
def has_post_norms(shape: ModelShape) -> bool:
    """Norms after attention and after the FFN (Gemma 3's ``post_attention_norm``/``post_ffw_norm``)."""
    return any(t.name == "blk.0.post_ffw_norm.weight" for t in shape.loaded)


@lru_cache(maxsize=64)
def attn_output_width(shape: ModelShape) -> int:
    """Layer 0's attention output input width (n_head × the value head: MLA's ``value_length_mla``)."""
    for t in shape.loaded:
        if t.name == "blk.0.attn_output.weight":
            return t.shape[0]
    return max(shape.n_head) * shape.head_dim_v
