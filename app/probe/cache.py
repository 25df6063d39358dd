"""Pass-1 results on disk: ``<cache>/measurements/<key>.json``.

A measurement is only true for one model file, one launch and one llama.cpp, so the key covers
all three: the file's identity (size, mtime, a digest of its first bytes, where the GGUF header and
metadata live), every ``LaunchSettings`` field, and the library the probe loads (its directory,
llama.cpp commit, and the library file's size and mtime). Change any of them and the old entry
is simply never found again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.files import atomic_text
from app.paths import cache_dir
from app.planner.gguf.reader import split_member
from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings

#: How much of the file the digest reads: the GGUF header, metadata and tensor table start here.
HEADER_BYTES = 1024 * 1024
#: Bump when the key's meaning or the stored JSON changes.
SCHEMA = 4


def measurements_dir() -> Path:
    return cache_dir() / "measurements"


def file_identity(path: Path) -> dict[str, Any]:
    """A model file's identity; a member of an archive (``Model.llamafile/zip/model.gguf``) is its
    archive's, with its name."""
    inside = split_member(path)
    if inside is not None:
        return {**file_identity(inside[0]), "member": inside[1]}
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(HEADER_BYTES))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "header_sha256": h.hexdigest()}


def library_identity(lib_dir: str | None, commit: str) -> dict[str, Any]:
    """Which llama.cpp measured: its directory, commit, and the libllama file's size and mtime."""
    ident: dict[str, Any] = {"lib_dir": lib_dir or "", "commit": commit}
    if lib_dir:
        for name in ("libllama.so", "libllama.dylib", "llama.dll"):
            lib = Path(lib_dir) / name
            if lib.is_file():
                st = lib.stat()
                ident.update(lib_size=st.st_size, lib_mtime_ns=st.st_mtime_ns)
                break
    return ident


def cache_key(model: Path, settings: LaunchSettings, library: dict[str, Any], method: str = "probe") -> str:
    blob = json.dumps({"schema": SCHEMA, "method": method, "file": file_identity(model),
                       "settings": settings.to_json(), "library": library}
                      | ({"draft": file_identity(Path(settings.draft_model))} if settings.draft_model else {}),
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class MeasureCache:
    """JSON files keyed by ``cache_key``; unreadable entries count as missing."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else measurements_dir()

    def get(self, key: str) -> Measurement | None:
        try:
            data = json.loads((self.root / f"{key}.json").read_text())
            return Measurement.from_json(data["measurement"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, measurement: Measurement, *, model: Path, settings: LaunchSettings) -> None:
        """Store it; a full or read-only cache stores nothing and leaves nothing half-written:
        the measurement is still returned, and measured again next time."""
        record = {"model": str(model), "settings": settings.to_json(), "measurement": measurement.to_json()}
        with contextlib.suppress(OSError):
            atomic_text(self.root / f"{key}.json", json.dumps(record, indent=1))


def cached(model: Path, settings: LaunchSettings, library: dict[str, Any],
           run: Callable[[], Measurement], *, cache: MeasureCache | None = None, refresh: bool = False,
           method: str = "probe") -> tuple[Measurement, bool]:
    """``(measurement, from_cache)``: the stored one for this key, else ``run()`` stored."""
    store = cache if cache is not None else MeasureCache()
    key = cache_key(model, settings, library, method)
    if not refresh:
        hit = store.get(key)
        if hit is not None:
            return hit, True
    fresh = run()
    store.put(key, fresh, model=model, settings=settings)
    return fresh, False
