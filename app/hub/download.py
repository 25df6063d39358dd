"""Download a repo's GGUF (every part) to launch it: resumable, sha256-checked, cancellable.

Each part streams to ``<dest>/<repo>/<path>.part`` and is renamed into place once complete and its
sha256 matches the LFS oid. A cancelled or cut download keeps its ``.part`` (and ``.part.json``: which
commit and sha256 it is part of); the next call hashes the kept bytes and asks for the rest with a Range
request, unless the repo moved on and the ``.part`` belongs to another file (then it starts over). A
finished file gets ``<file>.download.json``; :func:`downloaded` trusts a file only with a matching one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.hub.errors import HubCancelled, HubError, is_translatable, translate
from app.hub.files import read_json, size_of, write_json
from app.hub.remote import RemoteFile, RemoteGguf, open_range
from app.paths import data_dir
from app.planner.units import Bytes, MiB

#: Progress is reported at most this often (seconds).
PROGRESS_EVERY = 0.1
#: Kept free on the destination disk beyond the download itself.
DISK_MARGIN = 256 * MiB
_CHUNK = 4 * MiB
#: Next to a finished download: which repo file (commit, sha256) it is.
RECORD = ".download.json"

Progress = Callable[[int, int], None]


def models_dir(dest_root: Path | None = None) -> Path:
    return dest_root if dest_root is not None else data_dir() / "models"


def local_path(gguf: RemoteGguf, part: RemoteFile | None = None, dest_root: Path | None = None) -> Path:
    return models_dir(dest_root) / gguf.repo / (part or gguf.parts[0]).path


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def _part_record(path: Path) -> Path:
    """Which file a ``.part`` belongs to: {commit, sha256, size}, written before its first byte."""
    return path.with_name(path.name + ".part.json")


def _record(path: Path) -> Path:
    """Which repo file a finished download is: {repo, commit, path, sha256, size}. (Not ``.hub.json``:
    that suffix marks header-only previews.)"""
    return path.with_name(path.name + RECORD)


def _same_file(record: dict[str, Any] | None, gguf: RemoteGguf, part: RemoteFile) -> bool:
    """Does ``record`` describe ``part`` of ``gguf``: the same sha256 when both have one, else the same
    commit, and the same size either way."""
    if not record or record.get("size") != part.size:
        return False
    sha = record.get("sha256")
    if part.sha256 and isinstance(sha, str) and sha:
        return sha.lower() == part.sha256.lower()
    return record.get("commit") == gguf.commit


def _complete(gguf: RemoteGguf, part: RemoteFile, path: Path) -> bool:
    return size_of(path) == part.size and _same_file(read_json(_record(path)), gguf, part)


def downloaded(gguf: RemoteGguf, dest_root: Path | None = None) -> Path | None:
    """The complete local copy of ``gguf`` (every part its full size, recorded as this very file), or None."""
    if all(_complete(gguf, part, local_path(gguf, part, dest_root)) for part in gguf.parts):
        return local_path(gguf, dest_root=dest_root)
    return None


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
             progress: Progress | None = None, dest_root: Path | None = None,
             verifying: Progress | None = None) -> Path:
    """Download every part of ``gguf``; returns the first part's path. HubCancelled when ``cancel`` is
    set (the ``.part`` kept); HubError for a full disk, a network failure or a sha256 mismatch.

    The first ``progress`` event is the bytes already on disk (complete parts and kept ``.part`` files),
    so a speed counts only what moves after it. ``verifying(hashed, kept)`` reports re-hashing a kept
    ``.part`` before its transfer resumes (cancellable too)."""
    paths = [local_path(gguf, p, dest_root) for p in gguf.parts]
    kept = [p.size if _complete(gguf, p, path) else _kept(gguf, p, path)
            for p, path in zip(gguf.parts, paths, strict=True)]
    _check_space(paths[0], gguf.size - sum(kept))
    meter = _Meter(gguf.size, progress, sum(kept))
    meter.add(0, force=True)
    for part, path in zip(gguf.parts, paths, strict=True):
        if not _complete(gguf, part, path):
            _download_part(gguf, part, path, token, cancel, meter, verifying)
    meter.add(0, force=True)
    return paths[0]


def _kept(gguf: RemoteGguf, part: RemoteFile, path: Path) -> int:
    """The bytes of ``path``'s ``.part`` that belong to this very file. A ``.part`` of another commit's
    file (or of unknown origin, or too long) is deleted: resuming it would mix two files."""
    partial = _partial(path)
    have = size_of(partial)
    if have is not None and have <= part.size and _same_file(read_json(_part_record(path)), gguf, part):
        return have
    partial.unlink(missing_ok=True)
    _part_record(path).unlink(missing_ok=True)
    return 0


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
                   cancel: threading.Event | None, meter: _Meter, verifying: Progress | None) -> None:
    partial = _partial(path)
    digest = hashlib.sha256()
    if partial.exists():
        have = _hash_kept(gguf, part, partial, digest, cancel, verifying)
    else:
        have = 0
        try:
            write_json(_part_record(path), {"commit": gguf.commit, "sha256": part.sha256, "size": part.size})
        except OSError as exc:
            raise translate(exc, repo=gguf.repo, what=f"writing {_part_record(path)}") from None
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
                       if have else err.hint, reason=err.reason) from None
    _finish(gguf, part, path, partial, have, digest.hexdigest())


def _hash_kept(gguf: RemoteGguf, part: RemoteFile, partial: Path, digest: hashlib._Hash,
               cancel: threading.Event | None, verifying: Progress | None) -> int:
    """Hash the kept bytes of ``partial`` into ``digest`` (the sha256 covers the whole file), reporting
    ``verifying(hashed, kept)`` and stopping at once on ``cancel``."""
    kept = size_of(partial) or 0
    n, last = 0, 0.0
    with partial.open("rb") as f:
        while block := f.read(_CHUNK):
            if cancel is not None and cancel.is_set():
                raise HubCancelled(f"the download of {gguf.repo}/{part.path} was cancelled",
                                   f"{Bytes(kept)} of {Bytes(part.size)} kept; download again to resume")
            digest.update(block)
            n += len(block)
            if verifying is not None and (n == kept or time.monotonic() - last >= PROGRESS_EVERY):
                last = time.monotonic()
                verifying(n, kept)
    return n


def _finish(gguf: RemoteGguf, part: RemoteFile, path: Path, partial: Path, have: int, sha: str) -> None:
    if have != part.size:
        raise HubError(f"the download of {gguf.repo}/{part.path} stopped at {Bytes(have)} of {Bytes(part.size)}",
                       "download again to resume")
    if part.sha256 is not None and sha != part.sha256.lower():
        partial.unlink(missing_ok=True)
        _part_record(path).unlink(missing_ok=True)
        raise HubError(f"{gguf.repo}/{part.path}: the downloaded file's sha256 does not match the Hub's "
                       "(the file was deleted)", "download it again")
    try:  # the old record goes first: a crash in between leaves a file no record vouches for, never a wrong one
        _record(path).unlink(missing_ok=True)
        os.replace(partial, path)
        write_json(_record(path), {"repo": gguf.repo, "commit": gguf.commit, "path": part.path,
                                   "sha256": sha, "size": part.size})
        _part_record(path).unlink(missing_ok=True)
    except OSError as exc:
        raise translate(exc, repo=gguf.repo, what=f"keeping {path}") from None
