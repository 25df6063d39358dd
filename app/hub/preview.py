"""Header-only copies: plan (and run pass 1) on a repo's GGUF without downloading its weights.

For each part, a growing prefix is read from one stream of the file through huggingface_hub's
HfFileSystem (2 MiB, doubled until the header parses, at most 256 MiB: a 150k-token vocabulary alone is
several MiB; the stream is closed as soon as the header parses) into
``<cache>/hub/<repo>/<commit>/<path>`` (Headroom's cache, never the Hugging Face cache: other tools
would take it for the model), and the file is truncated up to its real size, so it is sparse:
the header is real, the weights read as zeros. Pass 1 (no_alloc, LOAD_MODE_NONE) never reads them.
A sidecar ``<file>.hub.json`` marks the copy as a preview: launching it is refused.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from app.files import read_json, size_of, write_json, write_sparse
from app.hub.errors import HubCancelled, HubError, endpoint, is_translatable, translate
from app.hub.remote import RemoteFile, RemoteGguf
from app.paths import cache_dir
from app.planner.errors import PlannerError
from app.planner.gguf.reader import parse_prefix
from app.planner.units import Bytes, MiB

FIRST_PREFIX = 2 * MiB
MAX_PREFIX = 256 * MiB
#: Bytes read from the stream between two looks at Cancel.
READ_BLOCK = 256 * 1024
SIDECAR = ".hub.json"
#: Allocated bytes a sparse copy may have beyond its prefix (filesystem blocks, metadata) before Headroom
#: decides the filesystem filled the hole in.
SPARSE_SLACK = 64 * MiB

Progress = Callable[[int, int], None]


def hub_dir() -> Path:
    """Where header-only copies live."""
    return cache_dir() / "hub"


def preview_path(gguf: RemoteGguf, part: RemoteFile | None = None) -> Path:
    return hub_dir() / gguf.repo / gguf.commit / (part or gguf.parts[0]).path


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR)


def fetch_header(gguf: RemoteGguf, *, token: str | None = None, cancel: threading.Event | None = None,
                 progress: Progress | None = None) -> Path:
    """The header-only copy of ``gguf`` (fetched now, or the cached one). Returns the first part's path."""
    first = preview_path(gguf)
    if preview_origin(first) is not None and all(
            size_of(preview_path(gguf, p)) == p.size for p in gguf.parts):
        return first
    prefixes: list[bytes] = []
    for part in gguf.parts:
        prefixes.append(_fetch_prefix(gguf, part, token, cancel, progress, sum(map(len, prefixes))))
    meta = _to_json(gguf) | {"fetched": sum(map(len, prefixes))}
    # The sidecars go first: a zero-filled copy must never exist without the mark that refuses launching it.
    written = [path for part in gguf.parts for path in (_sidecar(preview_path(gguf, part)), preview_path(gguf, part))]
    try:
        for part in gguf.parts:
            write_json(_sidecar(preview_path(gguf, part)), meta)
        for part, prefix in zip(gguf.parts, prefixes, strict=True):
            _write_sparse(preview_path(gguf, part), prefix, part.size)
    except BaseException:
        for path in reversed(written):  # files first, their sidecars last
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        raise
    return first


def _fetch_prefix(gguf: RemoteGguf, part: RemoteFile, token: str | None, cancel: threading.Event | None,
                  progress: Progress | None, before: int) -> bytes:
    """Grow the prefix until the header parses; HubError naming the file when it never does."""
    from huggingface_hub import HfFileSystem

    buf = bytearray()
    target = FIRST_PREFIX
    fs = HfFileSystem(endpoint=endpoint(), token=token, skip_instance_cache=True)  # no answer kept from before
    try:
        with fs.open(f"{gguf.repo}@{gguf.commit}/{part.path}", "rb", block_size=0) as stream:
            while True:
                want = min(target, part.size)
                _read_into(buf, stream, want, gguf, part, cancel)
                if progress is not None:
                    progress(before + len(buf), before + want)
                if _parses(buf, gguf, part):
                    return bytes(buf)
                if want >= MAX_PREFIX:  # (at the file's size, parse_prefix raises instead)
                    raise HubError(f"{gguf.repo}/{part.path}: the GGUF header is larger than {MAX_PREFIX // MiB} MiB",
                                   "download the file to plan it")
                target *= 2
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=gguf.repo, revision=gguf.commit,
                        what=f"fetching the header of {part.path}") from None


