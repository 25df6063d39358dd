"""What the user typed → a :class:`HubRef`.

Accepted::

    hf:owner/name[/dir/file.gguf][:QUANT][@revision]
    owner/name[/dir/file.gguf][:QUANT][@revision]        (parse_ref only: a bare name could be a path)
    https://huggingface.co/owner/name[/blob|resolve|tree/<revision>[/dir/file.gguf]]
    hf.co/owner/name...                                   (with or without https://, www.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from app.hub.errors import HubError

#: huggingface_hub's repo-id rule (utils/_validators.py): letters, digits, ``-_.``; no ``--`` or ``..``.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_QUANT = re.compile(r"^[A-Za-z0-9_]+$")
_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)
_FORMS = ('"hf:owner/name", "hf:owner/name:Q4_K_M", "hf:owner/name/file.gguf@revision" '
          'or a https://huggingface.co/owner/name link')


@dataclass(frozen=True)
class HubRef:
    repo: str  # "owner/name"
    revision: str = "main"
    path: str | None = None  # a file in the repo, else pick one
    quant: str | None = None  # "Q4_K_M" from "owner/name:Q4_K_M" (matched case-insensitively)

    def __str__(self) -> str:
        text = f"hf:{self.repo}" + (f"/{self.path}" if self.path else "")
        text += f":{self.quant}" if self.quant else ""
        return text + (f"@{self.revision}" if self.revision != "main" else "")


def is_hub_ref(text: str) -> bool:
    """True for ``hf:…`` and huggingface.co / hf.co links only (a bare ``owner/name`` may be a path)."""
    return text.startswith("hf:") or bool(_URL.match(text))


def parse_ref(text: str) -> HubRef:
    """Parse a repo reference; HubError naming the accepted forms for anything else."""
    raw = text.strip()
    if _URL.match(raw):
        return _from_url(raw, text)
    body = raw.removeprefix("hf:")
    revision = "main"
    if "@" in body:
        body, revision = body.rsplit("@", 1)
        _need(revision, "the revision after @", text)
    quant = None
    if ":" in body:
        body, quant = body.rsplit(":", 1)
        if not _QUANT.match(quant):
            raise _bad(text, f"{quant!r} is not a quantization name like Q4_K_M")
    return _build(body.split("/"), revision, quant, text)


def _from_url(raw: str, text: str) -> HubRef:
    url = urlsplit(raw if "://" in raw else f"https://{raw}")
    parts = [unquote(p) for p in url.path.split("/") if p]
    if len(parts) >= 4 and parts[2] in ("blob", "resolve", "tree"):
        return _build([*parts[:2], *parts[4:]], parts[3], None, text)
    if len(parts) > 2:
        raise _bad(text, "a link to a file looks like huggingface.co/owner/name/blob/main/file.gguf")
    return _build(parts, "main", None, text)


def _build(parts: list[str], revision: str, quant: str | None, text: str) -> HubRef:
    if len(parts) < 2:
        raise _bad(text, "a repo is owner/name")
    owner, name, rest = parts[0], parts[1], parts[2:]
    for part in (owner, name):
        if not _NAME.match(part) or "--" in part or ".." in part:
            raise _bad(text, f"{part!r} is not a valid owner or repo name")
    path = "/".join(rest) or None
    if path is not None and (not path.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in rest)):
        raise _bad(text, f"{path!r} is not a .gguf file in the repo")
    return HubRef(f"{owner}/{name}", revision, path, quant.upper() if quant else None)


def _need(value: str, what: str, text: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise _bad(text, f"{what} is empty or has spaces")


def _bad(text: str, why: str) -> HubError:
    return HubError(f"not a Hugging Face repo reference: {text!r} ({why})", f"use {_FORMS}")
