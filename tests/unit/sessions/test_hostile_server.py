"""`headroom sessions` against a server that is not llama-server, or is broken: a local HTTP server
that drips one byte at a time, sends an endless body or an endless stream, answers garbage, an odd
``/slots``, a ``Content-Length`` of 10^12, or control sequences. Each ends with one sentence and
exit 1, in bounded time, and the sessions already stored stay as they were."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.sessions.fork import TurnResult, keep
from app.sessions.store import Session, SessionStore

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]

#: Hostile escape sequences: an OSC 52 clipboard write, a screen clear, a C1 control, a
#: right-to-left override.
HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\u202e"


def _drip(h: http.server.BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "1000")
    h.end_headers()
    for _ in range(1000):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.3)


def _endless_body(h: http.server.BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()  # no length: the body ends when the connection does, which it never does
    block = b"[" * 65536
    while True:
        h.wfile.write(block)


def _garbage(h: http.server.BaseHTTPRequestHandler) -> None:
    _answer(h, f"<<not json {HOSTILE}>>".encode())


def _odd_slots(h: http.server.BaseHTTPRequestHandler) -> None:
    _answer(h, json.dumps([{"id": "zero", "n_ctx": None}]).encode())


def _huge_length(h: http.server.BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(10**12))
    h.end_headers()
    h.wfile.write(b"[")


def _endless_stream(h: http.server.BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.end_headers()
    event = json.dumps({"index": 0, "content": " more", "stop": False, "id_slot": -1})
    while True:
        h.wfile.write(f"data: {event}\n\n".encode())


def _answer(h: http.server.BaseHTTPRequestHandler, body: bytes, status: int = 200) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


@pytest.fixture
def hostile() -> Iterator[tuple[str, dict[str, Handler]]]:
    """A local server; the test maps "METHOD /path" to what it does."""
    routes: dict[str, Handler] = {}

    class Hostile(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _route(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            handler = routes.get(f"{self.command} {self.path.split('?')[0]}")
            try:
                if handler is None:
                    _answer(self, b'{"error": {"code": 404, "message": "no such route"}}', 404)
                else:
                    handler(self)
            except OSError:  # the client hung up: what a bounded client does
                pass

        do_GET = do_POST = _route

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", routes
    finally:
        server.shutdown()
        server.server_close()


def _sessions(url: str, cache: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "app", "sessions", "--url", url, "--timeout", "3", *argv],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, HEADROOM_CACHE_DIR=str(cache)))
    return out, time.monotonic() - started


def _keep_one_session(url: str, cache: Path) -> SessionStore:
    """A session stored earlier, which no failure below may touch."""
    store = SessionStore(url, cache)
    keep(store, TurnResult([Session("earlier", 0, "the text kept from before", turns=1)], []))
    return store


def _earlier(url: str, cache: Path) -> str:
    session = SessionStore(url, cache).get("earlier")
    assert session is not None
    return session.text


@pytest.mark.parametrize(("handler", "said"), [
    (_drip, "did not send a complete answer to /slots within 3 s"),
    (_endless_body, "sent more than 16 MiB, more than any llama-server answer; stopped reading"),
    (_garbage, "/slots did not answer with llama-server's JSON"),
    (_odd_slots, "not llama-server's list of slots"),
    (_huge_length, "announced an answer of 1,000,000,000,000 bytes"),
], ids=["one-byte-every-0.3s", "endless-body", "not-json", "odd-slots", "content-length-10^12"])
def test_a_broken_server_is_one_sentence_and_exit_1(hostile: tuple[str, dict[str, Handler]], tmp_path: Path,
                                                    handler: Handler, said: str) -> None:
    url, routes = hostile
    routes["GET /slots"] = handler
    _keep_one_session(url, tmp_path)
    out, took = _sessions(url, tmp_path, "list")
    assert out.returncode == 1, out.stderr
    assert said in out.stderr
    assert "Traceback" not in out.stderr
    assert took < 30  # bounded by --timeout 3, not by the server
    assert "earlier" in out.stdout  # the stored sessions are still listed
    assert _earlier(url, tmp_path) == "the text kept from before"


def test_an_endless_stream_stops_past_the_tokens_asked_and_keeps_what_came(
        hostile: tuple[str, dict[str, Handler]], tmp_path: Path) -> None:
    url, routes = hostile
    routes["POST /completion"] = _endless_stream
    _keep_one_session(url, tmp_path)
    out, took = _sessions(url, tmp_path, "send", "newone", "Name three colors.", "--n-predict", "4")
    assert out.returncode == 1, out.stderr
    assert "went on past the 4 tokens asked for" in out.stderr
    assert took < 30
    stored = SessionStore(url, tmp_path)
    newone = stored.get("newone")
    assert newone is not None and " more" in newone.text and not newone.complete
    assert _earlier(url, tmp_path) == "the text kept from before"


def test_a_hung_stream_stops_after_the_timeout(hostile: tuple[str, dict[str, Handler]], tmp_path: Path) -> None:
    url, routes = hostile

    def hang(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        h.wfile.write(b'data: {"index": 0, "content": " one", "stop": false}\n\n')
        h.wfile.flush()
        time.sleep(40)

    routes["POST /completion"] = hang
    out, took = _sessions(url, tmp_path, "send", "s", "hello", "--n-predict", "8")
    assert out.returncode == 1, out.stderr
    assert "did not send the next line of its stream within 3 s" in out.stderr
    assert took < 30
    session = SessionStore(url, tmp_path).get("s")
    assert session is not None and " one" in session.text


def test_what_a_server_sends_reaches_the_terminal_escaped(hostile: tuple[str, dict[str, Handler]],
                                                          tmp_path: Path) -> None:
    url, routes = hostile
    routes["GET /slots"] = _garbage
    routes["POST /completion"] = lambda h: _answer(
        h, json.dumps({"error": {"code": 400, "message": f"bad {HOSTILE} request"}}).encode(), 400)
    for argv in (("list",), ("send", "s", "hi", "--n-predict", "2")):
        out, _ = _sessions(url, tmp_path, *argv)
        assert out.returncode == 1, out.stderr
        printed = out.stdout + out.stderr
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in printed, (argv, printed)
        assert "\\x1b]52" in printed  # shown, escaped, so the user sees what the server sent
