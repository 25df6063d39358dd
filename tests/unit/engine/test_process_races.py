"""Review findings (round 3) on ServerProcess: races a user meets by pressing Stop or piping output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.capabilities import free_port
from app.engine.process import EngineFailed, ServerProcess, ServerStatus

#: Stands in for a loading engine: runs until killed.
LOADS_FOREVER = "import time\nprint('srv  llama_server: loading model', flush=True)\ntime.sleep(120)\n"

#: Logs more than a pipe holds (64 KiB) before it serves /health, as llama-server does at -lv 4.
VERBOSE_THEN_READY = """
import http.server, sys
for i in range(4000):
    print(f"llama_model_loader: - tensor {i:5d}: blk.{i % 48}.attn_q.weight f16 [5120, 5120]", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))


def _server(script: str, tmp_path: Path) -> ServerProcess:
    port = free_port()
    return ServerProcess([sys.executable, "-c", script, str(port)], "127.0.0.1", port,
                         log_path=tmp_path / "engine.log")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_stop_pressed_while_the_engine_is_being_spawned_leaves_no_engine_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The window's Stop runs on another thread; it can arrive after Popen but before start() has
    # recorded the process, when stop() sees nothing to stop.
    server = _server(LOADS_FOREVER, tmp_path)
    spawn = server._spawn
    pids: list[int] = []

    def spawn_then_user_stops() -> subprocess.Popen[bytes]:
        proc = spawn()
        pids.append(proc.pid)
        assert server.stop() is None  # too early: stop() cannot see the process yet
        return proc

    monkeypatch.setattr(server, "_spawn", spawn_then_user_stops)
    try:
        with pytest.raises(EngineFailed) as err:
            server.start()
        assert err.value.failure.kind == "stopped"
        assert not server.running() and _gone(pids[0])
        assert not list((tmp_path / "cache" / "running").glob("engine-*.json"))  # no stale PID file
    finally:
        server.stop(grace=0.5)


def test_a_line_listener_that_raises_does_not_stall_the_engine(tmp_path: Path) -> None:
    # `headroom serve ... | head` makes the console listener's print raise BrokenPipeError; the log
    # reader must keep draining the engine's output, or the engine blocks writing and never serves.
    server = _server(VERBOSE_THEN_READY, tmp_path)

    def broken_console(line: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    server.add_line_listener(broken_console)
    with server:
        server.start()
        server.wait_ready(timeout=10, stall=3)
        assert server.status == ServerStatus.READY
    assert "tensor  3999" in (tmp_path / "engine.log").read_text()


def test_an_engine_stopped_before_wait_ready_is_reported_stopped_not_crashed(tmp_path: Path) -> None:
    # The window's Stop can complete between start() and wait_ready() on the launch thread: the
    # user asked for it, so the message must not read as an engine failure to investigate.
    server = _server(LOADS_FOREVER, tmp_path)
    server.start()
    server.stop(grace=2.0)
    with pytest.raises(EngineFailed) as err:
        server.wait_ready(timeout=5)
    assert err.value.failure.kind == "stopped"
