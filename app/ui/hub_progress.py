"""What the Hugging Face dialog says: errors in a user's words (also as they leave a worker), transfer
speed and time left, the verifying of a kept part, and where a token comes from (never the token)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from app.hub.errors import HubError
from app.planner.units import Bytes

#: Added to a gated or unauthorised error: the dialog's own way to give a token.
TOKEN_HINT = "Paste a Hugging Face token (hf_…) in the Token field above: it is kept for this session only."


def hub_message(exc: HubError) -> str:
    """What went wrong and what to do, as the dialog shows it; a token would help: say where it goes."""
    text = exc.message.strip() or type(exc).__name__
    hint = exc.hint.strip().rstrip(".")
    lines = [text, f"{hint[:1].upper()}{hint[1:]}." if hint else ""]
    if exc.reason in ("gated", "auth"):
        lines.append(TOKEN_HINT)
    return "\n".join(line for line in lines if line)


def hub_work(fn: Callable[[threading.Event], object]) -> Callable[[threading.Event], object]:
    """A worker body whose HubError leaves it as :func:`hub_message` (TaskThread shows str(exc))."""

    def work(cancel: threading.Event) -> object:
        try:
            return fn(cancel)
        except HubError as exc:
            raise RuntimeError(hub_message(exc)) from exc

    return work


def token_placeholder() -> str:
    """Where a token comes from when the field is empty: HF_TOKEN, the stored `hf auth login`, or none."""
    if os.environ.get("HF_TOKEN", "").strip():
        return "empty: the token from HF_TOKEN"
    import huggingface_hub

    if huggingface_hub.get_token():
        return "empty: the token from your hf login"
    return "hf_… for gated or private repos"


def duration_text(seconds: float) -> str:
    """42 → '42 s', 185 → '3 min 05 s', 3720 → '1 h 02 min'."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def transfer_text(done: int, total: int, seconds: float, since: int = 0) -> str:
    """'1.2 GiB of 4.7 GiB — 35 MiB/s, 1 min 42 s left'. ``since``: bytes already on disk when this
    transfer started (a resumed download), which do not count towards its speed."""
    head = f"{Bytes(done)} of {Bytes(total)}"
    moved = done - since
    if seconds <= 0 or moved <= 0:
        return head
    speed = moved / seconds
    return f"{head} — {Bytes(speed)}/s, {duration_text(max(0, total - done) / speed)} left"


def verify_text(hashed: int, kept: int) -> str:
    return f"Verifying the kept part: {Bytes(hashed)} of {Bytes(kept)}…"


class TransferClock:
    """Speed and time left for one download: the first event is what was already on disk (download()
    reports it first), and the clock restarts after verifying a kept part, so neither counts as moved."""

    def __init__(self) -> None:
        self.since = -1
        self.started = 0.0

    def verifying(self) -> None:
        self.started = time.monotonic()

    def text(self, done: int, total: int) -> str:
        if self.since < 0:
            self.since, self.started = done, time.monotonic()
        return transfer_text(done, total, time.monotonic() - self.started, self.since)
