"""Shared-sequence sessions on the real llama-server (tiny llama, ``-np 4 -kvu --metrics``):
a fork of 3 decodes its prompt once and streams 3 different replies, each session continues
with the shared prompt reused, and failures (fork too large, engine killed mid-stream, engine
gone) say what happened without losing text."""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.engine.native_build import EngineBuild
from app.sessions.client import EngineClient, EngineRejected, EngineUnreachable
from app.sessions.fork import ForkTooLarge, Sampling, fork, restore, save, send
from app.sessions.smoke import run_smoke
from app.sessions.store import Session, SessionStore
from app.text import printable_text as model_text
from tests.fixtures.server_proc import RunningServer, running_server

pytestmark = pytest.mark.engine

#: What Headroom passes once it has planned (docs/domain.md §1), plus the session pool: 4 slots, one
#: unified KV cache, counters on.
POOL = ("-c", "2048", "-np", "4", "-kvu", "--metrics", "--fit", "off", "-ngl", "0")
DOCUMENT = "A long shared document that every session reads once. " * 6


@pytest.fixture(scope="module")
def engine(engine_build: EngineBuild, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("sessions-engine")
    (tmp / "slots").mkdir()
    with running_server(engine_build.server, tiny_model, tmp / "server.log",
                        (*POOL, "--slot-save-path", str(tmp / "slots"))) as srv:
        yield srv


def test_fork_of_three_gives_three_replies_from_one_prompt_evaluation_and_each_continues(
        engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    streamed: dict[int, str] = defaultdict(str)

    def on_piece(index: int, piece: str) -> None:
        streamed[index] += piece

    result = fork(client, DOCUMENT, ["a", "b", "c"], Sampling(n_predict=24, temperature=1.0, seed=42), on_piece)
    assert result.ok, result.error
    replies = [c.text for c in result.completions]
    assert all(replies) and len(set(replies)) == 3, replies
    assert dict(streamed) == dict(enumerate(replies)), "what streamed is what the sessions hold"
    assert len({s.slot for s in result.sessions}) == 3, "each reply came from its own slot"
    assert [s.text for s in result.sessions] == [DOCUMENT + r for r in replies]
    proof = result.proof
    assert proof is not None and proof.shared, str(proof)
    assert str(proof).startswith("prompt evaluated once, shared by 3")

    for s in result.sessions:
        turn = send(client, s, s.name, " Question?", Sampling(n_predict=8, seed=7))
        assert turn.ok, turn.error
        after = turn.sessions[0]
        assert after.text.startswith(s.text + " Question?")
        assert len(after.text) > len(s.text + " Question?") and after.turns == 2
        # the shared prompt is not decoded again for any of the three
        assert turn.cached_tokens[s.name] >= proof.prompt_tokens - 1, turn.cached_tokens


def test_a_fork_larger_than_the_slots_is_refused_with_the_slot_count(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    with pytest.raises(ForkTooLarge, match=r"needs 5 slots, but the engine .* has 4 \(-np 4\)"):
        fork(client, DOCUMENT, ["a", "b", "c", "d", "e"])
    # the engine's own limit (n_cmpl ≤ -np) reaches a client that skips the check, with its words
    with pytest.raises(EngineRejected, match=r"n_cmpl.*value <= 4"):
        client.stream({"prompt": "x", "n_cmpl": 5})


def test_slot_cache_saved_and_restored_into_another_slot_is_reused(engine: RunningServer) -> None:
    client = EngineClient(engine.base_url)
    first = send(client, None, "saved", DOCUMENT, Sampling(n_predict=8, seed=1))
    assert first.ok, first.error
    session = first.sessions[0]
    saved = save(client, session)
    assert saved["n_saved"] > 0
    target = ((session.slot or 0) + 1) % 4
    restored = restore(client, session, target)
    assert restored["n_restored"] == saved["n_saved"]
    held = {s.id: s.n_prompt_tokens for s in client.slots()}
    assert held[target] == saved["n_saved"]
    session.slot = target
    turn = send(client, session, "saved", " Again.", Sampling(n_predict=4, seed=2))
    assert turn.ok and turn.sessions[0].slot == target
    assert turn.cached_tokens["saved"] >= first.completions[0].prompt_tokens - 1


def test_smoke_passes_on_the_stock_engine_with_a_plain_llama(engine: RunningServer) -> None:
    result = run_smoke(engine.base_url, log_tail=lambda: engine.log_tail(50).splitlines())
    assert result.ok, result
    assert result.kind == "ok" and all(n > 0 for n in result.tokens.values()), result.tokens
    assert set(result.tokens) == {"smoke-a", "smoke-b"}
    assert "prompt evaluated once, shared by 2" in result.sharing


def _raw_controls(text: str) -> str:
    """The control characters in ``text`` a terminal would act on (all but the line break and tab)."""
    return "".join(c for c in text if not c.isprintable() and c not in "\n\t")


def test_cli_fork_continue_list_and_refusals(engine: RunningServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    base = ["sessions", "--url", engine.base_url]
    assert main([*base, "fork", DOCUMENT, "--k", "3", "--names", "x,y,z", "--n-predict", "8", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "prompt evaluated once, shared by 3" in out
    stored = SessionStore(engine.base_url).sessions
    for n in "xyz":  # each session's reply whole, under one header: not a line per token, interleaved
        reply = stored[n].text[len(DOCUMENT):]
        # the label on its own line, then the reply (walkthrough 14: not glued to it)
        assert out.count(f"[{n}] ") == 1 and f"[{n}] (slot {stored[n].slot})\n{model_text(reply)}\n" in out, out
    assert _raw_controls(out) == ""  # the replies' control characters escaped, the store keeps them as sent
    assert main([*base, "continue", "y", " And then?", "--n-predict", "4"]) == 0
    out = capsys.readouterr().out
    assert "session y: slot" in out and "prompt tokens reused from the cache" in out and " evaluated" in out
    assert main([*base, "list"]) == 0
    out = capsys.readouterr().out
    assert "engine at" in out and "4 slots" in out
    assert "2 turns, fork of 3 (x, y, z)" in out and "1 turn, fork of 3 (x, y, z)" in out
    # A fork without --names takes free names twice over; one told to reuse names says it replaces them.
    assert main([*base, "fork", "Two ways", "--k", "2", "--n-predict", "2"]) == 0
    assert main([*base, "fork", "Two more", "--k", "2", "--n-predict", "2"]) == 0
    assert {"s1", "s2", "s3", "s4", "x", "y", "z"} <= set(SessionStore(engine.base_url).sessions)
    capsys.readouterr()
    assert main([*base, "fork", "Again", "--names", "x,new", "--n-predict", "2"]) == 0
    assert "replacing x (--names): the text they held is dropped" in capsys.readouterr().err
    SessionStore(engine.base_url).put(Session("kept", None, "text from an engine since stopped"))
    assert main([*base, "list"]) == 0
    kept = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("kept "))
    assert "no slot" in kept and "None" not in kept
    assert main([*base, "fork", DOCUMENT, "--k", "5"]) == 2  # a request the engine cannot take
    assert "needs 5 slots" in capsys.readouterr().err
    assert main([*base, "continue", "nobody", "hi"]) == 2
    assert "no session 'nobody'" in capsys.readouterr().err


def test_engine_killed_mid_stream_keeps_what_arrived_and_then_is_named_as_gone(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> None:
    # -c 8192 (the last -c wins): room in the unified cache for two 3000-token replies, which take
    # tens of seconds on this CPU; the kill comes after 6 pieces, long before either could end.
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log", (*POOL, "-c", "8192")) as srv:
        client = EngineClient(srv.base_url)
        store = SessionStore(srv.base_url, root=tmp_path)
        got: dict[int, str] = defaultdict(str)
        pieces = 0

        def on_piece(index: int, piece: str) -> None:
            nonlocal pieces
            got[index] += piece
            pieces += 1
            if pieces == 6:
                srv.proc.kill()

        # Replies that cannot end before the test ends them: EOS is never sampled (ignore_eos), so only
        # n_predict stops them; a reply that ended by itself could sit whole in the socket buffer.
        result = fork(client, DOCUMENT, ["p", "q"], Sampling(n_predict=3000, temperature=1.0, seed=3, ignore_eos=True), on_piece)
        srv.proc.wait(timeout=30)  # gone for good (its sockets closed) before anything is sent to it again
        assert result.error is not None
        assert "the engine may have exited" in result.error and "text received so far is kept" in result.error
        store.put(*result.sessions)
        kept = SessionStore(srv.base_url, root=tmp_path)
        for index, name in enumerate(["p", "q"]):
            s = kept.get(name)
            assert s is not None and s.text == DOCUMENT + got[index] and not s.complete
        assert sum(len(t) for t in got.values()) > 0

        before = kept.get("p")
        with pytest.raises(EngineUnreachable, match="no engine answers at"):
            send(client, before, "p", " more")
        assert SessionStore(srv.base_url, root=tmp_path).get("p") == before


def test_smoke_on_an_engine_that_exits_says_so_and_suggests_the_diagnostic_launch(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> None:
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log", POOL) as srv:

        def kill_at_fork(step: str) -> None:
            if step.startswith("fork:"):
                srv.proc.kill()
                srv.proc.wait(timeout=30)

        result = run_smoke(srv.base_url, log_tail=lambda: srv.log_tail(50).splitlines(), on_step=kill_at_fork)
    assert not result.ok and result.kind == "engine-died", result
    assert "GGML_SCHED_DEBUG_REALLOC=1" in result.message


def test_an_engine_with_an_api_key_answers_only_a_client_that_sends_it(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> None:
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log",
                        (*POOL, "--api-key", "s3cret")) as srv:
        with pytest.raises(EngineRejected, match="HTTP 401"):
            EngineClient(srv.base_url).slots()
        result = fork(EngineClient(srv.base_url, "s3cret"), DOCUMENT, ["k1", "k2"], Sampling(n_predict=4, seed=1))
        assert result.ok and result.proof is not None and result.proof.shared, result.error


def test_cli_against_a_url_nobody_listens_on_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    for action in (["list"], ["smoke"], ["metrics"]):
        assert main(["sessions", "--url", url, *action]) == 1, action
        err = capsys.readouterr().err
        assert err.startswith(f"headroom sessions: no engine answers at {url}") and err.count("\n") == 1, err
        assert "exited during the smoke test" not in err  # it never answered at all
    assert main(["sessions", "--url", url, "fork", "hi", "--k", "1"]) == 2  # refused before asking the engine
    assert "--k 1: a fork makes at least 2 sessions" in capsys.readouterr().err


def test_cli_without_the_api_key_says_where_the_key_is(engine_build: EngineBuild, tiny_model: Path,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HEADROOM_API_KEY", raising=False)
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log",
                        (*POOL, "--api-key", "s3cret")) as srv:
        assert main(["sessions", "--url", srv.base_url, "metrics"]) == 1
        err = capsys.readouterr().err
        assert "HTTP 401" in err and "give the key: --api-key-file " in err and "HEADROOM_API_KEY" in err
        assert main(["sessions", "--url", srv.base_url, "--api-key", "s3cret", "metrics"]) == 0
        key_file = tmp_path / "key"  # issue 31: a key read from a file, on no command line
        key_file.write_text("s3cret\n")
        assert main(["sessions", "--url", srv.base_url, "metrics", "--api-key-file", str(key_file)]) == 0
        capsys.readouterr()
        assert main(["sessions", "--url", srv.base_url, "--api-key-file", str(tmp_path / "none"), "metrics"]) == 2
        assert "--api-key-file" in capsys.readouterr().err


def test_cli_on_a_one_slot_engine_offers_what_it_can_do_and_prints_replies_escaped(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log",
                        ("-c", "2048", "-np", "1", "--fit", "off", "-ngl", "0")) as srv:
        base = ["sessions", "--url", srv.base_url]
        assert main([*base, "list"]) == 0
        out = capsys.readouterr().out
        assert f"engine at {srv.base_url}: 1 slot\n" in out
        assert "fork" not in out.replace("a fork needs an engine with -np 2 or more", ""), out
        assert "send [NAME] PROMPT" in out and "-np 2 or more" in out

        # the tiny model's random weights write any byte: its reply streams to the terminal escaped
        assert main([*base, "send", "a", "Hello there", "--n-predict", "200", "--seed", "3"]) == 0
        out = capsys.readouterr().out
        reply = SessionStore(srv.base_url).sessions["a"].text[len("Hello there"):]
        assert _raw_controls(reply), "the reply has control characters to escape"  # what makes this a test
        assert _raw_controls(out) == "" and model_text(reply) in out, out
        assert main([*base, "continue", "a", " more", "--n-predict", "100", "--seed", "4"]) == 0
        assert _raw_controls(capsys.readouterr().out) == ""

        # a fork and the smoke test ask for what one slot cannot give: the same answer, 2 (refused)
        assert main([*base, "fork", "x", "--k", "2"]) == 2
        assert "needs 2 slots" in capsys.readouterr().err
        assert main([*base, "smoke"]) == 2
        said = capsys.readouterr()
        assert "the engine has 1 slot;" in said.out and "-np 2 or more" in said.out, said

        # an engine without --slot-save-path: the advice once
        assert main([*base, "save", "a"]) == 1
        err = capsys.readouterr().err
        assert err.count("--slot-save-path") == 1 and "restart the engine with --slot-save-path DIR" in err, err
        assert err.count("\n") == 1


def test_a_session_continued_on_a_restarted_engine_says_so_plainly(engine_build: EngineBuild, tiny_model: Path,
                                                                   tmp_path: Path) -> None:
    """Walkthrough finding 12: the engine a session began on stopped and another started; the session's
    stored text goes on, read again, and the turn says that in one plain sentence (no slot mechanics)."""
    with running_server(engine_build.server, tiny_model, tmp_path / "first.log", POOL) as srv:
        began = send(EngineClient(srv.base_url), None, "chat", DOCUMENT, Sampling(n_predict=4, seed=1))
        again = send(EngineClient(srv.base_url), began.sessions[0], "chat", " Hello", Sampling(n_predict=4, seed=1))
    assert "reused from the cache" in (again.reuse("chat") or "")  # the same engine: its cache reused
    with running_server(engine_build.server, tiny_model, tmp_path / "second.log", POOL) as srv:
        later = send(EngineClient(srv.base_url), again.sessions[0], "chat", " Hello", Sampling(n_predict=4, seed=1))
    assert later.ok and later.sessions[0].text.startswith(again.sessions[0].text + " Hello")
    said = later.reuse("chat") or ""
    assert said.startswith("continued from its stored text on a new engine (") and said.endswith(
        " prompt tokens read again)"), said
