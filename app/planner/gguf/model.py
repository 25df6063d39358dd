"""GGUF → :class:`ModelShape`: the hyper-parameters and tensor table the memory math needs.

Mirrors how the engine reads them: ``llama_model_base::load_hparams`` (src/llama-model.cpp) for the
common keys, each architecture's ``load_arch_hparams`` (src/models/<arch>.cpp) for SWA and MLA.
Only the header and the tensor table are read (:mod:`app.planner.gguf.reader`), never the weights.
Split GGUFs (``name-00001-of-00003.gguf``) are read as one model; a llamafile is read as the model
it holds (``Model.llamafile/zip/model.gguf``, where it lies in the archive). A file the engine's loader would
refuse (a key of the wrong type, hyper-parameters that contradict the tensors ...) is refused here,
naming the problem (:mod:`app.planner.gguf.checks`), instead of being planned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.planner.errors import PlannerError
from app.planner.gguf.checks import LLAMA_MAX_LAYERS, check_hparams, check_metadata, check_tensors
from app.planner.gguf.reader import (
    GGUFArray,
    GGUFHeader,
    LongString,
    TensorInfo,
    file_stamp,
    missing_files,
    read_header,
)
from app.text import quoted

#: Architectures whose memory the planner models (a plain or iSWA KV cache, MLA through
#: key_length_mla, a Mamba-2 hybrid). Each either has a shape fixture compared with the engine, or
#: reads no SWA/recurrent/KV-sharing keys in its src/models/<arch>.cpp and takes create_memory's
#: default llama_kv_cache. Anything else the engine knows gives NotModelled, not a wrong number.
MODELLED_ARCHS = frozenset({
    "llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "qwen3vl", "mistral3", "gemma3", "deepseek2",
    "granitehybrid", "granite", "granitemoe", "starcoder2", "command-r", "exaone",
    # a plain KV cache (src/models/phi3.cpp reads sliding_window and turns it off; smollm3.cpp's
    # every-4th layer without RoPE keeps its cache; olmo2.cpp is iSWA only with sliding_window):
    "phi3", "smollm3", "olmo2",
    # a plain cache over the trunk, a NextN layer skipped (src/models/glm4-moe.cpp):
    "glm4moe",
})
#: Architectures whose NextN/MTP layers (those past the trunk, ``nextn_predict_layers``) the engine skips
#: unless it drafts with them, which no launch of Headroom's asks: their tensors stay in the file, unread
#: and unallocated (src/models/<arch>.cpp ``if (!ml.load_mtp) mtp_flags |= TENSOR_SKIP``; the loader says
#: "model has unused tensor … -- ignoring"). tests/unit/engine/test_architectures.py reads the list from
#: the engine's source.
MTP_SKIPPED_ARCHS = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
    "hy_v3", "mimo2", "nemotron_h", "qwen35", "qwen35moe", "qwen3next", "step35",
})
#: Hybrid architectures whose recurrent layers are those with no KV heads
#: (src/models/granite-hybrid.cpp: ``is_recr_impl[i] = n_head_kv(i) == 0``).
HYBRID_BY_HEAD_KV = frozenset({"granitehybrid"})
#: Default SWA pattern per architecture when the file has no sliding_window_pattern
#: (src/models/gemma3.cpp: ``load_swa_pattern(ml, 6)``; 5 local layers then 1 global; olmo2.cpp
#: ``load_swa_pattern(ml, 4)`` when the file has a sliding_window: OLMo 3).
SWA_PATTERN_DEFAULT = {"gemma3": 6, "olmo2": 4}

_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True, eq=False)
class ModelShape:
    """What the engine allocates for, read from the GGUF header. Per-layer values are tuples.

    Compared and hashed by identity (``read_shape`` caches one object per file version), so
    per-shape tables can be cached cheaply while re-planning.
    """

    path: Path
    arch: str
    name: str
    n_layer: int  # n_layer_all in llama-hparams (includes NextN/MTP layers)
    n_layer_nextn: int
    n_embd: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_dim_k: int
    head_dim_v: int
    head_dim_k_swa: int
    head_dim_v_swa: int
    n_swa: int
    swa_layers: tuple[bool, ...]
    is_mla: bool
    kv_lora_rank: int
    n_rot: int
    n_ctx_train: int
    n_expert: int
    n_expert_used: int
    n_vocab: int
    recr_layers: tuple[bool, ...]  # recurrent (state, no KV) layers of a hybrid model
    n_embd_r: int  # llama-hparams.cpp n_embd_r(): conv state elements per sequence and layer
    n_embd_s: int  # n_embd_s(): SSM state elements per sequence and layer
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    file_size: int  # all split files together
    files: tuple[Path, ...]
    #: The GGUF carries ``tokenizer.chat_template``: without one llama-server formats a chat as ChatML
    #: (tools/server: ``common_chat_templates_init`` falls back to chatml), which the model may not know.
    has_chat_template: bool = False
    #: The estimate knows this architecture's memory (``MODELLED_ARCHS``). When it does not, the KV fields
    #: are the header's generic ones until pass 1's measured law sets them (app/planner/law.py).
    modelled: bool = True
    #: What the KV fields were fitted from (app/planner/law.py): "" for a modelled architecture.
    law: str = ""
    #: Layers with a recurrent state, where that is not every layer without KV (a fitted hybrid whose
    #: attention layers carry a state too: glm5-next); None: ``recr_layers``.
    state_layers: tuple[bool, ...] | None = None
    #: More KV caches of the context's cells beside the attention one (a k-pool indexer's): (layers, K
    #: elements a row, V elements a row) each, of the launch's KV types (app/planner/law.py fits them).
    extra_kv: tuple[tuple[tuple[int, ...], int, int], ...] = ()

    @property
    def is_swa_any(self) -> bool:
        return self.n_swa > 0 and any(self.swa_layers)

    def n_embd_k_gqa(self, il: int) -> int:
        """llama-hparams.cpp ``n_embd_k_gqa``: head size × KV heads of layer ``il``."""
        return (self.head_dim_k_swa if self.swa_layers[il] else self.head_dim_k) * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return (self.head_dim_v_swa if self.swa_layers[il] else self.head_dim_v) * self.n_head_kv[il]

    @property
    def n_layer_main(self) -> int:
        """llama-hparams ``n_layer()``: the trunk, without NextN/MTP layers."""
        return self.n_layer - self.n_layer_nextn

    @property
    def loaded(self) -> tuple[TensorInfo, ...]:
        """The tensors the engine loads: all of them but a NextN/MTP layer's where its architecture
        skips those (``MTP_SKIPPED_ARCHS``; a file of NextN layers alone, a draft, loads them)."""
        if not self.n_layer_nextn or self.n_layer_main <= 0 or self.arch not in MTP_SKIPPED_ARCHS:
            return self.tensors
        trunk = self.n_layer_main
        return tuple(t for t in self.tensors if t.layer is None or t.layer < trunk)


def split_parts(path: Path) -> tuple[Path, ...]:
    """All files of a split GGUF, in order (``-00001-of-0000N``); a single file is its own tuple."""
    m = _SPLIT_RE.match(path.name)
    if not m:
        return (path,)
    count = int(m.group("count"))
    if count < 1 or count > 9999:
        raise PlannerError(f"{path.name}: impossible split count {count}")
    parts = tuple(path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    missing = [p.name for p in missing_files(parts)]
    if missing:
        raise PlannerError(f"{path.name}: split model is missing {', '.join(missing)}")
    return parts


def model_parts(path: Path) -> tuple[Path, ...]:
    """The files llama.cpp loads for ``path``: decided by the first file's ``split.count`` key, not by its
    name (src/llama-model-loader.cpp: ``n_split > 1`` → ``split.no`` must be 0 and the other parts are
    ``llama_split_path(prefix, i, n_split)``; a name without that ``-00001-of-0000N`` ending is an
    "invalid split file name"). A file named like a part but without the key is a model of its own."""
    try:
        stamp = file_stamp(path)
    except OSError as e:
        raise PlannerError(f"{path}: cannot read: {e.strerror or e}") from None
    header = _header_cached(stamp)
    path = header.path  # a llamafile's own path: the model it holds (``<llamafile>/zip/<model>.gguf``)
    fields = header.fields
    count = fields.get("split.count", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count <= 1:
        return (path,)
    if fields.get("split.no", 0) != 0:
        raise PlannerError(f"{path.name}: is part {fields.get('split.no')} of a split model: give its first part")
    m = _SPLIT_RE.match(path.name)
    if not m or int(m.group("no")) != 1 or int(m.group("count")) != count:
        raise PlannerError(f"{path.name}: split.count is {count}, but the name does not end in -00001-of-"
                           f"{count:05d}.gguf (llama.cpp: invalid split file name)")
    return split_parts(path)


@lru_cache(maxsize=1)
def _header_cached(stamp: tuple[str, int, int]) -> GGUFHeader:
    """The first part's header, read once for :func:`model_parts` and again used by :func:`read_shape`
    right after. Only the last is kept: a header holds its tensor table and kept arrays, and 32 of them
    held for files that were refused grew a fuzz run's memory by hundreds of KB (the shape cache below
    keeps what a re-plan needs)."""
    return read_header(Path(stamp[0]))


def read_shape(path: str | Path) -> ModelShape:
    """Read a model's shape (cached by path, size and mtime: re-planning never re-reads the file)."""
    parts = model_parts(Path(path))
    try:
        stamp = tuple(file_stamp(q) for q in parts)
    except OSError as e:
        raise PlannerError(f"{Path(path)}: cannot read: {e.strerror or e}") from None
    return _read_shape_cached(stamp)


