"""Read and rewrite the dynamic section of a 64-bit little-endian ELF file (an engine binary or library).

Standard library only (native/build.py and packaging/build_bundle.py use it): ``set_runpath`` gives a
copied engine RUNPATH ``$ORIGIN`` so it runs wherever it is unpacked; ``needed`` lists what a library
loads (DT_NEEDED), for the checks of a CUDA build (tests/engine/test_cuda_build.py).
"""

from __future__ import annotations

import struct
from pathlib import Path

#: The dynamic section's tags: the end, a needed library, the string table, the library search paths.
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


def _dynamic(data: bytes | bytearray) -> tuple[int, list[tuple[int, int]]] | None:
    """(file offset of the dynamic string table, the dynamic section's (tag, value) pairs), or None for
    a file that is not a 64-bit little-endian ELF with a dynamic section."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return None
    entries: list[tuple[int, int]] = []
    strtab: int | None = None
    for j in range(dynamic[1] // 16):
        tag, value = struct.unpack_from("<qQ", data, dynamic[0] + 16 * j)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        entries.append((tag, value))
    if strtab is None:
        return None
    base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
    if base is None:
        raise ValueError("the dynamic string table is outside every loaded segment")
    return base, entries


def _string(data: bytes | bytearray, start: int) -> tuple[str, int]:
    end = data.index(b"\0", start)
    return bytes(data[start:end]).decode("utf-8", "replace"), end


def needed(path: Path) -> list[str]:
    """The libraries ``path`` names as DT_NEEDED, in order ([] for a file that is not such an ELF)."""
    data = path.read_bytes()
    dyn = _dynamic(data)
    if dyn is None:
        return []
    base, entries = dyn
    return [_string(data, base + v)[0] for t, v in entries if t == _DT_NEEDED]


def runpath(path: Path) -> str | None:
    """The RUNPATH (or RPATH) of ``path``, or None."""
    data = path.read_bytes()
    dyn = _dynamic(data)
    if dyn is None:
        return None
    base, entries = dyn
    return next((_string(data, base + v)[0] for t, v in entries if t in (_DT_RPATH, _DT_RUNPATH)), None)


def set_runpath(path: Path, new: str = "$ORIGIN") -> str | None:
    """Rewrite the RUNPATH (or RPATH) of the 64-bit little-endian ELF file at ``path`` in place to
    ``new``, which must not be longer than the old one (its string is overwritten, the rest padded
    with NULs). Returns the old value, or None for a file that is not such an ELF or has no path."""
    data = bytearray(path.read_bytes())
    try:
        dyn = _dynamic(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if dyn is None:
        return None
    base, entries = dyn
    paths = [v for t, v in entries if t in (_DT_RPATH, _DT_RUNPATH)]
    if not paths:
        return None
    old = ""
    encoded = new.encode()
    for rel in paths:
        old, end = _string(data, base + rel)
        if len(encoded) > end - (base + rel):
            raise ValueError(f"{path}: RUNPATH {old!r} is shorter than {new!r}")
        data[base + rel:end] = encoded + b"\0" * (end - (base + rel) - len(encoded))
    path.write_bytes(data)
    return old
