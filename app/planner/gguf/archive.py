"""The ZIP archive at the end of a llamafile: its central directory and where each member's bytes lie.

A model llamafile is an executable (an APE: it starts with ``MZqFpD='``) with a ZIP archive appended;
llamafile's ``zipalign`` stores the GGUF uncompressed, at 64 KiB alignment, always as ZIP64, and only
appends, so an older central directory may be left inside: the *last* end record is the archive
(docs/domain.md §14). A member's first data byte is at its local header + 30 + the local name
length + the *local* extra length (zipalign pads the local extra, so it differs from the central one).

Read over a buffer the GGUF reader has mapped (:mod:`app.planner.gguf.reader` opens the file; this
module opens nothing). Written out rather than through :mod:`zipfile` because ``zipfile`` reads the
whole central directory an end record claims into memory before it checks a byte of it: a damaged or
hostile 20 GB llamafile could make it read gigabytes. Here every count and length is checked against
the bytes there are first, and each refusal is one sentence.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import Any

from app.planner.errors import PlannerError
from app.planner.gguf.dotargs import DotArgs
from app.text import printable

#: How an Actually Portable Executable starts (a shell script header that is also a DOS stub).
APE_MAGIC = b"MZqFpD"
#: A Linux executable (a llamafile rebuilt with ``assimilate`` into a native ELF).
ELF_MAGIC = b"\x7fELF"
#: A local file header: what a plain ``.zip`` (no executable before it) starts with.
LOCAL_MAGIC = b"PK\x03\x04"
_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_LOCATOR = b"PK\x06\x07"
_CENTRAL = b"PK\x01\x02"
_EOCD_SIZE, _LOCATOR_SIZE, _EOCD64_SIZE, _CENTRAL_SIZE, _LOCAL_SIZE = 22, 20, 56, 46, 30
#: The longest comment an end record may carry (its length is 16 bits): where the end record is looked for.
_MAX_COMMENT = 0xFFFF
#: A central directory larger than this is refused (zipalign's has a few hundred bytes a member).
MAX_DIRECTORY = 64 << 20
_MASK32, _MASK16 = 0xFFFFFFFF, 0xFFFF
#: ZIP's compression methods by number (APPNOTE 4.4.5), for the sentence that refuses a packed member.
METHODS = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd", 95: "xz"}
#: llamafile's ``.args`` member: the arguments the executable starts with.
ARGS_MEMBER = ".args"


@dataclass(frozen=True)
class Member:
    """One archive member: its name and where its (stored) bytes lie in the file."""

    name: str
    method: int  # 0 = stored
    start: int  # the first data byte, from the local header
    size: int  # bytes in the archive (compressed size)
    file_size: int  # bytes once unpacked
    #: Where its local header starts, and what its directory entry says besides (to write it again).
    header: int = 0
    crc: int = 0
    flags: int = 0
    dos_time: int = 0
    dos_date: int = 0

    @property
    def stored(self) -> bool:
        return self.method == 0

    @property
    def method_name(self) -> str:
        return METHODS.get(self.method, f"method {self.method}")


@dataclass(frozen=True)
class Archive:
    """The archive a file ends with. ``executable``: an APE program comes before it (a llamafile);
    ``directories``: how many end records the file holds (zipalign appends one per edit)."""

    members: tuple[Member, ...]
    executable: bool
    directories: int = 1

    def member(self, name: str) -> Member | None:
        """The member named ``name`` (a ``/zip/`` prefix allowed); the *last* of that name, as an
        appended archive replaces a member by writing it again."""
        name = name.removeprefix("/zip/").lstrip("/")
        return next((m for m in reversed(self.members) if m.name == name), None)

    def ggufs(self) -> tuple[Member, ...]:
        """The members named ``*.gguf``, in archive order, each name once (the last of that name)."""
        seen: dict[str, Member] = {}
        for m in self.members:
            if m.name.lower().endswith(".gguf"):
                seen.pop(m.name, None)
                seen[m.name] = m
        return tuple(seen.values())


def _unpack(fmt: str, buf: Any, pos: int) -> tuple[Any, ...]:
    """``struct.unpack_from`` over any sliceable buffer (a mapped file, or the parts of a remote one)."""
    return struct.unpack(fmt, bytes(buf[pos:pos + struct.calcsize(fmt)]))


def looks_archived(head: bytes) -> bool:
    """Whether a file that begins with ``head`` may be an archive (an APE executable or a plain ZIP)
    rather than a GGUF: the reader then looks for the archive's end."""
    return any(head.startswith(m) for m in (APE_MAGIC, LOCAL_MAGIC, ELF_MAGIC, b"MZ"))


