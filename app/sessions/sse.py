"""Server-sent events as llama-server's ``/completion`` streams them.

tools/server/server-common.cpp ``format_oai_sse`` writes one event per result::

    data: {"index":0,"content":" the","tokens":[278],"stop":false,"id_slot":2,...}
    <blank line>

then ``data: [DONE]`` when every task of the request has answered, a comment line ``:`` as a
keep-alive ping (``sse_ping_interval``) and ``data: {"error":{...}}`` for an error mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"


@dataclass(frozen=True)
class SseEvent:
    """One ``data:`` payload: a JSON object, or ``done`` for the ``[DONE]`` terminator."""

    data: dict[str, Any]
    done: bool = False


class SseError(ValueError):
    """A ``data:`` line that is not JSON: the stream is not llama-server's."""


def iter_events(lines: Iterable[bytes]) -> Iterator[SseEvent]:
    """Events from raw lines (``b'data: {...}\\n'``); comments, ``event:``/``id:`` fields and blank
    lines are skipped. Several ``data:`` lines before a blank line are joined, per the SSE spec."""
    pending: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if pending:
                yield _event("\n".join(pending))
                pending = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            pending.append(value[1:] if value.startswith(" ") else value)
    if pending:
        yield _event("\n".join(pending))


def _event(payload: str) -> SseEvent:
    if payload.strip() == DONE:
        return SseEvent({}, done=True)
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise SseError(f"not a JSON event: {payload[:120]!r}") from exc
    if not isinstance(data, dict):
        raise SseError(f"not a JSON object: {payload[:120]!r}")
    return SseEvent(data)
