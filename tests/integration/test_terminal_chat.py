"""``headroom chat MODEL`` in a pseudo-terminal, as a user holds one: it starts the engine, a question is
answered in the model's template, a second turn carries the first, ``/fork 3`` answers the last message
three ways from one evaluation, Ctrl-C stops a reply without leaving, ``/exit`` stops the engine and
leaves nothing running; ``headroom sessions`` sees the conversation."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pexpect
import psutil
import pytest

from app.engine.native_build import EngineBuild
from app.sessions.store import SessionStore

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
PROMPT = ">>> "
#: Replies of exactly 12 tokens (the tiny model's end token ignored); /set makes one long enough to stop by
#: hand (the tiny model decodes thousands of tokens a second here).
FIXED = ("--max-tokens", "12", "--ignore-eos")


def _running_with(path: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if str(path) in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.Error, TypeError):
            continue
    return found


def _wait_reading(pid: int) -> None:
    """Until the chat's main thread waits in ``select`` for a key. CPython's readline shows the prompt and
    then selects; a SIGINT that lands between the two is seen only at the next key (Modules/readline.c,
    ``readline_until_enter_or_signal``), so a test that presses Ctrl-C on the prompt's first byte can
    lose it on a busy machine, where a person pressing it would press again."""
    syscall = Path(f"/proc/{pid}/syscall")
    deadline = time.monotonic() + 60
    while syscall.read_text().split()[0] not in ("23", "270"):  # x86-64 select, pselect6
        assert time.monotonic() < deadline, "the chat never waited for a key"
        time.sleep(0.05)


def _signal_state(pid: int) -> str:
    """What the kernel says of a chat that did not answer a Ctrl-C: its signal masks and each thread's call."""
    status = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(("Sig", "Shd"))]
    threads = {t.name: (t / "syscall").read_text().split()[0] + " " + (t / "comm").read_text().strip()
               for t in Path(f"/proc/{pid}/task").iterdir()}
    return f"{status}; threads {threads}"


def test_a_terminal_chat_answers_remembers_forks_stops_on_ctrl_c_and_leaves_nothing_running(
        engine_build: EngineBuild, tiny_chat_model: Path, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm",
           "HEADROOM_CACHE_DIR": str(tmp_path / "cache"), "HEADROOM_CONFIG_DIR": str(tmp_path / "config"),
           "HEADROOM_BATCHED_BENCH": "off"}
    chat = pexpect.spawn(sys.executable, ["-m", "app", "chat", str(tiny_chat_model), "-c", "65536", *FIXED,
                                           "--engine", str(engine_build.server)],
                         cwd=str(ROOT), env=env, encoding="utf-8", codec_errors="replace", timeout=300,
                         dimensions=(40, 160))
    try:
        chat.expect("starting the engine for ")
        chat.expect(r"chat with (http://127\.0\.0\.1:\d+) in session chat: the model's own chat template \(ChatML\), "
                    r"from its GGUF")
        url = chat.match.group(1)
        chat.expect_exact(PROMPT)
        chat.sendline("What is the capital of France?")
        chat.expect(r"\[12 tokens, \d+ tokens/s; 0 of (\d+) prompt tokens reused from the cache\]")
        first = int(chat.match.group(1))
        chat.expect_exact(PROMPT)
        # a second turn: the whole chat goes again, and the engine reuses what it holds of the first
        chat.sendline("And of Italy?")
        chat.expect(r"\[12 tokens, \d+ tokens/s; ([\d,]+) of ([\d,]+) prompt tokens reused from the cache\]")
        reused, second = (int(g.replace(",", "")) for g in chat.match.groups())
        assert second > first and reused >= first, (first, reused, second)
        chat.expect_exact(PROMPT)
        chat.sendline("/fork 3")
        chat.expect(r"\[prompt evaluated once, shared by 3 \(\d+-token prompt; /metrics: .*\); kept as sessions "
                    r"chat\.1, chat\.2, chat\.3; /pick N goes on with reply N\]")
        chat.expect_exact(PROMPT)
        # a long reply, stopped by Ctrl-C once it streams: the chat goes on
        chat.sendline("/set max-tokens 60000")
        chat.expect_exact("[max-tokens 60000 from the next reply]")
        chat.expect_exact(PROMPT)
        chat.sendline("Tell me everything.")
        chat.expect(r"Tell me everything\.\r?\n.")  # (the echo, then the first piece)
        chat.sendintr()
        chat.expect(r"\[stopped after (\d+) pieces; what came is kept\]")
        assert 0 < int(chat.match.group(1)) < 60000
        chat.expect_exact(PROMPT)
        _wait_reading(chat.pid)
        chat.sendintr()  # at the prompt: says how to leave, and stays
        if chat.expect_exact(["(to leave: /exit or Ctrl-D)", pexpect.TIMEOUT], timeout=60) == 1:
            pytest.fail(f"Ctrl-C at the prompt said nothing in 60 s; the chat's state: {_signal_state(chat.pid)}")
        chat.sendline("/exit")
        chat.expect_exact("engine stopped")
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert chat.exitstatus == 0, chat.before
    assert not [p for p in _running_with(tiny_chat_model) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    store = SessionStore(url, root=tmp_path / "cache")
    session = store.get("chat")
    assert session is not None and session.is_chat and session.messages is not None
    assert [m["content"] for m in session.messages if m["role"] == "user"] == [
        "What is the capital of France?", "And of Italy?", "Tell me everything."]
    assert all(re.fullmatch(r"chat\.\d", n) for n in store.sessions if n != "chat") and len(store.sessions) == 4
