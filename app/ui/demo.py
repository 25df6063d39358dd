"""The built-in demo: a simulated 24 GB GPU and a generated shape-only model.

On a fresh machine (no model, no GPU, no engine) the window opens on this, so the picture is never
empty. The model is written once to the cache directory: the real metadata keys and tensor table of
a Qwen2.5-7B-Instruct-1M-like model (qwen2, 28 layers, Q4_K / Q6_K weights, f32 norms and biases),
with the data region left sparse — the header costs ~2 MB, the rest is a hole. It is for planning
only; the engine would load zero weights.
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np

from app.files import publish
from app.paths import cache_dir

#: Bumped when the generated file must change (it is the file name's suffix).
DEMO_VERSION = 1
#: The simulated card the demo plans for (gpu_table: nominal 24 GiB).
DEMO_GPU = "RTX 4090"
DEMO_CONTEXT = 512 * 1024
#: What the window says while the demo is open (a banner over the plan; the link opens a model).
DEMO_BANNER = ("<b>Demo</b>: the shape of Qwen2.5-7B-Instruct-1M (no weights) on a simulated RTX 4090, to show "
               "how planning works. It cannot be launched: <a href='open'>open a model of your own</a> "
               "(File ▸ Open model…) to launch one.")
#: Why Launch is off for the demo (the button's tooltip).
DEMO_LAUNCH = "The demo model has no weights (a shape to plan with): open a model of your own to launch it"

# Qwen2.5-7B-Instruct-1M (config.json of the Hugging Face release).
_ARCH = "qwen2"
_N_LAYER, _N_EMBD, _N_HEAD, _N_HEAD_KV, _N_FF, _N_VOCAB = 28, 3584, 28, 4, 18944, 152064
_HEAD_DIM = _N_EMBD // _N_HEAD
_CTX_TRAIN = 1_010_000
_Q = gguf.GGMLQuantizationType


def demo_model_path() -> Path:
    return cache_dir() / "demo" / f"qwen2.5-7b-1m-shape-v{DEMO_VERSION}.gguf"


def _nbytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    return n // block * size


def _tensors() -> list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]]:
    """(name, numpy-order shape, type) for every tensor, as llama.cpp's qwen2 loader expects."""
    kv = _N_HEAD_KV * _HEAD_DIM
    out: list[tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]] = [
        ("token_embd.weight", (_N_VOCAB, _N_EMBD), _Q.Q6_K),
        ("output_norm.weight", (_N_EMBD,), _Q.F32),
        ("output.weight", (_N_VOCAB, _N_EMBD), _Q.Q6_K),
    ]
    for i in range(_N_LAYER):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", (_N_EMBD,), _Q.F32),
            (p + "attn_q.weight", (_N_EMBD, _N_EMBD), _Q.Q4_K),
            (p + "attn_q.bias", (_N_EMBD,), _Q.F32),
            (p + "attn_k.weight", (kv, _N_EMBD), _Q.Q4_K),
            (p + "attn_k.bias", (kv,), _Q.F32),
            (p + "attn_v.weight", (kv, _N_EMBD), _Q.Q6_K),
            (p + "attn_v.bias", (kv,), _Q.F32),
            (p + "attn_output.weight", (_N_EMBD, _N_EMBD), _Q.Q4_K),
            (p + "ffn_norm.weight", (_N_EMBD,), _Q.F32),
            (p + "ffn_gate.weight", (_N_FF, _N_EMBD), _Q.Q4_K),
            (p + "ffn_up.weight", (_N_FF, _N_EMBD), _Q.Q4_K),
            (p + "ffn_down.weight", (_N_EMBD, _N_FF), _Q.Q6_K),
        ]
    return out


def write_demo_model(path: Path) -> Path:
    """Write the shape-only GGUF atomically (temp name, then rename). Returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    w = gguf.GGUFWriter(tmp, _ARCH)
    w.add_name("Headroom demo (Qwen2.5-7B-Instruct-1M shape, no weights)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_block_count(_N_LAYER)
    w.add_context_length(_CTX_TRAIN)
    w.add_embedding_length(_N_EMBD)
    w.add_feed_forward_length(_N_FF)
    w.add_head_count(_N_HEAD)
    w.add_head_count_kv(_N_HEAD_KV)
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("llama")
    # Real vocabulary size (the engine checks it against token_embd); placeholder token texts.
    # (add_key_value with sub_type skips gguf's per-element type check: 3x faster for 152k tokens.)
    arr, tok = gguf.GGUFValueType.ARRAY, gguf.Keys.Tokenizer
    w.add_key_value(tok.LIST, [f"<t{i}>" for i in range(_N_VOCAB)], arr, sub_type=gguf.GGUFValueType.STRING)
    w.add_key_value(tok.SCORES, [0.0] * _N_VOCAB, arr, sub_type=gguf.GGUFValueType.FLOAT32)
    w.add_key_value(tok.TOKEN_TYPE, [1] * _N_VOCAB, arr, sub_type=gguf.GGUFValueType.INT32)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    data = 0
    align = gguf.GGUF_DEFAULT_ALIGNMENT
    for name, shape, qtype in _tensors():
        nbytes = _nbytes(shape, qtype)
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data += (nbytes + align - 1) // align * align
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = tmp.stat().st_size
    with open(tmp, "r+b") as fh:
        fh.truncate((header + align - 1) // align * align + data)  # sparse: no data written
    publish(tmp, path)
    return path


def ensure_demo_model() -> Path:
    """The demo model, generated on first use; where the cache cannot be written (a read-only or full
    disk), in the temporary folder instead, for this run."""
    path = demo_model_path()
    if path.is_file():
        return path
    try:
        return write_demo_model(path)
    except OSError:
        import tempfile

        spare = Path(tempfile.gettempdir()) / f"headroom-demo-{os.getuid()}" / path.name
        return spare if spare.is_file() else write_demo_model(spare)
