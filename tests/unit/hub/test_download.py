"""Downloading from the fake Hub: complete and sha-checked, resumed after a cut, cancelled, refused."""

from __future__ import annotations

import threading
from collections import namedtuple
from pathlib import Path

import pytest

from app.hub.download import download, downloaded
from app.hub.errors import HubCancelled, HubError
from app.hub.remote import RemoteGguf, list_ggufs
from app.planner.units import Bytes
from tests.fixtures.fake_hub import FakeHub

REPO, FILE = "acme/Tiny-GGUF", "sub/tiny-F32.gguf"


def _tiny(fake_hub: FakeHub, model: Path) -> RemoteGguf:
    fake_hub.add_repo(REPO, {FILE: model})
    return list_ggufs(REPO).ggufs[0]


def test_download_is_complete_and_reports_progress(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    assert downloaded(gguf, tmp_path) is None
    seen: list[tuple[int, int]] = []
    path = download(gguf, dest_root=tmp_path, progress=lambda d, t: seen.append((d, t)))
    assert path == tmp_path / REPO / FILE and path.read_bytes() == tiny_chat_model.read_bytes()
    assert seen[-1] == (gguf.size, gguf.size) and all(d <= t for d, t in seen)
    assert downloaded(gguf, tmp_path) == path
    assert not list(tmp_path.rglob("*.part"))
    before = fake_hub.served(REPO, FILE)
    assert download(gguf, dest_root=tmp_path) == path and fake_hub.served(REPO, FILE) == before  # nothing again


def test_a_cut_download_resumes_where_it_stopped(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    fake_hub.cut_once(REPO, FILE, after=100_000)
    with pytest.raises(HubError) as err:
        download(gguf, dest_root=tmp_path)
    assert "download again to resume" in err.value.hint
    part = tmp_path / REPO / (FILE + ".part")
    assert part.stat().st_size == 100_000
    path = download(gguf, dest_root=tmp_path)
    assert path.read_bytes() == tiny_chat_model.read_bytes()  # and its sha256 matched the listing's
    assert fake_hub.requests[-1][2] == "bytes=100000-"
    assert fake_hub.served(REPO, FILE) == gguf.size  # every byte sent once


def test_cancel_keeps_the_part(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    cancel = threading.Event()
    fake_hub.cut_once(REPO, FILE, after=50_000)
    with pytest.raises(HubError):
        download(gguf, dest_root=tmp_path)
    cancel.set()
    with pytest.raises(HubCancelled) as err:
        download(gguf, dest_root=tmp_path, cancel=cancel)
    assert "resume" in err.value.hint
    assert (tmp_path / REPO / (FILE + ".part")).stat().st_size >= 50_000
    assert downloaded(gguf, tmp_path) is None


def test_wrong_bytes_fail_the_sha256_check(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    fake_hub.corrupt(REPO, FILE)
    with pytest.raises(HubError) as err:
        download(gguf, dest_root=tmp_path)
    assert "sha256 does not match" in err.value.message
    assert not list(tmp_path.rglob("*.gguf*"))  # neither the file nor a .part to resume from


def test_not_enough_disk_space_says_how_much(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("app.hub.download.shutil.disk_usage", lambda _: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(HubError) as err:
        download(gguf, dest_root=tmp_path)
    assert "not enough disk space" in err.value.message and f"needs {Bytes(gguf.size)}" in err.value.message


def test_a_gated_file_is_refused(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    fake_hub.gate(REPO, accept_token="hf_ok")
    with pytest.raises(HubError, match="gated"):
        download(gguf, dest_root=tmp_path)
    assert download(gguf, dest_root=tmp_path, token="hf_ok").is_file()
