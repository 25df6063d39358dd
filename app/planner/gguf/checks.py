"""What llama.cpp's model loader refuses, refused here first, each with a sentence naming the problem.

A GGUF that the lean reader (:mod:`app.planner.gguf.reader`) parses can still be one llama.cpp will
not load; planning it would print "FITS" (or a nonsense figure) for a model that never starts. The
rules below are the loader's, read from the vendored llama.cpp (0c1e57098):

- **Key types** (src/llama-model-loader.cpp, ``GGUFMeta::GKV<T>::get_kv``: "key %s has wrong type
  %s but expected type %s"): a key the loader reads with ``get_key<T>`` must have T's GGUF type
  exactly; ``get_key_or_arr`` also takes an array of one UINT32/INT32/BOOL per layer ("key %s has
  wrong array length"). The tokenizer's arrays are checked by src/llama-vocab.cpp ``llama_vocab::
  impl::load`` ("invalid gguf type for %s", "Index out of array bounds for scores").
- **Required keys**: ``get_key(..., required = true)`` throws "key not found in model: %s" (the
  trunk's in ``llama_model_base::load_hparams``, src/llama-model.cpp; each architecture's in its
  src/models/<arch>.cpp ``load_arch_hparams``).
- **Hyper-parameter asserts** in ``load_hparams`` (``GGML_ASSERT``: these abort the process):
  ``0 < block_count <= LLAMA_MAX_LAYERS``, ``nextn_predict_layers <= block_count``, expert counts.
- **Tensors** (``llama_model_loader::create_tensor`` / ``check_tensor_dims``: "missing tensor",
  "tensor '%s' has wrong shape"; ``done_getting_tensors``: "wrong number of tensors"): every tensor
  the architecture creates must be in the file with the shape the hyper-parameters give, and no
  other. Names are checked against gguf-py's per-architecture tensor list (``MODEL_TENSORS``, kept
  beside llama-arch.cpp's); shapes for the tensors whose size follows ``block_count``,
  ``embedding_length``, the head counts and lengths, ``feed_forward_length`` and the expert count.

- **Tokenizer** (src/llama-vocab.cpp ``llama_vocab::impl::load``): a BPE model's
  ``tokenizer.ggml.pre`` must be one of the names it knows ("unknown pre-tokenizer type"); token texts
  must be distinct as it reads them (up to a NUL; a duplicate fails ``GGML_ASSERT(id_to_token.size()
  == token_to_id.size())``, an abort).
- **Experts**: an architecture whose experts are optional (llama, granite ...) creates the expert
  tensors, required, in every layer once ``expert_count`` is set ("tensor 'blk.0.ffn_gate_inp.weight'
  not found").
- **What aborts or crashes later**: an RMS/layer-norm epsilon that is NaN or negative (ggml-cpu's
  norms ``GGML_ASSERT(eps >= 0.0f)``: the server aborts at warm-up) and weights of a type no backend computes with (:data:`NOT_WEIGHT_TYPES`: an I32 weight
  crashes the server at warm-up).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gguf.constants import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, GGUFValueType

from app.planner.errors import PlannerError
from app.planner.gguf.ggml_types import NOT_WEIGHT_TYPES, type_name
from app.planner.gguf.reader import GGUFArray, TensorInfo
from app.text import printable, quoted

if TYPE_CHECKING:
    from app.planner.gguf.model import ModelShape

V = GGUFValueType
#: src/llama-hparams.h
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024

#: Keys outside ``{arch}.`` that the loader reads with ``get_key<T>``, and T's GGUF type.
GENERAL_KEYS: dict[str, int] = {
    "general.architecture": V.STRING, "general.name": V.STRING, "general.file_type": V.UINT32,
    "split.count": V.UINT16, "split.no": V.UINT16, "split.tensors.count": V.INT32,
    "tokenizer.ggml.model": V.STRING, "tokenizer.ggml.pre": V.STRING, "tokenizer.ggml.token_type_count": V.UINT32,
    **{f"tokenizer.ggml.{k}_token_id": V.UINT32 for k in (
        "bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "cls", "mask",
        "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep")},
    **{f"tokenizer.ggml.{k}": V.BOOL for k in (
        "add_bos_token", "add_eos_token", "add_sep_token", "add_space_prefix", "remove_extra_whitespaces",
        "normalizer.lowercase", "normalizer.strip_accents")},
}
#: ``{arch}.<suffix>`` keys read with ``get_key<T>`` by load_hparams or a modelled architecture's
#: load_arch_hparams (the hparams field each lands in fixes T: uint32_t, float, bool, std::string).
ARCH_KEYS: dict[str, int] = {
    **dict.fromkeys((
        "context_length", "embedding_length", "embedding_length_out", "pooling_type", "block_count",
        "nextn_predict_layers", "expert_count", "expert_group_count", "expert_group_used_count",
        "rope.scaling.original_context_length", "attention.key_length", "attention.value_length",
        "rope.dimension_count", "attention.key_length_swa", "attention.value_length_swa",
        "rope.dimension_count_swa", "vocab_size", "expert_shared_feed_forward_length",
        "attention.sliding_window", "leading_dense_block_count", "attention.q_lora_rank",
        "attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla",
        "expert_shared_count", "expert_gating_func", "attention.temperature_length", "n_deepstack_layers",
        "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count",
    ), V.UINT32),
    **dict.fromkeys((
        "rope.freq_base", "rope.scaling.factor", "rope.scale_linear", "rope.scaling.attn_factor",
        "rope.scaling.alpha", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
        "rope.freq_base_swa", "final_logit_softcapping", "expert_weights_scale",
        "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
        "attention.temperature_scale", "logit_scale", "residual_scale", "embedding_scale", "attention.scale",
    ), V.FLOAT32),
    **dict.fromkeys(("attention.causal", "rope.scaling.finetuned", "expert_weights_norm"), V.BOOL),
    "rope.scaling.type": V.STRING,
}
#: ``get_key_or_arr`` keys: a UINT32, or an array of one value per layer (BOOL, UINT32 or INT32:
#: ``get_arr`` for a ``std::array``); ``attention.sliding_window_pattern`` is read the same way
#: by ``load_swa_pattern`` (without the length check).
PER_LAYER_KEYS = frozenset({
    "feed_forward_length", "attention.head_count", "attention.head_count_kv", "expert_used_count",
    "expert_feed_forward_length", "attention.sliding_window_pattern",
})
_INT_ARRAY_ELEMS = frozenset({V.BOOL, V.UINT32, V.INT32})
#: Keys each architecture requires (``get_key`` without ``required = false``), besides the trunk's.
_RMS = ("attention.layer_norm_rms_epsilon",)
REQUIRED_ARCH_KEYS: dict[str, tuple[str, ...]] = {
    "llama": _RMS, "qwen2": _RMS, "qwen2moe": _RMS, "qwen3": _RMS, "qwen3moe": _RMS, "mistral3": _RMS,
    "gemma3": _RMS, "exaone": _RMS, "qwen3vl": (*_RMS, "rope.dimension_sections"),
    "deepseek2": (*_RMS, "attention.kv_lora_rank", "expert_feed_forward_length", "expert_shared_count"),
    "granite": (*_RMS, "logit_scale"), "granitemoe": (*_RMS, "logit_scale"),
    "granitehybrid": (*_RMS, "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank",
                      "ssm.group_count"),
    "starcoder2": ("attention.layer_norm_epsilon",), "command-r": ("attention.layer_norm_epsilon",),
}
TRUNK_REQUIRED = ("context_length", "embedding_length", "block_count")
#: llama-vocab.cpp: the tokenizer models it knows ("unknown tokenizer: '%s'" for any other).
TOKENIZER_MODELS = frozenset({"no_vocab", "none", "llama", "bert", "gpt2", "hybriddna", "whitespace", "t5",
                              "rwkv", "test", "plamo2", "gemma4"})
#: llama-vocab.cpp: the tokenizer models it reads as BPE, whose pre-tokenizer it must know.
BPE_MODELS = frozenset({"gpt2", "hybriddna", "whitespace", "gemma4"})
#: llama-vocab.cpp ``load``: every ``tokenizer_pre ==`` it accepts for a BPE model (an empty one is
#: "default"); ``tests/integration/test_engine_tables.py`` compares it with the engine's own source.
PRE_TOKENIZERS = frozenset({
    "", "default", "minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
    "lfm2", "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu", "falcon", "mpt",
    "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
    "mellum", "modern-bert", "jais-2", "gemma4", "granite-embed-multi-311m", "sarvam-moe", "jina-v1-en",
    "jina-v2-code", "roberta-bpe", "whitespace", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo",
    "f2llmv2", "qwen35", "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "chatglm-bpe", "glm4", "glm5",
    "viking", "jais", "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe",
    "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2", "talkie", "granite-embed-multi-97m",
    "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling", "bailingmoe", "bailingmoe2", "llada-moe",
    "seed-coder", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm", "kimi-k2", "ufakzeka", "grok-2", "afmoe",
    "laguna", "minimax-m2", "solar-open", "mellum2",
})
#: Architectures whose expert tensors follow ``expert_count``: set, every layer gets them, required
#: (src/models/<arch>.cpp ``load_arch_tensors``: ``if (n_expert == 0) {dense} else {experts}``).
OPTIONAL_EXPERT_ARCHS = frozenset({"llama", "granite", "granitemoe", "mistral3", "qwen2moe", "qwen3moe"})
#: ggml type F32: the only type of a one-dimensional weight (a norm, a bias) ggml-cpu's binary ops take
#: beside F32 activations ("binary_op: unsupported types", an abort).
F32 = 0
#: Epsilons llama.cpp's norms take as they are: NaN or below 0 aborts the server at warm-up
#: (ggml-cpu/ops.cpp ``GGML_ASSERT(eps >= 0.0f)``; -inf found by bench/bench_loader_fuzz.py, seed 31).
EPSILON_KEYS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon")
#: Tensor name endings llama.cpp's ``tn(…, suffix, …)`` uses for the modelled architectures.
TENSOR_SUFFIXES = ("weight", "bias", "scale", "input_scale")


def _type_name(vtype: int) -> str:
    try:
        return GGUFValueType(vtype).name
    except ValueError:
        return f"type {vtype}"


def check_metadata(fields: dict[str, Any], types: dict[str, int], arch: str) -> None:
    """Key types, required keys and the tokenizer arrays, as the loader checks them."""
    block_count = f"{arch}.block_count"
    if block_count in types and types[block_count] != V.UINT32:
        raise PlannerError(f"key {quoted(block_count)} is {_type_name(types[block_count])}, but llama.cpp reads it as UINT32")
    n_layer = fields.get(block_count, 0)
    for key, vtype in types.items():
        want = GENERAL_KEYS.get(key)
        suffix = key.removeprefix(f"{arch}.") if key.startswith(f"{arch}.") else None
        if want is None and suffix is not None:
            if suffix in PER_LAYER_KEYS:
                _check_per_layer(key, fields[key], vtype, n_layer, suffix != "attention.sliding_window_pattern")
                continue
            want = ARCH_KEYS.get(suffix)
        if want is not None and vtype != want:
            raise PlannerError(f"key {quoted(key)} is {_type_name(vtype)}, but llama.cpp reads it as {_type_name(want)}")
    for suffix in (*TRUNK_REQUIRED, *REQUIRED_ARCH_KEYS.get(arch, ())):
        if f"{arch}.{suffix}" not in fields:
            raise PlannerError(f"missing required key {arch}.{suffix} (llama.cpp: key not found in model)")
    for suffix in EPSILON_KEYS:
        eps = fields.get(f"{arch}.{suffix}")
        if isinstance(eps, float) and not eps >= 0.0:
            what = "NaN" if math.isnan(eps) else f"negative ({eps})"
            raise PlannerError(f"{arch}.{suffix} is {what}: llama-server aborts when it first runs the model")
    _check_tokenizer(fields)
    _check_chat_template(fields.get("tokenizer.chat_template"))


def _check_per_layer(key: str, value: Any, vtype: int, n_layer: int, exact_length: bool) -> None:
    if vtype == V.ARRAY:
        assert isinstance(value, GGUFArray)
        if value.elem_type not in _INT_ARRAY_ELEMS:
            raise PlannerError(f"key {quoted(key)} is an array of {_type_name(value.elem_type)}, but llama.cpp "
                               "reads it as UINT32 or INT32 values, one per layer")
        if exact_length and value.count != n_layer:
            raise PlannerError(f"key {quoted(key)}: array of {value.count} values for {n_layer} layers")
    elif vtype != V.UINT32:
        raise PlannerError(f"key {quoted(key)} is {_type_name(vtype)}, but llama.cpp reads it as UINT32 "
                           "(or one value per layer)")


def _check_tokenizer(fields: dict[str, Any]) -> None:
    model = fields.get("tokenizer.ggml.model")
    if model is None:
        raise PlannerError("missing required key tokenizer.ggml.model (llama.cpp: key not found in model)")
    if model not in TOKENIZER_MODELS:
        raise PlannerError(f"unknown tokenizer {quoted(model)} (tokenizer.ggml.model): llama.cpp cannot load it")
    if model in ("no_vocab", "none"):
        return
    pre = fields.get("tokenizer.ggml.pre", "")
    if model in BPE_MODELS and pre not in PRE_TOKENIZERS:
        raise PlannerError(f"unknown pre-tokenizer {quoted(str(pre)[:80])} (tokenizer.ggml.pre): llama.cpp cannot load it")
    tokens = fields.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, GGUFArray) or tokens.elem_type != V.STRING:
        raise PlannerError("tokenizer.ggml.tokens is missing or not an array of strings: llama.cpp needs the vocabulary")
    if tokens.distinct is not None and tokens.distinct < tokens.count:
        raise PlannerError(f"the vocabulary has {tokens.count - tokens.distinct} duplicate token text(s) "
                           "(tokenizer.ggml.tokens): llama.cpp aborts loading it")
    for key, elems in (("tokenizer.ggml.scores", {V.INT32, V.FLOAT32}), ("tokenizer.ggml.token_type", {V.INT32})):
        arr = fields.get(key)
        if arr is None:
            continue
        if not isinstance(arr, GGUFArray) or arr.elem_type not in elems:
            raise PlannerError(f"key {quoted(key)} has the wrong type for llama.cpp (an array of "
                               f"{' or '.join(sorted(_type_name(e) for e in elems))})")
        if arr.count < tokens.count:
            raise PlannerError(f"key {quoted(key)} has {arr.count} values for {tokens.count} tokens")
    merges = fields.get("tokenizer.ggml.merges")
    if model in ("gpt2", "gemma4") and fields.get("tokenizer.ggml.pre") != "kimi-k2" and (
            not isinstance(merges, GGUFArray) or merges.elem_type != V.STRING):
        raise PlannerError("tokenizer.ggml.merges is missing or not an array of strings (llama.cpp: cannot find "
                           "tokenizer merges in model file)")


def _check_chat_template(template: Any) -> None:
    """llama-server parses the model's chat template at start (tools/server ``common_chat_templates_init``,
    its own Jinja in common/jinja/) and exits on "chat template parsing error". Parsed here with Jinja2,
    the language's reference, which the templates are written for; one kept past the reader's bound
    (``LongString``) is not checked."""
    if not isinstance(template, str) or not template:
        return
    import jinja2  # only for a model that carries a template

    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise PlannerError(f"the chat template (tokenizer.chat_template) does not parse: {printable(exc.message or '')} "
                           f"(line {exc.lineno}): llama-server refuses to start with it (its advice: --no-jinja "
                           "--chat-template chatml)") from None


def check_hparams(shape: ModelShape) -> None:
    """``load_hparams``'s asserts (each aborts llama.cpp) and the loader's n_rot check."""
    if shape.n_layer_nextn > shape.n_layer:
        raise PlannerError(f"nextn_predict_layers {shape.n_layer_nextn} exceeds block_count {shape.n_layer}")
    if shape.n_expert > LLAMA_MAX_EXPERTS:
        raise PlannerError(f"expert_count {shape.n_expert} is over llama.cpp's {LLAMA_MAX_EXPERTS}")
    if shape.n_expert_used > shape.n_expert or (shape.n_expert > 0) != (shape.n_expert_used > 0):
        raise PlannerError(f"expert_used_count {shape.n_expert_used} does not fit expert_count {shape.n_expert}")
    # src/llama-model.cpp load_hparams: "invalid n_rot: %u, expected %u" for llama.
    if shape.arch == "llama" and shape.n_rot != shape.head_dim_k:
        raise PlannerError(f"rope.dimension_count {shape.n_rot} differs from the head size {shape.head_dim_k} "
                           "(llama.cpp: invalid n_rot)")


@lru_cache(maxsize=32)
def _tensor_names(arch: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """gguf-py's tensor names for ``arch``: (outside the layers, inside ``blk.N.``), None if unknown."""
    found = next((a for a, name in MODEL_ARCH_NAMES.items() if name == arch), None)
    if found is None:
        return None
    top: set[str] = set()
    layer: set[str] = set()
    for t in MODEL_TENSORS.get(found, ()):
        name = TENSOR_NAMES[t]
        if name.startswith("blk.{bid}."):
            layer.add(name.removeprefix("blk.{bid}."))
        elif "{" not in name:
            top.add(name)
    return frozenset(top), frozenset(layer)


