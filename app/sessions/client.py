"""HTTP client for a running llama-server: slots, counters, streamed completions, slot files.

Standard library only (``http.client``), no Qt: the CLI, the smoke test and the GUI's worker
thread share it. Endpoints and fields are those of tools/server in the vendored llama.cpp:
``GET /health``, ``GET /slots``, ``GET /metrics`` (``--metrics``), ``POST /tokenize``,
``POST /completion`` (``stream``, ``id_slot``, ``cache_prompt``, ``n_cmpl``) and
``POST /slots/{id}?action=save|restore|erase`` (``--slot-save-path``). ``open_stream`` is the
streamed POST itself, for the chat (app/sessions/chat.py: ``/v1/chat/completions``).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.sessions.metrics import Counters
from app.sessions.sse import SseError, iter_events
from app.text import printable

#: Called with (stream index, text piece) as each piece arrives.
PieceCallback = Callable[[int, str], None]

#: The most a non-streamed answer may carry. llama-server's largest (``/slots`` with every slot's
#: parameters, ``/metrics``, ``/props`` with a long chat template) are tens of KiB.
ANSWER_LIMIT = 16 * 2**20
#: The most one streamed event may carry (a token's JSON, with probabilities when asked: a few KiB)
#: and a whole stream (a 100k-token reply is about 30 MiB of events).
EVENT_LIMIT = 2**20
STREAM_LIMIT = 256 * 2**20
#: Tokens a result may send past its ``n_predict`` before the stream is judged not llama-server's.
EXTRA_TOKENS = 8


class EngineError(Exception):
    """Talking to the engine failed; the message says what a user can do about it."""


class EngineUnreachable(EngineError):
    """Nothing answers at the URL (the engine exited, or was never started there)."""


class EngineMisbehaved(EngineError):
    """Something answers, but not as llama-server does: too slow, too large, or not its JSON."""


class EngineRejected(EngineError):
    """The engine answered with an error (HTTP status and llama-server's own message)."""

    def __init__(self, status: int, message: str, error_type: str = "") -> None:
        self.status = status
        self.server_message = message
        self.error_type = error_type
        super().__init__(f"the engine refused the request (HTTP {status}): {message}")


@dataclass(frozen=True)
class SlotInfo:
    """One entry of ``GET /slots`` (tools/server/server-context.cpp ``server_slot::to_json``)."""

    id: int
    n_ctx: int
    is_processing: bool
    n_prompt_tokens: int  # tokens held in the slot's cache (prompt + generated so far)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SlotInfo:
        return cls(int(data["id"]), int(data.get("n_ctx", 0)), bool(data.get("is_processing", False)),
                   int(data.get("n_prompt_tokens", 0)))


@dataclass
class Completion:
    """What one stream index (one of the ``n_cmpl`` results) has delivered so far."""

    index: int
    slot: int | None = None
    text: str = ""
    tokens_predicted: int = 0
    prompt_tokens: int = 0  # tokens_evaluated: the prompt's length in tokens
    prompt_processed: int = 0  # timings.prompt_n: prompt tokens decoded for this result
    prompt_cached: int = 0  # timings.cache_n: prompt tokens reused from the slot's cache
    stop_type: str = ""
    finished: bool = False
    pieces: int = 0  # content pieces received (one per token)
    tokens_per_second: float = 0.0  # timings.predicted_per_second


@dataclass
class StreamOutcome:
    """A streamed request's results by index. ``error`` is None only when every result finished
    and the engine sent ``[DONE]``; otherwise it says why, and the text received is still here."""

    completions: dict[int, Completion] = field(default_factory=dict)
    error: str | None = None
    broken: bool = False  # the connection was cut (engine died, network), not an engine-reported error

    def ordered(self) -> list[Completion]:
        return [self.completions[i] for i in sorted(self.completions)]


class Watchdog:
    """Cuts a connection when no answer (or, for a stream, no next line) arrives within ``seconds``.

    A socket timeout bounds each read, not the answer: a server sending one byte every few seconds
    never trips it. The watchdog thread shuts the socket down at the deadline, so the read that
    waits returns; ``fired`` then tells the reader why."""

    def __init__(self, sock: socket.socket | None, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._sock = sock
        self._due = time.monotonic() + seconds
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-client-watchdog", daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Something arrived: the next deadline counts from now."""
        self._due = time.monotonic() + self.seconds

    def stop(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(max(0.0, self._due - time.monotonic())):
            if time.monotonic() >= self._due:
                self.fired = True
                if self._sock is not None:
                    try:
                        self._sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return


@dataclass
class Stream:
    """An open streamed answer: its lines, bounded in size and in time between lines."""

    conn: http.client.HTTPConnection
    resp: http.client.HTTPResponse
    watchdog: Watchdog
    base_url: str

    def lines(self) -> Iterator[bytes]:
        """The raw lines as they arrive. Raises EngineMisbehaved for a line over EVENT_LIMIT, a stream
        over STREAM_LIMIT, or no line within the client's timeout."""
        try:
            yield from self._lines()
        except (OSError, http.client.HTTPException) as exc:
            # the watchdog shut the socket, or one read waited as long: say why, not how the read failed
            if self.watchdog.fired or isinstance(exc, TimeoutError):
                raise _too_slow(self.base_url, self.watchdog.seconds, "the next line of its stream") from exc
            raise

    def _lines(self) -> Iterator[bytes]:
        total = 0
        for line in response_lines(self.resp):
            total += len(line)
            if len(line) > EVENT_LIMIT and not line.endswith(b"\n"):
                raise EngineMisbehaved(f"{self.base_url} sent one streamed event of more than "
                                       f"{EVENT_LIMIT // 2**20} MiB: that is not llama-server's stream")
            if total > STREAM_LIMIT:
                raise EngineMisbehaved(f"{self.base_url} streamed more than {STREAM_LIMIT // 2**20} MiB for "
                                       "one request: that is not llama-server's stream; stopped reading")
            self.watchdog.kick()
            yield line
        if self.watchdog.fired:
            raise _too_slow(self.base_url, self.watchdog.seconds, "the next line of its stream")

    def close(self) -> None:
        self.watchdog.stop()
        self.conn.close()


class EngineClient:
    """One llama-server at ``base_url`` (``http://127.0.0.1:8080``), optional API key."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 120.0) -> None:
        parts = urllib.parse.urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--url {base_url}: not a valid http(s) URL (try http://127.0.0.1:8080)")
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # -- plumbing -------------------------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _headers(self, body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if body:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[
            http.client.HTTPConnection, http.client.HTTPResponse, Watchdog]:
        """Send the request; the response's headers have arrived when this returns. The watchdog is
        running (``self.timeout`` from the connection): the caller stops it."""
        conn = self._connect()
        payload = None if body is None else json.dumps(body).encode()
        watchdog: Watchdog | None = None
        try:
            conn.connect()
            watchdog = Watchdog(conn.sock, self.timeout)
            conn.request(method, self._prefix + path, body=payload, headers=self._headers(body is not None))
            resp = conn.getresponse()
        except socket.gaierror as exc:  # the name does not resolve: nothing to restart
            conn.close()
            raise EngineUnreachable(f"cannot find the host of {self.base_url} ({exc.strerror or exc}): check "
                                    "that --url is a valid http(s) URL, e.g. http://127.0.0.1:8080") from exc
        except OSError as exc:  # refused, reset, timed out
            conn.close()
            if watchdog is not None:
                watchdog.stop()
                if watchdog.fired:
                    raise _too_slow(self.base_url, self.timeout, "a complete answer") from exc
            raise EngineUnreachable(
                f"no engine answers at {self.base_url} ({exc.strerror or exc}); it may have exited: check "
                "its log and start it again (the sessions' text is kept, and is sent again when you continue)"
            ) from exc
        except http.client.HTTPException as exc:
            conn.close()
            if watchdog is not None:
                watchdog.stop()
                if watchdog.fired:
                    raise _too_slow(self.base_url, self.timeout, "a complete answer") from exc
            raise EngineUnreachable(f"the engine at {self.base_url} closed the connection ({exc})") from exc
        return conn, resp, watchdog

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
        conn, resp, watchdog = self._open(method, path, body)
        try:
            data = _read_limited(resp, self.base_url, path)
        except (OSError, http.client.HTTPException) as exc:
            if watchdog.fired or isinstance(exc, TimeoutError):
                raise _too_slow(self.base_url, self.timeout, f"a complete answer to {path}") from exc
            raise EngineUnreachable(f"the engine at {self.base_url} stopped mid-answer ({exc})") from exc
        finally:
            watchdog.stop()
            conn.close()
        if watchdog.fired:  # the socket was shut: what arrived is cut short
            raise _too_slow(self.base_url, self.timeout, f"a complete answer to {path}")
        if resp.status >= 400:
            raise _rejected(resp.status, data)
        return data

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = self._call(method, path, body)
        try:
            return json.loads(data or b"null")
        except ValueError as exc:
            raise EngineMisbehaved(f"{self.base_url}{path} did not answer with llama-server's JSON "
                                   f"({_preview(data)}): is this URL a llama-server?") from exc

    # -- endpoints ------------------------------------------------------------------------------

    def health(self) -> bool:
        """True once the model is loaded (200); False while loading (503)."""
        try:
            self._call("GET", "/health")
        except EngineRejected as exc:
            if exc.status == 503:
                return False
            raise
        return True

    def slots(self) -> list[SlotInfo]:
        data = self._json("GET", "/slots")
        try:
            if not isinstance(data, list):
                raise TypeError("not a list")
            return [SlotInfo.from_json(s) for s in data]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise EngineMisbehaved(f"{self.base_url}/slots answered {_preview(json.dumps(data).encode())}, "
                                   "not llama-server's list of slots: is this URL a llama-server "
                                   "started by this version of Headroom?") from exc

    def props(self) -> dict[str, Any]:
        """``/props``: the engine's settings, ``chat_template`` among them (the GGUF's, as the engine uses it)."""
        data = self._json("GET", "/props")
        if not isinstance(data, dict):
            raise EngineMisbehaved(f"{self.base_url}/props answered {_preview(json.dumps(data).encode())}, "
                                   "not llama-server's settings")
        return data

    def metrics(self) -> Counters:
        """Counters from ``/metrics``; EngineRejected (501) when the engine runs without ``--metrics``."""
        return Counters.from_text(self._call("GET", "/metrics").decode("utf-8", "replace"))

    def tokenize(self, text: str) -> list[int]:
        data = self._json("POST", "/tokenize", {"content": text})
        try:
            return [int(t) for t in data.get("tokens", [])]
        except (TypeError, ValueError, AttributeError) as exc:
            raise EngineMisbehaved(f"{self.base_url}/tokenize answered {_preview(json.dumps(data).encode())}, "
                                   "not a list of tokens: is this URL a llama-server?") from exc

    def slot_action(self, slot: int, action: str, filename: str | None = None) -> dict[str, Any]:
        """``save`` / ``restore`` / ``erase`` a slot's cache (needs ``--slot-save-path``)."""
        body: dict[str, Any] = {} if filename is None else {"filename": filename}
        data = self._json("POST", f"/slots/{slot}?action={action}", body)
        return data if isinstance(data, dict) else {}

    def open_stream(self, path: str, body: dict[str, Any]) -> Stream:
        """POST ``body`` with ``stream: true`` to ``path``: the open stream, whose ``lines()`` the caller
        reads and then closes. Errors before the stream starts raise (EngineUnreachable,
        EngineRejected with the engine's own message, EngineMisbehaved)."""
        conn, resp, watchdog = self._open("POST", path, {**body, "stream": True})
        if resp.status >= 400:
            try:
                raise _rejected(resp.status, _read_limited(resp, self.base_url, path))
            except (OSError, http.client.HTTPException) as exc:
                raise EngineUnreachable(f"the engine at {self.base_url} stopped mid-answer ({exc})") from exc
            finally:
                watchdog.stop()
                conn.close()
        watchdog.kick()
        return Stream(conn, resp, watchdog, self.base_url)

    def stream(self, body: dict[str, Any], on_piece: PieceCallback | None = None) -> StreamOutcome:
        """POST ``/completion`` with ``stream: true``; text pieces go to ``on_piece`` as they arrive.
        The stream is complete when each of the ``n_cmpl`` indices has sent its ``stop`` result.

        Errors before the stream starts raise (EngineUnreachable, EngineRejected); once it has
        started, nothing received is dropped: a cut stream or an engine error ends up in
        ``StreamOutcome.error``."""
        stream = self.open_stream("/completion", body)
        outcome = StreamOutcome()
        allowed = tokens_allowed(body)
        try:
            try:
                for event in iter_events(stream.lines()):
                    if event.done:  # only the OAI-compatible endpoints send [DONE]
                        break
                    if "error" in event.data:
                        outcome.error = "the engine reported an error mid-stream: " + _message(event.data["error"])
                        return outcome
                    _apply(outcome, event.data, on_piece)
                    if allowed is not None and any(c.pieces > allowed for c in outcome.completions.values()):
                        outcome.error = too_many_tokens(self.base_url, allowed - EXTRA_TOKENS)
                        return outcome
            except EngineMisbehaved as exc:
                outcome.broken = True
                outcome.error = str(exc)
                return outcome
            except (TypeError, ValueError, AttributeError) as exc:
                outcome.error = (f"the stream from {self.base_url} is not llama-server's ({exc.__class__.__name__}: "
                                 f"{exc}); stopped reading")
                return outcome
            except (OSError, http.client.HTTPException) as exc:
                outcome.broken = True
                outcome.error = (f"the stream from {self.base_url} was cut ({exc.__class__.__name__}: {exc}); "
                                 "the engine may have exited")
                return outcome
            except SseError as exc:
                outcome.error = f"the engine's stream could not be read: {exc}"
                return outcome
            # /completion (non-OAI) sends no [DONE]: the stream ends when every index has stopped
            expected = int(body.get("n_cmpl", 1))
            unfinished = [i for i in range(expected)
                          if i not in outcome.completions or not outcome.completions[i].finished]
            if unfinished:
                outcome.broken = True
                outcome.error = (f"the stream from {self.base_url} ended before the engine finished "
                                 f"(results {unfinished} incomplete); the engine may have exited")
            return outcome
        finally:
            stream.close()


def response_lines(resp: http.client.HTTPResponse) -> Iterator[bytes]:
    """A streamed response's raw lines, as they arrive; a line longer than EVENT_LIMIT comes in pieces
    (``Stream.lines`` refuses it)."""
    while True:
        line = resp.readline(EVENT_LIMIT + 1)
        if not line:
            return
        yield line


def tokens_allowed(body: dict[str, Any]) -> int | None:
    """How many pieces one result of ``body`` may stream: its ``n_predict`` (or ``max_tokens``) plus
    EXTRA_TOKENS; None when it asks for no limit."""
    for key in ("n_predict", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value >= 0:
            return value + EXTRA_TOKENS
    return None


def too_many_tokens(url: str, asked: int) -> str:
    return (f"the stream from {url} went on past the {asked} tokens asked for: that is not "
            "llama-server's stream; stopped reading")


def _read_limited(resp: http.client.HTTPResponse, url: str, path: str) -> bytes:
    """The whole answer, refused when it announces or reaches more than ANSWER_LIMIT bytes."""
    announced = resp.getheader("Content-Length", "")
    if announced.strip().isdigit() and int(announced) > ANSWER_LIMIT:
        raise EngineMisbehaved(f"{url}{path} announced an answer of {int(announced):,} bytes, more than any "
                               f"llama-server answer ({ANSWER_LIMIT // 2**20} MiB at most): is this URL a "
                               "llama-server?")
    chunks: list[bytes] = []
    total = 0
    while chunk := resp.read1(65536):
        total += len(chunk)
        if total > ANSWER_LIMIT:
            raise EngineMisbehaved(f"{url}{path} sent more than {ANSWER_LIMIT // 2**20} MiB, more than any "
                                   "llama-server answer; stopped reading: is this URL a llama-server?")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_slow(url: str, seconds: float, what: str) -> EngineMisbehaved:
    return EngineMisbehaved(f"{url} did not send {what} within {seconds:g} s (it may be stuck, or not be "
                            "llama-server); stopped waiting")


def _preview(data: bytes) -> str:
    """The start of an answer, safe to print."""
    text = data[:80].decode("utf-8", "replace")
    return printable(repr(text) + ("…" if len(data) > 80 else ""))


def _apply(outcome: StreamOutcome, data: dict[str, Any], on_piece: PieceCallback | None) -> None:
    """Fold one streamed result into its Completion (partial: content piece; final: stop + stats)."""
    index = int(data.get("index", 0))
    comp = outcome.completions.setdefault(index, Completion(index))
    # partial results carry "id_slot": -1; the final one names the slot that served this index
    if isinstance(data.get("id_slot"), int) and data["id_slot"] >= 0:
        comp.slot = int(data["id_slot"])
    piece = str(data.get("content") or "")
    if piece:
        comp.text += piece
        comp.pieces += 1
        if on_piece is not None:
            on_piece(index, piece)
    comp.tokens_predicted = int(data.get("tokens_predicted", comp.tokens_predicted))
    comp.prompt_tokens = int(data.get("tokens_evaluated", comp.prompt_tokens))
    timings = data.get("timings")
    if isinstance(timings, dict):
        comp.prompt_processed = int(timings.get("prompt_n", comp.prompt_processed))
        comp.prompt_cached = int(timings.get("cache_n", comp.prompt_cached))
        comp.tokens_per_second = float(timings.get("predicted_per_second", comp.tokens_per_second))
    if data.get("stop"):
        comp.finished = True
        comp.stop_type = str(data.get("stop_type", ""))


def _message(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _rejected(status: int, body: bytes) -> EngineRejected:
    """llama-server's error body is ``{"error": {"code": 400, "message": ..., "type": ...}}``."""
    text = body.decode("utf-8", "replace")
    try:
        err = json.loads(text).get("error", {})
        return EngineRejected(status, _message(err), str(err.get("type", "")) if isinstance(err, dict) else "")
    except (ValueError, AttributeError):
        if text.lstrip()[:1] == "<":  # a web page: some other server holds the port
            return EngineRejected(status, "the answer is a web page, not llama-server's JSON: is this URL a "
                                          "llama-server? (another program may hold the port)")
        return EngineRejected(status, text.strip()[:300] or "(empty answer)")
