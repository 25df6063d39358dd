"""Download a repo's GGUF (every part) into the Hugging Face cache: resumable, sha256-checked, bounded
by the listed size, cancellable.

huggingface_hub 2.4's ``hf_hub_download`` deletes its temporary file when a download stops, so it cannot
resume one, and checks sizes only. Each part is fetched with the library's ``http_get`` (its retries,
its Range resume, its tqdm progress) into the cache's name for an interrupted download,
``blobs/<etag>.incomplete``, hashed as it arrives, renamed to ``blobs/<etag>`` when its sha256 matches
the LFS oid, and linked into ``snapshots/<commit>/`` by ``hf_hub_download``, which then transfers
nothing. A cancelled or cut download keeps its ``.incomplete`` for the next call. Nothing past the
listed size is written: a longer stream stops there, a longer announced length before its first byte.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from app.files import publish, size_of
from app.hub.cache import blobs, cached_file, hub_cache
from app.hub.errors import HubCancelled, HubError, endpoint, is_translatable, translate
from app.hub.remote import RemoteFile, RemoteGguf
from app.planner.units import Bytes, MiB

#: Progress is reported at most this often (seconds).
PROGRESS_EVERY = 0.1
#: Kept free on the destination disk beyond the download itself.
DISK_MARGIN = 256 * MiB
#: Kept bytes are re-hashed in blocks of this size (between two looks at Cancel).
_CHUNK = 4 * MiB
_MIRROR = "it should be the Hugging Face Hub or a mirror of it"
#: An etag Headroom will use as a file name (huggingface_hub uses it as the blob's name as it is).
_SAFE_ETAG = re.compile(r"^(?!\.+$)[0-9A-Za-z._-]{1,128}$")

Progress = Callable[[int, int], None]
#: How a download without a sha256 to check is named, wherever it is shown.
UNVERIFIED = "unverified (size checked only: the Hub lists no sha256)"


def downloaded(gguf: RemoteGguf) -> Path | None:
    """The first part's path when the Hugging Face cache holds every part of ``gguf`` (whoever downloaded
    them), else None. No network."""
    found = [cached_file(gguf.repo, gguf.commit, p.path, p.size) for p in gguf.parts]
    return found[0] if all(f is not None for f in found) else None


class _Meter:
    """progress(done, total) over all parts, at most every PROGRESS_EVERY seconds (and at the end)."""

    def __init__(self, total: int, progress: Progress | None, done: int) -> None:
        self.total, self.progress, self.done, self.last = total, progress, done, 0.0

    def add(self, n: int, *, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.progress is not None and (force or now - self.last >= PROGRESS_EVERY):
            self.last = now
            self.progress(self.done, self.total)


def download(gguf: RemoteGguf, *, token: str | None = None, cancel: threading.Event | None = None,
             progress: Progress | None = None, verifying: Progress | None = None) -> Path:
    """Download every part of ``gguf`` into the Hugging Face cache; returns the first part's path.
    HubCancelled when ``cancel`` is set (the ``.incomplete`` kept); HubError for a full disk, a network
    failure, a sha256 mismatch or more bytes than listed.

    The first ``progress`` event is the bytes already on disk (complete parts and kept ``.incomplete``
    files), so a speed counts only what moves after it. ``verifying(hashed, kept)`` reports re-hashing a
    kept ``.incomplete`` before its transfer resumes (cancellable too)."""
    todo: list[tuple[RemoteFile, Path]] = []
    done = 0
    for part in gguf.parts:
        if cached_file(gguf.repo, gguf.commit, part.path, part.size) is not None:
            done += part.size
            continue
        blob = _blob(gguf, part, token)
        done += part.size if size_of(blob) == part.size else _kept(part, _partial(blob))
        todo.append((part, blob))
    _check_space(blobs(gguf.repo), gguf.size - done)
    meter = _Meter(gguf.size, progress, done)
    meter.add(0, force=True)
    paths = {}
    for part, blob in todo:
        if size_of(blob) != part.size:
            _fetch(gguf, part, blob, token, cancel, meter, verifying)
        paths[part.path] = _link(gguf, part, token)
    meter.add(0, force=True)
    first = paths.get(gguf.path) or downloaded(gguf)
    if first is None:
        raise HubError(f"{gguf.repo}/{gguf.path} is not in the Hugging Face cache {hub_cache()} after its download",
                       "check the folder and its permissions, then download again")
    return first


def _partial(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def _blob(gguf: RemoteGguf, part: RemoteFile, token: str | None) -> Path:
    """Where the cache keeps ``part`` (its etag, from the library's HEAD). A size other than the listed
    one is refused here, before any byte is asked for."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(gguf.repo, part.path, revision=gguf.commit, endpoint=endpoint())
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint())
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=gguf.repo, revision=gguf.commit, what=f"downloading {part.path}") from None
    if meta.size is not None and meta.size != part.size:
        raise HubError(f"{gguf.repo}/{part.path}: the Hub gives its size as {Bytes(meta.size)}, the listing "
                       f"{Bytes(part.size)}: nothing was downloaded", "list the repo again")
    if meta.etag is None or not _SAFE_ETAG.match(meta.etag):
        raise HubError(f"{endpoint()} answered an etag Headroom will not use as a file name: {meta.etag!r}",
                       f"check HF_ENDPOINT: {_MIRROR}")
    return blobs(gguf.repo) / meta.etag


