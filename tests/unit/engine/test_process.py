"""ServerProcess against tiny real processes (``python -c``) standing in for an engine's behaviour:
503 while loading then 200, a log that keeps growing, silence, a process that ignores SIGTERM."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from app.engine.capabilities import free_port
from app.engine.process import EngineFailed, ServerProcess, ServerStatus

LOADING_SERVER = """
import http.server, sys
calls = {"n": 0}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        calls["n"] += 1
        code = 503 if calls["n"] <= 3 else 200
        self.send_response(code); self.end_headers()
        self.wfile.write(b'{"status":"ok"}' if code == 200 else b'{"error":{"code":503,"message":"Loading model"}}')
    def log_message(self, *a):
        print("request", calls["n"], flush=True)
print("srv  llama_server: loading model", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

CHATTY_THEN_SILENT = """
import sys, time
for i in range(20):
    print(f"load_tensors: line {i}", flush=True)
    time.sleep(0.1)
time.sleep(60)
"""

IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
time.sleep(60)
"""


EXITS_ON_SECOND_SIGTERM = """
import signal, sys, time
seen = []
def on_term(*_):
    seen.append(1)
    if len(seen) == 2:  # as llama-server: "Received second interrupt, terminating immediately."
        sys.exit(1)
signal.signal(signal.SIGTERM, on_term)
print("serving a stream", flush=True)
while True:
    time.sleep(0.05)
"""


def _server(script: str, tmp_path: Path, *args: str) -> ServerProcess:
    port = free_port()
    return ServerProcess([sys.executable, "-c", script, *args, str(port)], "127.0.0.1", port,
                         log_path=tmp_path / "engine.log")


def _started(script: str, tmp_path: Path, line: str) -> ServerProcess:
    """The script's server, started and past printing ``line`` (its signal handlers are set)."""
    server = _server(script, tmp_path)
    server.start()
    deadline = time.monotonic() + 20
    while line not in server.tail():
        assert server.running() and time.monotonic() < deadline
        time.sleep(0.02)
    return server


def test_loading_then_ready_with_statuses_in_order_and_the_log_kept(tmp_path: Path) -> None:
    server = _server(LOADING_SERVER, tmp_path)
    seen: list[ServerStatus] = []
    lines: list[str] = []
    server.add_listener(lambda s, d: seen.append(s))
    server.add_line_listener(lines.append)
    with server:
        server.start()
        server.wait_ready(timeout=20)
        assert seen == [ServerStatus.STARTING, ServerStatus.LOADING, ServerStatus.READY]
    assert seen[-1] == ServerStatus.STOPPED
    assert "srv  llama_server: loading model" in lines
    assert "srv  llama_server: loading model" in (tmp_path / "engine.log").read_text()


def test_the_deadline_stretches_while_the_log_grows_then_a_silent_engine_is_stopped(tmp_path: Path) -> None:
    server = _server(CHATTY_THEN_SILENT, tmp_path)
    server.start()
    with pytest.raises(EngineFailed) as err:
        server.wait_ready(timeout=0.3, stall=3.0)  # 30 times the gap between two of its lines
    assert err.value.failure.kind == "timeout"
    assert "load_tensors: line 19" in server.tail()  # it waited through all the log lines
    assert not server.running()


def test_stop_escalates_to_sigkill_for_an_engine_ignoring_sigterm(tmp_path: Path) -> None:
    server = _started(IGNORES_SIGTERM, tmp_path, "ignoring SIGTERM")
    assert server.stop(grace=0.5) == -9
    assert server.status == ServerStatus.STOPPED and not server.running()


def test_stop_sends_a_second_sigterm_before_killing(tmp_path: Path) -> None:
    """An engine busy with a stream does not stop on the first SIGTERM; llama-server exits on the second
    (exit 1), so Ctrl-C ends it cleanly instead of a SIGKILL ten seconds later (a walkthrough saw -9)."""
    server = _started(EXITS_ON_SECOND_SIGTERM, tmp_path, "serving a stream")
    assert server.stop(grace=30.0) == 1  # the second signal, not SIGKILL (-9)
    assert server.status == ServerStatus.STOPPED and not server.running()


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_another_server_answering_health_on_the_port_is_never_taken_for_the_engine(tmp_path: Path) -> None:
    foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    port = foreign.server_address[1]
    # an engine still loading, that has not bound its port (and never will)
    server = ServerProcess([sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(60)"],
                           "127.0.0.1", port, log_path=tmp_path / "engine.log")
    seen: list[ServerStatus] = []
    server.add_listener(lambda s, d: seen.append(s))
    try:
        server.start()
        with pytest.raises(EngineFailed) as err:
            server.wait_ready(timeout=0.5, stall=1.0)
    finally:
        server.stop(grace=0.5)
        foreign.shutdown()
        foreign.server_close()
    assert ServerStatus.READY not in seen
    assert err.value.failure.kind == "port_in_use"
    assert f"pid {os.getpid()}" in err.value.failure.message and "not the engine Headroom started" in str(err.value)


def test_serve_says_how_the_engine_ended_in_words() -> None:
    from app.commands.serve import stopped_how

    assert stopped_how(0) == "exit code 0" and stopped_how(1) == "exit code 1"
    assert stopped_how(-9) == "it did not stop when asked: killed (SIGKILL)"
    assert stopped_how(-15) == "ended by SIGTERM"