_BLK = re.compile(r"^blk\.(0|[1-9][0-9]*)\.(.+)$")  # llama.cpp names layers "blk.%d."


def _base(name: str) -> str:
    head, _, tail = name.rpartition(".")
    return head if head and tail in TENSOR_SUFFIXES else name


def _layers_and_names(shape: ModelShape) -> dict[int, dict[str, TensorInfo]]:
    """Tensors by layer (-1: outside the layers) and base name; an unknown name is refused."""
    names = _tensor_names(shape.arch)
    by_layer: dict[int, dict[str, TensorInfo]] = {}
    for t in shape.tensors:
        m = _BLK.match(t.name)
        layer, rest = (int(m.group(1)), m.group(2)) if m else (-1, t.name)
        base = _base(rest)
        if names is not None and base not in (names[1] if m else names[0]):
            raise PlannerError(f"tensor {quoted(t.name)} is not one llama.cpp's {shape.arch} loader creates "
                               "(llama.cpp: wrong number of tensors)")
        by_layer.setdefault(layer, {})[rest] = t
    return by_layer


def _dims(t: TensorInfo) -> tuple[int, ...]:
    """ne padded with 1s to GGML_MAX_DIMS, as check_tensor_dims compares them."""
    return (*t.shape, *(1,) * (4 - len(t.shape)))


