"""A repo's GGUF files: listed through huggingface_hub's HfApi (or, offline, read from the Hugging Face
cache), split sets grouped, one picked for a :class:`HubRef`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from app.hub.cache import SHA256, hub_cache
from app.hub.errors import HubError, endpoint, is_translatable, translate
from app.hub.refs import HubRef

#: llama.cpp's split naming (common/common.cpp ``llama_split_path``): ``<prefix>-00001-of-00003.gguf``.
_SPLIT = re.compile(r"^(?P<base>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$", re.IGNORECASE)
#: A quantization token in a file name: Q4_K_M, Q8_0, IQ2_XXS, TQ1_0, MXFP4_MOE, BF16, F16, F32 ...
_QUANT = re.compile(r"(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|TQ\d_\d|MXFP4(?:_MOE)?|BF16|FP16|F16|F32)(?=$|[-.])",
                    re.IGNORECASE)
#: How a vision projector's file name starts on the Hub (``mmproj-….gguf``: llama.cpp's converter, and what
#: its ``-hf`` looks for beside a model, common/download.cpp).
PROJECTOR_WORD = "mmproj"


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # the LFS oid when the Hub gives one; without it a download is checked by size only

    @property
    def verified(self) -> bool:
        return self.sha256 is not None


@dataclass(frozen=True)
class RemoteGguf:
    repo: str
    commit: str  # the resolved commit sha (downloads and caches key on it)
    parts: tuple[RemoteFile, ...]  # one file, or every part of a split set, in order
    revision: str = "main"  # the branch, tag or commit it was listed at (the cache's refs name it)

    @property
    def path(self) -> str:
        return self.parts[0].path

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def name(self) -> str:
        """The file name without the split suffix, for display."""
        file = PurePosixPath(self.path).name
        m = _SPLIT.match(file)
        return f"{m['base']}.gguf" if m else file

    @property
    def quant(self) -> str:
        return quant_of(self.name)

    @property
    def is_llamafile(self) -> bool:
        """A ``.llamafile``: the GGUF inside an executable's archive (app/hub/preview.py reads its header)."""
        return self.path.lower().endswith(".llamafile")

    @property
    def verified(self) -> bool:
        """Every part has a sha256 to check a download against (else: size checked only)."""
        return all(p.verified for p in self.parts)

    @property
    def is_projector(self) -> bool:
        return PurePosixPath(self.path).name.lower().startswith(PROJECTOR_WORD)


@dataclass(frozen=True)
class RepoListing:
    repo: str
    commit: str
    ggufs: tuple[RemoteGguf, ...]  # sorted by size
    note: str = ""  # why it was read from the Hugging Face cache instead of the Hub, else ""


def quant_of(file_name: str) -> str:
    """``Qwen2.5-14B-Instruct-1M-Q8_0.gguf`` → ``Q8_0``; ``model-q4_k_m-00001-of-00003.gguf`` → ``Q4_K_M``;
    '' when the name carries none."""
    name = PurePosixPath(file_name).name
    m = _SPLIT.match(name)
    stem = m["base"] if m else name.removesuffix(".gguf").removesuffix(".GGUF").removesuffix(".llamafile")
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else ""


def group_parts(repo: str, commit: str, files: list[RemoteFile], revision: str = "main") -> list[RemoteGguf]:
    """GGUF files → one RemoteGguf per model; a split set only when all its parts are present."""
    singles: list[RemoteGguf] = []
    sets: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    for f in files:
        if f.path.lower().endswith(".llamafile"):  # a model and its engine in one file: planned from its header
            singles.append(RemoteGguf(repo, commit, (f,), revision))
            continue
        if not f.path.lower().endswith(".gguf"):
            continue
        m = _SPLIT.match(f.path)
        if m is None:
            singles.append(RemoteGguf(repo, commit, (f,), revision))
        else:
            sets.setdefault((m["base"], int(m["n"])), {})[int(m["i"])] = f
    for (_, n), found in sets.items():
        if sorted(found) == list(range(1, n + 1)):
            singles.append(RemoteGguf(repo, commit, tuple(found[i] for i in range(1, n + 1)), revision))
    return sorted(singles, key=lambda g: (g.size, g.path))


