"""Reading llama-server's /completion stream: the recorded K=3 fork comes apart into 3 replies."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.sessions.sse import SseError, iter_events

DATA = Path(__file__).parent / "data"


def _lines(text: str) -> list[bytes]:
    return [line.encode() for line in text.splitlines(keepends=True)]


def test_recorded_fork_stream_yields_three_indexed_replies_each_ending_with_stop() -> None:
    events = list(iter_events(_lines((DATA / "fork_k3_stream.txt").read_text())))
    finals = [e.data for e in events if e.data.get("stop")]
    assert sorted(f["index"] for f in finals) == [0, 1, 2]
    # only the final result names the slot; partial ones carry id_slot -1
    assert len({f["id_slot"] for f in finals}) == 3
    assert all(e.data["id_slot"] == -1 for e in events if not e.data.get("stop"))
    pieces = {i: "".join(e.data["content"] for e in events if e.data["index"] == i) for i in range(3)}
    assert all(pieces.values())


def test_comments_pings_and_multiline_data_follow_the_sse_rules() -> None:
    raw = b": ping\n\ndata: {\"a\":\ndata: 1}\n\nevent: x\ndata: [DONE]\n\n"
    events = list(iter_events(raw.splitlines(keepends=True)))
    assert events[0].data == {"a": 1}
    assert events[1].done


def test_a_payload_that_is_not_json_is_an_error_not_silence() -> None:
    with pytest.raises(SseError, match="not a JSON event"):
        list(iter_events([b"data: <html>502 Bad Gateway</html>\n", b"\n"]))


def test_a_stream_cut_mid_event_still_yields_the_last_complete_payload() -> None:
    events = list(iter_events([b'data: {"index":0,"content":"hi"}\n']))
    assert events[0].data["content"] == "hi"
