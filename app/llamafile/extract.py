"""The GGUF of a llamafile copied out once, for an engine that cannot read it inside the archive.

The llamafile itself reads its weights in place (``-m /zip/model.gguf``); Headroom's llama-server, and
any other engine, opens a model by its file name, so it needs a file of its own. That copy costs the
disk the model's size: it is made once per version of the llamafile (path, size, modification time)
into ``<cache>/llamafile-gguf/<key>/`` and reused after. It is written to a ``.partial`` file and renamed
when whole, so a cut (Cancel, Ctrl-C, a full disk) leaves the part already copied, and the next run goes
on from there. A disk without room for the rest is refused before a byte is written. The bytes are copied
with ``copy_file_range``, which shares them (a reflink) on filesystems that can (btrfs, XFS) and never
passes them through Python.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.files import publish
from app.paths import cache_dir
from app.planner.errors import PlannerError
from app.planner.gguf.reader import file_stamp, read_archive, split_member
from app.planner.units import Bytes, MiB

#: Bytes copied between two looks at Cancel (and two progress reports).
CHUNK = 64 * MiB
#: Room kept free on the disk beyond the copy.
MARGIN = 256 * MiB
_SOURCE = "source.json"

Progress = Callable[[int, int], None]


class ExtractError(PlannerError):
    """The copy cannot be made; the message says why and what to do."""


class ExtractCancelled(ExtractError):
    """Cancelled by the caller; the part copied so far is kept for the next time."""


@dataclass(frozen=True)
class Pending:
    """One member to copy out: its path (``Model.llamafile/zip/model.gguf``), where the copy goes, and how
    many bytes are left to copy."""

    member: Path
    target: Path
    size: int
    left: int


def extracted_dir() -> Path:
    return cache_dir() / "llamafile-gguf"


def _folder(archive: Path) -> Path:
    return extracted_dir() / hashlib.sha256(repr(file_stamp(archive.resolve())).encode()).hexdigest()[:16]


def target_of(member: Path) -> Path:
    """Where the copy of ``member`` (a member path) lies, made or not."""
    inside = split_member(member)
    if inside is None:
        raise ExtractError(f"{member} is not inside a llamafile")
    return _folder(inside[0]) / inside[1]


def pending(members: Sequence[Path]) -> list[Pending]:
    """Of ``members``, those whose copy is not whole yet, with the bytes each still needs."""
    out = []
    for member in members:
        inside = split_member(member)
        if inside is None:
            continue
        entry = read_archive(inside[0]).member(inside[1])
        if entry is None:
            raise ExtractError(f"{inside[0].name}: its archive holds no {inside[1]}")
        target = target_of(member)
        if _whole(target, entry.size):
            continue
        done = _size(target.with_name(target.name + ".partial"))
        out.append(Pending(member, target, entry.size, entry.size - min(done, entry.size)))
    return out


def room_problem(items: Sequence[Pending]) -> str | None:
    """Why the disk cannot take the copies (a sentence), or None."""
    need = sum(p.left for p in items)
    if not items or not need:
        return None
    folder = extracted_dir()
    probe = next((q for q in (folder, *folder.parents) if q.exists()), Path("/"))
    if not os.access(probe, os.W_OK):
        return (f"cannot copy the GGUF out of the llamafile into {folder}: {probe} cannot be written (a read-only "
                "disk?): set HEADROOM_CACHE_DIR to a folder that can, or launch the llamafile itself")
    free = shutil.disk_usage(probe).free
    if free < need + MARGIN:
        return (f"copying the GGUF out of the llamafile needs {Bytes(need)} in {folder}, which has {Bytes(free)} free: "
                "free some space, or set HEADROOM_CACHE_DIR to a disk with room, or launch the llamafile itself")
    return None


def extract(items: Sequence[Pending], *, progress: Progress | None = None,
            cancel: threading.Event | None = None) -> list[Path]:
    """Copy each member out (resuming a ``.partial`` copy); ``progress(done, total)`` in bytes over all of
    them. ExtractError for a disk without room or that fails; ExtractCancelled when ``cancel`` is set."""
    problem = room_problem(items)
    if problem:
        raise ExtractError(problem)
    total = sum(p.left for p in items)
    done = 0
    out = []
    for item in items:
        inside = split_member(item.member)
        assert inside is not None
        entry = read_archive(inside[0]).member(inside[1])
        assert entry is not None

        def step(n: int, before: int = done) -> None:
            if progress is not None:
                progress(before + n, total)

        _copy(inside[0], entry.start, item, step, cancel)
        done += item.left
        out.append(item.target)
    return out


def _copy(archive: Path, start: int, item: Pending, step: Callable[[int], None],
          cancel: threading.Event | None) -> None:
    partial = item.target.with_name(item.target.name + ".partial")
    try:
        item.target.parent.mkdir(parents=True, exist_ok=True)
        _forget_older(archive, item.target.parent)
        # (not O_APPEND: copy_file_range refuses a file opened for appending)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        with archive.open("rb") as src, os.fdopen(fd, "wb") as dst:
            at = os.fstat(fd).st_size
            if at > item.size:  # (not from this archive's member: start again)
                os.ftruncate(fd, 0)
                at = 0
            first = at
            while at < item.size:
                if cancel is not None and cancel.is_set():
                    raise ExtractCancelled(f"copying {item.member.name} out of {archive.name} was cancelled "
                                           f"({Bytes(at)} of {Bytes(item.size)} kept for the next time)")
                n = _copy_range(src.fileno(), dst.fileno(), start + at, at, min(CHUNK, item.size - at))
                if n <= 0:
                    raise ExtractError(f"{archive.name} ended before its {item.member.name} was copied: the file "
                                       "changed or is cut short")
                at += n
                step(at - first)
        publish(partial, item.target)
    except ExtractError:
        raise
    except OSError as exc:
        why = {errno.ENOSPC: "the disk is full", errno.EROFS: "the disk is read-only",
               errno.EDQUOT: "the disk quota is used up", errno.EACCES: "permission denied"}.get(
            exc.errno or 0, exc.strerror or str(exc))
        raise ExtractError(f"cannot copy {item.member.name} out of {archive.name} into {item.target.parent}: {why} "
                           "(the part copied is kept; set HEADROOM_CACHE_DIR to another disk, or launch the "
                           "llamafile itself)") from None


def _copy_range(src: int, dst: int, src_at: int, dst_at: int, count: int) -> int:
    """``count`` bytes from ``src_at`` of ``src`` to ``dst_at`` of ``dst``: the kernel's copy (a reflink
    where the filesystem shares blocks), else read and write."""
    try:
        return os.copy_file_range(src, dst, count, src_at, dst_at)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    data = os.pread(src, min(count, 8 * MiB), src_at)
    return os.pwrite(dst, data, dst_at) if data else 0


def _forget_older(archive: Path, folder: Path) -> None:
    """Remove the copies of an earlier version of the same llamafile (its path, another size or time),
    and say in ``folder`` whose copies it holds."""
    record = {"archive": str(archive.resolve())}
    for other in extracted_dir().iterdir() if extracted_dir().is_dir() else ():
        if other == folder or not other.is_dir():
            continue
        with contextlib.suppress(OSError, ValueError):
            if json.loads((other / _SOURCE).read_text()).get("archive") == record["archive"]:
                shutil.rmtree(other, ignore_errors=True)
    (folder / _SOURCE).write_text(json.dumps(record))


def _whole(path: Path, size: int) -> bool:
    return _size(path) == size


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