def forget_cached() -> None:
    """Drop every cached header and shape (a benchmark's cold read)."""
    _header_cached.cache_clear()
    _read_shape_cached.cache_clear()


def read_headers(path: str | Path) -> list[GGUFHeader]:
    """Every part's header, for a caller that needs the file checked but not its shape (pass 1 of a
    model the planner does not model, ``-c 0``). Raises PlannerError for a missing or malformed part.
    The first part's header is the one :func:`model_parts` has just read (a 150k-token vocabulary takes
    a quarter of a second to check), and :func:`read_shape` reads it from there again."""
    parts = model_parts(Path(path))
    try:
        first = _header_cached(file_stamp(parts[0]))
    except OSError as e:
        raise PlannerError(f"{parts[0]}: cannot read: {e.strerror or e}") from None
    return [first, *(read_header(q, split=i) for i, q in enumerate(parts) if i)]


def training_context(header: GGUFHeader) -> int:
    """``<arch>.context_length``: what ``-c 0`` means (llama-context.cpp: ``n_ctx == 0`` → ``n_ctx_train``)."""
    arch = header.fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise PlannerError(f"{header.path.name}: no general.architecture key")
    return _uint(header.fields, f"{arch}.context_length")


@lru_cache(maxsize=32)
def _read_shape_cached(stamp: tuple[tuple[str, int, int], ...]) -> ModelShape:
    headers = [_header_cached(stamp[0]), *(read_header(Path(s[0]), split=i) for i, s in enumerate(stamp) if i)]
    return shape_from_headers(headers)