def check_tensors(shape: ModelShape, fields: dict[str, Any]) -> None:
    """The tensor table against the hyper-parameters, as ``create_tensor`` would find it."""
    if not shape.tensors:
        raise PlannerError("the model has no tensors (llama.cpp: missing tensor 'token_embd.weight')")
    for t in shape.tensors:
        if t.ggml_type in NOT_WEIGHT_TYPES:
            raise PlannerError(f"tensor {quoted(t.name)} is {type_name(t.ggml_type)}, a type llama.cpp cannot compute "
                               "with: llama-server crashes when it first runs the model")
        if len(t.shape) == 1 and t.ggml_type != F32:  # norms and biases: ggml-cpu binary_op takes F32 only
            raise PlannerError(f"tensor {quoted(t.name)} is {type_name(t.ggml_type)}, but llama.cpp applies it element-wise "
                               "to F32 activations, which needs F32: llama-server aborts when it first runs the model")
    by_layer = _layers_and_names(shape)
    layers = sorted(k for k in by_layer if k >= 0)
    if layers != list(range(shape.n_layer)):
        extra = [k for k in layers if k >= shape.n_layer]
        missing = sorted(set(range(shape.n_layer)) - set(layers))
        raise PlannerError(f"block_count is {shape.n_layer} but the tensors are for layers "
                           f"{_ranges(layers)}" + (f" (layer {extra[0]} is past the end)" if extra else
                                                   f" (layer {missing[0]} has no tensors)"))
    arch = shape.arch
    n_tokens = _token_count(fields)
    top = by_layer.get(-1, {})
    for name in REQUIRED_TOP:
        if name not in top:
            raise PlannerError(f"missing tensor {quoted(name)} (llama.cpp: tensor not found)")
    _check_layers_alike(shape, by_layer)
    if shape.n_expert and shape.arch in OPTIONAL_EXPERT_ARCHS:
        for il in range(shape.n_layer_main):
            if "ffn_gate_inp.weight" not in by_layer[il]:
                raise PlannerError(f"expert_count is {shape.n_expert} but layer {il} has no expert tensors "
                                   f"(llama.cpp: tensor 'blk.{il}.ffn_gate_inp.weight' not found)")
    want: list[tuple[TensorInfo, tuple[int, ...], str]] = []
    for name in ("token_embd.weight", "output.weight"):
        if name in top and n_tokens is not None:
            want.append((top[name], (shape.n_embd, n_tokens), "embedding_length × the vocabulary's tokens"))
    if "output_norm.weight" in top:
        want.append((top["output_norm.weight"], (shape.n_embd,), "embedding_length"))
    # load_hparams fills n_ff with 0 where feed_forward_length is absent: a dense FFN then mismatches.
    n_ff = _per_layer_int(fields, f"{arch}.feed_forward_length", shape.n_layer) or (0,) * shape.n_layer
    for il in range(shape.n_layer):
        want += _layer_wants(shape, il, by_layer[il], n_ff[il])
    for t, expected, why in want:
        if _dims(t) != (*expected, *(1,) * (4 - len(expected))):
            raise PlannerError(f"tensor {quoted(t.name)} has shape {list(t.shape)} but the hyper-parameters "
                               f"({why}) give {list(expected)} (llama.cpp: wrong shape)")


