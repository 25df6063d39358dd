"""A lean, bounded GGUF header reader: metadata and the tensor table, never the weights.

``gguf.GGUFReader`` materialises every tokenizer array (seconds on a real model's header); this
reader walks the same bytes through an ``mmap`` and *skips* array payloads by their lengths, keeping
only each array's element type and count (small numeric arrays, e.g. per-layer head counts, are kept).

Bounded: every count and length is checked against the bytes that remain before anything is read
or allocated, so a hostile file raises :class:`PlannerError` naming the problem, never a
``MemoryError``, a hang or a struct error. Only a regular file is opened, without blocking (a FIFO
or a device is refused before a byte is read).

Strict where llama.cpp is: ggml/src/gguf.cpp (``gguf_init_from_reader``, which
``gguf_init_from_file`` runs) refuses an empty key, a duplicate key or tensor name, a tensor name of
``GGML_MAX_NAME`` (64) bytes or more, a ``general.alignment`` that is not a power-of-two UINT32, more
than 2^30 array elements or string bytes, and any tensor whose data does not start exactly where the
previous one ended, padded to the alignment (so tensors that overlap, leave a gap or are out of
order); src/llama-model-loader.h (``llama_tensor_weight``) refuses data past the end of the file.
This reader refuses the same files, each with its own sentence. The ``gguf`` package is used for its
value-type constants only; the tensor types are the engine's own (:mod:`app.planner.gguf.ggml_types`).

Keys, tensor names and string values are C strings to llama.cpp: gguf.cpp keeps each as the bytes it
read (its duplicate checks compare those), but every lookup goes through the ``char *`` —
``gguf_find_key`` and ``gguf_find_tensor`` compare with ``strcmp`` and take the *first* match,
``ggml_set_name`` copies a tensor name up to its first NUL, ``gguf_get_val_str`` returns ``c_str()``.
So ``llama.block_count\0junk`` read before ``llama.block_count`` is the block count llama.cpp uses and
the later key is never seen; ``gemma3\0junk`` is the architecture ``gemma3``; two tensors whose names
read the same up to a NUL are "duplicated" (src/llama-model-loader.cpp). Keys are compared as bytes,
never after invalid UTF-8 is replaced.

Bounded: a string value is kept up to :data:`KEEP_STRING` bytes of its C string (a longer one is a
:class:`LongString`, its length and first characters), arrays are skipped by their lengths, and no
byte is read that the plan does not need: a 1 GiB ``general.name`` costs a ``find`` for its first NUL.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import mmap
import os
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf.constants import GGUFValueType

from app.planner.errors import PlannerError
from app.planner.gguf.archive import (
    ARGS_MEMBER,
    Archive,
    Member,
    looks_archived,
    no_model_inside,
    pick_members,
)
from app.planner.gguf.archive import read_archive as archive_of
from app.planner.gguf.dotargs import DotArgs, parse_dotargs
from app.planner.gguf.ggml_types import GGML_TYPES
from app.text import printable, quoted

GGUF_MAGIC = b"GGUF"
#: ggml/include/ggml.h GGML_MAX_DIMS
MAX_DIMS = 4
#: ggml/src/gguf.cpp GGUF_DEFAULT_ALIGNMENT
DEFAULT_ALIGNMENT = 32
#: ggml/include/ggml.h GGML_MAX_NAME: a tensor name must be shorter (gguf.cpp refuses it otherwise).
MAX_NAME = 64
#: ggml/src/gguf.cpp GGUF_MAX_ARRAY_ELEMENTS and GGUF_MAX_STRING_LENGTH (both 1024*1024*1024).
MAX_ARRAY_ELEMENTS = MAX_STRING_LENGTH = 1 << 30
#: ggml-impl.h TENSOR_ALIGNMENT: a mapped CPU buffer must start at a multiple of it
#: (ggml-backend.cpp ``ggml_backend_cpu_buffer_from_ptr``: "buffer pointer must be aligned", an abort).
TENSOR_ALIGNMENT = 32
#: Numeric arrays up to this many elements are kept (per-layer head counts, SWA patterns ...).
KEEP_ARRAY_MAX = 4096
#: String values are kept up to this many bytes (a chat template is tens of KiB); a longer one is a
#: :class:`LongString`. Keys are compared in full, hashed in chunks of this size past it.
KEEP_STRING = 1 << 20
#: Tokens whose texts are compared for duplicates (llama-vocab.cpp asserts they are unique); real
#: vocabularies have at most a few hundred thousand.
CHECK_TOKENS_MAX = 1 << 20

_SCALAR: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"), GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"), GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"), GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"), GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"), GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TOKENS = "tokenizer.ggml.tokens"


class HeaderTruncated(PlannerError):
    """The bytes ended inside the header (for a prefix of a remote file: fetch more)."""


#: Token texts counted in a Python set (about 60 bytes a token; the largest real vocabularies have 262k):
#: importing numpy for it cost pass 1 a seventh of a second. More, from a hostile header, are sorted in
#: numpy, 8 bytes a token, no more than the file's own lengths.
DISTINCT_IN_A_SET = 1 << 20

@dataclass(frozen=True)
class GGUFArray:
    """An array field. ``values`` is None when the payload was skipped (strings, long arrays).
    ``distinct``: for ``tokenizer.ggml.tokens``, how many different texts llama.cpp reads."""

    elem_type: int
    count: int
    values: tuple[Any, ...] | None = None
    distinct: int | None = None


@dataclass(frozen=True)
class LongString:
    """A string value whose C string is longer than :data:`KEEP_STRING` bytes: not read."""

    n_bytes: int
    head: str

    def __str__(self) -> str:
        return f"{self.head}… ({self.n_bytes} bytes)"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor-table entry. ``offset`` is absolute in its file; ``split`` is the file index."""

    name: str
    shape: tuple[int, ...]  # ggml order: ne[0] (the row) first
    ggml_type: int
    offset: int
    n_bytes: int
    split: int = 0

    @property
    def layer(self) -> int | None:
        """``blk.N.…`` → N; None for tensors outside the repeating layers."""
        if not self.name.startswith("blk."):
            return None
        num = self.name[4:].split(".", 1)[0]
        return int(num) if num.isdigit() else None


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    file_size: int
    alignment: int
    data_offset: int
    fields: dict[str, Any]  # key -> python scalar, str, or GGUFArray
    field_types: dict[str, int]  # key -> GGUFValueType
    tensors: tuple[TensorInfo, ...]
    #: Where the GGUF's first byte lies in its file: 0, or past 0 for a member of an archive (``path``
    #: then names the member, ``<archive>/zip/<name>``). Tensor offsets are the GGUF's own.
    start: int = 0


