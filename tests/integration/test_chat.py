"""The chat on the real llama-server (tiny llama with a ChatML template, ``-np 3 -kvu --metrics``):
``/v1/chat/completions`` streams a reply through the model's template with its timings, the next
turn reuses the conversation from the cache, ``n_cmpl`` forks K replies from one prompt evaluation,
Stop ends a reply that would not end by itself, and the engine's own refusals reach the caller."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.sessions.chat import ChatOutcome, ChatTooLong, Message, StopSwitch, chat
from app.sessions.client import EngineClient
from app.sessions.fork import ForkTooLarge, Sampling
from tests.fixtures.server_proc import RunningServer, running_server

pytestmark = pytest.mark.engine

POOL = ("-c", "4096", "-np", "3", "-kvu", "--metrics", "--fit", "off", "-ngl", "0")


@pytest.fixture(scope="module")
def engine(engine_build: EngineBuild, tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("chat-engine")
    with running_server(engine_build.server, tiny_chat_model, tmp / "server.log", POOL) as srv:
        yield srv


def test_a_reply_streams_through_the_template_and_the_next_turn_reuses_the_chat(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    streamed: dict[int, str] = defaultdict(str)
    question = [Message("user", "Tell me a story about a fox.")]
    first = chat(client, question, Sampling(12, seed=3, ignore_eos=True),
                 on_piece=lambda i, p: streamed.__setitem__(i, streamed[i] + p))
    assert first.ok, first.error
    reply = first.replies[0]
    assert reply.text and streamed[0] == reply.text
    assert reply.finish_reason == "length" and reply.predicted == 12 and reply.tokens_per_second > 0
    # The template wrapped the message: ChatML's markers are more tokens than the message's bytes alone.
    assert reply.prompt_tokens > len(b"Tell me a story about a fox.")
    assert "12 tokens" in reply.stats() and "tokens/s" in reply.stats()

    follow = [*question, Message("assistant", reply.text), Message("user", "And then?")]
    second = chat(client, follow, Sampling(8, seed=4, ignore_eos=True))
    assert second.ok, second.error
    again = second.replies[0]
    # The first turn's whole prompt is still in the cache: only the rest is evaluated.
    assert again.prompt_cached >= reply.prompt_tokens, (again, reply)
    assert again.prompt_tokens > reply.prompt_tokens
    assert f"{again.prompt_cached:,} of {again.prompt_tokens:,} prompt tokens reused from the cache" in again.stats()


def test_a_fork_of_three_evaluates_the_prompt_once(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    messages = [Message("system", "You are terse."), Message("user", "Three different openings, please.")]
    out = chat(client, messages, Sampling(16, temperature=1.0, seed=42, ignore_eos=True), k=3)
    assert out.ok, out.error
    texts = [r.text for r in out.replies]
    assert all(texts) and len(set(texts)) == 3, texts
    assert all(r.finish_reason == "length" and r.predicted == 16 for r in out.replies)
    assert out.proof is not None and out.proof.shared, str(out.proof)
    assert str(out.proof).startswith("prompt evaluated once, shared by 3")


def test_a_fork_larger_than_the_slots_is_refused_before_sending(engine: RunningServer) -> None:
    with pytest.raises(ForkTooLarge, match=r"needs 4 slots, but the engine .* has 3"):
        chat(EngineClient(engine.base_url), [Message("user", "hi")], Sampling(4), k=4)


def test_a_chat_longer_than_a_sessions_context_is_refused_with_both_lengths(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    long_text = " word" * 5000
    assert len(client.tokenize(long_text)) > 4096
    with pytest.raises(ChatTooLong) as refused:
        chat(client, [Message("user", "hi"), Message("assistant", long_text), Message("user", "and?")], Sampling(4))
    assert refused.value.n_ctx == 4096 and refused.value.tokens > 4096
    assert str(refused.value) == (f"this chat is {refused.value.tokens:,} tokens, more than the 4,096 tokens of "
                                  "context a session has on this engine: start a New chat, or launch with a longer "
                                  "context")
    out = chat(client, [Message("user", "hi")], Sampling(4))  # the engine goes on serving
    assert out.ok, out.error


def test_stop_ends_a_reply_that_would_not_end_by_itself_and_frees_the_slot(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    switch = StopSwitch()
    first_piece = threading.Event()
    result: list[ChatOutcome] = []

    def run() -> None:
        result.append(chat(client, [Message("user", "Go on forever.")], Sampling(4000, ignore_eos=True),
                           on_piece=lambda _i, _p: first_piece.set(), stop=switch))

    worker = threading.Thread(target=run)
    worker.start()
    assert first_piece.wait(120), "no piece streamed"
    switch.stop()
    worker.join(60)
    assert not worker.is_alive(), "the stopped stream did not return"
    out = result[0]
    assert out.ok and out.stopped, out
    reply = out.replies[0]
    assert reply.text and reply.stopped and not reply.finished
    assert reply.stats() == "stopped before the engine reported its numbers"
    # llama-server sees its client gone and cancels the task: no slot stays busy.
    end = time.monotonic() + 60
    while any(s.is_processing for s in client.slots()) and time.monotonic() < end:
        time.sleep(0.25)
    assert not any(s.is_processing for s in client.slots())


def test_an_engine_killed_mid_reply_is_said_and_the_text_received_is_kept(
        engine_build: EngineBuild, tiny_chat_model: Path, tmp_path: Path) -> None:
    with running_server(engine_build.server, tiny_chat_model, tmp_path / "server.log", POOL) as srv:
        client = EngineClient(srv.base_url)
        first_piece = threading.Event()
        result: list[ChatOutcome] = []

        def run() -> None:
            result.append(chat(client, [Message("user", "Go on forever.")], Sampling(4000, ignore_eos=True),
                               on_piece=lambda _i, _p: first_piece.set()))

        worker = threading.Thread(target=run)
        worker.start()
        assert first_piece.wait(120), "no piece streamed"
        srv.proc.kill()  # SIGKILL: the engine cannot finish the reply
        worker.join(60)
        assert not worker.is_alive()
    out = result[0]
    assert not out.ok and not out.stopped
    assert out.error is not None and "the engine may have exited" in out.error
    assert out.replies[0].text  # what arrived before the engine died is kept