def _layer_wants(shape: ModelShape, il: int, tensors: dict[str, TensorInfo],
                 n_ff: int) -> list[tuple[TensorInfo, tuple[int, ...], str]]:
    e = shape.n_embd
    out: list[tuple[TensorInfo, tuple[int, ...], str]] = []

    def expect(name: str, dims: tuple[int, ...], why: str) -> None:
        if name in tensors:
            out.append((tensors[name], dims, why))

    for norm in ("attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm"):
        expect(f"{norm}.weight", (e,), "embedding_length")
    if shape.recr_layers[il]:
        if "attn_q.weight" in tensors:
            raise PlannerError(f"layer {il} has attention tensors but head_count_kv says it is recurrent")
    elif not shape.is_mla:
        head_k = shape.head_dim_k_swa if shape.swa_layers[il] else shape.head_dim_k
        head_v = shape.head_dim_v_swa if shape.swa_layers[il] else shape.head_dim_v
        if shape.arch in _HYBRID_ARCHS and "attn_q.weight" not in tensors:
            raise PlannerError(f"layer {il} has no attention tensors but head_count_kv says it has "
                               f"{shape.n_head_kv[il]} KV heads")
        why = "embedding_length, head_count, key_length"
        # load_arch_tensors sizes Q and the output projection by n_head = hparams.n_head(), layer 0's
        # count, for every layer (a per-layer array with a later layer at 0 loads).
        expect("attn_q.weight", (e, shape.n_head[0] * head_k), why)
        expect("attn_k.weight", (e, shape.n_embd_k_gqa(il)), "embedding_length, head_count_kv, key_length")
        expect("attn_v.weight", (e, shape.n_embd_v_gqa(il)), "embedding_length, head_count_kv, value_length")
        expect("attn_output.weight", (shape.n_head[0] * head_v, e), "head_count, value_length, embedding_length")
        if shape.arch in FULL_WIDTH_QK_NORM:  # src/models/olmo2.cpp: one norm over all heads
            expect("attn_q_norm.weight", (shape.n_head[0] * head_k,), "head_count, key_length")
            expect("attn_k_norm.weight", (shape.n_embd_k_gqa(il),), "head_count_kv, key_length")
        else:
            expect("attn_q_norm.weight", (head_k,), "key_length")
            expect("attn_k_norm.weight", (head_k,), "key_length")
    if "ffn_up.weight" in tensors or "ffn_down.weight" in tensors:
        fused = shape.arch in FUSED_GATE_UP and "ffn_gate.weight" not in tensors  # src/models/phi3.cpp: {n_embd, 2·n_ff}
        expect("ffn_up.weight", (e, 2 * n_ff if fused else n_ff), "embedding_length, feed_forward_length")
        expect("ffn_gate.weight", (e, n_ff), "embedding_length, feed_forward_length")
        expect("ffn_down.weight", (n_ff, e), "feed_forward_length, embedding_length")
    has_router = "ffn_gate_inp.weight" in tensors
    if has_router and not shape.n_expert:
        raise PlannerError(f"layer {il} has expert tensors but expert_count is 0")
    if shape.n_expert:
        n = shape.n_expert
        expect("ffn_gate_inp.weight", (e, n), "embedding_length, expert_count")
        for name in ("ffn_up_exps.weight", "ffn_gate_exps.weight"):
            if name in tensors:
                out.append((tensors[name], (e, tensors[name].shape[1] if len(tensors[name].shape) > 1 else 0, n),
                            "embedding_length, expert_count"))
        if "ffn_down_exps.weight" in tensors:
            t = tensors["ffn_down_exps.weight"]
            out.append((t, (t.shape[0], e, n), "embedding_length, expert_count"))
    return out


