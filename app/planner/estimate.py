"""A deliberately rough, *marked* compute-buffer estimate, for when pass 1 has not measured yet.

The plan labels every number from here "estimated"; a measurement replaces it. The terms are the
graph's largest live tensors per ubatch (src/llama-graph.cpp): logits ``n_vocab × n_ubatch`` f32,
a few ``n_embd``/``n_ff`` activations, and the KQ mask ``n_kv × n_ubatch`` f16. Without flash
attention the KQ matrix ``n_kv × n_ubatch × n_head`` f32 is materialised too: that is the 10.5 GB seen
for Qwen2.5-14B at 131072 context (DOMAIN.md §2), which this reproduces within a few percent.
The host side is the pinned copy of the inputs, mostly the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.gguf_model import ModelShape
from app.planner.kv import ContextSize
from app.planner.settings import LaunchSettings

#: Everything else the scheduler keeps (norms, rope tables, small inputs): a flat margin.
BASE_MARGIN = 64 * 1024 * 1024


@dataclass(frozen=True)
class ComputeEstimate:
    gpu: int  # per GPU that runs layers
    host: int  # pinned host compute (CUDA_Host) or, with no GPU, the CPU compute buffer


def estimate_compute(shape: ModelShape, settings: LaunchSettings, ctx: ContextSize) -> ComputeEstimate:
    ub = settings.effective_n_ubatch
    n_kv = ctx.n_ctx_seq
    n_ff = 4 * shape.n_embd
    activations = ub * (shape.n_vocab * 4 + 4 * shape.n_embd * 4 + 2 * n_ff * 4)
    mask = n_kv * ub * 2
    gpu = activations + mask + BASE_MARGIN
    if settings.flash_attn == "off":
        gpu += n_kv * ub * max(shape.n_head) * 4
    host = mask + ub * shape.n_embd * 4 + BASE_MARGIN
    return ComputeEstimate(gpu, host)
