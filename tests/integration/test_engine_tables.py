"""Tables Headroom copies from llama.cpp, compared with the engine it builds on every run: a newer engine
with a new ggml type or pre-tokenizer fails here instead of its files being refused (issue 31: Q2_0,
type 42, was "unknown" because the table came from the ``gguf`` package)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from app.engine.native_build import EngineBuild
from app.planner.gguf.checks import BPE_MODELS, PRE_TOKENIZERS, TOKENIZER_MODELS
from app.planner.gguf.ggml_types import GGML_TYPE_COUNT, GGML_TYPES
from tests.fixtures.engine_source import source_dir


def _ggml_base(build: EngineBuild) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(Path(build.bin_dir) / "libggml-base.so"))
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_type_size.restype = ctypes.c_size_t
    for fn in (lib.ggml_type_name, lib.ggml_blck_size, lib.ggml_type_size):
        fn.argtypes = [ctypes.c_int]
    return lib


def test_ggml_types_are_the_engines(engine_build: EngineBuild) -> None:
    count = re.search(r"GGML_TYPE_COUNT\s*=\s*(\d+)", (source_dir(engine_build) / "ggml/include/ggml.h").read_text())
    assert count is not None
    assert int(count.group(1)) == GGML_TYPE_COUNT
    lib = _ggml_base(engine_build)
    engine = {}
    for t in range(GGML_TYPE_COUNT):
        block = lib.ggml_blck_size(t)
        if block:  # removed types keep a "DEPRECATED" entry of block size 0 (gguf.cpp refuses them)
            engine[t] = ((lib.ggml_type_name(t) or b"").decode(), block, lib.ggml_type_size(t))
    assert engine == GGML_TYPES


def _vocab_source(build: EngineBuild) -> str:
    return (source_dir(build) / "src/llama-vocab.cpp").read_text()


def test_tokenizer_models_and_pre_tokenizers_are_the_engines(engine_build: EngineBuild) -> None:
    text = _vocab_source(engine_build)
    # llama_vocab::impl::load: the models it knows ("unknown tokenizer: '%s'" for any other) ...
    load = text[text.index("void llama_vocab::impl::load("):text.index("unknown tokenizer: '%s'")]
    assert set(re.findall(r'tokenizer_model == "([^"]+)"', load)) == TOKENIZER_MODELS
    # ... those read as BPE (an `if (tokenizer_model == … || …) { type = LLAMA_VOCAB_TYPE_BPE;` branch) ...
    bpe = re.findall(r'\(((?:\s*(?:\|\|)?\s*tokenizer_model == "[^"]+")+)\s*\)\s*\{\s*type = LLAMA_VOCAB_TYPE_BPE;',
                     load)
    assert {m for cond in bpe for m in re.findall(r'"([^"]+)"', cond)} == BPE_MODELS
    # ... and the pre-tokenizers a BPE model may name (an empty one is "default").
    start = text.index("if (type == LLAMA_VOCAB_TYPE_BPE) {")
    pre = text[start:text.index("unknown pre-tokenizer type: '%s'", start)]
    assert {"", *re.findall(r'tokenizer_pre == "([^"]*)"', pre)} == PRE_TOKENIZERS
