"""The chat's pieces that need no engine: the recorded ``/v1/chat/completions`` fork of 3 folds into
3 replies with their timings, and the request a chat sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.sessions.chat import ChatOutcome, Message, Reply, apply_chunk, request_body
from app.sessions.fork import Sampling
from app.sessions.sse import iter_events

DATA = Path(__file__).parent / "data"


def test_the_recorded_chat_fork_folds_into_three_replies_with_the_engines_numbers() -> None:
    lines = [ln.encode() for ln in (DATA / "chat_fork_k3_stream.txt").read_text().splitlines(keepends=True)]
    outcome = ChatOutcome([Reply(i) for i in range(3)])
    pieces: dict[int, str] = {}
    for event in iter_events(lines):
        if event.done:
            break
        apply_chunk(outcome, event.data, lambda i, p: pieces.__setitem__(i, pieces.get(i, "") + p))
    assert [r.finish_reason for r in outcome.replies] == ["length"] * 3
    assert all(r.text and pieces[r.index] == r.text for r in outcome.replies)
    first = outcome.replies[0]
    assert (first.predicted, first.prompt_cached, first.prompt_evaluated) == (4, 21, 49)
    assert first.stats().startswith("4 tokens, 54.5 tokens/s (max tokens reached); "
                                    "21 of 70 prompt tokens reused from the cache")


def test_a_request_carries_the_messages_the_length_and_a_fork_only_when_asked() -> None:
    messages = [Message("user", "hi")]
    one = request_body(messages, Sampling(32, seed=1))
    assert one["messages"] == [{"role": "user", "content": "hi"}] and one["n_predict"] == 32
    assert one["cache_prompt"] is True and "n_cmpl" not in one
    assert request_body(messages, Sampling(8), k=3)["n_cmpl"] == 3
    with pytest.raises(ValueError, match="at least one message"):
        request_body([], Sampling(8))
    with pytest.raises(ValueError, match="role is one of"):
        Message("robot", "beep")