_HYBRID_ARCHS = frozenset({"granitehybrid"})
#: Architectures whose q and k norms span all heads (one weight of head_count × key_length).
FULL_WIDTH_QK_NORM = frozenset({"olmo2"})
#: Architectures whose ffn_up holds the gate and the up projection in one tensor (2 × n_ff wide).
FUSED_GATE_UP = frozenset({"phi3"})
#: Tensors outside the layers that every modelled architecture's load_arch_tensors creates as required.
REQUIRED_TOP = ("token_embd.weight", "output_norm.weight")


def _check_layers_alike(shape: ModelShape, by_layer: dict[int, dict[str, TensorInfo]]) -> None:
    """Layers of one kind (attention or recurrent; dense or expert FFN; trunk or NextN) must hold the
    same tensors: llama.cpp creates the same required ones for each, so a layer that lacks one that
    its kind's other layers have is a missing tensor ("check_tensor_dims: tensor '%s' not found")."""
    kinds: dict[tuple[bool, bool, bool], list[int]] = {}
    for il in range(shape.n_layer):
        kind = (shape.recr_layers[il], "ffn_gate_inp.weight" in by_layer[il], il >= shape.n_layer_main)
        kinds.setdefault(kind, []).append(il)
    for layers in kinds.values():
        union = set().union(*(by_layer[il] for il in layers))
        for il in layers:
            missing = sorted(union - set(by_layer[il]))
            if missing:
                raise PlannerError(f"missing tensor 'blk.{il}.{missing[0]}' (the other layers like it have one; "
                                   "llama.cpp: tensor not found)")


def _token_count(fields: dict[str, Any]) -> int | None:
    tokens = fields.get("tokenizer.ggml.tokens")
    return tokens.count if isinstance(tokens, GGUFArray) else None


def _per_layer_int(fields: dict[str, Any], key: str, n_layer: int) -> tuple[int, ...] | None:
    v = fields.get(key)
    if isinstance(v, GGUFArray):
        return tuple(int(x) for x in v.values) if v.values is not None and len(v.values) == n_layer else None
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * n_layer
    return None


def _ranges(layers: list[int]) -> str:
    if not layers:
        return "none"
    out: list[str] = []
    start = prev = layers[0]
    for x in [*layers[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}–{prev}")
        if x is not None:
            start = prev = x
    return ", ".join(out)
