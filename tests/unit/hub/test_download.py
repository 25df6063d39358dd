"""Downloading from the fake Hub: complete and sha-checked, resumed after a cut, cancelled, refused."""

from __future__ import annotations

import threading
from collections import namedtuple
from pathlib import Path

import pytest

from app.hub.download import download, downloaded
from app.hub.errors import HubCancelled, HubError
from app.hub.remote import RemoteFile, RemoteGguf, list_ggufs
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


def _same_size_other_bytes(model: Path, folder: Path) -> Path:
    """The model with one byte past its header changed: a new upload of the same file name and size."""
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    other = folder / "other.gguf"
    other.write_bytes(bytes(data))
    return other


def test_cancel_during_the_transfer_keeps_a_part_that_resumes(fake_hub: FakeHub, tiny_chat_model: Path,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    monkeypatch.setattr("app.hub.download.PROGRESS_EVERY", 0.0)
    fake_hub.slow(REPO, FILE, per_chunk_s=0.05)
    cancel = threading.Event()

    def progress(done: int, total: int) -> None:
        if done > 0:  # bytes are arriving: the user presses Cancel now
            cancel.set()

    with pytest.raises(HubCancelled) as err:
        download(gguf, dest_root=tmp_path, cancel=cancel, progress=progress)
    assert "download again to resume" in err.value.hint
    kept = (tmp_path / REPO / (FILE + ".part")).stat().st_size
    assert 0 < kept < gguf.size and downloaded(gguf, tmp_path) is None
    assert download(gguf, dest_root=tmp_path).read_bytes() == tiny_chat_model.read_bytes()
    assert fake_hub.requests[-1][2] == f"bytes={kept}-"


def test_a_part_of_an_older_commit_is_not_resumed(fake_hub: FakeHub, tiny_chat_model: Path, tmp_path: Path) -> None:
    old = _tiny(fake_hub, tiny_chat_model)
    fake_hub.cut_once(REPO, FILE, after=100_000)
    with pytest.raises(HubError):
        download(old, dest_root=tmp_path)
    other = _same_size_other_bytes(tiny_chat_model, tmp_path)
    fake_hub.publish(REPO, {FILE: other})
    new = list_ggufs(REPO).ggufs[0]
    assert new.commit != old.commit and new.size == old.size
    path = download(new, dest_root=tmp_path)  # no sha256 mismatch: the old part was dropped, not resumed
    assert path.read_bytes() == other.read_bytes()
    assert fake_hub.requests[-1][2] is None  # the whole file, from its first byte


def test_without_sha256_a_part_of_an_older_commit_is_not_mixed_in(fake_hub: FakeHub, tiny_chat_model: Path,
                                                                  tmp_path: Path) -> None:
    listed = _tiny(fake_hub, tiny_chat_model)
    old = RemoteGguf(REPO, listed.commit, (RemoteFile(FILE, listed.size, None),))  # a Hub without LFS oids
    fake_hub.cut_once(REPO, FILE, after=300_000)  # past the changed byte
    with pytest.raises(HubError):
        download(old, dest_root=tmp_path)
    other = _same_size_other_bytes(tiny_chat_model, tmp_path)
    new = RemoteGguf(REPO, fake_hub.publish(REPO, {FILE: other}).commit, (RemoteFile(FILE, listed.size, None),))
    assert download(new, dest_root=tmp_path).read_bytes() == other.read_bytes()


def test_a_download_of_one_commit_is_not_another_commits_file(fake_hub: FakeHub, tiny_chat_model: Path,
                                                              tmp_path: Path) -> None:
    old = _tiny(fake_hub, tiny_chat_model)
    path = download(old, dest_root=tmp_path)
    other = _same_size_other_bytes(tiny_chat_model, tmp_path)
    fake_hub.publish(REPO, {FILE: other})
    new = list_ggufs(REPO).ggufs[0]
    assert downloaded(old, tmp_path) == path and downloaded(new, tmp_path) is None  # same size, other file
    assert download(new, dest_root=tmp_path) == path and path.read_bytes() == other.read_bytes()
    assert downloaded(new, tmp_path) == path and downloaded(old, tmp_path) is None


def test_resuming_a_split_set_starts_from_the_bytes_on_disk(fake_hub: FakeHub, tiny_model: Path,
                                                           tmp_path: Path) -> None:
    one, two = "s/m-Q8_0-00001-of-00002.gguf", "s/m-Q8_0-00002-of-00002.gguf"
    fake_hub.add_repo(REPO, {one: tiny_model, two: tiny_model})
    gguf = list_ggufs(REPO).ggufs[0]
    fake_hub.cut_once(REPO, two, after=100_000)
    with pytest.raises(HubError):
        download(gguf, dest_root=tmp_path)
    seen: list[tuple[int, int]] = []
    download(gguf, dest_root=tmp_path, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (gguf.parts[0].size + 100_000, gguf.size)  # what moves after this counts as speed
    assert seen[-1] == (gguf.size, gguf.size)


def test_verifying_a_kept_part_reports_and_can_be_cancelled(fake_hub: FakeHub, tiny_chat_model: Path,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = _tiny(fake_hub, tiny_chat_model)
    fake_hub.cut_once(REPO, FILE, after=400_000)
    with pytest.raises(HubError):
        download(gguf, dest_root=tmp_path)
    monkeypatch.setattr("app.hub.download._CHUNK", 64 * 1024)  # the kept 400 kB hash in several blocks
    monkeypatch.setattr("app.hub.download.PROGRESS_EVERY", 0.0)
    cancel = threading.Event()
    hashed: list[tuple[int, int]] = []

    def verifying(done: int, kept: int) -> None:
        hashed.append((done, kept))
        cancel.set()  # Cancel while the kept bytes are being verified

    served = fake_hub.served(REPO, FILE)
    with pytest.raises(HubCancelled):
        download(gguf, dest_root=tmp_path, cancel=cancel, verifying=verifying)
    assert hashed == [(64 * 1024, 400_000)]  # it stopped at the next block
    assert fake_hub.served(REPO, FILE) == served  # nothing was asked of the Hub
    assert (tmp_path / REPO / (FILE + ".part")).stat().st_size == 400_000
    hashed.clear()
    download(gguf, dest_root=tmp_path, verifying=lambda d, k: hashed.append((d, k)))
    assert hashed[-1] == (400_000, 400_000) and downloaded(gguf, tmp_path) is not None
