"""Downloading from the fake Hub into the Hugging Face cache: complete and sha-checked, resumed after a
cut or a cancel, refused, found where other tools put it, and never more bytes on disk than listed."""

from __future__ import annotations

import random
import threading
from collections import namedtuple
from pathlib import Path, PurePosixPath

import pytest
from huggingface_hub import hf_hub_download, try_to_load_from_cache

from app.hub.download import download, downloaded
from app.hub.errors import HubCancelled, HubError
from app.hub.remote import RemoteGguf, list_ggufs
from app.planner.units import Bytes, MiB
from tests.fixtures.fake_hub import FakeHub

REPO, FILE = "acme/Tiny-GGUF", "sub/tiny-F32.gguf"
#: Big enough for several of huggingface_hub's 10 MiB download chunks: a cancel or a cut keeps a part.
BIG = 24 * MiB


def _bytes(folder: Path, name: str, size: int, seed: int = 1) -> Path:
    path = folder / name
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def _listed(fake_hub: FakeHub, file: Path) -> RemoteGguf:
    fake_hub.add_repo(REPO, {FILE: file})
    return list_ggufs(REPO).ggufs[0]


def _gets(fake_hub: FakeHub, path: str = FILE) -> list[str | None]:
    """The Range header of every GET of ``path`` so far (None: from its first byte)."""
    return [r for m, p, r in fake_hub.requests if m == "GET" and p.endswith(f"/{path}")]


def _incomplete(hf_cache: Path) -> list[Path]:
    return list(hf_cache.rglob("*.incomplete"))


def _cancel_once_bytes_arrive(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, object]:
    monkeypatch.setattr("app.hub.download.PROGRESS_EVERY", 0.0)
    cancel = threading.Event()

    def progress(done: int, total: int) -> None:
        if done > 0:  # bytes are arriving: the user presses Cancel now
            cancel.set()

    return cancel, progress


def test_download_is_complete_and_where_other_tools_find_it(fake_hub: FakeHub, tiny_chat_model: Path,
                                                            hf_cache: Path) -> None:
    gguf = _listed(fake_hub, tiny_chat_model)
    assert downloaded(gguf) is None and gguf.verified
    seen: list[tuple[int, int]] = []
    path = download(gguf, progress=lambda d, t: seen.append((d, t)))
    assert path.read_bytes() == tiny_chat_model.read_bytes()
    assert str(path) == try_to_load_from_cache(REPO, FILE, cache_dir=hf_cache)  # hf, llama.cpp -hf ... find it
    assert path.is_relative_to(hf_cache / "models--acme--Tiny-GGUF" / "snapshots" / gguf.commit)
    assert seen[-1] == (gguf.size, gguf.size) and all(d <= t for d, t in seen)
    assert downloaded(gguf) == path and not _incomplete(hf_cache)
    gets = len(_gets(fake_hub))
    assert download(gguf) == path and len(_gets(fake_hub)) == gets  # nothing fetched again


def test_a_file_another_tool_put_in_the_cache_is_not_fetched_again(fake_hub: FakeHub, tiny_chat_model: Path,
                                                                   hf_cache: Path) -> None:
    gguf = _listed(fake_hub, tiny_chat_model)
    theirs = hf_hub_download(REPO, FILE, cache_dir=hf_cache, endpoint=fake_hub.url)  # `hf download`, say
    gets = len(_gets(fake_hub))
    assert downloaded(gguf) == Path(theirs)
    assert download(gguf) == Path(theirs) and len(_gets(fake_hub)) == gets


