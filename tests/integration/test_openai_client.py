"""The official OpenAI Python client against ``headroom serve``, as a user points one at it: the model is
listed by its name (``--alias`` from the GGUF's ``general.name``), not a file path; a chat reply comes
back whole and streamed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from app.engine.native_build import EngineBuild

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(engine_build: EngineBuild, tiny_chat_model: Path) -> Iterator[tuple[str, list[str]]]:
    """``headroom serve`` on the tiny ChatML model: (its URL, the lines it printed until then)."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", str(tiny_chat_model), "-c", "2048", "--no-measure"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line.rstrip())
            if line.startswith("serving at ") or len(out) > 300:
                break
        url = next((ln.split()[2] for ln in out if ln.startswith("serving at ")), None)
        assert url, "\n".join(out)
        yield url, out
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a user stops it
        proc.wait(timeout=60)


def test_the_openai_client_lists_the_model_by_name_chats_and_streams(served: tuple[str, list[str]]) -> None:
    url, out = served
    assert 'model: served as "headroom-tiny" (the name OpenAI clients list; --alias to change it)' in out
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="not-needed-on-loopback", timeout=120)
    names = [m.id for m in client.models.list()]
    assert names == ["headroom-tiny"]  # not /home/…/tiny-llama-chat-….gguf
    reply = client.chat.completions.create(model=names[0], messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=8, temperature=0)
    assert reply.choices[0].message.role == "assistant" and reply.usage is not None
    assert reply.usage.completion_tokens == 8 and reply.choices[0].finish_reason == "length"
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=names[0], messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0, stream=True)
        if c.choices]
    assert len([p for p in pieces if p]) >= 2 and "".join(pieces) == reply.choices[0].message.content