# ---- the files themselves: the planner's only contact with the disk (tests/unit/test_import_rules.py) ----

#: A GGUF's identity for a cache: path, size, modification time (a changed file is read again). For a
#: member of an archive (``Model.llamafile/zip/model.gguf``) the archive's size and time.
FileStamp = tuple[str, int, int]

#: How a GGUF stored in an archive is named as a path: the archive, then llamafile's own ``/zip/``
#: prefix (its ``.args`` names its weights ``/zip/model.gguf``): ``Model.llamafile/zip/model.gguf``.
ZIP_DIR = "zip"
#: The file names a model is opened by: a GGUF, or a llamafile with its GGUF inside.
MODEL_SUFFIXES = (".gguf", ".llamafile")
#: The same, as a file dialog's filter (Qt's ``name (patterns)``) and a glob each.
MODEL_FILTER = "Models (*.gguf *.llamafile);;GGUF models (*.gguf);;llamafiles (*.llamafile);;All files (*)"
#: The most of ``.args`` read (llamafile's are a few lines).
MAX_ARGS_BYTES = 1 << 20


def is_model_name(name: str) -> bool:
    """Whether a file named ``name`` is opened as a model (``*.gguf``, ``*.llamafile``, any case)."""
    return name.lower().endswith(MODEL_SUFFIXES)


