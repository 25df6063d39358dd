"""A chat on the running engine: ``/v1/chat/completions``, the model's own chat template, streamed.

llama-server applies the template the GGUF carries (``tokenizer.chat_template``) to ``messages``
and streams OpenAI chunks (tools/server/server-task.cpp ``to_json_oaicompat_chat_stream``)::

    data: {"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}],...}
    data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],...,"timings":{"cache_n":34,
           "prompt_n":46,"predicted_n":8,"predicted_per_second":18.8,...}}
    data: [DONE]

Each index's last chunk carries its ``timings``: ``cache_n`` prompt tokens reused from the cache,
``prompt_n`` evaluated, ``predicted_n`` generated at ``predicted_per_second`` (no ``include_usage``:
its extra chunk has no index). ``n_cmpl = K`` (llama-server's own field, as for ``/completion``)
forks the reply: the prompt is evaluated once and its cells shared by K slots (app/sessions/fork.py),
and ``/metrics`` before and after proves it (``SharingProof``). Continuing a chat re-sends the whole
conversation with ``cache_prompt``: the engine evaluates only what its cache does not hold.
What this build's server does with chat requests: docs/domain.md §1 (llama-server).
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.sessions.client import (
    EXTRA_TOKENS,
    Completion,
    EngineClient,
    EngineMisbehaved,
    EngineRejected,
    PieceCallback,
    Stream,
    tokens_allowed,
    too_many_tokens,
)
from app.sessions.fork import (
    ForkTooLarge,
    Sampling,
    SharingProof,
    TurnResult,
    check_fork_size,
    counters,
    keep,
    pin_slot,
)
from app.sessions.sse import SseError, iter_events
from app.sessions.store import Session, SessionStore, check_name, transcript

PATH = "/v1/chat/completions"
#: OpenAI's roles, as chat templates name them.
ROLES = ("system", "user", "assistant")
#: A reply as the engine samples it unless told otherwise.
REPLY = Sampling(256)


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"a chat message's role is one of {', '.join(ROLES)}, not {self.role!r}")

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass
class Reply:
    """One streamed reply (one of the ``n_cmpl`` indices) as far as it has come."""

    index: int
    text: str = ""
    finish_reason: str = ""  # "stop" (end of generation), "length" (max tokens); "" while running or cut
    predicted: int = 0  # timings.predicted_n
    tokens_per_second: float = 0.0  # timings.predicted_per_second
    prompt_evaluated: int = 0  # timings.prompt_n
    prompt_per_second: float = 0.0  # timings.prompt_per_second
    prompt_cached: int = 0  # timings.cache_n
    stopped: bool = False  # the user stopped it
    pieces: int = 0  # content pieces received (one per token)

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    @property
    def prompt_tokens(self) -> int:
        return self.prompt_evaluated + self.prompt_cached

    def short_stats(self) -> str:
        """"12 tokens · 134 tok/s": the reply's length and speed where room is short ('' while it runs)."""
        if not self.finished:
            return "stopped" if self.stopped else ""
        return f"{self.predicted:,} tokens · {self.tokens_per_second:.0f} tok/s"

    def stats(self) -> str:
        """The line shown under a reply: its length and speed, and how much of the prompt the engine
        reused from its cache."""
        if not self.finished:
            return "stopped before the engine reported its numbers" if self.stopped else ""
        why = {"stop": "ended by the model", "length": "max tokens reached"}.get(self.finish_reason,
                                                                                 self.finish_reason)
        return (f"{self.predicted:,} tokens, {self.tokens_per_second:.1f} tokens/s ({why}); "
                f"{self.prompt_cached:,} of {self.prompt_tokens:,} prompt tokens reused from the cache")


@dataclass
class ChatOutcome:
    """A chat request's replies by index; ``error`` None when the engine finished (or the user
    stopped it); otherwise it says why, and the text received is still here."""

    replies: list[Reply]
    error: str | None = None
    stopped: bool = False
    proof: SharingProof | None = None  # a fork's: was the prompt evaluated once?

    @property
    def ok(self) -> bool:
        return self.error is None


