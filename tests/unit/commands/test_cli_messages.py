"""What a user saw running the CLI (a UX review), each finding as they would see it: a refusal with
a reason instead of a traceback, no abbreviated flags, serve refusing a simulated card, the verdict
first when the plan changed the settings, one exit-status table in every --help, hub and sessions
messages that say what is wrong."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app import cli
from app.engine.native_build import EngineBuild
from app.machine import devices
from app.machine import request as machine_request
from app.planner.devices import HostMemory
from app.planner.solve.speed import default_figures
from app.planner.units import Bytes, GiB

QWEN14B = "qwen2.5-14b-instruct-1m-q8_0"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


# --- 1. more slots than context: a reason, not a ZeroDivisionError ---

def test_more_slots_than_tokens_is_refused_with_what_to_change(
        shape_model: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", str(shape_model(QWEN14B)), "-np", "4097", "-c", "4096", "--gpu", "H200"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err == "headroom plan: 4096 tokens ÷ 4097 slots = 0 tokens per slot: raise -c or lower -np\n"
    # one slot per 256 tokens is still a launch the engine makes (padded to 256 cells each)
    assert cli.main(["plan", str(shape_model(QWEN14B)), "-np", "16", "-c", "4096", "--gpu", "H200"]) == 0


# --- 2. no abbreviated flags ---

@pytest.mark.parametrize(("argv", "says"), [
    (["measure", "M.gguf", "--gpu", "H200"], "unrecognized arguments: --gpu H200"),  # not --gpu-layers
    (["plan", "M.gguf", "--js"], "unrecognized arguments: --js"),
    (["plan", "M.gguf", "--meas"], "unrecognized arguments: --meas"),
    (["sessions", "--ur", "http://127.0.0.1:1", "list"], "choice: 'http://127.0.0.1:1'"),  # not --url
    (["engine", "build", "--job", "2"], "unrecognized arguments: --job"),
])
def test_an_abbreviated_flag_is_not_taken_for_another(argv: list[str], says: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert says in _usage_error(capsys, argv)


# --- 3. serve launches on the real devices only ---

def test_serve_refuses_a_card_this_machine_does_not_have(engine_build: EngineBuild, tiny_model: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serve", str(tiny_model), "--gpu", "H200", "--no-measure"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err == ("headroom serve: --gpu H200 plans for a card this machine does not have; serve launches on "
                   "the real devices: drop --gpu (or --gpu auto)\n")
    assert "engine: starting" not in out and "command:" not in out


# --- 4. the verdict first when the plan picked an alternative ---

def test_a_context_that_does_not_fit_says_so_on_the_first_line(
        shape_model: Callable[[str], Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Host RAM held still (the longer context with a host tail depends on it; the one chosen does not), and
    # the speed model's default figures, not this machine's calibration.
    monkeypatch.setattr(devices, "host_memory", lambda: HostMemory(32 * GiB, 30 * GiB))
    monkeypatch.setattr(machine_request, "machine_speed", lambda inv, host_attention=False, **_: default_figures(
        inv, host_attention=host_attention))
    model = str(shape_model(QWEN14B))
    # (exit 1: the plan fits only with a shorter context than the one asked for)
    assert cli.main(["plan", model, "--ctx", "512k", "--gpu", "RTX 4090"]) == 1
    lines = capsys.readouterr().out.splitlines()
    # both ends, each with its speed: the fastest (fully resident, chosen) and the longest with a host tail
    fastest, longest = "-c 49664 (~37 tok/s decode", "longest: -c 161536 KV of 34 layers on host (~"
    assert lines[0].startswith("512k DOES NOT FIT as asked (CUDA0 is short by 87.3 GiB); planned instead: "
                               + fastest) and longest in lines[0]
    largest = next(line for line in lines if line.startswith("  largest context: "))  # the same trade
    assert "49,664 fully resident (~37 tok/s decode" in largest and "161,536 with KV of 34 layers on host" in largest
    # --json is data: no such line, the same keys as before
    assert cli.main(["plan", model, "--ctx", "512k", "--gpu", "RTX 4090", "--json"]) == 1
    text = capsys.readouterr().out
    data = json.loads(text)
    assert data["launch"]["n_ctx"] == 49664 and data["feasible"] and "DOES NOT FIT" not in text
    assert data["asked_context_planned"] is False
    assert data["max_context"]["resident"] == 49664
    # as asked and fitting: no such line
    assert cli.main(["plan", model, "--ctx", "32k", "--gpu", "H200"]) == 0
    assert "DOES NOT FIT" not in capsys.readouterr().out


def test_a_huge_size_prints_in_tib() -> None:
    # the alternatives table printed "12800.0 GiB" for an -nkvo of a 2M context
    assert str(Bytes(12800 * GiB)) == "12.5 TiB" and str(Bytes(1023 * GiB)) == "1023.0 GiB"


# --- 5./6. one exit-status table in every --help; help text a user can read ---

@pytest.mark.parametrize("argv", [["plan"], ["measure"], ["serve"], ["sessions"], ["sessions", "fork"],
                                  ["engine"], ["engine", "build"], ["gui"]])
def test_every_subcommand_help_ends_with_its_exit_status(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 " in text and "; 1 " in text and "; 2 " in text


def test_serve_and_engine_build_help_read_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "`--unplanned`" in out
    with pytest.raises(SystemExit):
        cli.main(["engine", "build", "--help"])
    assert re.search(r"--jobs N\s+parallel compile jobs", capsys.readouterr().out)


def _every_help(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    yield path, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _every_help(child, (*path, name))


def test_no_help_names_a_source_file_and_the_chat_lists_its_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer's walkthrough read "(app/planner/law.py)" in serve --help and a chat --help that ended
    at "At the prompt:" with the list of /fork, /pick, /save left out."""
    monkeypatch.setenv("COLUMNS", "100")
    helps = dict(_every_help(cli.build_parser()))
    assert len(helps) > 15
    for path, text in helps.items():
        assert not re.search(r"\b(app|tests|native)/\S*\.py\b", text), (path, text)
    chat = helps[("chat",)]
    for command in ("/fork K", "/pick N", "/save", "/set max-tokens N", "/exit"):
        assert command in chat
    assert "Ctrl-C stops a reply" in chat and chat.index("At the prompt:") < chat.index("/fork K")