def member_path(archive: Path, name: str) -> Path:
    """The path that names member ``name`` of ``archive`` (see ZIP_DIR)."""
    return archive / ZIP_DIR / name.removeprefix("/zip/").lstrip("/")


def split_member(path: str | Path) -> tuple[Path, str] | None:
    """``(archive, member name)`` when ``path`` names a member of an archive (``<file>/zip/<name>``, the
    part before ``zip`` a regular file); None for any other path."""
    parts = Path(path).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == ZIP_DIR and Path(*parts[:i]).is_file():
            return Path(*parts[:i]), "/".join(parts[i + 1:])
    return None


def in_archive(path: str | Path) -> bool:
    """Whether ``path`` names a GGUF inside an archive: a member path, or a file that starts as an
    executable or a ZIP does (a llamafile given by its own path). Reads eight bytes at most."""
    if split_member(path) is not None:
        return True
    try:
        # O_NONBLOCK, and a regular file only: opening a FIFO for reading would wait for a writer (forever)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 8)
    except OSError:
        return False
    finally:
        os.close(fd)
    return not head.startswith(GGUF_MAGIC) and looks_archived(head)


def shown_name(path: str | Path) -> str:
    """A model file's name as a user knows it: ``Model.llamafile: model.gguf`` for a member."""
    inside = split_member(path)
    return f"{inside[0].name}: {inside[1]}" if inside else Path(path).name


def file_stamp(path: str | Path) -> FileStamp:
    """The file's stamp (an archive's for its member); OSError when it cannot be read (the caller says
    which file it is)."""
    inside = split_member(path)
    st = os.stat(inside[0] if inside else path)
    return str(path), st.st_size, st.st_mtime_ns


def missing_files(paths: tuple[Path, ...]) -> list[Path]:
    """Those of ``paths`` that are no regular file, nor a member of the archive they name (a split
    model's absent parts)."""
    return [p for p in paths if not p.is_file() and not _is_member(p)]


def _is_member(path: Path) -> bool:
    inside = split_member(path)
    if inside is None:
        return False
    try:
        return read_archive(inside[0]).member(inside[1]) is not None
    except PlannerError:
        return False


def gguf_files_in(folder: Path, word: str) -> list[Path]:
    """The ``*.gguf`` files in ``folder`` whose name holds ``word`` (any case), sorted; none when the
    folder cannot be listed. The folder ``<archive>/zip`` lists the archive's members."""
    inside = split_member(folder / "x")
    if inside is not None and folder.name == ZIP_DIR:
        try:
            names = [m.name for m in read_archive(inside[0]).ggufs()]
        except PlannerError:
            return []
        return sorted(member_path(inside[0], n) for n in names if "/" not in n and word in n.lower())
    try:
        return sorted(q for q in folder.iterdir() if q.suffix.lower() == ".gguf" and word in q.name.lower())
    except OSError:
        return []