class StopSwitch:
    """Stop a streaming reply from another thread: the connection is shut, so a read waiting for the
    next piece returns at once, and llama-server, seeing its client gone, cancels the generation."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def attach(self, conn: http.client.HTTPConnection | None) -> None:
        with self._lock:
            self._conn = conn
        if conn is not None and self.stopped:
            self._shut()

    def stop(self) -> None:
        self._event.set()
        self._shut()

    def _shut(self) -> None:
        with self._lock:
            sock = self._conn.sock if self._conn is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed
                    pass


class ChatTooLong(EngineRejected):
    """The chat, as the model's template writes it, is longer than one session's context."""

    def __init__(self, rejected: EngineRejected, tokens: int, n_ctx: int) -> None:
        super().__init__(rejected.status, rejected.server_message, rejected.error_type)
        self.tokens, self.n_ctx = tokens, n_ctx
        self.args = (f"this chat is {tokens:,} tokens, more than the {n_ctx:,} tokens of context a session has "
                     "on this engine: start a New chat, or launch with a longer context",)


#: tools/server/server-context.cpp: "request (5587 tokens) exceeds the available context size (4096 tokens), ..."
_TOO_LONG_RE = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")


def request_body(messages: list[Message], sampling: Sampling, k: int = 1, slot: int = -1) -> dict[str, Any]:
    """The JSON a chat request sends (``n_predict``/``temperature``/``seed`` as ``Sampling`` has them;
    ``slot`` ≥ 0 pins it to that slot, as a session's continuation is)."""
    if not messages:
        raise ValueError("a chat request needs at least one message")
    body: dict[str, Any] = {"messages": [m.to_json() for m in messages], "cache_prompt": True, **sampling.body()}
    if k > 1:
        body["n_cmpl"] = k
    if slot >= 0:
        body["id_slot"] = slot
    return body


#: What a chat template's text says of its family (the first that matches names it).
_FAMILIES = (("<|im_start|>", "ChatML"), ("<|start_header_id|>", "Llama 3"), ("<start_of_turn>", "Gemma"),
             ("[INST]", "Mistral / Llama 2"), ("<|user|>", "Phi-3 / Zephyr"), ("<|turn>", "Gemma 4"),
             ("<|channel|>", "gpt-oss (Harmony)"), ("<｜User｜>", "DeepSeek"))


@dataclass(frozen=True)
class Template:
    """The chat template the engine applies (``/props``) and whose it is: ``own`` True when the model's
    GGUF carries it, False when the engine fell back to its default (ChatML: tools/server
    ``common_chat_templates_init``), None when the model file is not readable here (another machine)."""

    text: str
    own: bool | None

    @property
    def family(self) -> str:
        return next((name for mark, name in _FAMILIES if mark in self.text), "")

    def words(self) -> str:
        """``the model's own chat template (ChatML), from its GGUF``."""
        family = f" ({self.family})" if self.family else ""
        if not self.text:
            return "the engine names no chat template (its /props does not say one)"
        if self.own is False:
            return f"the engine's default chat template{family}: the model's GGUF carries none"
        return f"the model's own chat template{family}" + (", from its GGUF" if self.own else "")


def engine_template(client: EngineClient) -> Template:
    """What ``/props`` says the engine applies, and (reading the model file's header, when it is here)
    whether the model carries it."""
    try:
        props = client.props()
    except (EngineRejected, EngineMisbehaved):  # not this build's llama-server: no template to go by
        return Template("", False)
    text = props.get("chat_template")
    path = props.get("model_path")
    own: bool | None = None
    if isinstance(path, str) and path and Path(path).is_file():
        from app.planner.gguf.model import read_shape

        try:
            own = read_shape(Path(path)).has_chat_template
        except Exception:  # (a header this reader refuses says nothing of the template)
            own = None
    if not isinstance(text, str) or not text:
        return Template("", False)
    return Template(text, own)


def chat_send(client: EngineClient, session: Session | None, name: str, prompt: str,
              sampling: Sampling = REPLY, on_piece: PieceCallback | None = None,
              stop: StopSwitch | None = None) -> TurnResult:
    """Start chat session ``name`` with ``prompt`` (``session`` None) or continue it: its messages and the
    new one through the model's chat template, pinned to its slot while that holds cells (``fork.pin_slot``), so
    the engine evaluates only the new turn. What arrived is in the result even when the stream broke."""
    check_name(name)
    if session is not None and not session.is_chat:
        raise ValueError(f"session {name!r} is a plain completion (--raw): continue it with --raw")
    history = list(session.messages or []) if session is not None else []
    messages = [Message(m["role"], m["content"]) for m in history] + [Message("user", prompt)]
    slot = pin_slot(client, session)
    outcome = chat(client, messages, sampling, on_piece=on_piece, stop=stop, slot=slot)
    reply = outcome.replies[0]
    kept = [*history, {"role": "user", "content": prompt}] + (
        [{"role": "assistant", "content": reply.text}] if reply.text or reply.finished else [])
    comp = Completion(0, slot=slot if slot >= 0 else (session.slot if session else None), text=reply.text,
                      tokens_predicted=reply.predicted, prompt_tokens=reply.prompt_tokens,
                      prompt_processed=reply.prompt_evaluated, prompt_cached=reply.prompt_cached,
                      stop_type=reply.finish_reason, finished=reply.finished, pieces=reply.pieces,
                      tokens_per_second=reply.tokens_per_second)
    updated = Session(name=name, slot=comp.slot, text=transcript(kept), turns=(session.turns if session else 0) + 1,
                      complete=outcome.error is None and (reply.finished or outcome.stopped),
                      origin=session.origin if session else "", messages=kept)
    return TurnResult([updated], [comp], outcome.error, None, {name: comp.prompt_cached},
                      {name: session.slot if session is not None else None}, {name: slot})


def chat_turn(client: EngineClient, store: SessionStore, name: str, prompt: str, sampling: Sampling = REPLY,
              on_piece: PieceCallback | None = None, *, new: bool = False,
              stop: StopSwitch | None = None) -> TurnResult:
    """``chat_send`` with the session store around it, as ``fork.turn`` is for plain sessions."""
    session = store.get(name)
    if session is None and not new:
        raise ValueError(f"no session {name!r} for {client.base_url} (see: list)")
    result = chat_send(client, session, name, prompt, sampling, on_piece, stop)
    keep(store, result)
    return result


def chat(client: EngineClient, messages: list[Message], sampling: Sampling = REPLY, *, k: int = 1,
         on_piece: PieceCallback | None = None, stop: StopSwitch | None = None, slot: int = -1) -> ChatOutcome:
    """Stream the model's reply to ``messages`` (``k`` > 1: K replies from one shared prompt, with the
    sharing proof from ``/metrics``). Pieces go to ``on_piece(index, text)`` as they arrive."""
    if k > 1:
        check_fork_size(client, k)
    before = counters(client) if k > 1 else None
    try:
        stream = client.open_stream(PATH, request_body(messages, sampling, k, slot))
    except EngineRejected as exc:
        if k > 1 and ("n_cmpl" in exc.server_message or "value <=" in exc.server_message):
            raise ForkTooLarge(f"the engine refused a fork of {k}: {exc.server_message}") from exc
        if (m := _TOO_LONG_RE.search(exc.server_message)) is not None:
            raise ChatTooLong(exc, int(m.group(1)), int(m.group(2))) from exc
        raise
    switch = stop or StopSwitch()
    switch.attach(stream.conn)
    outcome = ChatOutcome([Reply(i) for i in range(k)])
    try:
        _read(stream, outcome, on_piece, tokens_allowed(sampling.body()))
    except (OSError, http.client.HTTPException) as exc:
        if not switch.stopped:
            outcome.error = (f"the stream from {client.base_url} was cut ({exc.__class__.__name__}: {exc}); "
                             "the engine may have exited")
    finally:
        switch.attach(None)
        stream.close()
    if switch.stopped:
        outcome.stopped, outcome.error = True, None
        for r in outcome.replies:
            r.stopped = not r.finished
    elif outcome.error is None and not all(r.finished for r in outcome.replies):
        outcome.error = (f"the stream from {client.base_url} ended before the engine finished; "
                         "the engine may have exited")
    if before is not None:
        after = counters(client)
        delta = after.since(before) if after is not None else None
        prompt = max((r.prompt_tokens for r in outcome.replies), default=0)
        outcome.proof = SharingProof(k, prompt, delta.prompt_tokens if delta else None,
                                     delta.prompt_tokens_cached if delta else None, gone=after is None)
    return outcome


def _read(stream: Stream, outcome: ChatOutcome, on_piece: PieceCallback | None, allowed: int | None) -> None:
    url = stream.base_url
    try:
        for event in iter_events(stream.lines()):
            if event.done:
                return
            if "error" in event.data:
                err = event.data["error"]
                outcome.error = ("the engine reported an error mid-stream: "
                                 + str(err.get("message") if isinstance(err, dict) else err))
                return
            apply_chunk(outcome, event.data, on_piece)
            if allowed is not None and any(r.pieces > allowed for r in outcome.replies):
                outcome.error = too_many_tokens(url, allowed - EXTRA_TOKENS)
                return
    except SseError as exc:
        outcome.error = f"the engine's stream from {url} could not be read: {exc}"
    except EngineMisbehaved as exc:
        outcome.error = str(exc)
    except (TypeError, ValueError, AttributeError) as exc:
        outcome.error = f"the stream from {url} is not llama-server's ({exc.__class__.__name__}: {exc}); stopped reading"


def apply_chunk(outcome: ChatOutcome, data: dict[str, Any], on_piece: PieceCallback | None) -> None:
    """Fold one chunk into its reply: a content piece, or the finish reason with the timings."""
    for choice in data.get("choices") or []:
        index = int(choice.get("index", 0))
        if not 0 <= index < len(outcome.replies):
            continue
        reply = outcome.replies[index]
        piece = str((choice.get("delta") or {}).get("content") or "")
        if piece:
            reply.text += piece
            reply.pieces += 1
            if on_piece is not None:
                on_piece(index, piece)
        if choice.get("finish_reason"):
            reply.finish_reason = str(choice["finish_reason"])
            timings = data.get("timings")
            if isinstance(timings, dict):
                reply.predicted = int(timings.get("predicted_n", 0))
                reply.tokens_per_second = float(timings.get("predicted_per_second", 0.0))
                reply.prompt_evaluated = int(timings.get("prompt_n", 0))
                reply.prompt_per_second = float(timings.get("prompt_per_second", 0.0))
                reply.prompt_cached = int(timings.get("cache_n", 0))
