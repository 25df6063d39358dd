"""The model library: every GGUF and llamafile in the Hugging Face cache, in ``~/.llamafile`` and in the
folders the user added, each with
what its header says (architecture, quantization, training context), its size, and the vision
projector (mmproj) beside it, if any.

Only headers are read (``app.planner.gguf.reader``: the metadata and the tensor table through an mmap,
never the weights), once per file version (path, size, mtime); a rescan of an unchanged library reads
nothing again. Only regular files are opened: a FIFO, a socket or a device named ``*.gguf`` is left out
without being opened (opening a FIFO would wait for a writer). A file that is not a GGUF Headroom can
read is listed with its error, never raised. Folders are walked a few levels deep without following
links to folders (no loops); the cache is read through huggingface_hub's own ``scan_cache_dir``.

"Beside it" means: in the same snapshot of the same repo (the Hugging Face cache), or in the same
folder (a folder the user added). A projector is a GGUF whose ``general.type`` is ``mmproj``, whose
architecture is ``clip`` (what llama.cpp's mtmd loads), or whose name says ``mmproj``; it is paired only
with a model whose width (``n_embd``) its output fits, as the settings panel pairs one.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from app.hub.cache import hub_cache
from app.hub.remote import projector_rank, quant_of
from app.planner.errors import PlannerError
from app.planner.gguf.beside import fits_model, read_projector
from app.planner.gguf.model import split_parts
from app.planner.gguf.reader import is_model_name, read_header, read_llamafile, shown_name, split_member

#: How deep below a folder the user added GGUFs are looked for (``~/models/<family>/<quant>/x.gguf``).
MAX_DEPTH = 4
#: The most GGUF files one scan reads (a folder like ``/`` added by mistake ends, and says so).
MAX_FILES = 5000
#: llama.cpp's split naming (common/common.cpp ``llama_split_path``): ``<base>-00001-of-00003.gguf``;
#: the parts after the first are not models of their own.
_SPLIT = re.compile(r"^(?P<base>.+)-(?P<i>\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)
#: ``general.type`` of a projector file (llama.cpp tools/mtmd/clip.cpp writes and checks it).
PROJECTOR_TYPE = "mmproj"
#: The architecture llama.cpp's mtmd reads projectors as (tools/mtmd/clip-impl.h ``clip``).
PROJECTOR_ARCH = "clip"
HF_SOURCE = "Hugging Face cache"


@dataclass(frozen=True)
class LibraryEntry:
    """One GGUF model (a split set is one entry, its first part's path) or one projector."""

    path: Path  # what to open: the file, or a split set's first part
    source: str  # HF_SOURCE, or the folder the user added
    repo: str = ""  # owner/name for a file in the Hugging Face cache
    arch: str = ""
    title: str = ""  # general.name
    quant: str = ""  # from general.file_type, else the file name
    size: int = 0  # every part together
    parts: int = 1
    n_ctx_train: int | None = None  # <arch>.context_length
    is_projector: bool = False
    projector: Path | None = None  # the projector beside a model, if any
    #: A model's ``<arch>.embedding_length``; a projector's output width (0: unknown): they must agree.
    width: int = 0
    error: str = ""  # why the file cannot be used ("" when it can)
    #: For a llamafile: the name of the GGUF it carries ("" for a GGUF).
    inside: str = ""

    @property
    def name(self) -> str:
        """The file name (a split set's without its ``-00001-of-0000N``)."""
        name = self.path.name
        if self.inside:
            return shown_name(self.path / "zip" / self.inside)
        return f"{_split_base(name)}.gguf" if self.parts > 1 else name

    @property
    def openable(self) -> bool:
        return not self.error and not self.is_projector

    @property
    def where(self) -> str:
        """``owner/name`` for the cache, else the folder the file is in."""
        return self.repo or str(self.path.parent)


@dataclass(frozen=True)
class LibraryScan:
    entries: tuple[LibraryEntry, ...]
    notes: tuple[str, ...] = ()  # a folder that is missing or unreadable, a scan cut short
    files_read: int = 0  # headers read in this scan (0 when every file was read before)
    folders: tuple[str, ...] = field(default=())  # the folders scanned, as given

    @property
    def models(self) -> tuple[LibraryEntry, ...]:
        return tuple(e for e in self.entries if e.openable)


class _Budget:
    """Counts the files a scan looks at; ``cancel`` ends it early."""

    def __init__(self, cancel: threading.Event | None) -> None:
        self.cancel = cancel
        self.seen = 0
        self.read = 0
        self.full = False

    def take(self) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return False
        if self.seen >= MAX_FILES:
            self.full = True
            return False
        self.seen += 1
        return True


def scan_library(folders: Iterable[str | Path], *, hf: bool = True,
                 cancel: threading.Event | None = None) -> LibraryScan:
    """The Hugging Face cache (``hf``) and then each folder, projectors paired with their models. A file
    reachable twice (a folder inside the cache, the same blob in two snapshots) is listed once."""
    budget = _Budget(cancel)
    notes: list[str] = []
    groups: list[list[LibraryEntry]] = []
    if hf:
        groups += _scan_hf_cache(budget, notes)
    given = [str(f) for f in folders]
    for folder in given:
        groups += _scan_folder(Path(folder).expanduser(), budget, notes)
    own = Path.home() / ".llamafile"  # where llamafiles are kept (and llamafile keeps its GPU code)
    if own.is_dir() and all(Path(f).expanduser() != own for f in given):
        groups += _scan_folder(own, budget, [])
    if budget.full:
        notes.append(f"stopped after {MAX_FILES} GGUF files: add a narrower folder")
    seen: set[Path] = set()
    entries: list[LibraryEntry] = []
    for group in groups:
        for e in _pair_projectors(group):
            key = _real(e.path)
            if key not in seen:
                seen.add(key)
                entries.append(e)
    return LibraryScan(tuple(entries), tuple(notes), budget.read, tuple(given))


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


# ---- the Hugging Face cache -----------------------------------------------------------------------
def _scan_hf_cache(budget: _Budget, notes: list[str]) -> list[list[LibraryEntry]]:
    """One group per snapshot, newest first: ``<cache>/models--owner--name/snapshots/<commit>/...``."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    root = hub_cache()
    try:
        info = scan_cache_dir(root)
    except CacheNotFound:
        return []  # nothing downloaded yet: no note, the library is just empty there
    except (OSError, ValueError) as exc:
        notes.append(f"the Hugging Face cache {root} cannot be read: {exc}")
        return []
    groups = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            files = sorted(f.file_path for f in rev.files if _is_model_name(f.file_name))
            group = []
            for path in files:
                if not budget.take():
                    break
                entry = _entry(path, HF_SOURCE, budget, repo=repo.repo_id)
                if entry is not None:
                    group.append(entry)
            groups.append(group)
    return groups


# ---- folders the user added -----------------------------------------------------------------------
def _scan_folder(folder: Path, budget: _Budget, notes: list[str]) -> list[list[LibraryEntry]]:
    """One group per directory that holds GGUFs."""
    if not folder.is_dir():
        notes.append(f"{folder}: {'not a folder' if folder.exists() else 'not found'}")
        return []
    groups = []
    for directory, names in _walk(folder, notes):
        group = []
        for name in sorted(names):
            if not budget.take():
                break
            entry = _entry(directory / name, str(folder), budget)
            if entry is not None:
                group.append(entry)
        if group:
            groups.append(group)
    return groups


def _walk(folder: Path, notes: list[str]) -> Iterator[tuple[Path, list[str]]]:
    """(directory, GGUF file names) down to MAX_DEPTH, links to folders not followed; hidden folders
    (``.git``, ``.cache``) left out."""
    def unreadable(exc: OSError) -> None:
        notes.append(f"{exc.filename}: cannot read: {exc.strerror or exc}")

    for directory, subdirs, files in os.walk(folder, onerror=unreadable):
        here = Path(directory)
        depth = len(here.relative_to(folder).parts)
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        names = [f for f in files if _is_model_name(f)]
        if names:
            yield here, names


# ---- one file -----------------------------------------------------------------------------------
def _is_model_name(name: str) -> bool:
    """A ``.gguf`` name that is not a later part of a split set (``-00002-of-00003.gguf``), or a
    ``.llamafile``."""
    m = _SPLIT.match(name)
    return m["i"] == "00001" if m else is_model_name(name)


def _split_base(name: str) -> str:
    m = _SPLIT.match(name)
    return m["base"] if m else name.removesuffix(".gguf")


def _entry(path: Path, source: str, budget: _Budget, *, repo: str = "") -> LibraryEntry | None:
    """The entry for ``path``; None for what is no file at all (a FIFO, a socket, a device, a folder)."""
    try:
        st = os.stat(path)  # follows the cache's links to its blobs; never opens the file
    except OSError as exc:
        return LibraryEntry(path, source, repo, error=f"cannot read: {exc.strerror or exc}",
                            is_projector=_projector_name(path.name))
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        parts = split_parts(path)
        stamp = tuple((str(p), *_size_mtime(p)) for p in parts)
    except PlannerError as exc:
        return LibraryEntry(path, source, repo, error=_without_path(str(exc), path),
                            is_projector=_projector_name(path.name))
    before = _facts.cache_info().misses
    facts = _facts(stamp)
    budget.read += _facts.cache_info().misses - before
    return replace(facts, source=source, repo=repo)


def _size_mtime(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise PlannerError(f"{path.name}: cannot read: {exc.strerror or exc}") from None
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=4096)
def _facts(stamp: tuple[tuple[str, int, int], ...]) -> LibraryEntry:
    """What the first part's header says (read once per file version)."""
    path = Path(stamp[0][0])
    size = sum(s[1] for s in stamp)
    try:
        header = read_header(path)
    except PlannerError as exc:
        return LibraryEntry(path, "", size=size, parts=len(stamp), error=_without_path(str(exc), path),
                            is_projector=_projector_name(path.name))
    fields = header.fields
    arch = _text(fields.get("general.architecture"))
    ctx = fields.get(f"{arch}.context_length")
    inside = split_member(header.path)
    if inside is not None:  # a llamafile: named from the GGUF inside, its projector the one in its archive
        return _llamafile_entry(path, header.path, fields, arch, ctx, size)
    is_projector = (_text(fields.get("general.type")) == PROJECTOR_TYPE or arch == PROJECTOR_ARCH
                    or _projector_name(path.name))
    return LibraryEntry(
        path, "", arch=arch, title=_text(fields.get("general.name")),
        quant=_quant(fields.get("general.file_type")) or quant_of(path.name), size=size, parts=len(stamp),
        n_ctx_train=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None,
        is_projector=is_projector,
        width=_projector_width(path) if is_projector else _count(fields.get(f"{arch}.embedding_length")))


def _llamafile_entry(path: Path, model: Path, fields: dict[str, object], arch: str, ctx: object,
                     size: int) -> LibraryEntry:
    """A llamafile's entry: the model inside (``inside``), and the projector its archive carries."""
    try:
        projector = read_llamafile(path).projector
    except PlannerError:
        projector = None
    return LibraryEntry(
        path, "", arch=arch, title=_text(fields.get("general.name")),
        quant=_quant(fields.get("general.file_type")) or quant_of(model.name), size=size,
        n_ctx_train=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None,
        projector=None if projector is None else model.parent / projector.name,
        width=_count(fields.get(f"{arch}.embedding_length")), inside=model.name)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _projector_width(path: Path) -> int:
    """What the projector outputs per token (app/planner/memory/projector.py reads it); 0 when it cannot tell."""
    try:
        return read_projector(path).n_embd_out
    except PlannerError:
        return 0


def _text(value: object) -> str:
    """A metadata string as one printable line (names come from the file: control characters escaped)."""
    if not isinstance(value, str):
        return ""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def _quant(file_type: object) -> str:
    """``general.file_type`` (llama.cpp's ``llama_ftype``) → ``Q4_K_M``, ``F16``; '' when absent or unknown."""
    from gguf import LlamaFileType

    if not isinstance(file_type, int) or isinstance(file_type, bool):
        return ""
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return ""
    return "" if name == "GUESSED" else name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _projector_name(name: str) -> bool:
    return PROJECTOR_TYPE in name.lower()


def _without_path(message: str, path: Path) -> str:
    """The reader's sentence without the path the row already shows."""
    for prefix in (f"{path}: ", f"{path.name}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


# ---- projectors -----------------------------------------------------------------------------------
def _pair_projectors(group: list[LibraryEntry]) -> list[LibraryEntry]:
    """Each model in ``group`` (one snapshot, one folder) with the projector beside it that fits it (its
    output width the model's, the settings panel's rule: app.planner.memory.projector ``fits_model``): the only
    one, or the first by ``projector_rank`` (named most like the model, then F16): the Hub picker's rule too."""
    projectors = [e for e in group if e.is_projector and not e.error]
    if not projectors:
        return group

    def beside(model: LibraryEntry) -> Path | None:
        fits = [p for p in projectors if not model.width or fits_model(p.width, model.width)]
        return min(fits, key=lambda p: projector_rank(p.path.name, model.path.name)).path if fits else None

    return [replace(e, projector=beside(e)) if e.openable and not e.inside else e for e in group]