def list_ggufs(repo: str, revision: str = "main", *, token: str | None = None) -> RepoListing:
    """Every GGUF model in ``repo`` at ``revision`` (resolved to its commit), through huggingface_hub's
    HfApi. Offline (HF_HUB_OFFLINE=1), or when the Hub cannot be reached, the GGUFs the Hugging Face cache
    already holds for that revision, without network. HubError when neither has the repo (the commit is
    asked for with a TIMEOUT; the library pages the tree without one), or the repo holds no GGUF."""
    from huggingface_hub import HfApi, is_offline_mode
    from huggingface_hub.hf_api import RepoFile

    if is_offline_mode():
        return _from_cache(repo, revision, "offline mode (HF_HUB_OFFLINE)")
    api = HfApi(endpoint=endpoint(), token=token)
    try:
        try:
            commit = str(api.model_info(repo, revision=revision, timeout=TIMEOUT).sha or "")
            files = [RemoteFile(e.path, int(e.size), e.lfs.sha256 if e.lfs else None)
                     for e in api.list_repo_tree(repo, revision=commit, recursive=True) if isinstance(e, RepoFile)]
        except (json.JSONDecodeError, TypeError, KeyError) as exc:  # an answer that is not the Hub's JSON
            raise _not_json() from exc
        if not commit:
            raise _not_json()
    except Exception as exc:
        if not is_translatable(exc):
            raise
        error = translate(exc, repo=repo, revision=revision, what="listing its files")
        if error.reason == "unreachable":
            return _from_cache(repo, revision, error.message, error)
        raise error from None
    return _listing(repo, revision, commit, files)


def _listing(repo: str, revision: str, commit: str, files: list[RemoteFile], note: str = "") -> RepoListing:
    if not _SAFE_COMMIT.match(commit):
        raise HubError(f"{endpoint()} answered a commit id Headroom will not use as a folder name: {commit!r}",
                       "check HF_ENDPOINT: it should be the Hugging Face Hub or a mirror of it")
    # Header-only copies live at <root>/<repo>/<commit>/<path>: a path that could leave that folder is dropped.
    ggufs = group_parts(repo, commit, [f for f in files if _safe_path(f.path)], revision)
    if not ggufs:
        raise HubError(f"{repo} has no GGUF file at {revision}",
                       "Headroom plans GGUF models and llamafiles: look for a repo with -GGUF or llamafile in its name")
    return RepoListing(repo, commit, tuple(ggufs), note)


