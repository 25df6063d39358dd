"""A llamafile on the Hub (the fake Hub on loopback, real HTTP range requests): listed with its size,
planned from its header — the archive's end, then its GGUFs' headers — without its weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.hub.errors import HubError
from app.hub.preview import fetch_header, preview_origin, preview_refusal
from app.hub.remote import list_ggufs
from app.planner.gguf.beside import projector_beside
from app.planner.gguf.model import read_shape
from app.planner.gguf.reader import read_header
from tests.fixtures import gguf_factory, shapes
from tests.fixtures import llamafile_factory as lf
from tests.fixtures.fake_hub import FakeHub

LLAMA = "llama-3.1-8b-instruct-q4_k_m"


def _sparse_llamafile(tmp_path: Path, model: Path) -> Path:
    """A llamafile of a 4.7 GB shape-only model: the raw writer copies the sparse file's zeros."""
    return lf.raw_llamafile(tmp_path / "Meta-Llama-3.1-8B-Instruct.Q4_K_M.llamafile", lf.items(
        ("Meta-Llama-3.1-8B-Instruct.Q4_K_M.gguf", model), ("mmproj-tiny.gguf", gguf_factory.ensure(shapes.TINY_MMPROJ)),
        (".args", lf.args_text("-m", "/zip/Meta-Llama-3.1-8B-Instruct.Q4_K_M.gguf", "..."))))


@pytest.fixture
def small_llamafile(tmp_path: Path) -> Path:
    return lf.raw_llamafile(tmp_path / "Tiny.Q8_0.llamafile", lf.items(
        ("tiny.gguf", gguf_factory.ensure(shapes.TINY_CHAT)), ("mmproj-tiny.gguf", gguf_factory.ensure(shapes.TINY_MMPROJ)),
        (".args", lf.args_text("-m", "/zip/tiny.gguf"))))


def test_a_llamafile_is_listed_and_planned_from_its_header_by_range_requests(
        fake_hub: FakeHub, small_llamafile: Path) -> None:
    fake_hub.add_repo("mozilla-ai/Tiny-llamafile", {"Tiny.Q8_0.llamafile": small_llamafile, "README.md": small_llamafile})
    listing = list_ggufs("mozilla-ai/Tiny-llamafile")
    (found,) = listing.ggufs
    assert found.is_llamafile and found.size == small_llamafile.stat().st_size and found.quant == "Q8_0"
    path = fetch_header(found)
    assert path.name == "tiny.gguf" and path.parent.name == "zip"
    original = gguf_factory.ensure(shapes.TINY_CHAT)
    assert read_header(path).fields == read_header(original).fields
    assert read_shape(path).tensors == read_shape(original).tensors
    assert projector_beside(path) == path.with_name("mmproj-tiny.gguf")  # beside it, as in the archive
    assert preview_origin(path) is not None and "header-only preview" in (preview_refusal(path) or "")
    ranges = [r for m, p, r in fake_hub.requests if p.endswith(".llamafile") and m == "GET"]
    assert ranges and all(r and r.startswith("bytes=") for r in ranges)  # never the whole file


def test_a_big_llamafile_costs_its_headers_not_its_weights(
        fake_hub: FakeHub, shape_model: Callable[[str], Path], tmp_path: Path) -> None:
    big = _sparse_llamafile(tmp_path, shape_model(LLAMA))
    fake_hub.add_repo("Mozilla/Meta-Llama-3.1-8B-Instruct-llamafile", {big.name: big})
    (found,) = list_ggufs("Mozilla/Meta-Llama-3.1-8B-Instruct-llamafile").ggufs
    path = fetch_header(found)
    served = fake_hub.served("Mozilla/Meta-Llama-3.1-8B-Instruct-llamafile", big.name)
    assert served < 16 << 20 < found.size  # the archive's end and two headers, of a 4.7 GB file
    assert read_shape(path).n_layer == read_shape(shape_model(LLAMA)).n_layer


def test_an_engine_only_llamafile_on_the_hub_is_said(fake_hub: FakeHub, tmp_path: Path) -> None:
    engine = lf.raw_llamafile(tmp_path / "llamafile-0.10.6.llamafile", lf.items(("ggml-cuda.so", b"\x7fELF" + bytes(64))))
    fake_hub.add_repo("mozilla-ai/llamafile", {engine.name: engine})
    (found,) = list_ggufs("mozilla-ai/llamafile").ggufs
    with pytest.raises(HubError, match=r"a llamafile with no model inside, only the engine|holds no model"):
        fetch_header(found)
