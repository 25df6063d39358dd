"""The files a launch loads beside its model, read from their GGUF headers once, at the planner's
boundary: LoRA adapters (``--lora``), a draft model (``-md``) and a vision projector (``--mmproj``).
``read_beside`` gives their shapes for a launch's paths; ``app/machine/request.py`` hands it to the
plan request, which asks it once per plan, so the memory and solve code price shapes and read no file.
The checks llama.cpp makes of them against the model (``lora_problem``, ``draft_problem``,
``fits_model``) are here too, pure, for the planner and the window's file pickers alike.

Every file is read once per (path, size, mtime), like the model's header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.planner.errors import PlannerError
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.gguf.reader import FileStamp, TensorInfo, file_stamp, gguf_files_in, read_header

if TYPE_CHECKING:
    from app.planner.settings import LaunchSettings

#: The word a projector's file name carries (llama.cpp's -hf picks ``mmproj*.gguf`` beside the model:
#: common/download.cpp; the Hub lists them as "mmproj-…").
MMPROJ_WORD = "mmproj"


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter file: its architecture and, per base tensor it adapts, its A and B tensors."""

    path: Path
    arch: str
    pairs: tuple[tuple[str, TensorInfo, TensorInfo], ...]  # (base tensor name, lora_a, lora_b)


@dataclass(frozen=True)
class Beside:
    """The shapes of what a launch loads beside its model, for the paths its settings name."""

    loras: tuple[LoraAdapter, ...] = ()
    draft: ModelShape | None = None
    projector: ProjectorShape | None = None

    def check(self, settings: LaunchSettings) -> None:
        """PlannerError unless these are the files ``settings`` names (a plan request built without
        reading them, or for other settings): the plan would price files it never saw."""
        have = (tuple(str(a.path) for a in self.loras), str(self.draft.path) if self.draft else "",
                str(self.projector.path) if self.projector else "")
        want = (tuple(str(Path(p)) for p in settings.lora), str(Path(settings.draft_model)) if settings.draft_model
                else "", str(Path(settings.mmproj)) if settings.mmproj else "")
        if have != want:
            raise PlannerError(f"the files beside the model were read for {have}, the launch names {want}")


#: A launch with nothing beside its model.
NOTHING = Beside()


def read_beside(settings: LaunchSettings) -> Beside:
    """The shapes of the files ``settings`` loads beside the model; PlannerError says which cannot be
    read or is not what its flag wants (the checks against the model are the planner's)."""
    if not (settings.lora or settings.draft_model or settings.mmproj):
        return NOTHING
    return Beside(loras=tuple(read_lora(p) for p in settings.lora),
                  draft=draft_shape(settings.draft_model) if settings.draft_model else None,
                  projector=read_projector(settings.mmproj) if settings.mmproj else None)


def _stamp(path: str) -> FileStamp:
    try:
        return file_stamp(path)
    except OSError as exc:
        raise PlannerError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_lora(path: str) -> LoraAdapter:
    """The adapter at ``path``, checked as llama.cpp checks it; PlannerError says what is wrong."""
    return _read_lora(_stamp(path))


@lru_cache(maxsize=32)
def _read_lora(stamp: tuple[str, int, int]) -> LoraAdapter:
    path = Path(stamp[0])
    header = read_header(path)
    f = header.fields
    if f.get("general.type") != "adapter" or f.get("adapter.type") != "lora":
        raise PlannerError(f"{path.name} is not a LoRA adapter (general.type {f.get('general.type')!r}, "
                           f"adapter.type {f.get('adapter.type')!r}; llama.cpp wants 'adapter' and 'lora')")
    a: dict[str, TensorInfo] = {}
    b: dict[str, TensorInfo] = {}
    for t in header.tensors:
        if t.name.endswith(".lora_a"):
            a[t.name.removesuffix(".lora_a")] = t
        elif t.name.endswith(".lora_b"):
            b[t.name.removesuffix(".lora_b")] = t
        elif not t.name.endswith("_norm.weight"):  # llama.cpp skips norm vectors, refuses the rest
            raise PlannerError(f"LoRA tensor {t.name} in {path.name} has an unexpected suffix")
    if set(a) != set(b):
        missing = sorted(set(a) ^ set(b))[0]
        raise PlannerError(f"LoRA tensor pair for {missing} in {path.name} is missing one component")
    return LoraAdapter(path, str(f.get("general.architecture", "")),
                       tuple((name, a[name], b[name]) for name in sorted(a)))


def lora_problem(shape: ModelShape, adapter: LoraAdapter) -> str:
    """Why llama.cpp would refuse ``adapter`` for ``shape`` ('' when it would not): another
    architecture, a tensor the model lacks or of another shape (src/llama-adapter.cpp)."""
    if adapter.arch != shape.arch:
        return (f"LoRA {adapter.path.name} is for {adapter.arch or 'no architecture'}, the model is {shape.arch} "
                "(llama.cpp: model arch and LoRA arch mismatch)")
    by_name = {t.name: t for t in shape.tensors}
    for name, ta, tb in adapter.pairs:
        base = by_name.get(name)
        if base is None:
            return f"LoRA {adapter.path.name} adapts {name}, which the model does not have (a LoRA for another base model?)"
        if not name.endswith("token_embd.weight") and (
                base.shape[:2] != (ta.shape[0], tb.shape[1]) or ta.shape[1] != tb.shape[0]):
            return f"LoRA {adapter.path.name}: {name} has the wrong shape for this model"
    return ""


