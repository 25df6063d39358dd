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
    """The header-only copy of ``gguf`` (fetched now, or the cached one). Returns the first part's path.
    A ``.llamafile``: the header-only copy of the model it holds (``llamafile_preview``)."""
    if gguf.is_llamafile:
        return llamafile_preview(gguf, token=token, cancel=cancel, progress=progress)
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


# ---- a llamafile on the Hub: its archive's end, then its GGUFs' headers, by range requests ----

#: How much of a remote llamafile's end is read for its central directory (zipalign's has a few hundred
#: bytes a member; a llamafile carries a few hundred members).
ARCHIVE_TAIL = 1 * MiB


def llamafile_preview(gguf: RemoteGguf, *, token: str | None = None, cancel: threading.Event | None = None,
                      progress: Progress | None = None) -> Path:
    """Header-only copies of the model (and the vision projector) a llamafile on the Hub carries, at
    ``<preview of the llamafile>/zip/<member>``: its archive's end is read first (the central directory),
    then each member's local header and a growing prefix of its GGUF, each by a range request; the weights
    are never fetched. Returns the model's copy, the projector's beside it (named as in the archive)."""
    from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # public: lazily exported

    from app.hub.remote import TIMEOUT
    from app.planner.gguf.archive import located, pick_members
    from app.planner.gguf.archive import read_archive as archive_of
    from app.planner.gguf.dotargs import parse_dotargs

    part = gguf.parts[0]
    folder = preview_path(gguf) / "zip"
    url = hf_hub_url(gguf.repo, part.path, revision=gguf.commit, endpoint=endpoint())
    view = _Sparse(part.size)
    label = f"{gguf.repo}/{part.path}"

    def fetch(start: int, end: int) -> None:
        """Bytes ``start`` up to ``end`` by one range request (exactly those: no read-ahead)."""
        if cancel is not None and cancel.is_set():
            raise HubCancelled(f"fetching the header of {label} was cancelled")
        end = min(end, part.size)
        headers = {**build_hf_headers(token=token), "Range": f"bytes={start}-{end - 1}"}
        with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT) as answer:
            if answer.status_code >= 400:
                answer.read()
                hf_raise_for_status(answer)
            if answer.status_code != 206:  # (the whole file would follow: gigabytes)
                raise HubError(f"{endpoint()} does not answer range requests for {label}", "download it to plan it")
            got = bytearray()
            for chunk in answer.iter_bytes():
                got += chunk
                if len(got) >= end - start:
                    break
            data = bytes(got[:end - start])
        if len(data) != end - start:
            raise HubError(f"{label}: the Hub sent {len(data)} bytes of the {end - start} asked for", "try again")
        view.put(start, data)
        if progress is not None:
            progress(view.fetched, view.fetched)

    try:
        fetch(0, 64)
        fetch(max(0, part.size - ARCHIVE_TAIL), part.size)
        try:
            archive = archive_of(view, part.size, label, locate=False)
        except PlannerError as exc:
            raise HubError(f"{label} is not a usable llamafile: {exc}", "pick another file in the repo") from None
        wanted = [m for m in archive.members if m.name.lower().endswith(".gguf") or m.name == ".args"]
        for m in wanted:  # the local header: where its data starts
            fetch(m.header, m.header + 30 + 2 * 65536)
        members = [located(view, part.size, m, label) for m in wanted]
        args_member = next((m for m in members if m.name == ".args"), None)
        if args_member is not None:
            fetch(args_member.start, args_member.start + min(args_member.size, 1 << 20))
        args = None if args_member is None else parse_dotargs(
            bytes(view[args_member.start:args_member.start + args_member.size]).decode("utf-8", errors="replace"))
        model, projector = pick_members(archive.__class__(tuple(members), archive.executable), args, label)
    except PlannerError as exc:
        raise HubError(f"{label} is not a usable llamafile: {exc}", "pick another file in the repo") from None
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=gguf.repo, revision=gguf.commit, what=f"reading the archive of {part.path}") from None
    if model is None:
        raise HubError(f"{label} holds no model, only a llamafile engine", "pick a llamafile with a model inside")
    written = []
    for member in (model, projector):
        if member is None:
            continue
        target = folder / member.name
        if preview_origin(target) is None or size_of(target) != member.size:
            prefix = _member_prefix(view, fetch, member, label)
            meta = _to_json(gguf) | {"fetched": len(prefix), "member": member.name}
            write_json(_sidecar(target), meta)  # (the mark first: a zero-filled copy is never without it)
            _write_sparse(target, prefix, member.size)
        written.append(target)
    return written[0]


def _member_prefix(view: _Sparse, fetch: Callable[[int, int], None], member: Any, label: str) -> bytes:
    """A growing prefix of a member's GGUF, until its header parses."""
    want = FIRST_PREFIX
    while True:
        want = min(want, member.size)
        fetch(member.start, member.start + want)
        prefix = bytes(view[member.start:member.start + want])
        try:
            if parse_prefix(prefix, member.name, member.size) is not None:
                return prefix
        except PlannerError as exc:
            raise HubError(f"{label}: its {member.name} is not a usable GGUF file: {exc}",
                           "pick another file in the repo") from None
        if want >= min(MAX_PREFIX, member.size):
            raise HubError(f"{label}: the GGUF header of {member.name} is larger than {MAX_PREFIX // MiB} MiB",
                           "download the file to plan it")
        want *= 2


class _Sparse:
    """The bytes of a remote file fetched so far, at their offsets; zeros elsewhere (what the archive
    reader sees of the parts not fetched)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ranges: dict[int, bytes] = {}

    @property
    def fetched(self) -> int:
        return sum(map(len, self.ranges.values()))

    def put(self, start: int, data: bytes) -> None:
        self.ranges[start] = data

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> bytes:
        start, stop, _ = key.indices(self.size)
        out = bytearray(max(0, stop - start))
        for at, data in self.ranges.items():
            lo, hi = max(start, at), min(stop, at + len(data))
            if lo < hi:
                out[lo - start:hi - start] = data[lo - at:hi - at]
        return bytes(out)

    def rfind(self, sub: bytes, start: int, end: int) -> int:
        return self.find(sub, start, end, last=True)

    def find(self, sub: bytes, start: int, end: int, *, last: bool = False) -> int:
        best = -1
        for at, data in self.ranges.items():
            lo, hi = max(start, at), min(end, at + len(data))
            if lo >= hi:
                continue
            i = data.rfind(sub, lo - at, hi - at) if last else data.find(sub, lo - at, hi - at)
            if i >= 0:
                pos = at + i
                if best < 0 or (pos > best if last else pos < best):
                    best = pos
        return best