def _kept(part: RemoteFile, partial: Path) -> int:
    """The bytes of an interrupted download of ``part`` (its etag names this very file); one longer than
    the file is deleted."""
    have = size_of(partial)
    if have is not None and have <= part.size:
        return have
    partial.unlink(missing_ok=True)
    return 0


def _check_space(folder: Path, needed: int) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise HubError(f"cannot use {folder}: {exc.strerror or exc}", "check the folder and its permissions") from None
    if needed + DISK_MARGIN > free:
        raise HubError(f"not enough disk space in {folder}: the download needs {Bytes(needed)}, "
                       f"{Bytes(free)} is free", "free some space, or set HF_HUB_CACHE to a folder on another disk")


class _Sink:
    """What ``http_get`` writes into: the ``.incomplete`` file, hashed as it grows (``digest``: None
    without a sha256 to check), never past the listed size: the write that would pass it raises."""

    def __init__(self, f: IO[bytes], digest: Any, gguf: RemoteGguf, part: RemoteFile) -> None:
        self.f, self.digest, self.what, self.size = f, digest, f"{gguf.repo}/{part.path}", part.size

    def write(self, data: bytes) -> int:
        if self.f.tell() + len(data) > self.size:
            raise HubError(f"the Hub sent more than the listed {Bytes(self.size)} for {self.what}: writing "
                           f"stopped at {Bytes(self.f.tell())}", f"check HF_ENDPOINT; {_MIRROR}")
        if self.digest is not None:
            self.digest.update(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        """http_get truncates to where its download started (0: the server ignored the Range)."""
        self.digest = None if self.digest is None else hashlib.sha256()
        return self.f.truncate(size)


def _bar(gguf: RemoteGguf, part: RemoteFile, cancel: threading.Event | None, meter: _Meter,
         counted: int) -> type:
    """The tqdm class ``http_get`` reports to: progress into ``meter`` (which counted ``counted`` kept
    bytes of this part), Cancel, and a refusal of an announced length past the listed size."""

    class Bar:
        def __init__(self, *_: Any, total: int | None = None, initial: int = 0, **__: Any) -> None:
            if total is not None and total > part.size:
                raise HubError(f"the Hub announced {Bytes(total)} for {gguf.repo}/{part.path}, listed at "
                               f"{Bytes(part.size)}: refused before its first byte", f"check HF_ENDPOINT; {_MIRROR}")
            meter.add(initial - counted)  # 0, or a server that ignored the Range starts the part again

        def update(self, n: int = 1) -> None:  # called before each chunk is written
            if cancel is not None and cancel.is_set():
                raise HubCancelled(f"the download of {gguf.repo}/{part.path} was cancelled")
            meter.add(n)

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *_: object) -> None:
            return None

    return Bar


