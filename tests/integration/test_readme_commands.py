"""Every command README.md shows is run by a test: here, as written (``MODEL.gguf`` and ``Model.llamafile``
standing for files the tests generate), or by the test named for it (the bundle's tarball and install
script, which tests/bundle runs; ``./dev test``, which is CI itself). A command added to the README
without a way to run it fails ``test_every_readme_command_is_run``."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from tests.fixtures import gguf_factory, shapes
from tests.fixtures import llamafile_factory as lf
from tests.fixtures.server_proc import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIMEOUT_S = 300  # one command on 2 busy cores, generously

pytestmark = pytest.mark.engine


def readme_commands(text: str) -> list[str]:
    """The command lines of the README's ``sh`` blocks, without their comments."""
    found = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                found.append(command)
    return found


#: Commands another test runs as a user would: the test, and what its source must hold for it.
RUN_ELSEWHERE = {
    "tar xzf headroom-0.1.0-linux-x86_64.tar.gz": ("tests/bundle/test_bundle.py", "tarfile.open"),
    "headroom/install.sh": ("tests/bundle/test_bundle.py", '"install.sh"'),
    "headroom/install.sh --uninstall": ("tests/bundle/test_bundle.py", '"--uninstall"'),
    "./dev test": (".ci/run", "exec ./dev test"),
}


def _env(home: Path) -> dict[str, str]:
    """The checkout's user (its cache holds the engine ``./dev`` built), with settings of its own: a first start."""
    return dict(os.environ, QT_QPA_PLATFORM="offscreen", HEADROOM_CONFIG_DIR=str(home / "config"))


def _argv(command: str, files: dict[str, Path]) -> list[str]:
    return [str(files.get(word, word)) for word in shlex.split(command)]


def _run(argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=_env(home), capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


def _window(argv: list[str], home: Path) -> str:
    """The GUI command as given, with ``--screenshot``: it opens the window, plans, saves a picture and exits."""
    shot = home / "window.png"
    proc = _run([*argv, "--screenshot", str(shot), "--size", "1366x768"], home)
    assert proc.returncode == 0 and shot.stat().st_size > 10_000, proc.stdout + proc.stderr
    return proc.stdout


def _serve(argv: list[str], home: Path) -> str:
    """The server as given (on a free port: the tests share the machine), until it serves; then Ctrl-C."""
    proc = subprocess.Popen([*argv, "--port", str(free_port())], cwd=ROOT, env=_env(home), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out: list[str] = []
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if line.startswith("serving at "):
                proc.send_signal(signal.SIGINT)
                break
        rc = proc.wait(timeout=60)
        out += proc.stdout.readlines()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(out)
    assert rc == 0 and "plan vs actual:" in text and any(ln.startswith("serving at ") for ln in out), text
    return text


def test_every_readme_command_is_run(engine_build: EngineBuild, tmp_path: Path) -> None:
    commands = readme_commands(README.read_text())
    assert commands, "README.md shows no commands"
    llamafile = lf.zip_llamafile(tmp_path / "Model.llamafile", lf.items(
        ("tiny-chat.gguf", gguf_factory.ensure(shapes.TINY_CHAT)),
        (".args", lf.args_text("-m", "/zip/tiny-chat.gguf", "-c", "2048", "..."))))
    files = {"MODEL.gguf": gguf_factory.ensure(shapes.TINY_CHAT), "Model.llamafile": llamafile,
             ".venv/bin/headroom": Path(sys.executable).parent / "headroom"}
    runners: dict[str, Callable[[list[str], Path], object]] = {
        "./dev app": lambda argv, home: _window([*argv, "--demo"], home),
        "plan": lambda argv, home: _checked(_run(argv, home)),
        "serve": _serve,
        "Model.llamafile": _window,
    }
    for command in commands:
        if command in RUN_ELSEWHERE:
            where, holds = RUN_ELSEWHERE[command]
            assert holds in (ROOT / where).read_text(), f"{command!r}: {where} no longer runs it"
            continue
        words = shlex.split(command)
        key = next((k for k in runners if k == command or k in words), None)
        assert key is not None, f"README.md shows {command!r}, which no test runs: add it here"
        home = tmp_path / f"home-{len(list(tmp_path.iterdir()))}"
        home.mkdir()
        runners[key](_argv(command, files), home)


def _checked(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NVIDIA GeForce RTX 4090" in proc.stdout, proc.stdout  # the card the README plans for
    return proc.stdout


def test_the_reader_finds_commands_and_leaves_comments_out() -> None:
    text = "x\n```sh\n./dev app      # open it\n# a comment\nheadroom plan M --ctx 4k\n```\n```python\nno\n```\n"
    assert readme_commands(text) == ["./dev app", "headroom plan M --ctx 4k"]