def check_lora(model: ModelShape | None, path: str) -> LoraAdapter:
    """The adapter at ``path``, checked as llama.cpp checks it against ``model`` (None: the file
    alone); PlannerError says what is wrong (the window refuses a file with it)."""
    adapter = read_lora(path)
    if model is not None and (problem := lora_problem(model, adapter)):
        raise PlannerError(problem)
    return adapter


def draft_shape(path: str) -> ModelShape:
    """The draft model's shape (PlannerError when it cannot be read)."""
    _stamp(path)
    return read_shape(path)


def check_draft(model: ModelShape | None, path: str) -> ModelShape:
    """The draft model at ``path``; PlannerError when it cannot be read or llama.cpp would not
    speculate with it for ``model`` (None: the file alone): ``draft_problem``."""
    draft = draft_shape(path)
    problem = draft_problem(model, draft) if model is not None else ""
    if problem:
        raise PlannerError(f"{Path(path).name}: {problem}")
    return draft


def draft_problem(model: ModelShape, draft: ModelShape) -> str:
    """Why llama.cpp would not speculate with ``draft`` for ``model`` ('' when it would): the
    vocabularies must match (common/speculative.cpp ``common_speculative_are_compatible``: the same
    type and special tokens, sizes at most 128 apart)."""
    if abs(model.n_vocab - draft.n_vocab) > 128:
        return (f"the draft model's vocabulary ({draft.n_vocab:,} tokens) is not the model's ({model.n_vocab:,}): "
                "llama.cpp cannot speculate with it")
    return ""




@dataclass(frozen=True)
class ProjectorShape:
    """What the planner needs from a projector's header."""

    path: Path
    name: str
    proj_type: str
    n_embd: int  # the vision encoder's width (clip.vision.embedding_length)
    n_ff: int
    n_layer: int
    n_head: int
    image_size: int  # the warm-up image's side (clip.vision.image_size)
    patch_size: int
    #: The output width (mm.2.weight's ne[1] for the mlp type); 0 when the type's rule is not modelled.
    n_embd_out: int
    tensor_bytes: tuple[int, ...] = field(repr=False)

    @property
    def n_pos(self) -> int:
        """Tokens of the warm-up image: its patches, plus the class token (clip.cpp ``n_pos``)."""
        side = self.image_size // self.patch_size if self.patch_size else 0
        return side * side + 1


def _int(fields: dict[str, Any], key: str, path: Path, *, required: bool = True) -> int:
    value = fields.get(key)
    if value is None and not required:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PlannerError(f"{path.name}: not a vision projector llama.cpp can load: {key} is missing or not a count")
    return value


def read_projector(path: str | Path) -> ProjectorShape:
    """The projector's shape (cached by path, size and mtime). PlannerError for a file that is not one."""
    p = Path(path)
    try:
        _, size, mtime = file_stamp(p)
    except OSError as e:
        raise PlannerError(f"vision projector {p}: cannot read: {e.strerror or e}") from None
    return _read_cached(str(p), size, mtime)


@lru_cache(maxsize=16)
def _read_cached(path: str, size: int, mtime_ns: int) -> ProjectorShape:
    p = Path(path)
    header = read_header(p)
    f = header.fields
    arch = f.get("general.architecture")
    if arch != "clip":
        raise PlannerError(f"{p.name} is not a vision projector: its general.architecture is {arch!r}, not 'clip'")
    if f.get("clip.has_vision_encoder") is not True:
        raise PlannerError(f"{p.name} has no vision encoder (clip.has_vision_encoder): Headroom plans vision "
                           "projectors only")
    proj_type = f.get("clip.projector_type", f.get("clip.vision.projector_type"))
    if not isinstance(proj_type, str) or not proj_type:
        raise PlannerError(f"{p.name}: not a vision projector llama.cpp can load: no clip.projector_type")
    by_name = {t.name: t for t in header.tensors}
    mm2 = by_name.get("mm.2.weight")
    out = mm2.shape[1] if proj_type == "mlp" and mm2 is not None and len(mm2.shape) > 1 else 0
    name = f.get("general.name")
    return ProjectorShape(
        path=p, name=name if isinstance(name, str) else p.stem, proj_type=proj_type,
        n_embd=_int(f, "clip.vision.embedding_length", p), n_ff=_int(f, "clip.vision.feed_forward_length", p),
        n_layer=_int(f, "clip.vision.block_count", p), n_head=_int(f, "clip.vision.attention.head_count", p),
        image_size=_int(f, "clip.vision.image_size", p), patch_size=_int(f, "clip.vision.patch_size", p),
        n_embd_out=out, tensor_bytes=tuple(t.n_bytes for t in header.tensors))


def projector_beside(model: str | Path) -> Path | None:
    """A vision projector in the model's folder (a ``*mmproj*.gguf`` whose header says clip), the one
    whose output fits the model first when it can tell; None when there is none."""
    p = Path(model)
    candidates = [q for q in gguf_files_in(p.parent, MMPROJ_WORD) if q != p]
    found: list[ProjectorShape] = []
    for q in candidates:
        try:
            found.append(read_projector(q))
        except PlannerError:
            continue
    if not found:
        return None
    try:
        n_embd = read_shape(p).n_embd
    except PlannerError:
        return found[0].path
    fits = [f for f in found if fits_model(f.n_embd_out, n_embd)]
    return fits[0].path if fits else None


def fits_model(n_embd_out: int, n_embd: int) -> bool:
    """A projector whose output width is ``n_embd_out`` (0: it cannot tell) can feed a model of width
    ``n_embd``: mtmd.cpp refuses any other ("mismatch between text model (n_embd = …) and mmproj")."""
    return n_embd_out in (0, n_embd)


