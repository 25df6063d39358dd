"""A fork in a unified KV pool whose other slots still hold earlier conversations (native/patches/0003,
docs/engine-patches.md): the real llama-server, tiny llama, ``-c 4096 -np 3 -kvu``.

A fork of 3 takes every slot. Its two children used to keep their old cells while the parent decoded
the prompt, so a 2,000-token fork beside two 1,500-token conversations found no room, and the retry
in halves handed the children half a prompt: "Invalid input batch." for every slot. Headroom's chat
met it on CI, forking a chat after a long reply. ``HEADROOM_KPOOL_ENGINE`` (tests/fixtures/kpool.py)
runs the same tests against another build, to see them fail without the patch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, fork
from tests.fixtures.kpool import kpool_engine_for_tests
from tests.fixtures.server_proc import RunningServer, running_server

pytestmark = pytest.mark.engine

POOL = ("-c", "4096", "-np", "3", "-kvu", "--metrics", "--fit", "off", "-ngl", "0", "--cache-ram", "0")
#: The log line patch 3 adds when a child frees what it cached.
FREED = "cached tokens for the child of task"


def _text(client: EngineClient, word: str, n_tokens: int) -> str:
    """A prompt of ``n_tokens`` tokens (within one) made of one repeated word."""
    per = len(client.tokenize(f" {word}" * 100)) / 100
    text = f" {word}" * round(n_tokens / per)
    assert abs(len(client.tokenize(text)) - n_tokens) <= n_tokens // 50
    return text


@pytest.fixture
def engine(engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(kpool_engine_for_tests(engine_build).server, tiny_model, tmp_path / "server.log",
                        POOL) as srv:
        yield srv


def _hold_two_conversations(client: EngineClient) -> None:
    for word in ("apple", "river"):  # one after the other: the second takes an unused slot (LRU)
        out = client.stream({"prompt": _text(client, word, 1500), "n_predict": 4, "cache_prompt": True})
        assert out.error is None, out.error
    held = sorted(s.n_prompt_tokens for s in client.slots())
    assert held[0] == 0 and held[1] >= 1450 and held[2] >= 1450, held


def test_a_fork_beside_two_idle_conversations_frees_its_childrens_cells_and_gives_three_replies(
        engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    _hold_two_conversations(client)
    result = fork(client, _text(client, "stone", 2000), ["a", "b", "c"], Sampling(n_predict=8, seed=3))
    assert result.ok, result.error  # before the patch: "Invalid input batch."
    assert len(result.completions) == 3 and all(c.tokens_predicted == 8 for c in result.completions)
    proof = result.proof
    assert proof is not None and proof.shared, str(proof)  # the prompt decoded once, in one pass
    freed = [line for line in engine.log_path.read_text(errors="replace").splitlines() if FREED in line]
    assert len(freed) == 2, freed  # both children dropped the conversation they held
    assert "Invalid input batch" not in engine.log_path.read_text(errors="replace")


def test_a_fork_that_cannot_fit_beside_a_running_reply_is_refused_as_a_full_context(
        engine: RunningServer) -> None:
    """A busy slot is not freed: the fork truly does not fit, and says so, not "Invalid input batch"."""
    client = EngineClient(engine.base_url)
    first_piece = threading.Event()
    running: dict[str, object] = {}

    def long_reply() -> None:
        running["out"] = client.stream(
            {"prompt": _text(client, "cloud", 2800), "n_predict": 1200, "ignore_eos": True, "cache_prompt": True},
            on_piece=lambda _i, _p: first_piece.set())

    reply = threading.Thread(target=long_reply)
    reply.start()
    assert first_piece.wait(120), "the long reply never started"
    result = fork(client, _text(client, "stone", 1500), ["a", "b"], Sampling(n_predict=8, seed=3))
    reply.join(120)
    assert not result.ok and result.error is not None
    assert "Context size has been exceeded" in result.error, result.error
    assert "Invalid input batch" not in engine.log_path.read_text(errors="replace")
    assert client.health()  # the engine is still serving