def _uint(fields: dict[str, Any], key: str, default: int | None = None) -> int:
    v = fields.get(key, default)
    if v is None:
        raise PlannerError(f"missing required key {quoted(key)}")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise PlannerError(f"key {quoted(key)} is {quoted(v)}, expected a non-negative integer")
    return v


def _per_layer(fields: dict[str, Any], key: str, n_layer: int, default: int) -> tuple[int, ...]:
    """``get_key_or_arr`` (src/llama-model-loader.cpp): one value for all layers or one per layer."""
    v = fields.get(key)
    if v is None:
        return (default,) * n_layer
    if isinstance(v, GGUFArray):
        if v.values is None or len(v.values) != n_layer:
            raise PlannerError(f"key {quoted(key)}: array of {v.count} values for {n_layer} layers")
        if any(not isinstance(x, int) or isinstance(x, bool) or x < 0 for x in v.values):
            raise PlannerError(f"key {quoted(key)}: per-layer values must be non-negative integers")
        return tuple(int(x) for x in v.values)
    return (_uint(fields, key),) * n_layer


def shape_from_headers(headers: list[GGUFHeader]) -> ModelShape:
    first = headers[0]
    f = first.fields
    arch = f.get("general.architecture")
    if isinstance(arch, LongString):
        raise PlannerError(f"{first.path.name}: general.architecture is {arch.n_bytes} bytes long: no architecture "
                           "llama.cpp knows")
    if not isinstance(arch, str) or not arch:
        raise PlannerError(f"{first.path.name}: no general.architecture key")
    modelled = arch in MODELLED_ARCHS  # else planned from pass 1's measured law (app/planner/law.py)
    _checked(first, check_metadata, f, first.field_types, arch)
    expected = _uint(f, "split.count", 1)
    if expected != len(headers):
        raise PlannerError(f"{first.path.name}: split.count says {expected} files, found {len(headers)}")

    def k(suffix: str) -> str:
        return f"{arch}.{suffix}"

    n_layer = _uint(f, k("block_count"))
    if not 0 < n_layer <= LLAMA_MAX_LAYERS:  # load_hparams: GGML_ASSERT(n_layer_all > 0 && ... <= LLAMA_MAX_LAYERS)
        raise PlannerError(f"{arch}.block_count {n_layer} is out of range")
    n_embd = _uint(f, k("embedding_length"))
    n_head = _per_layer(f, k("attention.head_count"), n_layer, 0)
    n_head_kv = _per_layer(f, k("attention.head_count_kv"), n_layer, n_head[0]) \
        if k("attention.head_count_kv") in f else n_head
    if n_head[0] == 0 and modelled:  # every modelled architecture has attention heads (a recurrent layer: no KV heads)
        raise PlannerError(f"{first.path.name}: {arch}.attention.head_count is 0 (layer 0), but a {arch} model "
                           "has attention heads")
    # load_hparams: head size defaults to n_embd / n_head(0), overridden by key_length/value_length.
    head_k = _uint(f, k("attention.key_length"), n_embd // max(1, n_head[0]))
    head_v = _uint(f, k("attention.value_length"), n_embd // max(1, n_head[0]))
    head_k_swa = _uint(f, k("attention.key_length_swa"), head_k)
    head_v_swa = _uint(f, k("attention.value_length_swa"), head_v)

    n_swa = _uint(f, k("attention.sliding_window"), 0) if not isinstance(f.get(k("attention.sliding_window")), GGUFArray) else 0
    swa_layers = (False,) * n_layer
    if n_swa > 0 and arch in SWA_PATTERN_DEFAULT:
        swa_layers = _swa_layers(f, k("attention.sliding_window_pattern"), n_layer, SWA_PATTERN_DEFAULT[arch])
    elif n_swa > 0 and modelled:
        n_swa = 0  # the engine ignores the window for architectures that do not read it
    # (for another architecture the window is kept: pass 1's caches say which layers use it, law.py)

    # deepseek2.cpp: MLA when key_length_mla and value_length_mla are both set; the cache then holds
    # only K = kv_lora_rank + rope dims per position (the GGUF stores that as key_length, 1 KV head).
    is_mla = _uint(f, k("attention.key_length_mla"), 0) > 0 and _uint(f, k("attention.value_length_mla"), 0) > 0

    recr = (False,) * n_layer
    n_embd_r = n_embd_s = 0
    if arch in HYBRID_BY_HEAD_KV:
        recr = tuple(h == 0 for h in n_head_kv)
        # llama-hparams.cpp (Mamba-2): n_embd_r = (d_conv - 1) * (d_inner + 2 n_group d_state);
        # n_embd_s = d_state * d_inner.
        d_conv, d_inner = _uint(f, k("ssm.conv_kernel")), _uint(f, k("ssm.inner_size"))
        d_state, n_group = _uint(f, k("ssm.state_size")), _uint(f, k("ssm.group_count"))
        n_embd_r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = d_state * d_inner

    tokens = f.get("tokenizer.ggml.tokens")
    n_vocab = _uint(f, k("vocab_size"), tokens.count if isinstance(tokens, GGUFArray) else 0)
    tensors = tuple(t for h in headers for t in h.tensors)
    shape = ModelShape(
        path=first.path, arch=arch, name=str(f.get("general.name", first.path.stem)),
        n_layer=n_layer, n_layer_nextn=_uint(f, k("nextn_predict_layers"), 0), n_embd=n_embd,
        n_head=n_head, n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
        head_dim_k_swa=head_k_swa, head_dim_v_swa=head_v_swa, n_swa=n_swa, swa_layers=swa_layers,
        is_mla=is_mla, kv_lora_rank=_uint(f, k("attention.kv_lora_rank"), 0),
        n_rot=_uint(f, k("rope.dimension_count"), head_k), n_ctx_train=training_context(first),
        n_expert=_uint(f, k("expert_count"), 0), n_expert_used=_uint(f, k("expert_used_count"), 0),
        n_vocab=n_vocab, recr_layers=recr, n_embd_r=n_embd_r, n_embd_s=n_embd_s, tensors=tensors, file_size=sum(h.file_size for h in headers),
        files=tuple(h.path for h in headers),
        has_chat_template=isinstance(f.get("tokenizer.chat_template"), LongString) or (
            isinstance(f.get("tokenizer.chat_template"), str) and bool(f.get("tokenizer.chat_template"))),
        modelled=modelled,
    )
    _checked(first, check_hparams, shape)
    if modelled:  # (another architecture's tensors are the engine's to judge: pass 1 loads them, or says why not)
        _checked(first, check_tensors, shape, f)
    return shape


def _checked(header: GGUFHeader, check: Any, *args: Any) -> None:
    """Run one of gguf_checks' rules; its refusal names the file, as the reader's do."""
    try:
        check(*args)
    except PlannerError as e:
        raise PlannerError(f"{header.path.name}: {e}") from None


def _swa_layers(f: dict[str, Any], key: str, n_layer: int, default_pattern: int) -> tuple[bool, ...]:
    """``load_swa_pattern`` + ``llama_hparams::set_swa_pattern`` (src/llama-hparams.cpp)."""
    v = f.get(key)
    if isinstance(v, GGUFArray):
        if v.values is None or len(v.values) != n_layer:
            raise PlannerError(f"key {quoted(key)}: array of {v.count} values for {n_layer} layers")
        return tuple(bool(x) for x in v.values)
    n_pattern = _uint(f, key, default_pattern)
    return tuple(n_pattern == 0 or (il % n_pattern < n_pattern - 1) for il in range(n_layer))
