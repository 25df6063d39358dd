"""KV-cache bytes, exactly as the engine allocates them.

Mirrors, in order:
- src/llama-context.cpp ``llama_context::llama_context``: ``n_ctx = GGML_PAD(n_ctx, 256)``; unified →
  ``n_ctx_seq = n_ctx``; else ``n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256)`` and
  ``n_ctx = n_ctx_seq * n_seq_max``.
- src/llama-model.cpp ``llama_model::create_memory``: one ``llama_kv_cache`` of ``n_ctx_seq`` cells, or
  for an iSWA model (src/llama-kv-cache-iswa.cpp) a base cache of ``n_ctx_seq`` cells for the global
  layers plus a SWA cache of ``GGML_PAD(min(n_ctx_seq, n_swa*(unified ? n_seq : 1) + n_ubatch), 256)``
  cells (``n_ctx_seq`` when swa_full); NextN/MTP layers are filtered out of the trunk's cache.
- src/llama-kv-cache.cpp ``llama_kv_cache::llama_kv_cache``: per layer a K tensor
  ``[n_embd_k_gqa, kv_size, n_stream]`` and (not for MLA) a V tensor ``[n_embd_v_gqa, kv_size, n_stream]``,
  ``n_stream = unified ? 1 : n_seq_max``; with flash attention off (``v_trans``) and V widths that vary
  by layer, V is padded to the widest layer. Row bytes: ggml.c ``ggml_row_size``.
- src/llama-memory-hybrid.cpp / llama-memory-recurrent.cpp: a hybrid model's recurrent layers hold no
  KV but per sequence an f32 conv state (``n_embd_r``) and SSM state (``n_embd_s``), in
  ``max(1, n_seq_max)`` cells (``n_rs_seq`` = 0: no rollback rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from app.planner.errors import PlannerError
from app.planner.gguf.model import ModelShape
from app.planner.settings import GGML_TYPE_IDS, LaunchSettings

#: src/llama-context.cpp: ``cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)``.
CTX_PAD = 256


def pad(n: int, to: int = CTX_PAD) -> int:
    """GGML_PAD: round up to a multiple of ``to``."""
    return -(-n // to) * to


def cache_block(cache_type: str) -> tuple[int, int]:
    """A cache type's block: (elements, bytes) (gguf's ``GGML_QUANT_SIZES``; f16: (1, 2), q8_0: (32, 34))."""
    return GGML_QUANT_SIZES[GGMLQuantizationType(GGML_TYPE_IDS[cache_type])]


@lru_cache(maxsize=1024)  # a plan asks for every layer's rows; the context chart for dozens of plans
def row_bytes(cache_type: str, n: int) -> int:
    """ggml_row_size(type, n): bytes of ``n`` elements of a cache type (block sizes from gguf)."""
    block, size = cache_block(cache_type)
    if n % block:
        raise PlannerError(f"a {cache_type} KV cache needs rows that are a multiple of {block}; this model's are {n}")
    return n // block * size


@dataclass(frozen=True)
class ContextSize:
    """The engine's own context numbers after padding (llama_context constructor)."""

    n_ctx: int
    n_ctx_seq: int
    n_seq: int
    n_stream: int


def context_size(settings: LaunchSettings) -> ContextSize:
    n_seq = max(1, settings.n_parallel)
    n_ctx = pad(settings.n_ctx)
    if settings.kv_unified:
        return ContextSize(n_ctx, n_ctx, n_seq, 1)
    n_ctx_seq = pad(n_ctx // n_seq)
    return ContextSize(n_ctx_seq * n_seq, n_ctx_seq, n_seq, n_seq)


@dataclass(frozen=True)
class KvCache:
    """One llama_kv_cache: its layers, cells per stream, and bytes per layer for K and V."""

    swa: bool
    cells: int
    n_stream: int
    layers: tuple[int, ...]
    k_layer: tuple[int, ...]  # K bytes of each layer in ``layers``
    v_layer: tuple[int, ...]

    @property
    def k_bytes(self) -> int:
        return sum(self.k_layer)

    @property
    def v_bytes(self) -> int:
        return sum(self.v_layer)

    @property
    def size(self) -> int:
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True)
class RecurrentState:
    """llama_memory_recurrent: R (conv) and S (SSM) state per layer, f32, ``cells`` sequences."""

    cells: int
    layers: tuple[int, ...]
    r_bytes: int  # per layer
    s_bytes: int  # per layer

    @property
    def size(self) -> int:
        return (self.r_bytes + self.s_bytes) * len(self.layers)


@dataclass(frozen=True)
class KvLayout:
    ctx: ContextSize
    caches: tuple[KvCache, ...]
    recurrent: RecurrentState | None = None

    @property
    def total(self) -> int:
        """Every byte of the memory module: all KV caches plus any recurrent state."""
        return sum(c.size for c in self.caches) + (self.recurrent.size if self.recurrent else 0)

    @property
    def base(self) -> KvCache:
        """The cache that grows with the context (the full-attention layers)."""
        return next(c for c in self.caches if not c.swa)

    def layer_bytes(self) -> dict[int, int]:
        """K+V bytes per model layer, all caches together (for placing KV with its layer's device)."""
        out: dict[int, int] = {}
        for c in self.caches:
            for il, kb, vb in zip(c.layers, c.k_layer, c.v_layer, strict=True):
                out[il] = out.get(il, 0) + kb + vb
        if self.recurrent is not None:
            for il in self.recurrent.layers:
                out[il] = out.get(il, 0) + self.recurrent.r_bytes + self.recurrent.s_bytes
        return out


