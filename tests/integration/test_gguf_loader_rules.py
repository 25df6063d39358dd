"""Issue 31: the files llama.cpp's loader reads its own way, each planned exactly when llama-server loads it.

One deterministic copy of the tiny llama per case (tests/fixtures/gguf_mutate.py builds them): plan's
verdict, and llama-server's own (tests/fixtures/loader_oracle.py) on the same file. The seeded long run
of every class is ``bench/bench_loader_fuzz.py`` (bench/results/loader-fuzz-cpu-2026-12-02.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.native_build import find_build
from tests.fixtures import gguf_factory, gguf_mutate, shapes
from tests.fixtures.gguf_mutate import F32, KV, STR, U32, Header, encode
from tests.fixtures.loader_oracle import engine_verdict, plan_verdict

pytestmark = [pytest.mark.engine]


def _nul_key_before(h: Header) -> None:
    real = h.index("llama.block_count")
    h.kvs.insert(real, KV(b"llama.block_count\0junk", U32, encode(U32, 3)))


def _nul_key_after(h: Header) -> None:
    h.kvs.insert(h.index("llama.block_count") + 1, KV(b"llama.block_count\0junk", U32, encode(U32, 3)))


def _nul_tensor_name(h: Header) -> None:
    h.tensors[-1].name += b"\0junk"


def _same_name_to_nul(h: Header) -> None:
    h.tensors[-1].name = h.tensors[-2].name + b"\0x"


def _nul_arch(h: Header) -> None:
    h.kv("general.architecture").raw = struct.pack("<Q", 10) + b"llama\0junk"


def _utf8_keys(h: Header) -> None:
    h.kvs += [KV(b"general.note\xff", STR, encode(STR, "a")), KV(b"general.note\xfe", STR, encode(STR, "b"))]


def _alignment(value: int) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        gguf_mutate._set_kv(h, b"general.alignment", U32, encode(U32, value))
        h.repack_offsets()
    return change


def _experts(h: Header) -> None:
    h.kvs += [KV(b"llama.expert_count", U32, encode(U32, 8)), KV(b"llama.expert_used_count", U32, encode(U32, 2))]


def _epsilon(value: float) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        h.kv("llama.attention.layer_norm_rms_epsilon").raw = encode(F32, value)
    return change


def _tensor_type(name: str, ggml_type: int) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        next(t for t in h.tensors if t.name == name.encode()).ggml_type = ggml_type
        if ggml_type in gguf_mutate._BLOCK:  # type 43: no size, and the offsets as they were
            h.repack_offsets()
    return change


def _pre(pre: str) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        h.kv("tokenizer.ggml.model").raw = encode(STR, "gpt2")
        tokens = gguf_mutate._strings(h.kv("tokenizer.ggml.tokens").raw)
        h.kv("tokenizer.ggml.tokens").raw = gguf_mutate._str_array(
            [b"\xc4\x8a" if t == b"<0x0A>" else t for t in tokens])
        gguf_mutate._set_kv(h, b"tokenizer.ggml.merges", gguf_mutate.ARR, gguf_mutate._str_array([]))
        h.kvs = [k for k in h.kvs if k.key != b"tokenizer.ggml.token_type"]
        gguf_mutate._set_kv(h, b"tokenizer.ggml.pre", STR, encode(STR, pre))
    return change


def _tokens(change_list: Callable[[list[bytes]], None]) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        tokens = gguf_mutate._strings(h.kv("tokenizer.ggml.tokens").raw)
        change_list(tokens)
        h.kv("tokenizer.ggml.tokens").raw = gguf_mutate._str_array(tokens)
    return change


def _head_count_layers(per: list[int]) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        kv = h.kv("llama.attention.head_count")
        kv.vtype, kv.raw = gguf_mutate.ARR, struct.pack("<IQ", U32, len(per)) + b"".join(struct.pack("<I", v) for v in per)
    return change


def _template(text: str) -> Callable[[Header], None]:
    def change(h: Header) -> None:
        gguf_mutate._set_kv(h, b"tokenizer.chat_template", STR, encode(STR, text))
    return change


def _dup(tokens: list[bytes]) -> None:
    tokens[10] = tokens[11]


def _dup_to_nul(tokens: list[bytes]) -> None:
    tokens[10] = tokens[11] + b"\0tail"


def _empty(tokens: list[bytes]) -> None:
    tokens[10] = b""


#: (case, change, file name, whether llama-server loads it, words plan's refusal must hold)
CASES: list[tuple[str, Callable[[Header], None], str, bool, str]] = [
    ("nul-key-before", _nul_key_before, "m.gguf", False, "block_count is 3"),
    ("nul-key-after", _nul_key_after, "m.gguf", True, ""),
    ("nul-tensor-name", _nul_tensor_name, "m.gguf", True, ""),
    ("same-name-to-nul", _same_name_to_nul, "m.gguf", False, "appears twice"),
    ("nul-arch", _nul_arch, "m.gguf", True, ""),
    ("utf8-keys", _utf8_keys, "m.gguf", True, ""),
    ("alignment-1", _alignment(1), "m.gguf", False, "buffer pointer must be aligned"),
    ("alignment-8-lands-aligned", _alignment(8), "m.gguf", True, ""),
    ("alignment-64", _alignment(64), "m.gguf", True, ""),
    ("alignment-1m-pages-between", _alignment(1 << 20), "m.gguf", True, ""),
    ("experts-on-dense", _experts, "m.gguf", False, "ffn_gate_inp.weight' not found"),
    ("nan-epsilon", _epsilon(float("nan")), "m.gguf", False, "is NaN"),
    ("minus-inf-epsilon", _epsilon(float("-inf")), "m.gguf", False, "is negative (-inf)"),
    ("negative-epsilon", _epsilon(-1e-6), "m.gguf", False, "is negative"),
    ("inf-epsilon", _epsilon(float("inf")), "m.gguf", True, ""),
    ("zero-epsilon", _epsilon(0.0), "m.gguf", True, ""),
    ("i32-weight", _tensor_type("token_embd.weight", 26), "m.gguf", False, "cannot compute with"),
    ("q2_0-weight", _tensor_type("blk.0.attn_q.weight", 42), "m.gguf", True, ""),
    ("q2_0-norm", _tensor_type("blk.0.attn_norm.weight", 42), "m.gguf", False, "needs F32"),
    ("type-43", _tensor_type("blk.0.attn_q.weight", 43), "m.gguf", False, "unknown ggml type 43"),
    ("known-pre", _pre("llama-bpe"), "m.gguf", True, ""),
    ("unknown-pre", _pre("no-such-pre"), "m.gguf", False, "unknown pre-tokenizer 'no-such-pre'"),
    ("duplicate-token", _tokens(_dup), "m.gguf", False, "1 duplicate token"),
    ("duplicate-to-nul", _tokens(_dup_to_nul), "m.gguf", False, "1 duplicate token"),
    ("empty-token", _tokens(_empty), "m.gguf", True, ""),
    ("split-name-no-key", lambda h: None, "m-00001-of-00003.gguf", True, ""),
    ("head-count-layer-1-zero", _head_count_layers([4, 0]), "m.gguf", True, ""),
    ("head-count-layer-0-zero", _head_count_layers([0, 4]), "m.gguf", False, "head_count is 0"),
    ("chat-template", _template("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"), "m.gguf",
     True, ""),
    ("chat-template-cut", _template("{% for m in messages %}<|{{ m.role }}|>{{ m.content "), "m.gguf", False,
     "the chat template (tokenizer.chat_template) does not parse"),
    ("chat-template-unclosed-for", _template("{% for m in messages %}{{ m.content }}"), "m.gguf", False,
     "does not parse"),
]


@pytest.mark.parametrize(("case", "change", "name", "loads", "words"), CASES, ids=[c[0] for c in CASES])
def test_plan_refuses_exactly_what_llama_server_refuses(tmp_path: Path, case: str, change: Callable[[Header], None],
                                                        name: str, loads: bool, words: str) -> None:
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    change(header)
    path = header.write(tmp_path / name)
    plan = plan_verdict(path)
    assert plan.sound, (case, plan.rc, plan.err)
    assert plan.refused == (not loads), (case, plan.err)
    assert words in plan.err
    build = find_build()
    assert build is not None
    engine = engine_verdict(build.server, path, tmp_path / "server.log")
    assert engine.loaded == loads, (case, engine)


@pytest.mark.parametrize(("key", "kind", "n"), [(b"general.name", "string", 1 << 30),
                                                (b"general.huge", "array", 1 << 30)])
def test_a_huge_value_is_skipped_not_read(tmp_path: Path, key: bytes, kind: str, n: int) -> None:
    """A 1 GiB ``general.name`` (OOM-killed at 24 GB before) and a 2^30-element array: planned in well
    under 500 MiB (the file is sparse: the value is a hole)."""
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    path = gguf_mutate.write_with_hole(header, tmp_path / "huge.gguf", key, kind, n)
    plan = plan_verdict(path)
    assert plan.rc == 0, plan.err
    assert plan.rss_bytes < 200 * 2**20


def test_only_the_first_tensor_must_start_on_32_bytes(tmp_path: Path) -> None:
    """llama.cpp maps the host tensors as one buffer from the first one's data and checks only that
    pointer: alignment 16 on the tiny gemma3 puts a later tensor off a 32-byte boundary, and
    llama-server loads it (the loader fuzz found it, seed 5), so the plan does too."""
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY_GEMMA3))
    _alignment(16)(header)
    assert any(t.offset % 32 for t in header.tensors)  # some tensor starts off a 32-byte boundary
    path = header.write(tmp_path / "m.gguf")
    plan = plan_verdict(path)
    assert plan.sound and not plan.refused, plan.err
    build = find_build()
    assert build is not None
    assert engine_verdict(build.server, path, tmp_path / "server.log").loaded