def _parses(buf: bytearray, gguf: RemoteGguf, part: RemoteFile) -> bool:
    try:
        return parse_prefix(bytes(buf), part.path, part.size) is not None
    except PlannerError as exc:
        raise HubError(f"{gguf.repo}/{part.path} is not a usable GGUF file: {exc}",
                       "pick another file in the repo") from None


def _read_into(buf: bytearray, stream: IO[bytes], want: int, gguf: RemoteGguf, part: RemoteFile,
               cancel: threading.Event | None) -> None:
    """Read the stream on to byte ``want``, a block at a time, stopping at once on ``cancel``."""
    while len(buf) < want:
        if cancel is not None and cancel.is_set():
            raise HubCancelled(f"fetching the header of {gguf.repo}/{part.path} was cancelled")
        block = stream.read(min(READ_BLOCK, want - len(buf)))
        if not block:
            raise HubError(f"{gguf.repo}/{part.path}: the Hub sent {len(buf)} bytes of the {want} asked for",
                           "try again")
        buf += block


def _write_sparse(path: Path, prefix: bytes, size: int) -> None:
    """``prefix``, then a hole up to ``size``. HubError when the disk allocated the hole (FAT, exFAT...):
    a header-only copy would then take the model's whole size."""

    try:
        allocated = write_sparse(path, prefix, size)
    except OSError as exc:
        raise HubError(f"cannot write {path}: {exc.strerror or exc}", "check the disk space and permissions") from None
    if allocated > len(prefix) + SPARSE_SLACK:
        path.unlink(missing_ok=True)
        raise HubError(f"the filesystem of {hub_dir()} cannot hold sparse files: a header-only copy of "
                       f"{path.name} would take {Bytes(allocated)} instead of {Bytes(len(prefix))}",
                       "set HEADROOM_CACHE_DIR to a folder on ext4, xfs or btrfs")


def _to_json(gguf: RemoteGguf) -> dict[str, Any]:
    return {"repo": gguf.repo, "commit": gguf.commit, "path": gguf.path, "size": gguf.size,
            "parts": [{"path": p.path, "size": p.size, "sha256": p.sha256} for p in gguf.parts]}


def _sidecar_json(path: str | Path) -> dict[str, Any] | None:
    return read_json(_sidecar(Path(path)))


def preview_origin(path: str | Path) -> RemoteGguf | None:
    """The repo file ``path`` is a header-only copy of, or None for a real file."""
    data = _sidecar_json(path)
    if data is None:
        return None
    try:
        parts = tuple(RemoteFile(str(p["path"]), int(p["size"]), p.get("sha256")) for p in data["parts"])
        return RemoteGguf(str(data["repo"]), str(data["commit"]), parts)
    except (KeyError, TypeError, ValueError):  # a damaged sidecar still marks a preview
        p = Path(path)
        return RemoteGguf("?", "", (RemoteFile(p.name, size_of(p) or 0, None),))


def fetched_bytes(path: str | Path) -> int:
    """How many bytes of the repo file a header-only copy holds (0 for a real file)."""
    data = _sidecar_json(path) or {}
    value = data.get("fetched", 0)
    return value if isinstance(value, int) else 0


def refuse_preview(path: str | Path) -> None:
    """HubError when ``path`` is a header-only copy: its weights are zeros, it cannot be launched."""
    origin = preview_origin(path)
    if origin is not None:
        raise HubError(f"{origin.repo}/{origin.path} is a header-only preview: its weights are not downloaded",
                       f"download it first (Download in the Hugging Face dialog, or "
                       f"`headroom serve hf:{origin.repo}/{origin.path}`)")


def preview_refusal(path: Path) -> str | None:
    """``refuse_preview``'s words, or None: the check ``app.engine.launch.prepare`` is given."""
    try:
        refuse_preview(path)
    except HubError as exc:
        return str(exc)
    return None