def check_supported(shape: ModelShape, settings: LaunchSettings) -> None:
    """Settings the engine refuses to create a context with (src/llama-context.cpp
    ``llama_init_from_model``), as a PlannerError instead of a number for a launch that cannot start."""
    ctx = context_size(settings)
    if ctx.n_ctx_seq == 0:  # per-slot caches: pad(n_ctx) // n_seq rounds down to no cells at all
        raise PlannerError(f"{pad(settings.n_ctx)} tokens ÷ {settings.n_parallel} slots = 0 tokens per slot: "
                           "raise -c or lower -np")
    if shape.is_mla and settings.type_k != settings.type_v:
        raise PlannerError(f"this model (MLA) needs the same K and V cache types, not {settings.type_k}/"
                           f"{settings.type_v}")
    if settings.type_v not in ("f32", "f16", "bf16") and settings.flash_attn_off:
        raise PlannerError(f"a quantized V cache ({settings.type_v}) requires flash attention")
    if not settings.flash_attn_off:
        # llama_init_from_model: with flash attention a quantized cache type's block must divide
        # every layer's head size ("K cache type q8_0 with block size 32 does not divide n_embd_head_k=16").
        swa = shape.is_swa_any
        for which, cache_type, heads in (
                ("K", settings.type_k, {shape.head_dim_k} | ({shape.head_dim_k_swa} if swa else set())),
                ("V", settings.type_v, {shape.head_dim_v} | ({shape.head_dim_v_swa} if swa else set()))):
            block = cache_block(cache_type)[0]
            bad = sorted(h for h in heads if h % block)
            if block > 1 and bad:
                raise PlannerError(f"a {cache_type} {which} cache needs a head size that is a multiple of {block}; "
                                   f"this model's is {bad[0]} (use f16, bf16 or f32)")


def kv_layout(shape: ModelShape, settings: LaunchSettings) -> KvLayout:
    """Every KV cache the engine creates for these settings, with exact byte counts."""
    check_supported(shape, settings)
    ctx = context_size(settings)
    n_trunk = shape.n_layer_main if shape.n_layer_nextn and shape.n_layer_main > 0 else shape.n_layer
    trunk = [il for il in range(n_trunk) if not shape.recr_layers[il]]
    recurrent = None
    state = shape.state_layers if shape.state_layers is not None else shape.recr_layers
    if any(state):
        cells = max(1, settings.n_parallel)
        recurrent = RecurrentState(cells, tuple(il for il in range(n_trunk) if state[il]),
                                   shape.n_embd_r * 4 * cells, shape.n_embd_s * 4 * cells)
    flash = not settings.flash_attn_off

    def build(swa: bool, cells: int) -> KvCache:
        layers, k_row, v_row = _cell_bytes(shape, settings.type_k, settings.type_v, flash, swa, tuple(trunk))
        n = cells * ctx.n_stream
        return KvCache(swa, cells, ctx.n_stream, layers, tuple(b * n for b in k_row), tuple(b * n for b in v_row))

    extra = tuple(_extra(settings, ctx, layers, k, v) for layers, k, v in shape.extra_kv)
    if not shape.is_swa_any:
        return KvLayout(ctx, (build(False, ctx.n_ctx_seq), *extra), recurrent)
    return KvLayout(ctx, (build(False, ctx.n_ctx_seq), build(True, swa_cells(shape, settings, ctx)), *extra),
                    recurrent)


def _extra(settings: LaunchSettings, ctx: ContextSize, layers: tuple[int, ...], k: int, v: int) -> KvCache:
    """One more cache of the context's cells (a k-pool indexer's, ``ModelShape.extra_kv``)."""
    n = ctx.n_ctx_seq * ctx.n_stream
    return KvCache(False, ctx.n_ctx_seq, ctx.n_stream, layers, (row_bytes(settings.type_k, k) * n,) * len(layers),
                   (row_bytes(settings.type_v, v) * n if v else 0,) * len(layers))


@lru_cache(maxsize=1024)  # the context chart prices one layout per context: the rows are the same
def _cell_bytes(shape: ModelShape, type_k: str, type_v: str, flash: bool, swa: bool,
                trunk: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The SWA (or full-attention) trunk layers and the K and V bytes of one cell each. Without flash
    attention V is padded to the widest layer (see the module docstring)."""
    layers = tuple(il for il in trunk if shape.swa_layers[il] == swa)
    k = tuple(row_bytes(type_k, shape.n_embd_k_gqa(il)) for il in layers)
    if shape.is_mla:
        return layers, k, (0,) * len(layers)
    v_max = max(shape.n_embd_v_gqa(il) for il in trunk)
    return layers, k, tuple(row_bytes(type_v, shape.n_embd_v_gqa(il) if flash else v_max) for il in layers)


def swa_cells(shape: ModelShape, settings: LaunchSettings, ctx: ContextSize) -> int:
    """Cells per stream of an iSWA model's SWA cache (src/llama-kv-cache-iswa.cpp)."""
    if settings.swa_full:
        return ctx.n_ctx_seq
    return pad(min(ctx.n_ctx_seq, shape.n_swa * (ctx.n_seq if settings.kv_unified else 1)
                   + settings.effective_n_ubatch))
