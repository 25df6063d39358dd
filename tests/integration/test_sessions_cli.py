"""``headroom sessions`` as a newcomer types it, on the real llama-server: an instruct model's chat goes
through its own chat template and a second turn carries the first; a model without one gets a plain
completion, said so, whose turns do not run together; a forgotten prompt or a name that is not a
session is a usage error that changes no session."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.sessions.store import SessionStore
from tests.fixtures.server_proc import RunningServer, running_server

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
POOL = ("-c", "2048", "-np", "4", "-kvu", "--metrics", "--fit", "off", "-ngl", "0")


@pytest.fixture
def chat_engine(engine_build: EngineBuild, tiny_chat_model: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(engine_build.server, tiny_chat_model, tmp_path / "server.log", POOL) as srv:
        yield srv


@pytest.fixture
def base_engine(engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(engine_build.server, tiny_model, tmp_path / "server.log", POOL) as srv:
        yield srv


def _sessions(url: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HEADROOM_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "app", "sessions", "--url", url, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def _stored(url: str, cache: Path) -> SessionStore:
    return SessionStore(url, root=cache)


def test_a_chat_goes_through_the_models_template_and_the_second_turn_carries_the_first(
        chat_engine: RunningServer, tmp_path: Path) -> None:
    url = chat_engine.base_url
    first = _sessions(url, tmp_path, "send", "What is the capital of France?", "--n-predict", "6", "--seed", "1")
    assert first.returncode == 0, first.stderr
    assert ("chat: the model's own chat template (ChatML), from its GGUF, applied by the engine (--raw for a plain "
            "completion)") in first.stderr
    second = _sessions(url, tmp_path, "continue", "And of Italy?", "--n-predict", "6", "--seed", "2")
    assert second.returncode == 0, second.stderr
    chat = _stored(url, tmp_path).get("chat")
    assert chat is not None and chat.is_chat and chat.turns == 2
    assert [m["role"] for m in chat.messages or []] == ["user", "assistant", "user", "assistant"]
    assert chat.messages is not None and chat.messages[0]["content"] == "What is the capital of France?"
    assert chat.messages[1]["content"] and chat.messages[2]["content"] == "And of Italy?"
    # the second turn's prompt held the first (the engine reused it from its cache)
    reuse = next(ln for ln in second.stdout.splitlines() if ln.startswith("session chat:"))
    reused = int(reuse.split("; ", 1)[1].split(" of ", 1)[0].replace(",", ""))
    assert reused > 10, reuse


def test_a_model_without_a_template_gets_a_plain_completion_said_so_with_turns_apart(
        base_engine: RunningServer, tmp_path: Path) -> None:
    url = base_engine.base_url
    first = _sessions(url, tmp_path, "send", "One sentence.", "--n-predict", "4", "--seed", "1")
    assert first.returncode == 0, first.stderr
    assert ("plain completion: the engine's default chat template (ChatML): the model's GGUF carries none (a base "
            "model's? the text goes to it as it is)") in first.stderr
    before = _stored(url, tmp_path).get("chat")
    assert before is not None and not before.is_chat
    _sessions(url, tmp_path, "continue", "chat", "Tell me a joke.", "--n-predict", "4")
    after = _stored(url, tmp_path).get("chat")
    assert after is not None and after.text.startswith(before.text)
    joined = after.text[len(before.text):]
    assert joined.startswith("Tell me a joke.") if before.text[-1:].isspace() else joined.startswith("\nTell me a joke.")


def test_a_forgotten_prompt_or_a_session_that_is_not_there_is_a_usage_error_that_changes_nothing(
        chat_engine: RunningServer, tmp_path: Path) -> None:
    url = chat_engine.base_url
    assert _sessions(url, tmp_path, "send", "Hello", "--n-predict", "4").returncode == 0
    assert _sessions(url, tmp_path, "fork", "A shared question", "--k", "2", "--n-predict", "4").returncode == 0
    file = _stored(url, tmp_path).path
    before = json.loads(file.read_text())
    forgot = _sessions(url, tmp_path, "continue", "s2")
    assert forgot.returncode == 2 and forgot.stdout == ""
    assert forgot.stderr.startswith("usage: headroom sessions continue [options] [NAME] PROMPT")
    assert "continue: what to say to session 's2' is missing: continue s2 PROMPT" in forgot.stderr
    nobody = _sessions(url, tmp_path, "continue", "s9", "Hi")
    assert nobody.returncode == 2 and "there is no session 's9' to continue (sessions: chat, s1, s2)" in nobody.stderr
    loose = _sessions(url, tmp_path, "send", "chat", "two", "words")
    assert loose.returncode == 2 and "3 words given, at most NAME and PROMPT: put the prompt in quotes" in loose.stderr
    empty = _sessions(url, tmp_path, "send")
    assert empty.returncode == 2 and "send: what to say is missing (PROMPT)" in empty.stderr
    assert json.loads(file.read_text()) == before  # no session changed
