"""Header-only copies from the fake Hub: a growing prefix of one HfFileSystem stream, a sparse file, a
sidecar, a cache."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.hub.errors import HubCancelled, HubError
from app.hub.preview import (
    FIRST_PREFIX,
    fetch_header,
    fetched_bytes,
    hub_dir,
    preview_origin,
    preview_path,
    preview_refusal,
    refuse_preview,
)
from app.hub.remote import list_ggufs
from app.planner.gguf.model import read_shape
from app.planner.gguf.reader import parse_prefix, read_header
from app.planner.units import MiB
from tests.fixtures.fake_hub import FakeHub

LLAMA = "llama-3.1-8b-instruct-q4_k_m"


def test_header_of_a_128k_vocab_model_grows_the_prefix_and_reads_like_the_file(
        fake_hub: FakeHub, shape_model: Callable[[str], Path]) -> None:
    original = shape_model(LLAMA)
    fake_hub.add_repo("acme/Llama-GGUF", {"Llama-3.1-8B-Instruct-Q4_K_M.gguf": original})
    gguf = list_ggufs("acme/Llama-GGUF").ggufs[0]
    seen: list[tuple[int, int]] = []
    path = fetch_header(gguf, progress=lambda done, total: seen.append((done, total)))

    assert path.stat().st_size == original.stat().st_size  # truncated up to the real size
    assert path.stat().st_blocks * 512 < 16 * MiB  # ... and sparse: only the prefix is on disk
    got, want = read_shape(path), read_shape(original)
    assert (got.arch, got.n_layer, got.n_head_kv, got.n_ctx_train, got.file_size) == \
        (want.arch, want.n_layer, want.n_head_kv, want.n_ctx_train, want.file_size)
    assert read_header(path).fields == read_header(original).fields
    assert read_header(path).tensors == read_header(original).tensors
    # the 128k-token vocabulary does not fit the first 2 MiB: the prefix doubled, read on from one stream
    assert fetched_bytes(path) == 2 * FIRST_PREFIX
    assert seen == [(FIRST_PREFIX, FIRST_PREFIX), (2 * FIRST_PREFIX, 2 * FIRST_PREFIX)]
    assert [m for m, p, _ in fake_hub.requests if p.endswith(".gguf")] == ["GET"]

    assert preview_origin(path) == gguf and preview_origin(original) is None
    assert fetch_header(gguf) == path  # cached: no new request
    assert len([r for _, p, r in fake_hub.requests if p.endswith(".gguf")]) == 1


def test_a_preview_is_refused_for_launch_with_the_download_hint(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model})
    path = fetch_header(list_ggufs("acme/Tiny-GGUF").ggufs[0])
    with pytest.raises(HubError) as err:
        refuse_preview(path)
    assert "header-only preview" in err.value.message
    assert "headroom serve hf:acme/Tiny-GGUF/tiny-F32.gguf" in err.value.hint
    refuse_preview(tiny_chat_model)  # a real file launches


def test_a_file_that_is_not_gguf_is_named(fake_hub: FakeHub, tmp_path: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not a model</html>" * 1000)
    fake_hub.add_repo("acme/Bad-GGUF", {"bad-Q4_0.gguf": junk})
    with pytest.raises(HubError) as err:
        fetch_header(list_ggufs("acme/Bad-GGUF").ggufs[0])
    assert "acme/Bad-GGUF/bad-Q4_0.gguf is not a usable GGUF file" in err.value.message


def test_a_file_cut_inside_its_header_is_named(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_chat_model.read_bytes()[:3000])
    fake_hub.add_repo("acme/Cut-GGUF", {"cut-F32.gguf": cut})
    with pytest.raises(HubError) as err:
        fetch_header(list_ggufs("acme/Cut-GGUF").ggufs[0])
    assert "acme/Cut-GGUF/cut-F32.gguf is not a usable GGUF file" in err.value.message
    assert "runs past the end of the file" in err.value.message


def test_a_fetch_cancelled_mid_header_leaves_nothing(fake_hub: FakeHub, shape_model: Callable[[str], Path]) -> None:
    fake_hub.add_repo("acme/Llama-GGUF", {"m-Q4_K_M.gguf": shape_model(LLAMA)})
    gguf = list_ggufs("acme/Llama-GGUF").ggufs[0]
    cancel = threading.Event()
    seen: list[tuple[int, int]] = []

    def cancel_after_the_first_range(done: int, total: int) -> None:
        seen.append((done, total))
        cancel.set()

    with pytest.raises(HubCancelled):  # the first 2 MiB arrive, then Cancel, before the next 2 MiB
        fetch_header(gguf, cancel=cancel, progress=cancel_after_the_first_range)
    assert seen == [(FIRST_PREFIX, FIRST_PREFIX)]  # the second 2 MiB were never read
    folder = hub_dir() / gguf.repo / gguf.commit
    assert not folder.exists() or not list(folder.rglob("*"))  # no zero-filled copy, no sidecar, no temp file
    assert preview_origin(fetch_header(gguf)) == gguf


def test_a_gated_header_is_refused_without_the_token(fake_hub: FakeHub, shape_model: Callable[[str], Path]) -> None:
    fake_hub.add_repo("acme/Other-GGUF", {"m-Q4_K_M.gguf": shape_model(LLAMA)})
    other = list_ggufs("acme/Other-GGUF").ggufs[0]
    fake_hub.gate("acme/Other-GGUF", accept_token="hf_ok")
    with pytest.raises(HubError, match="gated") as err:
        fetch_header(other)
    assert err.value.reason == "gated"
    assert preview_origin(fetch_header(other, token="hf_ok")) == other


def test_a_failed_write_leaves_no_copy_without_its_sidecar(fake_hub: FakeHub, tiny_model: Path) -> None:
    one, two = "m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"
    fake_hub.add_repo("acme/Split-GGUF", {one: tiny_model, two: tiny_model})
    gguf = list_ggufs("acme/Split-GGUF").ggufs[0]
    blocker = preview_path(gguf, gguf.parts[1])
    blocker.mkdir(parents=True)  # the second part cannot be written: a folder sits where it goes
    with pytest.raises(HubError, match="cannot write"):
        fetch_header(gguf)
    first = preview_path(gguf)
    assert not first.exists()  # never a zero-filled copy that refuse_preview would take for a real file
    assert not list(first.parent.glob("*.hub.json"))
    blocker.rmdir()
    assert preview_origin(fetch_header(gguf)) == gguf


def test_a_filesystem_without_sparse_files_is_named(fake_hub: FakeHub, tiny_chat_model: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model})
    gguf = list_ggufs("acme/Tiny-GGUF").ggufs[0]
    monkeypatch.setattr("app.hub.preview.SPARSE_SLACK", -1)  # as on FAT: every byte of the hole allocated
    with pytest.raises(HubError) as err:
        fetch_header(gguf)
    assert "cannot hold sparse files" in err.value.message and "HEADROOM_CACHE_DIR" in err.value.hint
    assert not preview_path(gguf).exists() and preview_origin(preview_path(gguf)) is None


def test_parse_prefix_says_when_it_needs_more(tiny_chat_model: Path) -> None:
    data = tiny_chat_model.read_bytes()
    size = len(data)
    assert parse_prefix(data[:100], "t.gguf", size) is None
    header = parse_prefix(data[:200_000], "t.gguf", size)
    assert header is not None and header.tensors == read_header(tiny_chat_model).tensors


def test_a_header_past_the_cap_is_refused(fake_hub: FakeHub, shape_model: Callable[[str], Path],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.hub.preview.MAX_PREFIX", FIRST_PREFIX)  # the 128k vocab needs 4 MiB
    fake_hub.add_repo("acme/Llama-GGUF", {"m-Q4_K_M.gguf": shape_model(LLAMA)})
    with pytest.raises(HubError, match="header is larger than 2 MiB"):
        fetch_header(list_ggufs("acme/Llama-GGUF").ggufs[0])


def test_the_launch_path_refuses_a_preview(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    from app.engine.launch import LaunchRefused, prepare
    from app.machine.devices import resolve_gpus
    from app.planner.settings import LaunchSettings
    from app.planner.solve.plan import make_plan

    fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model})
    path = fetch_header(list_ggufs("acme/Tiny-GGUF").ggufs[0])
    plan = make_plan(read_shape(path), resolve_gpus(["H200"]), LaunchSettings())
    assert plan.feasible  # it plans; it does not launch
    with pytest.raises(LaunchRefused, match="header-only preview"):
        prepare(plan, path, [], unlaunchable=preview_refusal)


def test_a_hub_that_never_answers_times_out_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from app.hub.remote import RemoteFile, RemoteGguf

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_ETAG_TIMEOUT", 0.5)  # the library's own timeout
        gguf = RemoteGguf("acme/Slow-GGUF", "c0ffee" * 6 + "c0ff", (RemoteFile("m-Q4_0.gguf", 10**9, None),))
        with pytest.raises(HubError) as err:
            fetch_header(gguf)
    assert err.value.message.startswith("timed out talking to http://127.0.0.1:")
    assert "HF_ENDPOINT" in err.value.hint