def read_archive(buf: Any, size: int, label: str, *, locate: bool = True) -> Archive:
    """The archive ``buf`` (``size`` bytes: a mapped file) ends with. PlannerError, naming ``label``,
    when there is none or it is damaged. ``locate`` False: from the end record and the directory alone
    (the end of a remote file), each member's ``start`` left at -1 (``located`` finds it)."""
    eocd = _last_end_record(buf, size)
    if eocd < 0:
        raise PlannerError(f"{label}: not a GGUF file, and no ZIP archive ends it: a llamafile ends with the "
                           "archive that holds its GGUF, so this one is cut short (an unfinished download?) "
                           "or is no llamafile")
    disk, cd_disk, n_here, n_total, cd_size, cd_offset = _unpack("<HHHHII", buf, eocd + 4)
    cd_end = eocd
    if eocd >= _LOCATOR_SIZE and bytes(buf[eocd - _LOCATOR_SIZE:eocd - _LOCATOR_SIZE + 4]) == _LOCATOR:
        found = _zip64_end(buf, size, eocd, label)
        if found is not None:
            disk, cd_disk, n_here, n_total, cd_size, cd_offset, cd_end = found
    if disk or cd_disk or n_here != n_total:
        raise PlannerError(f"{label}: its archive spans several disks, which llamafile cannot read")
    if cd_size > min(MAX_DIRECTORY, cd_end) or n_total > cd_size // _CENTRAL_SIZE:
        raise PlannerError(f"{label}: the archive's end record is damaged (a directory of {cd_size} bytes for "
                           f"{n_total} members, ending at byte {cd_end})")
    cd_start = cd_end - cd_size
    # Bytes before the archive that its offsets do not count (an executable prepended to a finished .zip);
    # 0 for zipalign's, whose offsets are from the start of the file.
    shift = cd_start - cd_offset
    if shift < 0:
        raise PlannerError(f"{label}: the archive's end record puts its directory at byte {cd_offset}, past "
                           f"where it can be ({cd_start}): the archive is damaged")
    members = tuple(_central_entries(buf, size, cd_start, cd_end, n_total, shift, label, locate))
    head = bytes(buf[:len(APE_MAGIC)])
    return Archive(members, executable=head.startswith(APE_MAGIC) or head.startswith(ELF_MAGIC),
                   directories=_count_end_records(buf, eocd))


def _last_end_record(buf: Any, size: int) -> int:
    """The position of the last end-of-central-directory record: its signature, with a comment that
    ends exactly at the end of the file; -1 when there is none."""
    if size < _EOCD_SIZE:
        return -1
    low = max(0, size - _EOCD_SIZE - _MAX_COMMENT)
    pos = size - _EOCD_SIZE
    while pos >= low:
        pos = buf.rfind(_EOCD, low, pos + 4)
        if pos < 0:
            return -1
        (comment,) = _unpack("<H", buf, pos + 20)
        if pos + _EOCD_SIZE + comment == size:
            return int(pos)
        pos -= 1
    return -1


def _count_end_records(buf: Any, last: int) -> int:
    """How many end records lie before ``last`` and it (zipalign leaves the old ones when it appends);
    looked for only in the last 64 MiB, where the directories of appended edits lie."""
    count, low = 1, max(0, last - MAX_DIRECTORY)
    pos = buf.rfind(_EOCD, low, last)
    while pos >= 0:
        count += 1
        pos = buf.rfind(_EOCD, low, pos)
    return count


def _zip64_end(buf: Any, size: int, eocd: int, label: str) -> tuple[int, int, int, int, int, int, int] | None:
    """(disk, directory disk, entries here, entries, directory size, directory offset, directory end) from
    the ZIP64 end record the locator before ``eocd`` names; None when the locator names none."""
    _, where, _ = _unpack("<IQI", buf, eocd - _LOCATOR_SIZE + 4)
    record = eocd - _LOCATOR_SIZE - _EOCD64_SIZE  # where it lies when nothing is between them
    if not (record >= 0 and bytes(buf[record:record + 4]) == _EOCD64):
        if where + _EOCD64_SIZE > size or bytes(buf[where:where + 4]) != _EOCD64:
            raise PlannerError(f"{label}: the archive's ZIP64 end record is missing or damaged")
        record = where
    disk, cd_disk, n_here, n_total, cd_size, cd_offset = _unpack("<IIQQQQ", buf, record + 16)
    return disk, cd_disk, n_here, n_total, cd_size, cd_offset, record


def _central_entries(buf: Any, size: int, pos: int, end: int, count: int, shift: int, label: str,
                     locate: bool) -> list[Member]:
    members: list[Member] = []
    for i in range(count):
        if pos + _CENTRAL_SIZE > end or bytes(buf[pos:pos + 4]) != _CENTRAL:
            raise PlannerError(f"{label}: the archive's directory is damaged at entry {i + 1} of {count}")
        (_, _, flags, method, dos_time, dos_date, crc, csize, usize, n_name, n_extra, n_comment, _, _, _,
         offset) = _unpack("<4xHHHHHHIIIHHHHHII", buf, pos)
        name_at = pos + _CENTRAL_SIZE
        nxt = name_at + n_name + n_extra + n_comment
        if nxt > end:
            raise PlannerError(f"{label}: the archive's directory is damaged at entry {i + 1} of {count}")
        raw_name = bytes(buf[name_at:name_at + n_name])
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
        usize, csize, offset = _zip64_sizes(bytes(buf[name_at + n_name:name_at + n_name + n_extra]),
                                            usize, csize, offset)
        member = Member(name, method, -1, csize, usize, offset + shift, crc, flags, dos_time, dos_date)
        members.append(located(buf, size, member, label) if locate else member)
        pos = nxt
    return members


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The 64-bit sizes and offset a ZIP64 extra field (id 1) carries for the 32-bit fields set to all
    ones, in APPNOTE's order (4.5.3)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, n = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            data, at = extra[pos + 4:pos + 4 + n], 0
            values = []
            for value in (usize, csize, offset):
                if value == _MASK32 and at + 8 <= len(data):
                    value = struct.unpack_from("<Q", data, at)[0]
                    at += 8
                values.append(value)
            return values[0], values[1], values[2]
        pos += 4 + n
    return usize, csize, offset