def test_a_cut_transfer_is_resumed_within_the_same_download(fake_hub: FakeHub, tmp_path: Path) -> None:
    big = _bytes(tmp_path, "big.gguf", BIG)
    gguf = _listed(fake_hub, big)
    fake_hub.cut_once(REPO, FILE, after=BIG // 2)
    assert download(gguf).read_bytes() == big.read_bytes()  # and its sha256 matched the listing's
    first, again = _gets(fake_hub)
    assert first is None and again is not None and again.startswith("bytes=")
    assert 0 < int(again.removeprefix("bytes=").rstrip("-")) <= BIG // 2  # from what it had kept, not from 0


def test_wrong_bytes_fail_the_sha256_check(fake_hub: FakeHub, tiny_chat_model: Path, hf_cache: Path) -> None:
    gguf = _listed(fake_hub, tiny_chat_model)
    fake_hub.corrupt(REPO, FILE)
    with pytest.raises(HubError) as err:
        download(gguf)
    assert "sha256 does not match" in err.value.message
    assert downloaded(gguf) is None and not [p for p in hf_cache.rglob("*") if p.is_file() and "blobs" in p.parts]


def test_not_enough_disk_space_says_how_much(fake_hub: FakeHub, tiny_chat_model: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = _listed(fake_hub, tiny_chat_model)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("app.hub.download.shutil.disk_usage", lambda _: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(HubError) as err:
        download(gguf)
    assert "not enough disk space" in err.value.message and f"needs {Bytes(gguf.size)}" in err.value.message
    assert "HF_HUB_CACHE" in err.value.hint


def test_a_gated_file_is_refused(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    gguf = _listed(fake_hub, tiny_chat_model)
    fake_hub.gate(REPO, accept_token="hf_ok")
    with pytest.raises(HubError, match="gated"):
        download(gguf)
    assert download(gguf, token="hf_ok").is_file()


def _same_size_other_bytes(model: Path, folder: Path) -> Path:
    """The model with one byte changed: a new upload of the same file name and size."""
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    other = folder / "other.gguf"
    other.write_bytes(bytes(data))
    return other


def test_cancel_during_the_transfer_keeps_a_part_that_resumes(fake_hub: FakeHub, tmp_path: Path, hf_cache: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    big = _bytes(tmp_path, "big.gguf", BIG)
    gguf = _listed(fake_hub, big)
    cancel, progress = _cancel_once_bytes_arrive(monkeypatch)
    with pytest.raises(HubCancelled) as err:
        download(gguf, cancel=cancel, progress=progress)  # type: ignore[arg-type]
    assert "download again to resume" in err.value.hint
    [part] = _incomplete(hf_cache)
    kept = part.stat().st_size
    assert 0 < kept < gguf.size and downloaded(gguf) is None
    assert part.name == f"{gguf.parts[0].sha256}.incomplete"  # the cache's own name: `hf cache` lists it
    assert download(gguf).read_bytes() == big.read_bytes()
    assert _gets(fake_hub)[-1] == f"bytes={kept}-"
    assert not _incomplete(hf_cache)


def test_a_part_of_an_older_commit_is_not_resumed(fake_hub: FakeHub, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    big = _bytes(tmp_path, "big.gguf", BIG)
    old = _listed(fake_hub, big)
    cancel, progress = _cancel_once_bytes_arrive(monkeypatch)
    with pytest.raises(HubCancelled):
        download(old, cancel=cancel, progress=progress)  # type: ignore[arg-type]
    other = _same_size_other_bytes(big, tmp_path)
    fake_hub.publish(REPO, {FILE: other})
    new = list_ggufs(REPO).ggufs[0]
    assert new.commit != old.commit and new.size == old.size
    assert download(new).read_bytes() == other.read_bytes()  # no sha256 mismatch: the old part was not resumed
    assert _gets(fake_hub)[-1] is None  # the whole file, from its first byte


def test_without_sha256_a_download_is_size_checked_and_not_mixed_with_an_older_part(
        fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = _bytes(tmp_path, "big.gguf", BIG)
    fake_hub.add_repo(REPO, {FILE: big})
    fake_hub.outside_lfs(REPO, FILE)  # listed without an LFS sha256
    old = list_ggufs(REPO).ggufs[0]
    assert old.parts[0].sha256 is None and not old.verified
    cancel, progress = _cancel_once_bytes_arrive(monkeypatch)
    with pytest.raises(HubCancelled):
        download(old, cancel=cancel, progress=progress)  # type: ignore[arg-type]
    other = _same_size_other_bytes(big, tmp_path)
    fake_hub.publish(REPO, {FILE: other})
    new = list_ggufs(REPO).ggufs[0]
    assert not new.verified and download(new).read_bytes() == other.read_bytes()


def test_a_download_of_one_commit_is_not_another_commits_file(fake_hub: FakeHub, tiny_chat_model: Path,
                                                              tmp_path: Path) -> None:
    old = _listed(fake_hub, tiny_chat_model)
    path = download(old)
    other = _same_size_other_bytes(tiny_chat_model, tmp_path)
    fake_hub.publish(REPO, {FILE: other})
    new = list_ggufs(REPO).ggufs[0]
    assert downloaded(old) == path and downloaded(new) is None  # same size, other file
    again = download(new)
    assert again != path and again.read_bytes() == other.read_bytes()
    assert path.read_bytes() == tiny_chat_model.read_bytes()  # the cache keeps both commits
    assert downloaded(new) == again and downloaded(old) == path


def test_resuming_a_split_set_starts_from_the_bytes_on_disk(fake_hub: FakeHub, tmp_path: Path, hf_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = "s/m-Q8_0-00001-of-00002.gguf", "s/m-Q8_0-00002-of-00002.gguf"
    fake_hub.add_repo(REPO, {one: _bytes(tmp_path, "1.gguf", 4 * MiB, 1), two: _bytes(tmp_path, "2.gguf", BIG, 2)})
    gguf = list_ggufs(REPO).ggufs[0]
    monkeypatch.setattr("app.hub.download.PROGRESS_EVERY", 0.0)
    cancel = threading.Event()

    def progress(done: int, total: int) -> None:
        if done > gguf.parts[0].size:  # bytes of the second part are arriving
            cancel.set()

    with pytest.raises(HubCancelled):
        download(gguf, cancel=cancel, progress=progress)
    kept = [p.stat().st_size for p in _incomplete(hf_cache)]
    seen: list[tuple[int, int]] = []
    first = download(gguf, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (gguf.parts[0].size + kept[0], gguf.size)  # what moves after this counts as speed
    assert seen[-1] == (gguf.size, gguf.size)
    assert first.name == PurePosixPath(one).name  # llama.cpp finds the second part beside it
    assert first.with_name(PurePosixPath(two).name).read_bytes() == (tmp_path / "2.gguf").read_bytes()


def test_verifying_a_kept_part_reports_and_can_be_cancelled(fake_hub: FakeHub, tmp_path: Path, hf_cache: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    big = _bytes(tmp_path, "big.gguf", BIG)
    gguf = _listed(fake_hub, big)
    cancel, progress = _cancel_once_bytes_arrive(monkeypatch)
    with pytest.raises(HubCancelled):
        download(gguf, cancel=cancel, progress=progress)  # type: ignore[arg-type]
    [part] = _incomplete(hf_cache)
    kept = part.stat().st_size
    monkeypatch.setattr("app.hub.download._CHUNK", MiB)  # the kept bytes hash in several blocks
    cancel = threading.Event()
    hashed: list[tuple[int, int]] = []

    def verifying(done: int, kept: int) -> None:
        hashed.append((done, kept))
        cancel.set()  # Cancel while the kept bytes are being verified

    gets = len(_gets(fake_hub))
    with pytest.raises(HubCancelled):
        download(gguf, cancel=cancel, verifying=verifying)
    assert hashed == [(MiB, kept)]  # it stopped at the next block
    assert len(_gets(fake_hub)) == gets and part.stat().st_size == kept  # nothing was asked of the Hub
    hashed.clear()
    download(gguf, verifying=lambda d, k: hashed.append((d, k)))
    assert hashed[-1] == (kept, kept) and downloaded(gguf) is not None


# ---- bounded by what was listed -------------------------------------------------------------------

def test_a_stream_longer_than_listed_is_cut_at_the_listed_size(fake_hub: FakeHub, tmp_path: Path,
                                                               hf_cache: Path) -> None:
    """64 MiB for a listed 8 MiB, scaled: 8 x the listed 24 MiB, the body unannounced (it ends when the
    connection closes). Nothing past the listed size reaches the disk."""
    gguf = _listed(fake_hub, _bytes(tmp_path, "big.gguf", BIG))
    fake_hub.flood(REPO, FILE, total=8 * BIG)
    with pytest.raises(HubError) as err:
        download(gguf)
    assert f"sent more than the listed {Bytes(BIG)}" in err.value.message
    kept = [p.stat().st_size for p in _incomplete(hf_cache)]
    assert kept and all(0 < k <= BIG for k in kept), kept  # it wrote up to the listed size, and stopped there
    assert downloaded(gguf) is None and not list(hf_cache.rglob("snapshots/*/*"))


def test_an_announced_length_past_the_listed_size_is_refused_before_its_first_byte(
        fake_hub: FakeHub, tmp_path: Path, hf_cache: Path) -> None:
    gguf = _listed(fake_hub, _bytes(tmp_path, "big.gguf", BIG))
    fake_hub.flood(REPO, FILE, total=8 * BIG, length=10**15)
    with pytest.raises(HubError) as err:
        download(gguf)
    assert f"announced {Bytes(10**15)}" in err.value.message and "before its first byte" in err.value.message
    assert not _incomplete(hf_cache) and downloaded(gguf) is None  # not one byte written
