"""Session operations: send to one session, fork one prompt into K sessions, continue, save/restore.

A fork is one ``/completion`` request with ``n_cmpl = K`` (tools/server/server-context.cpp):
the server gives the parent task a slot (``id_slot`` may pin it) and K−1 free child slots, decodes
the prompt once in the parent, then ``copy_state_to`` → ``llama_memory_seq_cp`` shares its cells
with each child (children get seeds ``seed+1``, ``seed+2``, …). The K results stream interleaved,
each tagged with ``index`` 0..K−1 and its ``id_slot``. ``n_cmpl`` is hard-limited to ``-np``.

Continuing re-sends the session's whole text pinned to its slot with ``cache_prompt``; the
engine reuses the common prefix and decodes only the new tokens. ``turn`` is that path with the
session store around it — the one way the CLI's ``sessions continue`` and the window continue a
session — and ``TurnResult.reuse`` says what the engine reported for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.sessions.client import (
    Completion,
    EngineClient,
    EngineError,
    EngineRejected,
    PieceCallback,
    StreamOutcome,
)
from app.sessions.metrics import Counters
from app.sessions.store import Session, SessionStore, check_name

#: llama.cpp's LLAMA_DEFAULT_SEED (include/llama.h): "pick a random seed".
RANDOM_SEED = 0xFFFFFFFF


class ForkTooLarge(EngineError):
    """More sessions asked for than the engine has slots (``n_cmpl`` ≤ ``-np``)."""


@dataclass(frozen=True)
class Sampling:
    """What each reply is sampled with; ``seed=None`` lets the engine pick."""

    n_predict: int = 64
    temperature: float = 0.8
    seed: int | None = None
    #: Generate all ``n_predict`` tokens even past an end-of-generation token (llama-server ``ignore_eos``).
    ignore_eos: bool = False

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"n_predict": self.n_predict, "temperature": self.temperature,
                                "seed": RANDOM_SEED if self.seed is None else self.seed}
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


@dataclass(frozen=True)
class SharingProof:
    """Did the fork decode its prompt once? Read from ``/metrics`` before and after: a child of an
    ``n_cmpl`` fork adds nothing to ``prompt_tokens_total`` or ``prompt_tokens_cached_total``."""

    k: int
    prompt_tokens: int
    decoded: int | None  # growth of llamacpp:prompt_tokens_total, None when /metrics is off
    reused: int | None  # growth of llamacpp:prompt_tokens_cached_total
    #: /metrics answered before the fork but not after it: the engine stopped (not "no /metrics").
    gone: bool = False

    @property
    def measured(self) -> bool:
        return self.decoded is not None and self.reused is not None and self.prompt_tokens > 0

    @property
    def evaluations(self) -> float | None:
        """How many times the prompt went through the engine (1.0 when shared)."""
        if not self.measured or self.decoded is None or self.reused is None:
            return None
        return (self.decoded + self.reused) / self.prompt_tokens

    @property
    def shared(self) -> bool:
        return self.k > 1 and self.evaluations == 1.0

    def __str__(self) -> str:
        if not self.measured:
            return self.headline
        # llama-server's prompt_tokens_total counts prompt tokens read (prefilled), not tokens generated
        counts = (f"{self.prompt_tokens}-token prompt; /metrics: {self.decoded} prompt tokens read, "
                  f"{self.reused} taken from the cache")
        return f"{self.headline} ({counts})"

    @property
    def headline(self) -> str:
        """The verdict without its counts ("prompt evaluated once, shared by 3"): where room is short."""
        if not self.measured:
            if self.gone:
                return "sharing not measured: the engine stopped answering before the fork ended"
            return ("sharing not measured: the engine has no /metrics (start it with --metrics)"
                    if self.decoded is None else "sharing not measured: the prompt length is unknown")
        if self.shared:
            return f"prompt evaluated once, shared by {self.k}"
        ev = self.evaluations or 0.0
        if ev >= self.k:
            return f"prompt NOT shared: evaluated {ev:.0f} times for {self.k} sessions"
        return f"sharing unclear: the prompt went through {ev:.2f} times — other requests ran meanwhile?"


@dataclass
class TurnResult:
    """Sessions as they stand after a send/continue/fork (text received is always in them)."""

    sessions: list[Session]
    completions: list[Completion]
    error: str | None = None
    proof: SharingProof | None = None
    cached_tokens: dict[str, int] = field(default_factory=dict)  # session → prompt tokens reused
    #: session → the slot it held before this turn, and the slot the request was pinned to (-1: none).
    slot_before: dict[str, int | None] = field(default_factory=dict)
    pinned: dict[str, int] = field(default_factory=dict)
    #: session → a continuation the engine held none of: True when the engine had read nothing before
    #: this turn (a new engine since the session began: /metrics counted only this prompt), else False.
    held_none: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def reuse(self, name: str) -> str | None:
        """What the engine reported for session ``name``'s prompt in this turn: how much of it came
        from its cache, how much it evaluated, on which slot — and, when that is not the session's
        own slot, why (None for a session this turn did not send a prompt for). Without the name:
        the caller says whose it is."""
        i = next((i for i, s in enumerate(self.sessions) if s.name == name), None)
        if i is None or name not in self.cached_tokens or i >= len(self.completions):
            return None
        comp = self.completions[i]
        if name in self.held_none:  # nothing of it on this engine: said plainly, without slot mechanics
            where = "on a new engine" if self.held_none[name] else "on an engine that held none of it"
            return f"continued from its stored text {where} ({comp.prompt_processed:,} prompt tokens read again)"
        line = (f"{comp.prompt_cached:,} of {comp.prompt_tokens:,} prompt tokens reused from the cache, "
                f"{comp.prompt_processed:,} evaluated")
        if comp.slot is not None:
            line += f" (slot {comp.slot})"
        own = self.slot_before.get(name)
        if own is not None and comp.slot is not None and comp.slot != own and self.pinned.get(name, -1) < 0:
            line += (f"; its own slot {own} held nothing any more (llama-server empties a forked session's slot "
                     "when its reply ends, and with -kvu moves idle slots to its host prompt cache), so the engine "
                     "chose the slot with the longest matching prefix")
        return line


def counters(client: EngineClient) -> Counters | None:
    """Counters, or None when /metrics is off — or the engine is gone after a cut stream, whose
    text must still reach the caller."""
    try:
        return client.metrics()
    except EngineError:
        return None


def pin_slot(client: EngineClient, session: Session | None) -> int:
    """The slot to pin a continuation to, or -1 to let the engine choose.

    A session's slot may no longer hold its cells: llama-server clears a fork's child slots when
    they finish ("the parent's context is enough", ``server_slot::release``) and, with a unified
    cache and ``--cache-idle-slots`` (default on), moves idle slots to its host prompt cache when a
    new task starts. An empty slot is not pinned: unpinned, the engine picks the slot with the
    longest common prefix (the fork's parent holds the shared prompt) or restores the session
    from its prompt cache, so the shared prefix is still not decoded again."""
    if session is None or session.slot is None:
        return -1
    try:
        slots = client.slots()
    except EngineRejected:  # /slots turned off (--no-slots): pin and hope
        return session.slot
    for info in slots:
        if info.id == session.slot:
            return session.slot if info.n_prompt_tokens > 0 else -1
    return -1


def send(client: EngineClient, session: Session | None, name: str, prompt: str,
         sampling: Sampling = Sampling(), on_piece: PieceCallback | None = None) -> TurnResult:
    """Start session ``name`` with ``prompt`` (``session`` None) or continue it: its text + prompt
    with ``cache_prompt``, on its slot while that still holds cells (see ``pin_slot``), so the engine
    decodes only what it does not already hold. ``TurnResult.cached_tokens`` says how much it reused."""
    check_name(name)
    before = session.text if session is not None else ""
    slot = pin_slot(client, session)
    # a new turn starts on a line of its own (not glued to the last reply: "…sentence.Tell me a joke.")
    full = before + ("\n" if before and not before[-1].isspace() and not prompt[:1].isspace() else "") + prompt
    body = {"prompt": full, "id_slot": slot, "cache_prompt": True, **sampling.body()}
    outcome = client.stream(body, on_piece)
    comp = outcome.completions.get(0) or Completion(0)
    updated = Session(
        name=name,
        slot=comp.slot if comp.slot is not None else (session.slot if session else None),
        text=full + comp.text,
        turns=(session.turns if session else 0) + 1,
        complete=outcome.error is None and comp.finished,
        origin=session.origin if session else "",
    )
    held_none: dict[str, bool] = {}
    if before and comp.prompt_cached == 0 and comp.prompt_processed > 0:  # none of the session's text was there
        now = counters(client)  # an engine that read only this prompt since it started is a new one
        held_none[name] = now is not None and now.prompt_tokens <= comp.prompt_processed
    return TurnResult([updated], [comp], _error(outcome, [name]), None, {name: comp.prompt_cached},
                      {name: session.slot if session is not None else None}, {name: slot}, held_none)


def turn(client: EngineClient, store: SessionStore, name: str, prompt: str, sampling: Sampling = Sampling(),
         on_piece: PieceCallback | None = None, *, new: bool = False) -> TurnResult:
    """Continue session ``name`` of ``store`` (``new``: or start it) with ``prompt`` through ``send``,
    and store what came back — text received before a failure included. ValueError for a session
    the store does not have (unless ``new``)."""
    session = store.get(name)
    if session is None and not new:
        raise ValueError(f"no session {name!r} for {client.base_url} (see: list)")
    result = send(client, session, name, prompt, sampling, on_piece)
    keep(store, result)
    return result


def keep(store: SessionStore, result: TurnResult) -> None:
    """Store a turn's (or a fork's) sessions. A session that held a slot one of them now has holds it
    no more: it is not pinned there next time (the engine then finds its text by prefix, or in its
    host prompt cache)."""
    taken = {s.slot for s in result.sessions if s.slot is not None}
    names = {s.name for s in result.sessions}

    def change(stored: dict[str, Session]) -> None:
        for other in stored.values():
            if other.name not in names and other.slot in taken:
                other.slot = None
        stored.update({s.name: s for s in result.sessions})

    for s in result.sessions:
        check_name(s.name)
    store.update(change)


def check_fork_size(client: EngineClient, k: int) -> None:
    """ForkTooLarge when the engine has fewer than ``k`` slots (asked before sending)."""
    try:
        n_slots = len(client.slots())
    except EngineRejected:  # /slots turned off: the engine's own n_cmpl limit still answers
        n_slots = k
    if k > n_slots:
        raise ForkTooLarge(
            f"a fork into {k} sessions needs {k} slots, but the engine at {client.base_url} has {n_slots} "
            f"(-np {n_slots}); fork into at most {n_slots}, or restart the engine with -np {k} -kvu")


def fork(client: EngineClient, prompt: str, names: list[str], sampling: Sampling = Sampling(),
         on_piece: PieceCallback | None = None, slot: int = -1) -> TurnResult:
    """One request, ``n_cmpl = len(names)``: the prompt decoded once and shared; reply ``i`` becomes
    session ``names[i]``. Raises ForkTooLarge before sending when the engine lacks the slots."""
    for n in names:
        check_name(n)
    k = len(names)
    if k < 2 or len(set(names)) != k:
        raise ValueError("a fork needs at least two distinct session names")
    check_fork_size(client, k)
    before = counters(client)
    body = {"prompt": prompt, "n_cmpl": k, "id_slot": slot, "cache_prompt": True, **sampling.body()}
    try:
        outcome = client.stream(body, on_piece)
    except EngineRejected as exc:
        if "n_cmpl" in exc.server_message or "value <=" in exc.server_message:
            raise ForkTooLarge(f"the engine refused a fork of {k}: {exc.server_message}") from exc
        raise
    after = counters(client) if before is not None else None
    comps = [outcome.completions.get(i) or Completion(i) for i in range(k)]
    origin = f"fork of {k} ({', '.join(names)})"
    sessions = [Session(name, c.slot, prompt + c.text, 1, outcome.error is None and c.finished, origin)
                for name, c in zip(names, comps, strict=True)]
    prompt_tokens = max((c.prompt_tokens for c in comps), default=0)
    delta = after.since(before) if after is not None and before is not None else None
    proof = SharingProof(k, prompt_tokens, delta.prompt_tokens if delta else None,
                         delta.prompt_tokens_cached if delta else None, gone=before is not None and after is None)
    return TurnResult(sessions, comps, _error(outcome, names), proof)


def _error(outcome: StreamOutcome, names: list[str]) -> str | None:
    if outcome.error is None:
        return None
    got = [f"{n}: {len(outcome.completions[i].text)} chars" for i, n in enumerate(names)
           if i in outcome.completions]
    kept = ("; text received so far is kept (" + ", ".join(got) + ")") if got else "; no text had arrived"
    return outcome.error + kept


def slot_file(session: Session) -> str:
    """The file name under the engine's ``--slot-save-path`` (a session name is a valid one)."""
    return f"{check_name(session.name)}.slot"


def save(client: EngineClient, session: Session) -> dict[str, Any]:
    """Write the session's slot cache to ``--slot-save-path``/<name>.slot."""
    if session.slot is None:
        raise EngineError(f"session {session.name!r} has no slot yet: send it a prompt first")
    return _slot_call(client, session.slot, "save", slot_file(session))


def restore(client: EngineClient, session: Session, slot: int | None = None) -> dict[str, Any]:
    """Load the saved cache into ``slot`` (default: the session's own)."""
    target = session.slot if slot is None else slot
    if target is None:
        raise EngineError(f"session {session.name!r} has no slot: pass one to restore into")
    return _slot_call(client, target, "restore", slot_file(session))


def _slot_call(client: EngineClient, slot: int, action: str, filename: str) -> dict[str, Any]:
    try:
        return client.slot_action(slot, action, filename)
    except EngineRejected as exc:
        if exc.status == 501:
            # the server's own words ("This server does not support slots action. Start it with
            # `--slot-save-path`") name the flag already: say it once, with Headroom's way to pass it
            raise EngineError(f"cannot {action} slot caches: restart the engine with --slot-save-path DIR "
                              "(headroom serve takes it too)") from exc
        raise
