"""Save as llamafile: one file that launches as planned, with a double-click or ``./Model.llamafile``.

The new file is the llamafile engine at hand (an engine-only llamafile, or the program and assets inside
the llamafile that is open: its GPU libraries, its help texts), then the model's GGUF (every part of a
split model) and its projector, then an ``.args`` that holds the planned flags — laid out as llamafile's
own ``zipalign`` lays it (the GGUFs stored, their data at 64 KiB boundaries so they can be mapped, ZIP64
records, the data of a member found from its local header). The engine's members are copied as they
are (deflated ones stay deflated); its old GGUFs and ``.args`` are left out. It is written to a
temporary file beside the target and renamed when whole; never over the source or the engine.

``.args`` ends with ``...``: what a user types after ``./Model.llamafile`` comes after the planned flags
and wins (docs/llamafiles.md, how each version merges them).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.files import publish
from app.planner.errors import PlannerError
from app.planner.gguf.archive import ARGS_MEMBER, Archive, Member
from app.planner.gguf.model import model_parts
from app.planner.gguf.reader import in_archive, read_archive, read_header, split_member
from app.planner.settings import ALL_LAYERS, LaunchSettings
from app.planner.units import Bytes, MiB

ALIGN = 64 * 1024
CHUNK = 16 * MiB
_MASK32 = 0xFFFFFFFF
#: A ZIP extra field id for the padding that aligns the data (Android's zipalign uses the same).
_PAD_ID = 0xD935

Progress = Callable[[int, int], None]


class SaveError(PlannerError):
    """The llamafile cannot be written; the message says why."""


@dataclass(frozen=True)
class _Entry:
    name: bytes
    method: int
    flags: int
    dos_time: int
    dos_date: int
    crc: int
    csize: int
    usize: int
    header: int


def planned_args(launch: LaunchSettings, model_member: str, projector_member: str | None,
                 kept: Sequence[str] = ()) -> list[str]:
    """The ``.args`` lines: the model and projector by their ``/zip/`` names, every planned flag that
    changes what the engine allocates, the source's other flags (``kept``: its sampling defaults), then
    ``...`` (the user's arguments after them)."""
    args = ["-m", f"/zip/{model_member}", "-c", str(launch.n_ctx),
            "-ngl", str(min(launch.n_gpu_layers, ALL_LAYERS)), "-fa", str(launch.flash_attn),
            "-ctk", launch.type_k, "-ctv", launch.type_v, "-ub", str(launch.n_ubatch), "-b", str(launch.n_batch),
            "-np", str(launch.n_parallel)]
    args += ["-kvu"] if launch.kv_unified else []
    args += ["--swa-full"] if launch.swa_full else []
    args += ["-nkvo"] if not launch.offload_kqv else []
    args += ["-ts", ",".join(map(str, launch.tensor_split))] if launch.tensor_split else []
    args += ["--cache-ram", str(launch.cache_ram_mib)] if launch.cache_ram_mib is not None else []
    if projector_member:
        args += ["--mmproj", f"/zip/{projector_member}"] + ([] if launch.mmproj_offload else ["--no-mmproj-offload"])
    return [*args, *kept, "..."]


def engine_problem(engine: Path) -> str | None:
    """Why ``engine`` cannot be the program of a new llamafile (a sentence), or None."""
    if not in_archive(engine):
        return f"{engine.name} is not a llamafile (a GGUF model, or a program without an archive)"
    try:
        archive = read_archive(engine)
    except PlannerError as exc:
        return f"{engine.name} is no llamafile engine Headroom can build on: {exc}"
    if not archive.executable:
        return f"{engine.name} is a plain ZIP archive, not a llamafile engine"
    return None


def save_llamafile(out: Path, engine: Path, model: Path, launch: LaunchSettings, *, kept: Sequence[str] = (),
                   progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
    """Write ``out``: ``engine``'s program and assets, ``model`` (a GGUF, a member of a llamafile, or a
    llamafile) with every part, ``launch``'s projector, and an ``.args`` of ``launch`` and ``kept`` (the
    source llamafile's other flags). SaveError when
    there is no engine to build on, ``out`` is the source, the disk lacks room, or a write fails."""
    problem = engine_problem(engine)
    if problem:
        raise SaveError(f"no llamafile engine at hand: {problem}; choose a llamafile (an engine-only one, or one "
                        "with a model inside) to build the new file on")
    out = out.absolute()
    sources = {_file_of(p) for p in (engine, model, *([Path(launch.mmproj)] if launch.mmproj else []))}
    if any(_same(out, s) for s in sources):
        raise SaveError(f"{out.name} is one of the files it is made from: choose another name")
    pieces = [(_name_of(p), p) for p in model_parts(model)]
    projector = Path(launch.mmproj) if launch.mmproj else None
    if projector is not None:
        pieces.append((_name_of(projector), projector))
    args = planned_args(launch, pieces[0][0], _name_of(projector) if projector is not None else None, kept)
    archive = read_archive(engine)
    assets = [m for m in archive.members if not m.name.lower().endswith(".gguf") and m.name != ARGS_MEMBER]
    total = sum(_size(p) for _, p in pieces) + sum(m.size for m in assets)
    free = _free(out.parent)
    if free is not None and free < total + 64 * MiB:
        raise SaveError(f"{out.name} needs {Bytes(total)} in {out.parent}, which has {Bytes(free)} free")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        with tmp.open("wb") as f:
            done = [0]

            def step(n: int) -> None:
                done[0] += n
                if cancel is not None and cancel.is_set():
                    raise SaveError(f"saving {out.name} was cancelled (nothing was written)")
                if progress is not None:
                    progress(done[0], total)

            entries = _copy_program(f, engine, archive, assets, step)
            for name, source in pieces:
                entries.append(_write_stored(f, name, source, step))
            text = ("\n".join(args) + "\n").encode()
            entries.append(_write_bytes(f, ARGS_MEMBER, text))
            _write_directory(f, entries)
        os.chmod(tmp, 0o755)
        publish(tmp, out)
    except OSError as exc:
        raise SaveError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _file_of(path: Path) -> Path:
    inside = split_member(path)
    return (inside[0] if inside else path).absolute()


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _name_of(path: Path) -> str:
    inside = split_member(path)
    return (inside[1] if inside else path.name).rsplit("/", 1)[-1]


def _size(path: Path) -> int:
    header = read_header(path)
    return header.file_size


def _free(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _range(path: Path) -> tuple[Path, int, int]:
    """(file, first byte, size) of a GGUF: a plain file, or a member where it lies in its archive."""
    header = read_header(path)
    inside = split_member(header.path)
    return (inside[0] if inside else header.path), header.start, header.file_size


def _copy_program(f: BinaryIO, engine: Path, archive: Archive, kept: Sequence[Member],
                  step: Callable[[int], None]) -> list[_Entry]:
    """The bytes before the engine's first member (its program), then each kept member as it is."""
    entries: list[_Entry] = []
    out = f
    with engine.open("rb") as src:
        first = min((m.header for m in archive.members), default=0)
        _copy(src, out, 0, first, lambda _n: None)
        for m in kept:
            if m.flags & 0x8:  # a data descriptor after the data: its length is not in the directory
                raise SaveError(f"{engine.name}: its member {m.name} is written with a data descriptor, which "
                                "Headroom does not copy; rebuild the engine with llamafile's zipalign")
            at = out.tell()
            name = m.name.encode("utf-8")
            zip64 = struct.pack("<HHQQ", 1, 16, m.file_size, m.size)
            out.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, m.flags & ~0x8 | 0x800, m.method,
                                  m.dos_time, m.dos_date, m.crc, _MASK32, _MASK32, len(name), len(zip64)) + name + zip64)
            _copy(src, out, m.start, m.size, step)
            entries.append(_Entry(name, m.method, m.flags & ~0x8 | 0x800, m.dos_time, m.dos_date, m.crc, m.size,
                                  m.file_size, at))
    return entries


def _copy(src: BinaryIO, dst: BinaryIO, start: int, n: int, step: Callable[[int], None]) -> int:
    """``n`` bytes from ``start`` of ``src`` to ``dst``'s position; returns their CRC-32."""
    crc = 0
    src.seek(start)
    left = n
    while left:
        block = src.read(min(CHUNK, left))
        if not block:
            raise SaveError("a source file ended early: it changed while it was read")
        crc = zlib.crc32(block, crc)
        dst.write(block)
        left -= len(block)
        step(len(block))
    return crc


def _write_stored(f: BinaryIO, name: str, source: Path, step: Callable[[int], None]) -> _Entry:
    """A GGUF stored, its data at the next 64 KiB boundary (the local extra field padded)."""
    file, start, size = _range(source)
    raw = name.encode("utf-8")
    at = f.tell()
    zip64 = struct.pack("<HHQQ", 1, 16, size, size)
    pad = -(at + 30 + len(raw) + len(zip64) + 4) % ALIGN
    extra = zip64 + struct.pack("<HH", _PAD_ID, pad) + bytes(pad)
    f.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0x800, 0, 0, 0x5821, 0, _MASK32, _MASK32,
                        len(raw), len(extra)) + raw + extra)
    with file.open("rb") as src:
        crc = _copy(src, f, start, size, step)
    end = f.tell()
    f.seek(at + 14)  # the CRC, known now
    f.write(struct.pack("<I", crc))
    f.seek(end)
    return _Entry(raw, 0, 0x800, 0, 0x5821, crc, size, size, at)


def _write_bytes(f: BinaryIO, name: str, data: bytes) -> _Entry:
    raw = name.encode("utf-8")
    at = f.tell()
    crc = zlib.crc32(data)
    zip64 = struct.pack("<HHQQ", 1, 16, len(data), len(data))
    f.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0x800, 0, 0, 0x5821, crc, _MASK32, _MASK32,
                        len(raw), len(zip64)) + raw + zip64 + data)
    return _Entry(raw, 0, 0x800, 0, 0x5821, crc, len(data), len(data), at)


def _write_directory(f: BinaryIO, entries: Sequence[_Entry]) -> None:
    """The ZIP64 central directory, its end record and locator, and the end record (as zipalign writes)."""
    start = f.tell()
    for e in entries:
        extra = struct.pack("<HHQQQ", 1, 24, e.usize, e.csize, e.header)
        f.write(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, e.flags, e.method, e.dos_time,
                            e.dos_date, e.crc, _MASK32, _MASK32, len(e.name), len(extra), 0, 0, 0, 0o100755 << 16,
                            _MASK32) + e.name + extra)
    end = f.tell()
    f.write(struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, len(entries), len(entries),
                        end - start, start))
    f.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, end, 1))
    f.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, _MASK32, _MASK32, 0))