def _fetch(gguf: RemoteGguf, part: RemoteFile, blob: Path, token: str | None, cancel: threading.Event | None,
           meter: _Meter, verifying: Progress | None) -> None:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # public: lazily exported

    partial = _partial(blob)
    digest = hashlib.sha256() if part.sha256 is not None else None
    kept = _hash_kept(gguf, part, partial, digest, cancel, verifying)
    url = hf_hub_url(gguf.repo, part.path, revision=gguf.commit, endpoint=endpoint())
    try:
        with partial.open("ab") as f:
            sink = _Sink(f, digest, gguf, part)
            http_get(url, cast(BinaryIO, sink), resume_size=kept, headers=build_hf_headers(token=token),
                     expected_size=part.size, displayed_filename=part.path,
                     tqdm_class=_bar(gguf, part, cancel, meter, kept))
    except Exception as exc:
        if not isinstance(exc, HubError | ValueError) and not is_translatable(exc):
            raise
        raise _stopped(exc, gguf, part, partial) from None
    _finish(gguf, part, blob, partial, sink.digest)


def _stopped(exc: Exception, gguf: RemoteGguf, part: RemoteFile, partial: Path) -> HubError:
    """The HubError for a transfer that stopped, saying what of it is kept."""
    have = size_of(partial) or 0
    if not have:  # (refused before its first byte: no empty file left behind)
        partial.unlink(missing_ok=True)
    kept = f"{Bytes(have)} of {Bytes(part.size)} kept; download again to resume"
    if isinstance(exc, HubCancelled):
        return HubCancelled(exc.message, kept)
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, ValueError):  # a file the library's plain HTTP download refuses (over 50 GB)
        return HubError(f"{gguf.repo}/{part.path}: {exc}")
    if type(exc) is OSError and exc.errno is None:  # http_get's size check: the stream ended early
        return HubError(f"the download of {gguf.repo}/{part.path} stopped at {Bytes(have)} of {Bytes(part.size)}",
                        kept)
    err = translate(exc, repo=gguf.repo, revision=gguf.commit, what=f"downloading {part.path}")
    return HubError(err.message, f"{err.hint}; {kept}" if err.hint else kept, reason=err.reason)


def _hash_kept(gguf: RemoteGguf, part: RemoteFile, partial: Path, digest: Any,
               cancel: threading.Event | None, verifying: Progress | None) -> int:
    """The kept bytes of ``partial``, hashed into ``digest`` (unless None: nothing to check them against),
    reporting ``verifying(hashed, kept)`` and stopping at once on ``cancel``."""
    kept = _kept(part, partial)
    if digest is None or not kept:
        return kept
    n, last = 0, 0.0
    with partial.open("rb") as f:
        while block := f.read(min(_CHUNK, kept - n)):
            if cancel is not None and cancel.is_set():
                raise HubCancelled(f"the download of {gguf.repo}/{part.path} was cancelled",
                                   f"{Bytes(kept)} of {Bytes(part.size)} kept; download again to resume")
            digest.update(block)
            n += len(block)
            if verifying is not None and (n == kept or time.monotonic() - last >= PROGRESS_EVERY):
                last = time.monotonic()
                verifying(n, kept)
    return n


def _finish(gguf: RemoteGguf, part: RemoteFile, blob: Path, partial: Path, digest: Any) -> None:
    have = size_of(partial) or 0
    if have != part.size:
        raise HubError(f"the download of {gguf.repo}/{part.path} stopped at {Bytes(have)} of {Bytes(part.size)}",
                       "download again to resume")
    if part.sha256 is not None and digest.hexdigest() != part.sha256.lower():
        partial.unlink(missing_ok=True)
        raise HubError(f"{gguf.repo}/{part.path}: the downloaded file's sha256 does not match the Hub's "
                       "(the file was deleted)", "download it again")
    try:
        publish(partial, blob)
    except OSError as exc:
        raise translate(exc, repo=gguf.repo, what=f"keeping {blob}") from None


class _NoTransfer:
    """The tqdm class of the call that links a complete blob: a transfer there means the Hub moved on."""

    def __init__(self, *_: Any, **__: Any) -> None:
        raise HubError("the repo changed on the Hub during the download", "list it again, then download")


def _link(gguf: RemoteGguf, part: RemoteFile, token: str | None) -> Path:
    """``hf_hub_download`` puts the complete blob in ``snapshots/<commit>/`` (and ``refs/<revision>``)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(gguf.repo, part.path, revision=gguf.revision, cache_dir=hub_cache(),
                                    endpoint=endpoint(), token=token, tqdm_class=_NoTransfer))
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=gguf.repo, revision=gguf.revision, what=f"keeping {part.path}") from None