def located(buf: Any, size: int, member: Member, label: str) -> Member:
    """``member`` with its data's first byte, found from its local header (whose extra field may differ
    from the central one's)."""
    shown, header = printable(member.name), member.header
    if header + _LOCAL_SIZE > size or bytes(buf[header:header + 4]) != LOCAL_MAGIC:
        raise PlannerError(f"{label}: the archive's member {shown} has no local header where its directory "
                           f"entry says (byte {header}): the archive is damaged or cut short")
    n_name, n_extra = _unpack("<HH", buf, header + 26)
    local = bytes(buf[header + _LOCAL_SIZE:header + _LOCAL_SIZE + n_name])
    if local.decode("utf-8" if member.flags & 0x800 else "cp437", errors="replace") != member.name:
        raise PlannerError(f"{label}: the archive's member {shown} is named differently in its local header: "
                           "the archive is damaged")
    start = header + _LOCAL_SIZE + n_name + n_extra
    if start + member.size > size:
        raise PlannerError(f"{label}: the archive's member {shown} ({member.size} bytes from byte {start}) runs "
                           f"{start + member.size - size} bytes past the end of the file: it is cut short (an "
                           "unfinished download?) or damaged")
    return replace(member, start=start)


#: The flags of llamafile's ``.args`` (llama.cpp's common/arg.cpp spellings) that name its model and
#: its vision projector.
MODEL_FLAGS = ("-m", "--model")
PROJECTOR_FLAGS = ("-mm", "--mmproj")
_LATER_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def flag_value(args: tuple[str, ...], flags: tuple[str, ...]) -> str | None:
    """The value of the last of ``flags`` in ``args`` (llama.cpp takes the last), ``--flag=value`` too."""
    found = None
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in flags:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def pick_members(archive: Archive, args: DotArgs | None, label: str) -> tuple[Member | None, Member | None]:
    """(the model, the vision projector) of a llamafile: those its ``.args`` names (``-m /zip/…``,
    ``--mmproj /zip/…``), else its one GGUF that is not a projector (``*mmproj*``; of a split model, the
    first part) and its one projector. PlannerError for a plain ZIP, for an ``.args`` that names a
    member the archive does not hold, and for several models none of which ``.args`` names."""
    if not archive.executable:
        raise PlannerError(f"{label}: a plain ZIP archive, not a llamafile (no program before its archive): "
                           "unpack it and open the GGUF inside")
    baked = args.args if args is not None else ()
    chosen: list[Member | None] = []
    for flags in (MODEL_FLAGS, PROJECTOR_FLAGS):
        value = flag_value(baked, flags)
        if value is None or not value.startswith("/zip/"):
            chosen.append(None)
            continue
        member = archive.member(value)
        if member is None:
            raise PlannerError(f"{label}: its .args gives {flags[0]} {printable(value)}, which its archive does "
                               f"not hold (it holds {_names(archive.ggufs())}): llamafile would fail to start")
        chosen.append(member)
    model, projector = chosen
    ggufs = archive.ggufs()
    projectors = [m for m in ggufs if "mmproj" in m.name.lower()]
    if model is None:
        models = [m for m in ggufs if m not in projectors and not _later_part(m.name)]
        if len(models) > 1:
            raise PlannerError(f"{label}: holds {len(models)} models ({_names(models)}) and its .args names none: "
                               f"give one as {label}/zip/NAME")
        model = models[0] if models else None
    if projector is None and len(projectors) == 1:
        projector = projectors[0]
    return model, projector


def _later_part(name: str) -> bool:
    m = _LATER_PART.search(name)
    return m is not None and m.group(1) != "00001"


def _names(members: Any) -> str:
    names = [printable(m.name) for m in members]
    return ", ".join(names) if names else "no GGUF"


def no_model_inside(label: str, archive: Archive) -> str:
    """Why a llamafile with no model GGUF cannot be planned, and what it is good for."""
    if archive.ggufs():
        return (f"{label}: holds only a vision projector ({_names(archive.ggufs())}), no model: open the "
                "model it goes with")
    return (f"{label}: a llamafile with no model inside, only the engine: use it as the engine (--engine "
            f"{label}, or File ▸ Choose engine… in the window) and open a GGUF model with it")
