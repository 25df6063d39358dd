"""Header-only views: what pass 1 is handed for a GGUF stored inside a llamafile.

llama.cpp opens a model by its file name, so it cannot read a GGUF that starts in the middle of an
archive. Pass 1 (``no_alloc``, ``LLAMA_LOAD_MODE_NONE``) reads only the header and the tensor table and
checks that every tensor lies within the file; so the view is a sparse file of the member's size that
holds the member's header and tensor table (the bytes pass 1 reads) and a hole where the weights are.
It costs the disk those bytes, never the weights. Views live in ``<cache>/llamafile-views/<key>/``
(the temporary folder when the cache cannot be written), named as the members are (a split model's parts
find each other by name), and are kept for the next pass 1 of the same file; one whose filesystem
cannot hold a hole is removed and refused in a sentence.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from app.files import write_sparse
from app.paths import cache_dir
from app.planner.errors import PlannerError
from app.planner.gguf.model import model_parts
from app.planner.gguf.reader import GGUFHeader, file_stamp, in_archive, read_header, split_member
from app.planner.settings import LaunchSettings
from app.planner.units import Bytes, MiB

#: Allocated bytes a view may have beyond its header (filesystem blocks) before Headroom decides the
#: filesystem filled the hole in.
SPARSE_SLACK = 16 * MiB


def views_dir() -> Path:
    return cache_dir() / "llamafile-views"


def view_for(path: str | Path) -> Path:
    """The file pass 1 loads for ``path``: ``path`` itself for a plain GGUF; for a llamafile (or a
    member of one) the header-only view of its model (of a split model: of every part, the first
    returned). PlannerError when the archive is damaged or the view cannot be written."""
    if not in_archive(path):
        return Path(path)
    parts = model_parts(Path(path))
    archive, _ = split_member(parts[0]) or (Path(path), "")
    headers = [read_header(part, split=i) for i, part in enumerate(parts)]
    try:
        return _write_views(headers, views_dir() / _key(archive))
    except OSError:  # a read-only or full cache: the temporary folder holds the few bytes a view needs
        spare = Path(tempfile.gettempdir()) / f"headroom-views-{os.getuid()}" / _key(archive)
        try:
            return _write_views(headers, spare)
        except OSError as exc:
            raise PlannerError(f"cannot write the header of {archive.name}'s GGUF for pass 1 into {views_dir()} "
                               f"nor {spare.parent}: {exc.strerror or exc}") from None


def views_for(settings: LaunchSettings) -> LaunchSettings:
    """``settings`` with each file that lies in an archive (the projector, a draft, a LoRA adapter)
    replaced by its view: what pass 1 measures with."""
    return settings.with_(
        mmproj=str(view_for(settings.mmproj)) if settings.mmproj else "",
        draft_model=str(view_for(settings.draft_model)) if settings.draft_model else "",
        lora=tuple(str(view_for(f)) for f in settings.lora))


def _key(archive: Path) -> str:
    """One folder per version of an archive: its path, size and modification time."""
    return hashlib.sha256(repr(file_stamp(archive.resolve())).encode()).hexdigest()[:16]


def _write_views(headers: list[GGUFHeader], folder: Path) -> Path:
    """Every part's view in ``folder``; the first part's path."""
    views = [_write_view(h, folder) for h in headers]
    return views[0]


def _write_view(header: GGUFHeader, folder: Path) -> Path:
    inside = split_member(header.path)
    assert inside is not None  # a header read at a start past 0 is a member's
    archive, name = inside
    target = folder / name
    header_bytes = header.data_offset  # the header, the tensor table and its padding: all pass 1 reads
    if target.is_file() and target.stat().st_size == header.file_size:
        return target
    with archive.open("rb") as f:
        f.seek(header.start)
        prefix = f.read(header_bytes)
    allocated = write_sparse(target, prefix, header.file_size)  # (OSError: the caller tries elsewhere)
    if allocated > len(prefix) + SPARSE_SLACK:
        shutil.rmtree(folder, ignore_errors=True)
        raise PlannerError(f"the filesystem of {views_dir()} cannot hold sparse files: a header-only view of "
                           f"{name} for pass 1 would take {Bytes(allocated)} instead of {Bytes(len(prefix))} "
                           "(set HEADROOM_CACHE_DIR to a folder on ext4, xfs or btrfs)")
    return target
