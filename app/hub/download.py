"""Download a repo's GGUF (every part) to launch it: resumable, sha256-checked, cancellable.

Each part streams to ``<dest>/<repo>/<path>.part`` and is renamed into place once complete and its
sha256 matches the LFS oid. A cancelled or cut download keeps its ``.part``; the next call hashes the
kept bytes and asks for the rest with a Range request.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.hub.errors import HubCancelled, HubError, is_translatable, translate
from app.hub.remote import RemoteFile, RemoteGguf, open_range
from app.paths import data_dir
from app.planner.units import Bytes, MiB

#: Progress is reported at most this often (seconds).
PROGRESS_EVERY = 0.1
#: Kept free on the destination disk beyond the download itself.
DISK_MARGIN = 256 * MiB
_CHUNK = 4 * MiB

Progress = Callable[[int, int], None]


def models_dir(dest_root: Path | None = None) -> Path:
    return dest_root if dest_root is not None else data_dir() / "models"


def local_path(gguf: RemoteGguf, part: RemoteFile | None = None, dest_root: Path | None = None) -> Path:
    return models_dir(dest_root) / gguf.repo / (part or gguf.parts[0]).path


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def downloaded(gguf: RemoteGguf, dest_root: Path | None = None) -> Path | None:
    """The complete local copy of ``gguf`` (every part, each its full size), or None."""
    for part in gguf.parts:
        path = local_path(gguf, part, dest_root)
        if not path.is_file() or path.stat().st_size != part.size:
            return None
    return local_path(gguf, dest_root=dest_root)


class _Meter:
    """progress(done, total) over all parts, at most every PROGRESS_EVERY seconds (and at the end)."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.progress, self.done, self.last = total, progress, 0, 0.0

    def add(self, n: int, *, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if self.progress is not None and (force or now - self.last >= PROGRESS_EVERY):
            self.last = now
            self.progress(self.done, self.total)


def download(gguf: RemoteGguf, *, token: str | None = None, cancel: threading.Event | None = None,
             progress: Progress | None = None, dest_root: Path | None = None) -> Path:
    """Download every part of ``gguf``; returns the first part's path. HubCancelled when ``cancel`` is
    set (the ``.part`` kept); HubError for a full disk, a network failure or a sha256 mismatch."""
    paths = [local_path(gguf, p, dest_root) for p in gguf.parts]
    kept = [p.size if _size_of(path) == p.size else min(_size_of(_partial(path)), p.size)
            for p, path in zip(gguf.parts, paths, strict=True)]
    _check_space(paths[0], gguf.size - sum(kept))
    meter = _Meter(gguf.size, progress)
    for part, path in zip(gguf.parts, paths, strict=True):
        if _size_of(path) == part.size:
            meter.add(part.size)
            continue
        _download_part(gguf, part, path, token, cancel, meter)
    meter.add(0, force=True)
    return paths[0]


def _check_space(path: Path, needed: int) -> None:
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise HubError(f"cannot use {folder}: {exc.strerror or exc}", "check the folder and its permissions") from None
    if needed + DISK_MARGIN > free:
        raise HubError(f"not enough disk space in {folder}: the download needs {Bytes(needed)}, "
                       f"{Bytes(free)} is free", "free some space or choose another folder")


def _download_part(gguf: RemoteGguf, part: RemoteFile, path: Path, token: str | None,
                   cancel: threading.Event | None, meter: _Meter) -> None:
    partial = _partial(path)
    if _size_of(partial) > part.size:
        partial.unlink()
    digest = hashlib.sha256()
    have = _hash_kept(partial, digest) if partial.exists() else 0
    meter.add(have)
    if have == part.size:  # complete but never renamed (stopped before its check)
        _finish(gguf, part, path, partial, have, digest.hexdigest())
        return
    what = f"downloading {part.path}"
    try:
        with open_range(gguf.repo, gguf.commit, part.path, start=have, token=token) as (r, at), \
                partial.open("r+b" if partial.exists() else "wb") as f:
            if at != have:  # the server ignored the Range: start over
                meter.add(-have)
                digest, have = hashlib.sha256(), 0
            f.seek(have)
            f.truncate()
            for chunk in r.iter_bytes():
                if cancel is not None and cancel.is_set():
                    raise HubCancelled(f"the download of {gguf.repo}/{part.path} was cancelled",
                                       f"{Bytes(have)} of {Bytes(part.size)} kept; download again to resume")
                f.write(chunk)
                digest.update(chunk)
                have += len(chunk)
                meter.add(len(chunk))
    except Exception as exc:
        if not is_translatable(exc):
            raise
        err = translate(exc, repo=gguf.repo, revision=gguf.commit, what=what)
        raise HubError(err.message, f"{err.hint}; the {Bytes(have)} downloaded are kept: download again to resume"
                       if have else err.hint) from None
    _finish(gguf, part, path, partial, have, digest.hexdigest())


def _hash_kept(partial: Path, digest: hashlib._Hash) -> int:
    n = 0
    with partial.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
            n += len(block)
    return n


def _finish(gguf: RemoteGguf, part: RemoteFile, path: Path, partial: Path, have: int, sha: str) -> None:
    if have != part.size:
        raise HubError(f"the download of {gguf.repo}/{part.path} stopped at {Bytes(have)} of {Bytes(part.size)}",
                       "download again to resume")
    if part.sha256 is not None and sha != part.sha256.lower():
        partial.unlink(missing_ok=True)
        raise HubError(f"{gguf.repo}/{part.path}: the downloaded file's sha256 does not match the Hub's "
                       "(the file was deleted)", "download it again")
    os.replace(partial, path)