@contextlib.contextmanager
def _mapped(p: Path) -> Iterator[tuple[Any, int]]:
    """``(mapped bytes, size)`` of the regular file ``p``: PlannerError for anything else (a FIFO would
    block the read forever), for a file that cannot be read, and for an empty one (which cannot be
    mapped)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (forever).
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PlannerError(f"{p}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PlannerError(f"{p}: cannot read: Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise PlannerError(f"{p}: not a regular file ({_file_kind(st.st_mode)}): a model must be a GGUF file")
        if st.st_size < 24:
            raise PlannerError(f"{p.name}: not a GGUF file: only {st.st_size} bytes")
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            yield mm, st.st_size
    except OSError as e:
        raise PlannerError(f"{p}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read_archive(path: str | Path) -> Archive:
    """The ZIP archive a file ends with (a llamafile's): its members and where their bytes lie."""
    p = Path(path)
    with _mapped(p) as (mm, size):
        return archive_of(mm, size, p.name)


@dataclass(frozen=True)
class Llamafile:
    """A llamafile (an executable with a ZIP archive appended) as a model file: its members, its
    ``.args`` (the arguments it starts with, as cosmopolitan's ``cosmo_args`` reads them; None when it
    has none) and which of its GGUFs is the model and which the vision projector."""

    path: Path
    archive: Archive
    args: DotArgs | None
    model: Member | None
    projector: Member | None

    def path_of(self, member: Member) -> Path:
        return member_path(self.path, member.name)

    @property
    def model_path(self) -> Path | None:
        return None if self.model is None else self.path_of(self.model)


def read_llamafile(path: str | Path) -> Llamafile:
    """The llamafile at ``path``; PlannerError when it is none (a GGUF, a plain file), its archive is
    damaged, or it holds several models and its ``.args`` names none of them."""
    p = Path(path)
    with _mapped(p) as (mm, size):
        if bytes(mm[:4]) == GGUF_MAGIC:
            raise PlannerError(f"{p.name}: a GGUF file, not a llamafile")
        found = archive_of(mm, size, p.name)
        args = None
        entry = found.member(ARGS_MEMBER)
        if entry is not None:
            args = parse_dotargs(_member_text(mm, entry, p.name))
    model, projector = pick_members(found, args, p.name)
    return Llamafile(p, found, args, model, projector)


def _member_text(mm: Any, entry: Member, label: str) -> str:
    """A small member's text (``.args``), stored or deflated; PlannerError when it is neither, or large."""
    if entry.file_size > MAX_ARGS_BYTES or entry.size > MAX_ARGS_BYTES:
        raise PlannerError(f"{label}: its {entry.name} is {entry.file_size} bytes: not llamafile arguments")
    raw = bytes(mm[entry.start:entry.start + entry.size])
    if entry.method == 8:
        try:
            raw = zlib.decompressobj(-15).decompress(raw, MAX_ARGS_BYTES)
        except zlib.error:
            raise PlannerError(f"{label}: its {entry.name} cannot be unpacked: the archive is damaged") from None
    elif not entry.stored:
        raise PlannerError(f"{label}: its {entry.name} is packed with {entry.method_name}, which llamafile "
                           "cannot read")
    return raw.decode("utf-8", errors="replace")


def tensor_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    """ggml_nbytes for a contiguous tensor (ggml.c ``ggml_row_size`` × rows)."""
    _, block, type_size = GGML_TYPES[ggml_type]
    n = 1
    for d in shape[1:]:
        n *= d
    return shape[0] // block * type_size * n if shape else 0


class _Cursor:
    """Bounds-checked reads over a buffer; every failure is a PlannerError naming what and where."""

    __slots__ = ("base", "buf", "end", "label", "pos")

    def __init__(self, buf: Any, label: str, base: int = 0, size: int | None = None) -> None:
        """``buf`` holds the GGUF's ``size`` bytes from ``base`` (a member of an archive starts past 0);
        positions are ``buf``'s, the ones a message names the GGUF's own."""
        self.buf = buf
        self.base = base
        self.end = len(buf) if size is None else min(len(buf), base + size)
        self.pos = base
        self.label = label

    def fail(self, what: str) -> PlannerError:
        return PlannerError(f"{self.label}: not a valid GGUF file: {what} (at byte {self.pos - self.base})")

    def short(self, what: str) -> HeaderTruncated:
        """Ran out of bytes: a truncated file, or a prefix of a remote one that needs more."""
        return HeaderTruncated(f"{self.label}: not a valid GGUF file: {what} (at byte {self.pos - self.base})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise self.short(f"{what} runs past the end of the file ({self.end - self.base} bytes)")

    def u32(self, what: str) -> int:
        self.need(4, what)
        v: int = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        v: int = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def raw_string(self, what: str) -> tuple[int, int]:
        """A string's (start, length) in the buffer, checked as gguf.cpp checks it; the cursor moves past it."""
        n = self.u64(f"{what} length")
        if n > MAX_STRING_LENGTH:  # gguf.cpp: "string length ... exceeds maximum"
            raise self.fail(f"{what} is {n} bytes long (llama.cpp's limit is {MAX_STRING_LENGTH})")
        self.need(n, what)
        start = self.pos
        self.pos += n
        return start, n

    def c_end(self, start: int, n: int, keep: int) -> int:
        """One past the last byte of the C string at ``start`` (its first NUL), looked for in at most
        ``keep`` bytes; -1 when there is none there."""
        nul = self.buf.find(b"\0", start, start + min(n, keep))
        return nul if nul >= 0 else (start + n if n <= keep else -1)

    def string(self, what: str) -> str | LongString:
        """A string value as llama.cpp reads it: up to its first NUL, kept up to KEEP_STRING bytes."""
        start, n = self.raw_string(what)
        end = self.c_end(start, n, KEEP_STRING)
        if end < 0:
            return LongString(n, _text(self.buf[start:start + 80]))
        return _text(self.buf[start:end])

    def identity(self, start: int, n: int) -> bytes:
        """A key's full bytes (gguf.cpp compares keys with their NULs); past KEEP_STRING, a digest of them,
        hashed a chunk at a time so a huge key is never held (nor, in a mapped file, kept resident)."""
        if n <= KEEP_STRING:
            return bytes(self.buf[start:start + n])
        h = hashlib.blake2b(digest_size=32)
        for at in range(start, start + n, KEEP_STRING):
            stop = min(at + KEEP_STRING, start + n)
            h.update(self.buf[at:stop])
            _drop_pages(self.buf, at, stop)
        return b"\0long\0" + n.to_bytes(8, "little") + h.digest()

    def scalar(self, vtype: int, what: str) -> Any:
        st = _SCALAR[vtype]
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def skip_strings(self, count: int, what: str) -> None:
        # Each string is at least its 8-byte length: a count the file cannot hold is rejected first.
        if count > (self.end - self.pos) // 8:
            raise self.short(f"{what}: {count} strings cannot fit in the file")
        buf, pos, end, unpack = self.buf, self.pos, self.end, _U64.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                raise self.short(f"{what} runs past the end of the file")
            pos += 8 + unpack(buf, pos)[0]
        if pos > end:
            raise self.short(f"{what} runs past the end of the file")
        self.pos = pos

    def distinct_tokens(self, count: int) -> int:
        """How many different token texts llama-vocab.cpp reads: each up to its first NUL, an empty one
        as ``[EMPTY_i]``, into ``token_to_id`` (a duplicate aborts it: ``id_to_token.size() ==
        token_to_id.size()``). Texts are hashed (the vocabulary is never held)."""
        if count > (self.end - self.pos) // 8:
            raise self.short(f"array {quoted(_TOKENS)}: {count} strings cannot fit in the file")
        hashes = array.array("q")  # 8 bytes a token, no more than the file's own 8-byte lengths
        # ``raw_string`` and ``c_end`` written out (the same checks and words), the position in a local:
        # a vocabulary has 150k tokens and more, and pass 1 waits for this loop. ``buf`` is the mapped
        # file or a prefix of bytes: a slice of either is bytes.
        buf, end, unpack, find, add = self.buf, self.end, _U64.unpack_from, self.buf.find, hashes.append
        pos = self.pos
        for i in range(count):
            if pos + 8 > end:
                self.pos = pos
                raise self.short(f"token {i} length runs past the end of the file ({end - self.base} bytes)")
            n = unpack(buf, pos)[0]
            if n > KEEP_STRING:  # rare: the general path, with its limit
                self.pos = pos
                start, n = self.raw_string(f"token {i}")
                stop = self.c_end(start, n, KEEP_STRING)
                text = bytes(buf[start:stop]) if stop >= 0 else self.identity(start, n)
                pos = self.pos
            else:
                start = pos + 8
                pos = start + n
                if pos > end:
                    self.pos = start
                    raise self.short(f"token {i} runs past the end of the file ({end - self.base} bytes)")
                nul = find(b"\0", start, pos)
                text = buf[start:nul if nul >= 0 else pos]
            add(hash(text or f"[EMPTY_{i}]".encode()))
        self.pos = pos
        if len(hashes) <= DISTINCT_IN_A_SET:
            return len(set(hashes))
        import numpy as np  # (a vocabulary past any real one: sorted in place, 8 bytes a token)

        return int(np.unique(np.frombuffer(hashes, dtype=np.int64)).size)

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype, f"value of {quoted(key)}")
        if vtype == GGUFValueType.STRING:
            return self.string(f"value of {quoted(key)}")
        if vtype == GGUFValueType.ARRAY:
            etype = self.u32(f"array type of {quoted(key)}")
            count = self.u64(f"array length of {quoted(key)}")
            if count > MAX_ARRAY_ELEMENTS:  # gguf.cpp gguf_reader::read(std::vector<T>&, n)
                raise self.fail(f"array {quoted(key)} has {count} elements (llama.cpp's limit is {MAX_ARRAY_ELEMENTS})")
            if etype == GGUFValueType.STRING:
                if key == _TOKENS and count <= CHECK_TOKENS_MAX:
                    return GGUFArray(etype, count, distinct=self.distinct_tokens(count))
                self.skip_strings(count, f"array {quoted(key)}")
                return GGUFArray(etype, count)
            if etype not in _SCALAR:
                raise self.fail(f"array {quoted(key)} has unsupported element type {etype}")
            st = _SCALAR[etype]
            if count > (self.end - self.pos) // st.size:
                raise self.short(f"array {quoted(key)} of {count} elements runs past the end of the file")
            values = None
            if count <= KEEP_ARRAY_MAX:
                values = tuple(v[0] for v in st.iter_unpack(self.buf[self.pos:self.pos + count * st.size]))
            self.pos += count * st.size
            return GGUFArray(etype, count, values)
        raise self.fail(f"key {quoted(key)} has unknown value type {vtype}")


def read_header(path: str | Path, split: int = 0) -> GGUFHeader:
    """Read one GGUF file's metadata and tensor table: a plain file, a member of an archive named as
    ``<archive>/zip/<name>``, or the model of a llamafile given by its own path. Raises PlannerError for
    anything malformed, and for anything that is not a regular file (a FIFO would block the read
    forever)."""
    p = Path(path)
    inside = split_member(p)
    file = inside[0] if inside else p
    with _mapped(file) as (mm, size):
        if inside is None and bytes(mm[:4]) != GGUF_MAGIC and looks_archived(bytes(mm[:8])):
            found = archive_of(mm, size, p.name)
            model = pick_members(found, _args_in(mm, found, p.name), p.name)[0]
            if model is None:
                raise PlannerError(no_model_inside(p.name, found))
            inside = (p, model.name)
            p = member_path(p, model.name)
        if inside is None:
            return _parse(mm, p, size, split)
        member = archive_of(mm, size, file.name).member(inside[1])
        label = f"{file.name}: {printable(inside[1])}"
        if member is None:
            raise PlannerError(f"{file.name}: its archive holds no {printable(inside[1])}")
        if not member.stored:
            raise PlannerError(f"{label} is packed with {member.method_name}: a llamafile's weights are stored "
                               "uncompressed, so that they can be mapped (rebuild it with llamafile's zipalign, "
                               "or zip -0)")
        if member.size < 24:
            raise PlannerError(f"{label}: not a GGUF file: only {member.size} bytes")
        return _parse(mm, p, member.size, split, base=member.start, label=label)


def _args_in(mm: Any, found: Archive, label: str) -> DotArgs | None:
    entry = found.member(ARGS_MEMBER)
    return None if entry is None else parse_dotargs(_member_text(mm, entry, label))


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def parse_prefix(prefix: bytes, name: str, size: int) -> GGUFHeader | None:
    """The header of a ``size``-byte file from its first bytes; None when ``prefix`` ends inside the
    header (fetch more). PlannerError when the bytes are not a GGUF header at all."""
    if len(prefix) < 24 and len(prefix) < size:
        return None
    try:
        return _parse(prefix, Path(name), size, 0)
    except HeaderTruncated:
        if len(prefix) < size:
            return None
        raise


def _what_it_begins_with(head: bytes) -> str:
    """The first bytes of a file that is not a GGUF, as a person reads them: the text a text file begins
    with, else the bytes in hex; either beside what a GGUF begins with."""
    if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        first = " ".join(head.decode("ascii").split())[:24]
        return f"it is text (it begins '{first}'), where a GGUF begins with the bytes 'GGUF'"
    return f"it begins with the bytes {head[:4].hex(' ')}, where a GGUF begins with 'GGUF' (47 47 55 46)"


def _parse(mm: Any, path: Path, size: int, split: int, *, base: int = 0, label: str = "") -> GGUFHeader:
    """The header of the GGUF whose ``size`` bytes start at ``base`` of ``mm``; offsets in the record
    are the GGUF's own (``GGUFHeader.start`` says where it starts in its file)."""
    label = label or path.name
    cur = _Cursor(mm, label, base, size)
    magic = bytes(mm[base:base + 4])
    if magic != GGUF_MAGIC:
        if base == 0 and looks_archived(bytes(mm[:8])):
            raise PlannerError(f"{label}: not a GGUF file: an executable or archive (magic {magic!r})")
        raise PlannerError(f"{label}: not a GGUF file: {_what_it_begins_with(bytes(mm[base:base + 32]))}")
    cur.pos = base + 4
    version = cur.u32("version")
    if version not in (2, 3):
        if version & 0xFFFF == 0:
            raise PlannerError(f"{path.name}: big-endian GGUF files are not supported")
        raise PlannerError(f"{path.name}: unsupported GGUF version {version}")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    # A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8+4+8+4+8.
    if n_kv > (size - (cur.pos - base)) // 13:
        raise cur.fail(f"metadata count {n_kv} cannot fit in the file")
    if n_tensors > (size - (cur.pos - base)) // 32:
        raise cur.fail(f"tensor count {n_tensors} cannot fit in the file")

    fields: dict[str, Any] = {}
    types: dict[str, int] = {}
    raw_keys: set[bytes] = set()
    for i in range(n_kv):
        start, n = cur.raw_string("metadata key")
        if not n:  # gguf.cpp: "key %d is empty"
            raise cur.fail(f"metadata key {i} is empty")
        raw = cur.identity(start, n)
        end = cur.c_end(start, n, KEEP_STRING)
        key = _text(cur.buf[start:end]) if end >= 0 else str(LongString(n, _text(cur.buf[start:start + 80])))
        vtype = cur.u32(f"type of {quoted(key)}")
        if raw in raw_keys:  # gguf.cpp compares the keys' bytes, NULs included
            raise cur.fail(f"duplicate key {quoted(key)}")
        raw_keys.add(raw)
        value = cur.value(vtype, key)
        if key not in fields:  # gguf_find_key: strcmp, the first match; a later key reading the same is unseen
            fields[key] = value
            types[key] = vtype

    alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in types and types["general.alignment"] != GGUFValueType.UINT32:
        # gguf.cpp: "key 'general.alignment' must be of type u32"
        raise cur.fail(f"general.alignment is {_type_name(types['general.alignment'])}, llama.cpp requires UINT32")
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
            or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment {quoted(alignment)} is not a power of two")

    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    raw_names: set[bytes] = set()
    c_names: set[bytes] = set()
    for _ in range(n_tensors):
        start, n = cur.raw_string("tensor name")
        if n >= MAX_NAME:  # gguf.cpp: "tensor name %d is too long"
            raise cur.fail(f"tensor name {quoted(_text(cur.buf[start:start + 80]))} is {n} bytes long "
                           f"(llama.cpp allows at most {MAX_NAME - 1})")
        raw = bytes(cur.buf[start:start + n])
        c_name = raw.split(b"\0", 1)[0]  # ggml_set_name(name.c_str())
        name = _text(c_name)
        if raw in raw_names:  # gguf.cpp: "duplicate tensor name"
            raise cur.fail(f"duplicate tensor {quoted(name)}")
        if c_name in c_names:  # llama-model-loader.cpp: "invalid model: tensor '%s' is duplicated"
            raise cur.fail(f"tensor {quoted(name)} appears twice (llama.cpp reads a name up to its first NUL byte)")
        raw_names.add(raw)
        c_names.add(c_name)
        n_dims = cur.u32(f"dimension count of {quoted(name)}")
        if n_dims > MAX_DIMS:
            raise cur.fail(f"tensor {quoted(name)} has {n_dims} dimensions (at most {MAX_DIMS})")
        shape = tuple(cur.u64(f"shape of {quoted(name)}") for _ in range(n_dims))
        ggml_type = cur.u32(f"type of {quoted(name)}")
        if ggml_type not in GGML_TYPES:
            raise cur.fail(f"tensor {quoted(name)} has unknown ggml type {ggml_type}")
        offset = cur.u64(f"offset of {quoted(name)}")
        infos.append((name, shape, ggml_type, offset))

    data_offset = -(-(cur.pos - base) // alignment) * alignment
    if infos and data_offset > size:  # gguf.cpp: "failed to seek to beginning of data section"
        raise cur.fail(f"the data section would start at byte {data_offset}, past the end of the file")
    tensors: list[TensorInfo] = []
    expected = 0  # gguf.cpp: each tensor starts where the previous one ended, padded to the alignment
    for name, shape, ggml_type, offset in infos:
        block = GGML_TYPES[ggml_type][1]
        if any(d > size * 8 or d < 0 for d in shape):  # no dimension can exceed the file's bits
            raise cur.fail(f"tensor {quoted(name)} has an impossible shape {shape}")
        if shape and shape[0] % block:
            raise cur.fail(f"tensor {quoted(name)}: row of {shape[0]} is not a multiple of block size {block}")
        if offset != expected:
            raise cur.fail(_misplaced(name, offset, expected, alignment, first=not tensors))
        n_bytes = tensor_nbytes(ggml_type, shape)
        start = data_offset + offset
        if start + n_bytes > size:
            raise cur.fail(f"tensor {quoted(name)} ({n_bytes} bytes at {start}) runs past the end of the file")
        # Only where general.alignment is below 32, and only for the first tensor: llama.cpp maps the
        # host tensors as one buffer from the first one's data (llama-model-loader.cpp
        # ``get_mapping_range``), and only that pointer is checked; a later tensor off a 32-byte
        # boundary loads (the fuzz: alignment 16 on the tiny gemma3). The first host tensor is the
        # file's first (token_embd, the input layer, stays on the CPU).
        if not tensors and start % TENSOR_ALIGNMENT:
            raise cur.fail(f"general.alignment {alignment} puts the first tensor {quoted(name)} at byte {start}, not "
                           f"a multiple of {TENSOR_ALIGNMENT}: llama-server aborts (buffer pointer must be aligned)")
        tensors.append(TensorInfo(name, shape, ggml_type, start, n_bytes, split))
        expected = offset + -(-n_bytes // alignment) * alignment

    return GGUFHeader(path, version, size, alignment, data_offset, fields, types, tuple(tensors), start=base)


def _misplaced(name: str, offset: int, expected: int, alignment: int, *, first: bool) -> str:
    """Why a tensor's data offset is not the one llama.cpp requires (gguf.cpp: "tensor '%s' has
    offset %" PRIu64 ", expected %zu")."""
    if first:
        why = "the first tensor's data must start the data section"
    elif offset < expected:
        why = "it overlaps the tensor before it (or the tensors are out of order)"
    elif offset % alignment:
        why = f"it is not aligned to {alignment}"
    else:
        why = f"it leaves a gap of {offset - expected} bytes after the tensor before it (or the tensors are out of order)"
    return (f"tensor {quoted(name)} starts at data offset {offset}, but llama.cpp requires {expected} "
            f"(where the previous tensor ends, padded to {alignment}): {why}")


def _text(raw: Any) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def _drop_pages(buf: Any, start: int, stop: int) -> None:
    """Let a mapped file's pages that were only hashed go (they would count as resident)."""
    if isinstance(buf, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        if stop - first >= mmap.PAGESIZE:
            buf.madvise(mmap.MADV_DONTNEED, first, (stop - first) // mmap.PAGESIZE * mmap.PAGESIZE)


def _type_name(vtype: int) -> str:
    try:
        return GGUFValueType(vtype).name
    except ValueError:
        return f"type {vtype}"
