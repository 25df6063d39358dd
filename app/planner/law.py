"""A model the estimate does not know, planned from what pass 1 measured of it: the measured law.

The estimate knows the memory of the architectures in ``MODELLED_ARCHS`` (app/planner/gguf/model.py);
llama.cpp knows many more, and pass 1 (llama.cpp's own allocator, ``no_alloc``) measures every one of
them at the exact launch settings. From one pass 1 this module reads the model's memory law, as
llama.cpp's ``common/fit.cpp`` plans from its own dry run:

- **The KV caches**: each ``llama_kv_cache: size =`` line and its per-layer lines give a cache's cells,
  the layers it holds and its K and V bytes. A cache's bytes are cells × layers × a row per layer, so
  the row (K and V elements per cell and layer) is read back from them; a cache with fewer cells than
  the context is the sliding-window one, its window the header's ``<arch>.attention.sliding_window``
  (or the one that gives the cells pass 1 saw). Layers in no cache are recurrent (when pass 1 made a
  recurrent state) or hold no KV. The shape's KV fields are set to reproduce exactly that, so the
  planner's own KV arithmetic (app/planner/memory/kv.py) then gives the KV at any context, slot count,
  KV type and placement: what grows with the context and per layer.
- **The recurrent state**: constant in the context; its R and S bytes per cell and layer.
- **The compute buffers**: never the estimate's for such a model; pass 1 measures each launch a plan
  chooses (the plan request asks for it), and across contexts the growth is the planner's (the KQ mask).

``fit_shape`` returns the shape with ``law`` saying what it was fitted from; ``NotFitted`` when the
lines do not say enough (a cache of unequal layers that no row explains).
"""

from __future__ import annotations

from dataclasses import replace

from app.planner.errors import PlannerError
from app.planner.gguf.ggml_types import GGML_TYPES
from app.planner.gguf.model import ModelShape
from app.planner.measurement import MeasuredCache, Measurement
from app.planner.memory.kv import context_size, swa_cells
from app.planner.settings import LaunchSettings

#: llama.cpp prints MiB with two decimals: a byte count read back is within this of the true one.
MIB_RESOLUTION = 1024 * 1024 // 200


class NotFitted(PlannerError):
    """Pass 1's lines do not say enough to plan this model from them; the message says what is missing."""


def _type(name: str) -> tuple[int, int]:
    """(elements a block, bytes a block) of a KV cache type named as llama.cpp prints it."""
    for _, (type_name, block, size) in GGML_TYPES.items():
        if type_name.lower() == name.lower():
            return block, size
    raise NotFitted(f"pass 1's KV cache is of type {name}, which Headroom does not know")


