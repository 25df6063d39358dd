"""The generated GGUFs read back as what their specs say (gguf-py's own reader), cost no disk,
and the headline shape reproduces the recorded H200 engine log's model sizes."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from app.planner.units import MiB
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.spec import ModelSpec

H200_LOG = "h200/llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log"


def _field(reader: GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


@functools.cache
def _read(name: str) -> GGUFReader:
    """gguf-py parses a 150k-token vocab string by string (seconds): read each file once."""
    return GGUFReader(gguf_factory.ensure(shapes.BY_NAME[name]))


_ALL = [pytest.param(s, marks=[pytest.mark.slow] if s.n_vocab > 1000 else [], id=s.name) for s in shapes.ALL]


@pytest.mark.parametrize("spec", _ALL)
def test_reads_back_with_the_specd_tensor_table(spec: ModelSpec) -> None:
    reader = _read(spec.name)
    assert len(reader.tensors) == spec.n_tensors
    got = {t.name: (tuple(int(d) for d in t.shape), t.tensor_type) for t in reader.tensors}
    assert got == {t.name: (t.shape, t.qtype) for t in spec.tensors}
    assert _field(reader, "general.architecture") == spec.arch
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == spec.n_vocab
    assert _field(reader, f"{spec.arch}.block_count") == spec.meta("{arch}.block_count")


@pytest.mark.parametrize("spec", shapes.SHAPES, ids=lambda s: s.name)
def test_shape_only_files_are_sparse(spec: ModelSpec) -> None:
    path = gguf_factory.ensure(spec)
    st = path.stat()
    assert st.st_size >= spec.tensor_bytes > 1024 * MiB
    assert st.st_blocks * 512 < 64 * MiB, "the data region must be a hole, not written zeros"


def test_tiny_model_has_real_seeded_weights(tmp_path: Path) -> None:
    path = gguf_factory.ensure(shapes.TINY)
    reader = GGUFReader(path)
    wq = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    assert float(np.abs(wq.data).mean()) > 0.01
    again = tmp_path / "again.gguf"
    gguf_factory.write(shapes.TINY, again)
    assert again.read_bytes() == path.read_bytes()
    assert "tokenizer.chat_template" not in reader.fields
    chat = GGUFReader(gguf_factory.ensure(shapes.TINY_CHAT))
    assert "<|im_start|>" in str(_field(chat, "tokenizer.chat_template"))


def test_editing_a_spec_changes_its_cache_file() -> None:
    from dataclasses import replace

    edited = replace(shapes.TINY, seed=shapes.TINY.seed + 1)
    assert gguf_factory.path_for(edited) != gguf_factory.path_for(shapes.TINY)


def _mib(line_re: str, text: str) -> float:
    m = re.search(line_re, text)
    assert m, f"recorded log lacks {line_re!r}"
    return float(m.group(1))


def test_qwen25_14b_matches_the_recorded_h200_log(shared_fixtures: Path) -> None:
    """The planner reproduces this log's buffers from the GGUF, so the fixture must be that file."""
    log = (shared_fixtures / H200_LOG).read_text()
    spec = shapes.QWEN25_14B_1M
    reader = _read(spec.name)
    # loaded meta data with 19 key-value pairs and 579 tensors from models/qwen2-14b-1m.gguf
    m = re.search(r"loaded meta data with (\d+) key-value pairs and (\d+) tensors", log)
    assert m
    assert (len(reader.fields) - 3, spec.n_tensors) == (int(m.group(1)), int(m.group(2)))  # 3 = GGUF.*
    # llama_model_loader: - type  f32:  241 tensors
    recorded = {k: int(v) for k, v in re.findall(r"- type\s+(\w+):\s+(\d+) tensors", log)}
    assert spec.count_by_type() == recorded
    embd = next(t for t in spec.tensors if t.name == "token_embd.weight")
    # load_tensors:   CPU_Mapped model buffer size =   788.91 MiB
    assert round(embd.nbytes / MiB, 2) == _mib(r"CPU_Mapped model buffer size =\s+([\d.]+) MiB", log)
    # load_tensors:        CUDA0 model buffer size = 14179.61 MiB
    on_gpu = spec.tensor_bytes - embd.nbytes
    assert round(on_gpu / MiB, 2) == _mib(r"CUDA0 model buffer size =\s+([\d.]+) MiB", log)
    # print_info: file size   = 14.62 GiB (8.50 BPW)
    assert round(spec.tensor_bytes / (1024 * MiB), 2) == _mib(r"file size\s+=\s+([\d.]+) GiB", log)
