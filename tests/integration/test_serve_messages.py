"""``headroom serve`` on the real engine, as a user reads it: each thing said once (the stop, a port in
use), the context as ``plan`` writes it, the smoke result in words, and ``sessions`` against it
(--url after the action; a fork into more sessions than slots is a request that cannot be used: 2).
A port in use is refused before the engine starts (2); one taken after that check is the engine's failure (1)."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app import cli
from app.engine.native_build import EngineBuild
from tests.fixtures.server_proc import headroom_serve

pytestmark = pytest.mark.engine


def _serve(model: Path, *extra: str, deadline_s: float = 150.0) -> tuple[int, str]:
    """Run ``headroom serve`` until it serves (then SIGTERM, as Ctrl-C) or exits by itself."""
    return headroom_serve([str(model), "--no-measure", *extra], deadline_s)


def test_a_port_in_use_is_refused_before_anything_starts_and_exits_2(engine_build: EngineBuild,
                                                                     tiny_model: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        rc, out = _serve(tiny_model, "-c", "4096", "--port", str(port))
    assert rc == 2, out  # a launch serve refuses, as for any other setting it cannot use
    assert out.count(f"port {port} on 127.0.0.1 is in use") == 1 and f"pid {os.getpid()}" in out, out
    assert "pass another --port, or leave --port out for a free one" in out, out
    assert "command:" not in out and "engine:" not in out and "plan:" not in out, out  # no engine started
    assert "Last engine log lines" not in out


def test_a_port_taken_after_the_check_is_said_once_without_the_engine_log(
        engine_build: EngineBuild, tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the race the check before launching cannot close: free when asked, taken before the engine binds
    # (the check is told the port is free; the port is really held, and the real engine meets it)
    from app.engine import process

    monkeypatch.setattr(process, "bind_problem", lambda host, port: None)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        rc = cli.main(["serve", str(tiny_model), "--no-measure", "-c", "4096", "--port", str(port)])
    out = capsys.readouterr()
    assert rc == 1, out
    assert "plan: cpu, 4,096 tokens" in out.out
    assert out.err.count("the port is in use") == 1, out.err
    assert f"headroom serve: the engine failed. The engine could not listen on 127.0.0.1:{port}" in out.err
    assert "Last engine log lines" not in out.err and out.err.count("\n") == 1, out.err


def test_serve_says_each_thing_once_and_sessions_take_url_after_the_action(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [sys.executable, "-m", "app", "serve", str(tiny_model), "--no-measure", "-c", "4096", "-np", "2",
            "-kvu", "--smoke", "--then-serve"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))  # this test's sessions only (not the engine's cache)
    assert proc.stdout is not None
    lines: list[str] = []
    rcs: list[int] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving at"):
                url = line.split()[2]
                rcs.append(cli.main(["sessions", "fork", "a prompt", "--k", "3", "--url", url]))
                rcs.append(cli.main(["sessions", "list", "--url", url]))
                proc.send_signal(signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert proc.wait(timeout=60) == 0, out
    assert "plan: cpu, 4,096 tokens" in out
    smoke = next(line for line in lines if line.startswith("smoke: "))
    assert "smoke-a " in smoke and " tokens, smoke-b " in smoke and "{" not in smoke, smoke
    assert out.count("engine stopped (exit code") == 1 and "engine: stopped" not in out, out
    assert "-0.00 MiB" not in out
    fork_rc, list_rc = rcs
    seen = capsys.readouterr()
    assert fork_rc == 2 and "a fork into 3 sessions needs 3 slots" in seen.err
    assert list_rc == 0 and "2 slots" in seen.out


class _Healthy(http.server.BaseHTTPRequestHandler):
    """Another server that says it is healthy to anyone who asks."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_another_server_answering_health_on_the_port_is_a_port_in_use(engine_build: EngineBuild,
                                                                       tiny_model: Path) -> None:
    foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        port = foreign.server_address[1]
        rc, out = _serve(tiny_model, "-c", "4096", "--port", str(port))
    finally:
        foreign.shutdown()
        foreign.server_close()
    assert rc == 2, out
    assert f"port {port} on 127.0.0.1 is in use (held by pid {os.getpid()}" in out, out
    assert "serving at" not in out and "plan vs actual" not in out and "command:" not in out, out
