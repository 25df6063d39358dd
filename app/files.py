"""The small file operations every package shares: a size that may be missing, a write that is whole or
absent, a sparse copy of a header, and the JSON records kept next to local copies. Standard library only."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def size_of(path: Path) -> int | None:
    """The file's size in bytes, or None when it cannot be read (missing, a folder we cannot stat...)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


@contextmanager
def atomic_file(path: Path, *, mode: int = 0o666, durable: bool = False) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write (created empty, ``mode`` before the umask: 0o600 for a
    secret); when the block ends without an error it replaces ``path`` (``publish``), else it is removed:
    readers see the old file or the new one, never half of it. ``durable``: flushed to the disk first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.close(fd)
    try:
        yield tmp
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object], *, mode: int = 0o666,
                 durable: bool = False) -> None:
    """``write`` into a temporary sibling, then rename it onto ``path`` (``atomic_file``). OSError
    propagates (the temporary file removed)."""
    with atomic_file(path, mode=mode, durable=durable) as tmp, tmp.open("r+b") as f:
        write(f)


def atomic_text(path: Path, text: str, **options: Any) -> None:
    """``text`` (UTF-8) as the whole of ``path``, atomically (``atomic_write``'s options)."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data), **options)


def publish(partial: Path, target: Path) -> None:
    """Put a finished file in its place in one step (the one ``os.replace`` of the code base): a
    download's or a copy's ``.partial``, an atomic write's temporary sibling."""
    os.replace(partial, target)


def write_json(path: Path, data: dict[str, Any]) -> None:
    payload = json.dumps(data, indent=1).encode()
    atomic_write(path, lambda f: f.write(payload))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is none; {} when it is damaged."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_json_dict(path: Path) -> dict[str, Any]:
    """A small JSON store's object: {} when it is missing, unreadable or not an object (a store that
    starts again rather than stops the app)."""
    return read_json(path) or {}


def write_sparse(path: Path, prefix: bytes, size: int) -> int:
    """``prefix``, then a hole up to ``size`` bytes, written whole or not at all; returns the bytes the
    filesystem allocated (a filesystem without holes, FAT or exFAT, allocates them all)."""

    def write(f: IO[bytes]) -> None:
        f.write(prefix)
        f.truncate(size)

    atomic_write(path, write)
    return path.stat().st_blocks * 512
