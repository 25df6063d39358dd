"""Each kind of file llama.cpp refuses (issue 17, §3) is refused by ``read_shape`` with its own sentence.

The copies are the tiny llama with one thing broken (tests/fixtures/gguf_mutate.py). That llama.cpp
itself refuses every one of them is checked against its real loader by tests/integration/
test_gguf_fuzz.py; here, that the sentence names the problem.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.planner.errors import PlannerError
from app.planner.gguf.model import read_shape
from tests.fixtures import gguf_factory, gguf_mutate, shapes
from tests.fixtures.gguf_mutate import STR, U32, U64, Header


def _overlap(h: Header) -> None:
    h.tensors[3].offset = h.tensors[2].offset  # starts where the one before it starts


def _gap(h: Header) -> None:
    for t in h.tensors[3:]:
        t.offset += 4096


def _out_of_order(h: Header) -> None:
    h.tensors[2].offset, h.tensors[3].offset = h.tensors[3].offset, h.tensors[2].offset


def _no_tensors(h: Header) -> None:
    h.tensors = []


def _set(key: str, value: int) -> Callable[[Header], None]:
    return lambda h: h.set_u32(key, value)


def _empty_key(h: Header) -> None:
    h.kv("llama.rope.freq_base").key = b""


def _retype(key: str, vtype: int, value: object) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        kv = h.kv(key)
        kv.vtype, kv.raw = vtype, gguf_mutate.encode(vtype, value)
    return change


def _drop(key: str) -> Callable[[Header], None]:
    def drop(h: Header) -> None:
        h.kvs.pop(h.index(key))
    return drop


CASES: dict[str, tuple[Callable[[Header], None], str]] = {
    "overlap": (_overlap, r"'blk\.0\.attn_k\.weight' starts at data offset \d+, but llama\.cpp requires \d+ "
                          r".*: it overlaps the tensor before it"),
    "gap": (_gap, r"leaves a gap of 4096 bytes after the tensor before it"),
    "out-of-order": (_out_of_order, r"'blk\.0\.attn_q\.weight' starts at data offset .*(gap|overlaps)"),
    "no-tensors": (_no_tensors, r"the model has no tensors"),
    "block_count-more": (_set("llama.block_count", 3), r"block_count is 3 but the tensors are for layers 0–1 "
                                                        r"\(layer 2 has no tensors\)"),
    "block_count-fewer": (_set("llama.block_count", 1), r"block_count is 1 but the tensors are for layers 0–1 "
                                                         r"\(layer 1 is past the end\)"),
    "head_count_kv": (_set("llama.attention.head_count_kv", 4),
                      r"'blk\.0\.attn_k\.weight' has shape \[64, 32\] but the hyper-parameters "
                      r"\(embedding_length, head_count_kv, key_length\) give \[64, 64\]"),
    # The llama's head size follows embedding_length (llama.cpp then says invalid n_rot first, as here);
    # the gemma3 gives its key_length, so its tensors are what contradicts.
    "embedding_length": (_set("llama.embedding_length", 128), r"rope\.dimension_count 16 differs from the head "
                                                              r"size 32 \(llama\.cpp: invalid n_rot\)"),
    "embedding_length-gemma3": (_set("gemma3.embedding_length", 512),
                                r"'token_embd\.weight' has shape \[256, 259\] but the hyper-parameters .* give "
                                r"\[512, 259\]"),
    "empty-key": (_empty_key, r"metadata key \d+ is empty"),
    "key-wrong-type": (_retype("llama.context_length", U64, 4096),
                       r"key 'llama\.context_length' is UINT64, but llama\.cpp reads it as UINT32"),
    "name-wrong-type": (_retype("general.name", U32, 7), r"key 'general\.name' is UINT32, but llama\.cpp reads it "
                                                         r"as STRING"),
    "required-key": (_drop("llama.attention.layer_norm_rms_epsilon"),
                     r"missing required key llama\.attention\.layer_norm_rms_epsilon"),
    "tokenizer": (_retype("tokenizer.ggml.model", STR, "lama"), r"unknown tokenizer 'lama'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_llama_cpp_refuses_is_refused_naming_why(tmp_path: Path, case: str) -> None:
    change, words = CASES[case]
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY_GEMMA3 if "gemma3" in case else shapes.TINY))
    change(header)
    path = header.write(tmp_path / f"{case}.gguf")
    with pytest.raises(PlannerError, match=words) as err:
        read_shape(path)
    assert str(err.value).startswith(f"{case}.gguf: ")  # which file, then what is wrong with it


def test_the_unbroken_copy_reads(tmp_path: Path) -> None:
    """The copies differ from the model only by what each case breaks."""
    path = gguf_mutate.read(gguf_factory.ensure(shapes.TINY)).write(tmp_path / "same.gguf")
    assert read_shape(path).n_layer == 2
