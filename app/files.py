"""The small file operations every package shares: a size that may be missing, a write that is whole or
absent, a sparse copy of a header, and the JSON records kept next to local copies. Standard library only."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def size_of(path: Path) -> int | None:
    """The file's size in bytes, or None when it cannot be read (missing, a folder we cannot stat...)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """``write`` into a temporary sibling, then rename it onto ``path``: readers see the old file or the new
    one, never half of it. OSError propagates (the temporary file removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with tmp.open("wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


def write_sparse(path: Path, prefix: bytes, size: int) -> int:
    """``prefix``, then a hole up to ``size`` bytes, written whole or not at all; returns the bytes the
    filesystem allocated (a filesystem without holes, FAT or exFAT, allocates them all)."""

    def write(f: IO[bytes]) -> None:
        f.write(prefix)
        f.truncate(size)

    atomic_write(path, write)
    return path.stat().st_blocks * 512