def _from_cache(repo: str, revision: str, why: str, error: HubError | None = None) -> RepoListing:
    """The cache's snapshot of ``repo`` at ``revision`` (a branch, tag or commit), as a listing of the
    files it holds; ``error`` (or an offline HubError) when it holds none."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        repos = scan_cache_dir(hub_cache()).repos
    except (CacheNotFound, OSError, ValueError):  # no cache at all, or not a folder
        repos = frozenset()
    for cached in repos:
        if cached.repo_id != repo or cached.repo_type != "model":
            continue
        for rev in cached.revisions:
            if revision in rev.refs or rev.commit_hash == revision:
                files = [RemoteFile(f.file_path.relative_to(rev.snapshot_path).as_posix(), f.size_on_disk,
                                    f.blob_path.name if SHA256.match(f.blob_path.name) else None) for f in rev.files]
                return _listing(repo, revision, rev.commit_hash, files,
                                f"{why}: the files already in the Hugging Face cache {hub_cache()}")
    if error is not None:
        raise error from None
    raise HubError(f"offline mode is on (HF_HUB_OFFLINE is set) and the Hugging Face cache {hub_cache()} holds "
                   f"no {repo}@{revision}", "unset HF_HUB_OFFLINE or set it to 0 to use the Hub")


def _not_json() -> HubError:
    return HubError(f"the Hub at {endpoint()} did not answer with JSON",
                    "check HF_ENDPOINT: it should be the Hugging Face Hub or a mirror of it")


_SAFE_COMMIT = re.compile(r"^(?!\.+$)[0-9A-Za-z._-]{1,96}$")  # a sha, a branch or a tag; never "." or ".."


def _safe_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and "\\" not in path and all(
        p not in ("", ".", "..") for p in parts)


def pick(listing: RepoListing, ref: HubRef) -> RemoteGguf:
    """The GGUF ``ref`` names (by path or quant), or the repo's only model; else HubError with the choices."""
    models = [g for g in listing.ggufs if not g.is_projector]
    if ref.path is not None:
        found = [g for g in listing.ggufs if ref.path in (p.path for p in g.parts)]
        if not found:
            raise HubError(f"{listing.repo} has no GGUF {ref.path!r}", f"choose one of: {_choices(models)}")
        if found[0].is_projector:
            raise HubError(f"{listing.repo}/{ref.path} is a vision projector (mmproj), not a model to plan alone",
                           f"choose one of: {_choices(models)}")
        return found[0]
    if ref.quant is not None:
        found = [g for g in models if g.quant.upper() == ref.quant.upper()]
        if len(found) == 1:
            return found[0]
        if not found:
            raise HubError(f"{listing.repo} has no {ref.quant} GGUF", f"choose one of: {_choices(models)}")
        raise HubError(f"{listing.repo} has {len(found)} {ref.quant} GGUFs",
                       f"name the file: {_choices(found, by_path=True)}")
    if len(models) == 1:
        return models[0]
    if not models:
        raise HubError(f"{listing.repo} holds only vision projectors (mmproj), no model to plan")
    raise HubError(f"{listing.repo} has {len(models)} GGUF models: say which",
                   f"choose one of: {_choices(models)}")


def likeness(projector: str, model: str) -> int:
    """How many leading characters a projector's file name shares with a model's once its "mmproj" is
    left out: ``mmproj-gemma-3-12b-f16.gguf`` is more like ``gemma-3-12b-it-Q4_K_M.gguf`` than
    ``mmproj-qwen2.5-vl-f16.gguf`` is."""
    stem = projector.lower().replace(PROJECTOR_WORD, "").strip("-_.")
    name = model.lower()
    return next((i for i, (a, b) in enumerate(zip(stem, name, strict=False)) if a != b), min(len(stem), len(name)))


def projector_rank(projector: str, model: str) -> tuple[int, bool, str]:
    """The order projectors are offered with a model in (the first is the one): the one named most like
    the model, then an F16 one (the precision llama.cpp's converter writes by default), then by name."""
    return -likeness(projector, model), quant_of(projector) != "F16", projector


def projector_for(listing: RepoListing, model: RemoteGguf) -> RemoteGguf | None:
    """The vision projector to fetch with ``model``: of the repo's projectors in the model's folder (where
    the window looks for one beside the model), the first by :func:`projector_rank`; None without one."""
    if model.is_projector:
        return None
    folder = PurePosixPath(model.path).parent
    found = [g for g in listing.ggufs if g.is_projector and PurePosixPath(g.path).parent == folder]
    return min(found, key=lambda g: projector_rank(g.name, model.name), default=None)


def _choices(models: list[RemoteGguf], *, by_path: bool = False) -> str:
    quants = [g.quant.upper() for g in models]
    return ", ".join(f"hf:{g.repo}/{g.path}" if by_path or not g.quant or quants.count(g.quant.upper()) > 1
                     else f"hf:{g.repo}:{g.quant}" for g in models)


#: Seconds to wait for the Hub to answer a listing's first request (huggingface_hub's own timeouts,
#: HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT, bound its HEADs and transfers).
TIMEOUT = 30.0


def longest_wait() -> float:
    """About the longest one Hub call goes unanswered before it fails: a listing's TIMEOUT, or a transfer's
    six tries in huggingface_hub, each waiting its timeout, with up to 23 s of back-off between them."""
    from huggingface_hub import constants

    return max(TIMEOUT, 6 * max(constants.HF_HUB_DOWNLOAD_TIMEOUT, constants.HF_HUB_ETAG_TIMEOUT) + 23)
