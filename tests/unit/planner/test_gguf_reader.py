"""The lean GGUF reader: field-for-field equal to gguf.GGUFReader, bounded on hostile input."""

from __future__ import annotations

import random
import re
import struct
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest

from app.planner.errors import PlannerError
from app.planner.gguf.model import read_shape
from app.planner.gguf.reader import GGUFArray, read_header
from tests.fixtures import gguf_factory, shapes


def _small_gguf(path: Path) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_token_list([f"tok{i}".encode() for i in range(300)])
    w.add_token_scores([0.5] * 300)
    w.add_array("llama.attention.per_layer", [1, 2])
    w.add_string("general.name", "small")
    w.add_tensor("token_embd.weight", np.zeros((300, 64), dtype=np.float16))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    w.add_tensor("output.weight", np.zeros((300, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _assert_same_as_gguf_reader(path: Path) -> None:
    ours = read_header(path)
    ref = gguf.GGUFReader(str(path))
    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.fields) == list(ref_fields)
    for key, f in ref_fields.items():
        vtype = f.types[0]
        assert ours.field_types[key] == vtype, key
        mine = ours.fields[key]
        if vtype == gguf.GGUFValueType.ARRAY:
            assert isinstance(mine, GGUFArray)
            assert mine.elem_type == f.types[-1], key
            assert mine.count == len(f.data), key
            if mine.values is not None:
                assert list(mine.values) == pytest.approx([f.parts[i][0] for i in f.data]), key
        elif vtype == gguf.GGUFValueType.STRING:
            assert mine == bytes(f.parts[-1]).decode("utf-8"), key
        else:
            assert mine == pytest.approx(f.parts[-1][0]), key
    assert len(ours.tensors) == len(ref.tensors)
    for t, r in zip(ours.tensors, ref.tensors, strict=True):
        assert (t.name, list(t.shape), t.ggml_type, t.offset, t.n_bytes) == \
            (r.name, [int(x) for x in r.shape], int(r.tensor_type), int(r.data_offset), int(r.n_bytes))


@pytest.mark.parametrize("spec", shapes.ALL, ids=lambda s: s.name)
def test_reader_matches_gguf_reader_on_every_fixture(spec: object) -> None:
    _assert_same_as_gguf_reader(gguf_factory.ensure(spec))  # type: ignore[arg-type]


def test_reader_matches_on_a_small_written_file(tmp_path: Path) -> None:
    path = _small_gguf(tmp_path / "small.gguf")
    _assert_same_as_gguf_reader(path)
    h = read_header(path)
    assert h.fields["tokenizer.ggml.tokens"] == GGUFArray(gguf.GGUFValueType.STRING, 300, distinct=300)
    assert h.fields["llama.attention.per_layer"].values == (1, 2)


def test_tokenizer_arrays_are_skipped_not_materialised() -> None:
    path = gguf_factory.ensure(shapes.GEMMA3_12B)  # 262208 tokens
    t0 = time.thread_time()  # CPU time of this thread: what the reader costs, whatever else runs here
    h = read_header(path)
    elapsed = time.thread_time() - t0
    tokens = h.fields["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GGUFArray) and tokens.count == 262208 and tokens.values is None
    assert elapsed < 2.0  # GGUFReader takes seconds here; the bench measures the real figure


def _header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def _kv_str(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v


@pytest.mark.parametrize(("blob", "words"), [
    (b"GGML" + b"\0" * 40, "not a GGUF file: it begins with the bytes 47 47 4d 4c, where a GGUF begins with 'GGUF'"),
    (b"import os\nprint('hello')\n" * 2, "not a GGUF file: it is text (it begins 'import os print('hello')"),
    (b"GGUF" + struct.pack("<IQQ", 7, 0, 0), "unsupported GGUF version 7"),
    (_header(0, 2**62), "metadata count"),
    (_header(2**62, 0), "tensor count"),
    (_header(0, 1) + struct.pack("<Q", 2**60) + b"key" + b"\0" * 16, "metadata key is 1152921504606846976 bytes long"),
    (_header(0, 1) + struct.pack("<Q", 2**20) + b"key" + b"\0" * 16, "metadata key runs past"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99) + b"\0" * 16, "unknown value type 99"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**61) + b"\0" * 16,
     "array 'k' has 2305843009213693952 elements"),  # gguf.cpp's GGUF_MAX_ARRAY_ELEMENTS
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**24) + b"\0" * 16,
     "strings cannot fit"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 6, 2**24) + b"\0" * 16,
     "runs past the end"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 1234, 0) + b"\0" * 32,
     "unknown ggml type 1234"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9) + b"\0" * 64, "9 dimensions"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 64, 0, 0) + b"\0" * 32,
     "runs past the end"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 2**40) + b"\0" * 32,
     "the first tensor's data must start the data section"),
    (_header(0, 1) + struct.pack("<Q", 0) + struct.pack("<I", 4) + b"\0" * 16, "metadata key 0 is empty"),
    (_header(0, 1) + struct.pack("<Q", 17) + b"general.alignment" + struct.pack("<IQ", 10, 32) + b"\0" * 8,
     "general.alignment is UINT64, llama.cpp requires UINT32"),
    (_header(1, 0) + struct.pack("<Q", 64) + b"t" * 64 + struct.pack("<IQIQ", 1, 32, 0, 0) + b"\0" * 160,
     "is 64 bytes long"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 2**40, 0, 0) + b"\0" * 32,
     "impossible shape"),
    (_header(0, 1) + _kv_str("general.alignment", "x" * 20)[:-1], "runs past the end"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_hostile_headers_raise_planner_error_naming_the_problem(tmp_path: Path, blob: bytes, words: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(blob)
    tracemalloc.start()
    try:
        with pytest.raises(PlannerError, match=re.escape(words)):
            read_header(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024  # a 2**62 count never turns into an allocation


def test_empty_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(PlannerError, match="only 0 bytes"):
        read_header(tmp_path / "empty.gguf")
    with pytest.raises(PlannerError, match="cannot read"):
        read_header(tmp_path / "missing.gguf")


def test_fuzz_mutated_files_only_ever_raise_planner_error(tmp_path: Path) -> None:
    base = _small_gguf(tmp_path / "base.gguf").read_bytes()
    header_end = read_header(tmp_path / "base.gguf").data_offset
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    deadline = time.monotonic() + 60
    tracemalloc.start()
    for i in range(400):
        data = bytearray(base)
        kind = i % 4
        if kind == 0:  # flip bytes in the header
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(header_end)] = rng.randrange(256)
        elif kind == 1:  # truncate
            data = data[:rng.randrange(len(data))]
        elif kind == 2:  # a huge count or length at a random 8-byte position
            pos = rng.randrange(4, header_end - 8)
            data[pos:pos + 8] = struct.pack("<Q", rng.choice([2**63, 2**40, 2**32 - 1, 0xFFFFFFFFFFFFFFFF]))
        else:  # a random type tag
            pos = rng.randrange(4, header_end - 4)
            data[pos:pos + 4] = struct.pack("<I", rng.randrange(0, 64))
        path = tmp_path / f"m{i}.gguf"
        path.write_bytes(bytes(data))
        tracemalloc.reset_peak()
        try:
            read_header(path)
            read_shape(path)
            outcomes["ok"] += 1
        except PlannerError as e:
            assert str(e)
            outcomes["error"] += 1
        _, peak = tracemalloc.get_traced_memory()
        assert peak < len(data) + 256 * 1024, f"mutation {i} allocated {peak} bytes for a {len(data)}-byte file"
        path.unlink()
        assert time.monotonic() < deadline, "the reader must never hang"
    tracemalloc.stop()
    assert outcomes["error"] > 200  # most mutations are caught, each as a PlannerError


@pytest.mark.parametrize("in_a_set", [True, False], ids=["a real vocabulary", "past any real one"])
def test_duplicate_token_texts_are_counted_the_same_either_way(
        tmp_path: Path, in_a_set: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp aborts on two tokens whose texts it reads alike (up to a NUL); a real vocabulary is
    counted in a set (pass 1 does not wait for numpy's import), one past any real size in numpy."""
    from app.planner.gguf import reader

    if not in_a_set:
        monkeypatch.setattr(reader, "DISTINCT_IN_A_SET", 0)
    w = gguf.GGUFWriter(str(tmp_path / "dup.gguf"), "llama")
    w.add_token_list([b"a", b"b", b"a\0x", b"", b"", b"c"])  # "a\0x" reads as "a"; empty ones are [EMPTY_i]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    assert read_header(tmp_path / "dup.gguf").fields["tokenizer.ggml.tokens"].distinct == 5