# --- 7. hub errors that say what is wrong ---

def _headroom(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *argv], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **env))


def test_offline_mode_is_named_with_how_to_turn_it_off() -> None:
    out = _headroom("plan", "hf:someone/model-GGUF", HF_HUB_OFFLINE="1")
    assert out.returncode == 2
    assert "offline mode is on (HF_HUB_OFFLINE is set)" in out.stderr and "someone/model-GGUF" in out.stderr
    assert "unset HF_HUB_OFFLINE or set it to 0" in out.stderr and "disk" not in out.stderr


def test_an_unreachable_hub_names_the_repo() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    out = _headroom("plan", "hf:someone/model-GGUF", HF_ENDPOINT=url)
    assert out.returncode == 2
    assert f"cannot reach {url} for someone/model-GGUF (listing its files)" in out.stderr


# --- 8. sessions: --url after the action, an engine that is not answering, a URL that is not one ---

def test_sessions_url_after_the_action_and_an_engine_not_answering(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    url = f"http://127.0.0.1:{_closed_port()}"
    for argv in (["sessions", "list", "--url", url], ["sessions", "--url", url, "list"]):
        assert cli.main(argv) == 1
        out, err = capsys.readouterr()
        assert out == f"engine at {url}: not answering\n"  # not also "(no sessions yet …)"
        assert f"no engine answers at {url}" in err
        assert "Connection refused" in err and "ConnectionRefusedError" not in err  # words, not a class name


def test_sessions_send_with_only_a_prompt_sends_it_to_session_chat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Walkthrough finding 13: ``send "Hello"`` is the prompt, to the default session (said in --help),
    not a session named Hello missing its prompt."""
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    url = f"http://127.0.0.1:{_closed_port()}"
    assert cli.main(["sessions", "--url", url, "send", "Hello"]) == 1  # sent: no engine answered it
    assert f"no engine answers at {url}" in capsys.readouterr().err
    assert cli.main(["sessions", "--url", url, "send"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: headroom sessions send [options] [NAME] PROMPT")
    assert "send: what to say is missing (PROMPT)" in err
    with pytest.raises(SystemExit):
        cli.main(["sessions", "send", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "usage: headroom sessions send [options] [NAME] PROMPT" in shown
    assert 'the session (default chat: `send "Hello"` is session chat)' in shown


def test_sessions_without_an_action_lists_what_it_can_do(capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer typing ``headroom sessions`` got argparse's "the following arguments are required: ACTION"."""
    assert cli.main(["sessions"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "required" not in err and err.startswith("headroom sessions: say what to do")
    for action in ("list", "send", "continue", "fork", "save", "restore"):
        assert re.search(rf"^  {action} +\S", err, re.M), action
    assert "headroom chat MODEL" in err


def test_sessions_against_a_web_server_that_is_no_engine_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import http.server
    import threading

    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        assert cli.main(["sessions", "--url", f"http://127.0.0.1:{web.server_port}", "list"]) == 1
    finally:
        web.shutdown()
    err = capsys.readouterr().err
    assert "the answer is a web page, not llama-server's JSON: is this URL a llama-server?" in err
    assert "<html" not in err.lower()


def test_sessions_sampling_flags_are_checked_before_sending(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as bad:
        cli.main(["sessions", "--url", "http://127.0.0.1:9", "send", "a", "hi", "--n-predict", "-5"])
    assert bad.value.code == 2
    assert "-5: tokens to generate are -1 (until the model stops) or 0 and up" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sessions", "--url", "http://127.0.0.1:9", "fork", "p", "--help"])
    shown = capsys.readouterr().out
    assert "tokens to generate per reply" in shown and "sampling temperature" in shown and "sampling seed" in shown


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1:8080"])
def test_sessions_url_that_is_not_one_says_so(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sessions", "list", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err == f"headroom sessions: --url {url}: not a valid http(s) URL (try http://127.0.0.1:8080)\n"


def test_sessions_without_url_says_where_it_goes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sessions", "list"]) == 2
    assert "--url is required (before or after the action)" in capsys.readouterr().err


def test_a_smaller_kv_type_chosen_is_named_on_the_first_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The demo's case: 512k of a 7B on a 24 GB card fits with a q8_0 cache; the first line said
    # "planned instead: other settings".
    from app.ui.demo import write_demo_model

    model = str(write_demo_model(tmp_path / "demo.gguf"))
    assert cli.main(["plan", model, "--ctx", "512k", "--gpu", "RTX 4090"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("planned instead: -ctk q8_0 -ctv q8_0"), first


def test_the_windows_options_open_the_window_without_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The window is the default command: ``headroom --demo --ctx 4k`` (``./dev app --demo``) is ``headroom gui
    --demo --ctx 4k``, not "invalid choice: '4k'"; ``--help`` and ``--version`` stay the program's own."""
    from app.commands import gui

    seen: list[tuple[bool, object]] = []
    def run(args: object) -> int:
        seen.append((getattr(args, "demo"), getattr(args, "ctx")))  # noqa: B009
        return 0

    monkeypatch.setattr(gui, "run", run)
    assert cli.main(["--demo", "--ctx", "4k"]) == 0 and seen == [(True, "4k")]
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith("headroom ")