def _row(total: int, rows: int, type_name: str, hint: int) -> int:
    """The elements of one row (a layer's K or V of one cell) whose ``rows`` make ``total`` bytes, as
    near as llama.cpp's two decimals of MiB allow: ``hint`` (the header's) when it fits, else the
    candidate with the most factors of two (head sizes are)."""
    if total == 0:
        return 0
    block, size = _type(type_name)
    lo = max(0, total - MIB_RESOLUTION) / rows / size * block
    hi = (total + MIB_RESOLUTION) / rows / size * block
    if hint and lo <= hint <= hi and hint % block == 0:
        return hint
    candidates = [n for n in range(int(lo) // block * block, int(hi) + block, block) if lo <= n <= hi and n > 0]
    if not candidates:
        raise NotFitted(f"pass 1's KV cache of {total} bytes over {rows} rows gives no whole row")
    return max(candidates, key=lambda n: ((n & -n), -abs(n - (lo + hi) / 2)))


def fit_shape(shape: ModelShape, m: Measurement) -> ModelShape:
    """``shape`` with its KV and recurrent fields set from pass 1 (``m``, measured with ``m.launch``)."""
    settings = m.launch or LaunchSettings()
    if not m.caches and m.recurrent_state is None:
        if m.kv_total:
            raise NotFitted("pass 1 printed its KV cache but not its layers (an older probe): measure again")
        return replace(shape, law=_law_words(shape, settings))
    ctx = context_size(settings)
    caches = list(m.caches)
    base = max(caches, key=lambda c: c.cells) if caches else None  # (the first of the most cells: the attention one)
    base = next((c for c in caches if base is not None and c.cells == base.cells), None)
    smaller = [c for c in caches if base is not None and c.cells < base.cells]
    extras = [c for c in caches if base is not None and c is not base and c.cells == base.cells]
    if len(smaller) > 1:
        raise NotFitted(f"pass 1 made {len(smaller)} KV caches smaller than the context; Headroom plans one "
                        "sliding-window cache")
    swa = smaller[0] if smaller else None
    n = shape.n_layer
    n_head_kv = [0] * n
    swa_layers = [False] * n
    head_k = head_v = head_k_swa = head_v_swa = 0
    for cache, is_swa in ((base, False), (swa, True)):
        if cache is None:
            continue
        if not cache.layers:
            raise NotFitted("pass 1's log did not name the layers of its KV cache: measure again")
        rows = cache.cells * cache.n_stream * len(cache.layers)
        hint_k = shape.head_dim_k_swa if is_swa else shape.head_dim_k
        hint_v = shape.head_dim_v_swa if is_swa else shape.head_dim_v
        per_kv = max(1, shape.n_head_kv[cache.layers[0]])
        k = _row(cache.k, rows, cache.type_k, hint_k * per_kv)
        v = _row(cache.v, rows, cache.type_v, hint_v * per_kv)
        heads, hk, hv = _heads(k, v, hint_k, hint_v)
        for il in cache.layers:
            if 0 <= il < n:
                n_head_kv[il] = heads
                swa_layers[il] = is_swa
        if is_swa:
            head_k_swa, head_v_swa = hk, hv
        else:
            head_k, head_v = hk, hv
    in_cache = {il for c in caches for il in c.layers}
    trunk = shape.n_layer_main if shape.n_layer_nextn and shape.n_layer_main > 0 else n
    recr = [il not in in_cache for il in range(n)]  # (no KV: excluded from the attention trunk)
    state: list[bool] | None = None
    n_embd_r = n_embd_s = 0
    rs = m.recurrent_state
    if rs is not None:
        held = list(rs.layer_ids) or [il for il in range(trunk) if il not in in_cache]
        if not held:
            raise NotFitted("pass 1's recurrent state names none of its layers: measure again")
        state = [il in held for il in range(n)]
        rows = max(1, rs.cells) * len(held)
        n_embd_r = round(rs.r / rows / 4)  # f32 states (llama-memory-recurrent.cpp)
        n_embd_s = round(rs.s / rows / 4)
    extra_kv = []
    for cache in extras:
        rows = cache.cells * cache.n_stream * len(cache.layers)
        extra_kv.append((tuple(cache.layers), _row(cache.k, rows, cache.type_k, 0), _row(cache.v, rows, cache.type_v, 0)))
    fitted = replace(
        shape, n_head_kv=tuple(n_head_kv), head_dim_k=head_k or shape.head_dim_k, head_dim_v=head_v or shape.head_dim_v,
        head_dim_k_swa=head_k_swa or head_k or shape.head_dim_k, head_dim_v_swa=head_v_swa or head_v or shape.head_dim_v,
        swa_layers=tuple(swa_layers), recr_layers=tuple(recr), n_embd_r=n_embd_r, n_embd_s=n_embd_s,
        is_mla=base is not None and base.v == 0, law=_law_words(shape, settings),
        state_layers=None if state is None else tuple(state), extra_kv=tuple(extra_kv))
    if swa is not None:
        fitted = replace(fitted, n_swa=_window(fitted, settings, swa, ctx))
    return fitted


def _heads(k: int, v: int, hint_k: int, hint_v: int) -> tuple[int, int, int]:
    """(KV heads, K head size, V head size) for rows of ``k`` and ``v`` elements: the header's head
    sizes where they divide the rows evenly (so the planner prices attention by the real head size),
    else one head of the whole row."""
    if hint_k and k % hint_k == 0 and (v == 0 or (hint_v and v % hint_v == 0 and v // hint_v == k // hint_k)):
        return k // hint_k, hint_k, hint_v if v else 0
    return 1, k, v


def _window(shape: ModelShape, settings: LaunchSettings, cache: MeasuredCache, ctx: object) -> int:
    """The sliding window that gives the SWA cache's cells at these settings: the header's when it does,
    else the largest that does (the cells are padded to 256)."""
    from app.planner.memory.kv import ContextSize

    assert isinstance(ctx, ContextSize)
    if shape.n_swa and swa_cells(shape, settings, ctx) == cache.cells:
        return shape.n_swa
    per = ctx.n_seq if settings.kv_unified else 1
    best = 0
    for n_swa in range(1, cache.cells + 1):
        if swa_cells(replace(shape, n_swa=n_swa), settings, ctx) == cache.cells:
            best = n_swa
    if not best:
        raise NotFitted(f"pass 1's sliding-window cache of {cache.cells} cells fits no window at {per} sequences")
    return best


def _law_words(shape: ModelShape, settings: LaunchSettings) -> str:
    return f"at -c {settings.n_ctx}; the estimate does not know {shape.arch}"
