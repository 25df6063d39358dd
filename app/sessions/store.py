"""Named sessions (name → slot, text so far), kept per engine URL in a small JSON file.

``<cache>/sessions/<sha256(url)[:16]>.json``, written atomically and flushed to the disk (app/files.py),
so a crash mid-write never leaves half a file and the text a
session has received is never lost to a failed save. The CLI and the window share the file: every
change re-reads it under a lock (``update``), so one never writes back a stale copy over sessions
the other made since.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.files import atomic_text
from app.paths import cache_dir

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the re-read still keeps what others wrote before
    fcntl = None  # type: ignore[assignment]

VERSION = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class Session:
    """One conversation pinned to one slot of the engine's KV pool.

    ``text`` is everything the slot's sequence holds, in order (shared prompt, replies, follow-ups):
    continuing re-sends it with ``cache_prompt`` on the same slot, so the engine reuses the cache and
    decodes only the new part. ``complete`` is False when the last reply was cut off."""

    name: str
    slot: int | None
    text: str
    turns: int = 0
    complete: bool = True
    origin: str = ""  # e.g. "fork of 3 (a, b, c)"
    #: A chat (the model's chat template, ``/v1/chat/completions``): its messages, ``{"role", "content"}``
    #: in order, and ``text`` a transcript for people. None: a plain completion, ``text`` the prompt itself.
    messages: list[dict[str, str]] | None = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Session:
        slot = data.get("slot")
        raw = data.get("messages")
        messages = None if not isinstance(raw, list) else [
            {"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in raw if isinstance(m, dict)]
        return cls(str(data["name"]), None if slot is None else int(slot), str(data.get("text", "")),
                   int(data.get("turns", 0)), bool(data.get("complete", True)), str(data.get("origin", "")),
                   messages)


def transcript(messages: list[dict[str, str]]) -> str:
    """A chat as people read it: ``user: …`` and ``assistant: …`` paragraphs."""
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def check_name(name: str) -> str:
    """Session names double as slot-file names (llama-server's ``fs_validate_filename``): letters,
    digits, ``_ . -``, up to 64 characters. Returns the name or raises ValueError."""
    if not _NAME_RE.match(name):
        raise ValueError(f"bad session name {name!r}: use letters, digits, '_', '.', '-' (max 64)")
    return name


def free_names(taken: Container[str], k: int) -> list[str]:
    """The first ``k`` of ``s1``, ``s2``, … not in ``taken``: a fork's names when it is given none."""
    free = (f"s{i}" for i in itertools.count(1) if f"s{i}" not in taken)
    return [next(free) for _ in range(k)]


def store_path(base_url: str, root: Path | None = None) -> Path:
    digest = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]
    return (root or cache_dir()) / "sessions" / f"{digest}.json"


class SessionStore:
    """Sessions of one engine URL; ``save()`` writes them all atomically."""

    def __init__(self, base_url: str, root: Path | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.path = store_path(self.base_url, root)
        self.sessions: dict[str, Session] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.sessions = {}
            return
        except (OSError, ValueError) as exc:
            raise ValueError(f"session file {self.path} is unreadable ({exc}); move it aside") from exc
        self.sessions = {s.name: s for s in (Session.from_json(item) for item in data.get("sessions", []))}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The file to itself while it is read and written (another ``headroom`` may be at it too)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def reload(self) -> None:
        """The sessions as the file has them now."""
        with self._locked():
            self._load()

    def update(self, change: Callable[[dict[str, Session]], None]) -> None:
        """Read the file as it is now, apply ``change`` to its sessions, write it: what another
        process stored since this store was read is kept."""
        with self._locked():
            self._load()
            change(self.sessions)
            self.save()

    def get(self, name: str) -> Session | None:
        return self.sessions.get(name)

    def put(self, *sessions: Session) -> None:
        """Add or replace sessions and write the file at once."""
        for s in sessions:
            check_name(s.name)
        self.update(lambda stored: stored.update({s.name: s for s in sessions}))

    def remove(self, name: str) -> bool:
        found: list[bool] = []
        self.update(lambda stored: found.append(stored.pop(name, None) is not None))
        return found[0]

    def save(self) -> None:
        doc = {"version": VERSION, "url": self.base_url,
               "sessions": [asdict(s) for s in self.sessions.values()]}
        atomic_text(self.path, json.dumps(doc, indent=1, ensure_ascii=False), durable=True)
