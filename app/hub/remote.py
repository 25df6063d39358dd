"""A repo's GGUF files: listed through the Hub API, split sets grouped, one picked for a :class:`HubRef`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from app.hub.errors import HubError, endpoint, is_translatable, translate
from app.hub.refs import HubRef

if TYPE_CHECKING:
    import httpx2

#: llama.cpp's split naming (common/common.cpp ``llama_split_path``): ``<prefix>-00001-of-00003.gguf``.
_SPLIT = re.compile(r"^(?P<base>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$", re.IGNORECASE)
#: A quantization token in a file name: Q4_K_M, Q8_0, IQ2_XXS, TQ1_0, MXFP4_MOE, BF16, F16, F32 ...
_QUANT = re.compile(r"(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|TQ\d_\d|MXFP4(?:_MOE)?|BF16|FP16|F16|F32)(?=$|[-.])",
                    re.IGNORECASE)


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # the LFS oid when the Hub gives one


@dataclass(frozen=True)
class RemoteGguf:
    repo: str
    commit: str  # the resolved commit sha (downloads and caches key on it)
    parts: tuple[RemoteFile, ...]  # one file, or every part of a split set, in order

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
    def is_projector(self) -> bool:
        return PurePosixPath(self.path).name.lower().startswith("mmproj")


@dataclass(frozen=True)
class RepoListing:
    repo: str
    commit: str
    ggufs: tuple[RemoteGguf, ...]  # sorted by size


def quant_of(file_name: str) -> str:
    """``Qwen2.5-14B-Instruct-1M-Q8_0.gguf`` → ``Q8_0``; ``model-q4_k_m-00001-of-00003.gguf`` → ``Q4_K_M``;
    '' when the name carries none."""
    name = PurePosixPath(file_name).name
    m = _SPLIT.match(name)
    stem = m["base"] if m else name.removesuffix(".gguf").removesuffix(".GGUF")
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else ""


def group_parts(repo: str, commit: str, files: list[RemoteFile]) -> list[RemoteGguf]:
    """GGUF files → one RemoteGguf per model; a split set only when all its parts are present."""
    singles: list[RemoteGguf] = []
    sets: dict[tuple[str, int], dict[int, RemoteFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        m = _SPLIT.match(f.path)
        if m is None:
            singles.append(RemoteGguf(repo, commit, (f,)))
        else:
            sets.setdefault((m["base"], int(m["n"])), {})[int(m["i"])] = f
    for (_, n), found in sets.items():
        if sorted(found) == list(range(1, n + 1)):
            singles.append(RemoteGguf(repo, commit, tuple(found[i] for i in range(1, n + 1))))
    return sorted(singles, key=lambda g: (g.size, g.path))


def list_ggufs(repo: str, revision: str = "main", *, token: str | None = None) -> RepoListing:
    """Every GGUF model in ``repo`` at ``revision`` (resolved to its commit). HubError when the repo,
    revision or Hub cannot be reached (each request waits at most TIMEOUT seconds for an answer), or the
    repo holds no GGUF."""
    from urllib.parse import quote

    base = f"{endpoint()}/api/models/{repo}"
    try:
        info = _get_json(base if revision == "main" else f"{base}/revision/{quote(revision, safe='')}", token)
        commit = str(info.get("sha") or revision) if isinstance(info, dict) else ""
        if not commit:
            raise _not_json()
        files: list[RemoteFile] = []
        url: str | None = f"{base}/tree/{quote(commit, safe='')}?recursive=true"
        while url is not None:
            page, url = _get_page(url, token)
            files += _files(page)
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=repo, revision=revision, what="listing its files") from None
    if not _SAFE_COMMIT.match(commit):
        raise HubError(f"{endpoint()} answered a commit id Headroom will not use as a folder name: {commit!r}",
                       "check HF_ENDPOINT: it should be the Hugging Face Hub or a mirror of it")
    # Local copies live at <root>/<repo>/<commit>/<path>: a path that could leave that folder is dropped.
    files = [f for f in files if _safe_path(f.path)]
    ggufs = group_parts(repo, commit, files)
    if not ggufs:
        raise HubError(f"{repo} has no GGUF file at {revision}",
                       "Headroom plans GGUF models: look for a repo with -GGUF in its name")
    return RepoListing(repo, commit, tuple(ggufs))


def _not_json() -> HubError:
    return HubError(f"the Hub at {endpoint()} did not answer with JSON",
                    "check HF_ENDPOINT: it should be the Hugging Face Hub or a mirror of it")


def _get_page(url: str, token: str | None) -> tuple[Any, str | None]:
    """One GET of the Hub API (at most TIMEOUT s without an answer): its JSON and the Link header's next
    page (the Hub paginates trees as GitHub does). huggingface_hub's HTTP errors propagate."""
    from huggingface_hub import get_session
    from huggingface_hub.utils._headers import build_hf_headers
    from huggingface_hub.utils._http import hf_raise_for_status

    r = get_session().get(url, headers=build_hf_headers(token=token), follow_redirects=True, timeout=TIMEOUT)
    hf_raise_for_status(r)
    try:
        data = r.json()
    except ValueError:
        raise _not_json() from None
    nxt = r.links.get("next", {}).get("url")
    return data, str(nxt) if nxt else None


def _get_json(url: str, token: str | None) -> Any:
    return _get_page(url, token)[0]


def _files(page: Any) -> list[RemoteFile]:
    """The files of one tree page: ``[{"type": "file", "path", "size", "lfs": {"oid"}}]``."""
    if not isinstance(page, list):
        raise _not_json()
    out: list[RemoteFile] = []
    for e in page:
        if not isinstance(e, dict) or e.get("type") != "file":
            continue
        lfs = e.get("lfs")
        sha = lfs.get("oid") if isinstance(lfs, dict) else None
        try:
            out.append(RemoteFile(str(e["path"]), int(e["size"]), str(sha) if sha else None))
        except (KeyError, TypeError, ValueError):
            raise _not_json() from None
    return out


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


def _choices(models: list[RemoteGguf], *, by_path: bool = False) -> str:
    quants = [g.quant.upper() for g in models]
    return ", ".join(f"hf:{g.repo}/{g.path}" if by_path or not g.quant or quants.count(g.quant.upper()) > 1
                     else f"hf:{g.repo}:{g.quant}" for g in models)


#: Seconds to wait for the Hub to connect or to send the next bytes.
TIMEOUT = 30.0


@contextmanager
def open_range(repo: str, commit: str, path: str, *, start: int = 0, end: int | None = None,
               token: str | None = None) -> Iterator[tuple[httpx2.Response, int]]:
    """A streaming GET of ``path`` from byte ``start`` (to ``end``, inclusive): yields the response and
    the offset its body starts at (0 when the server ignored the Range). huggingface_hub's errors
    propagate (callers translate them)."""
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.utils._headers import build_hf_headers
    from huggingface_hub.utils._http import hf_raise_for_status

    url = hf_hub_url(repo, path, revision=commit, endpoint=endpoint())
    headers = build_hf_headers(token=token)
    if start or end is not None:
        headers["Range"] = f"bytes={start}-{'' if end is None else end}"
    with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=TIMEOUT) as r:
        if r.status_code >= 400:
            r.read()
            hf_raise_for_status(r)
        yield r, start if r.status_code == 206 else 0
