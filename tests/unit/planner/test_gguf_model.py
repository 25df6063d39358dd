"""ModelShape from real-shaped GGUFs: the numbers llama.cpp's print_info shows for each model."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from app.planner.devices import HostMemory, Inventory
from app.planner.errors import NotModelled, PlannerError
from app.planner.gguf.model import read_shape
from app.planner.request import PlanRequest
from app.planner.settings import LaunchSettings
from app.planner.units import GiB
from tests.fixtures import gguf_factory, shapes, tables
from tests.fixtures.quant import uniform


def test_qwen2_14b_shape_as_the_engine_prints_it() -> None:
    s = read_shape(gguf_factory.ensure(shapes.QWEN25_14B_1M))
    assert (s.arch, s.n_layer, s.n_embd, s.n_head[0], s.n_head_kv[0]) == ("qwen2", 48, 5120, 40, 8)
    assert (s.head_dim_k, s.head_dim_v, s.n_ctx_train, s.n_vocab) == (128, 128, 1010000, 152064)
    assert s.n_embd_k_gqa(0) == 1024  # print_info: n_embd_k_gqa = 1024
    assert len(s.tensors) == 579 and not s.is_swa_any and not s.is_mla


def test_gemma3_has_40_local_and_8_global_layers() -> None:
    s = read_shape(gguf_factory.ensure(shapes.GEMMA3_12B))
    assert s.n_swa == 1024 and s.is_swa_any
    assert sum(s.swa_layers) == 40
    assert [il for il in range(48) if not s.swa_layers[il]] == [5, 11, 17, 23, 29, 35, 41, 47]
    assert (s.head_dim_k, s.head_dim_v) == (256, 256)


def test_deepseek2_is_mla_with_one_576_wide_head() -> None:
    s = read_shape(gguf_factory.ensure(shapes.DEEPSEEK_V2_LITE))
    assert s.is_mla and s.kv_lora_rank == 512
    assert s.n_embd_k_gqa(0) == 576


def test_moe_and_hybrid_shapes() -> None:
    moe = read_shape(gguf_factory.ensure(shapes.QWEN3_30B_A3B))
    assert (moe.n_expert, moe.n_expert_used) == (128, 8)
    hyb = read_shape(gguf_factory.ensure(shapes.GRANITE4_H_TINY))
    assert [il for il in range(40) if not hyb.recr_layers[il]] == list(shapes.GRANITE_ATTN_LAYERS)
    assert hyb.n_embd_s == 128 * 3072


def test_tensor_layers_and_sizes_add_up_to_the_file() -> None:
    spec = shapes.LLAMA31_8B
    s = read_shape(gguf_factory.ensure(spec))
    assert sum(t.n_bytes for t in s.tensors) == spec.tensor_bytes
    assert {t.layer for t in s.tensors} == {None, *range(32)}


def _write(path: Path, arch: str, *, split: tuple[int, int] | None = None, tensors: int = 2) -> None:
    """A tiny llama llama.cpp's loader accepts (``tensors`` layers), its tensors spread over the parts
    of a split set; metadata-only except for the tensor table (no data is read)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(2048)
    w.add_embedding_length(64)
    w.add_block_count(tensors)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(300)])
    if split is not None:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
    table = tables.llama_like(uniform(gguf.GGMLQuantizationType.F32), n_layer=tensors, n_embd=64, n_head=4,
                              n_head_kv=4, n_ff=128, n_vocab=300)
    part, parts = split if split is not None else (0, 1)
    for i, t in enumerate(table):
        if i % parts == part:
            w.add_tensor(t.name, np.zeros(tuple(reversed(t.shape)), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_split_gguf_reads_as_one_model(tmp_path: Path) -> None:
    for i in range(3):
        _write(tmp_path / f"m-{i + 1:05d}-of-00003.gguf", "llama", split=(i, 3))
    s = read_shape(tmp_path / "m-00001-of-00003.gguf")
    assert len(s.files) == 3
    assert len(s.tensors) == 21 and {t.split for t in s.tensors} == {0, 1, 2}
    assert s.file_size == sum(p.stat().st_size for p in tmp_path.iterdir())


def test_split_gguf_with_a_missing_part(tmp_path: Path) -> None:
    _write(tmp_path / "m-00001-of-00002.gguf", "llama", split=(0, 2))
    with pytest.raises(PlannerError, match=r"missing m-00002-of-00002\.gguf"):
        read_shape(tmp_path / "m-00001-of-00002.gguf")


def test_an_architecture_the_estimate_does_not_know_is_read_for_pass_1s_law(tmp_path: Path) -> None:
    """Its shape is read with the header's generic keys, marked not modelled: the plan request fits its KV
    from pass 1 (app/planner/law.py) and refuses, saying so, when no pass 1 measured it."""
    _write(tmp_path / "rwkv.gguf", "rwkv7")
    shape = read_shape(tmp_path / "rwkv.gguf")
    assert shape.arch == "rwkv7" and not shape.modelled and not shape.law
    request = PlanRequest(shape, Inventory(gpus=(), host=HostMemory(64 * GiB, 60 * GiB)), lookup=lambda _s: None)
    with pytest.raises(NotModelled, match=r"not modelled: rwkv7 .*planned from pass 1"):
        request.plan(LaunchSettings())


def test_shape_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path, "llama")
    assert read_shape(path) is read_shape(path)
    _write(path, "llama", tensors=3)
    assert read_shape(path).n_layer == 3


def test_the_planner_loads_gguf_constants_alone_and_the_gguf_package_still_works_after_it() -> None:
    """``headroom measure`` checks the file without gguf-py's package ``__init__`` (its writer, reader and
    yaml); a later ``import gguf`` (a writer) gets the whole package, sharing the planner's constants."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from app.planner.gguf.model import read_shape\n"
            "print(sorted(m for m in ('gguf', 'gguf.gguf_writer', 'yaml') if m in sys.modules))\n"
            "from app.planner.gguf.checks import GGUFValueType\n"
            "import gguf, gguf.constants\n"
            "print(gguf.constants is sys.modules['gguf.constants'], gguf.GGUFValueType is GGUFValueType,"
            " gguf.GGUFWriter.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True True GGUFWriter"]
