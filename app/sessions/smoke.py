"""The shared-sequence smoke test, run against a launched engine.

The scenario of llama.cpp's regression test for shared sequences (docs/domain.md §5): decode a prompt
into one sequence, share it with a second (one ``n_cmpl = 2`` request: the parent decodes, then
``llama_memory_seq_cp`` shares its cells with the child), let both generate, then continue both.
Both must produce tokens. The prompt is ~2500 tokens like the upstream repro
(``llama-batched-bench -npp 2500 -ntg 32 -npl 1,2 -kvu``), shortened to fit a slot.

In a *diagnostic* launch the engine runs with ``GGML_SCHED_DEBUG_REALLOC=1`` (``DIAGNOSTIC_ENV``;
the launcher sets it): an engine that re-reserves its graph mid-decode then aborts with
``unexpected graph reallocation`` instead of carrying on, and the smoke test names that bug. The
engine Headroom builds also checks its k-pool scatter rows then (``HEADROOM_KPOOL_SCATTER_CHECK``,
native/patches/0002): two sequences writing one pooled row abort with ``k-pool scatter race``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.llamacpp.failures import REALLOC_MARK, SCATTER_MARK, abort_line
from app.sessions.client import EngineClient, EngineError, EngineRejected, EngineUnreachable
from app.sessions.fork import Sampling, fork, send

#: Environment a diagnostic launch adds to the engine's: ggml/src/ggml-backend.cpp reads the first;
#: the second only the engine Headroom builds (native/patches/0002), every other engine ignores it.
DIAGNOSTIC_ENV = {"GGML_SCHED_DEBUG_REALLOC": "1", "HEADROOM_KPOOL_SCATTER_CHECK": "1"}
#: The upstream repro's prompt length (-npp 2500).
REPRO_PROMPT_TOKENS = 2500
#: How long to wait for the engine's last words to reach the log after the stream broke.
LOG_GRACE_S = 3.0

_FILLER = ("The shared prefix of this smoke test is decoded once and then shared between two "
           "sequences, which continue independently. ")

#: Why a diagnostic pass on a single-backend engine proves nothing (ggml/src/ggml-alloc.c).
SINGLE_BACKEND_WHY = ("ggml re-reserves a changed graph silently (one allocator buffer), so "
                      "GGML_SCHED_DEBUG_REALLOC cannot fire and the shared-sequence bug cannot show")
SECOND_BACKEND_HINT = ("run it on the GPU, or give the engine a second backend: start ggml-rpc-server "
                       "and launch with --rpc 127.0.0.1:PORT -ngl 99")


#: The kind of a smoke test an engine with fewer than two slots cannot run (a request it cannot take).
TOO_FEW_SLOTS = "too-few-slots"


@dataclass(frozen=True)
class SmokeResult:
    """``kind``: ``ok``, ``inconclusive`` (tokens in both, but a diagnostic run on one backend, which
    cannot show the bug), ``engine-bug`` (the §5 shared-sequence bug: graph re-reserve abort or an
    assertion during the shared decode), ``engine-died``, ``no-tokens``, ``too-few-slots`` (the engine
    has one slot: nothing was sent), ``refused`` (the engine rejected the request), ``unreachable``."""

    ok: bool
    kind: str
    message: str
    tokens: dict[str, int] = field(default_factory=dict)  # per session, over fork + continuation
    steps: tuple[str, ...] = ()
    log_line: str = ""
    diagnostic: bool = False
    sharing: str = ""

    def __str__(self) -> str:
        return ("smoke test passed: " if self.ok else "smoke test FAILED: ") + self.message


def _classify(lines: list[str]) -> str:
    return abort_line(lines)


def _last_words(log_tail: Callable[[], list[str]] | None, grace_s: float) -> str:
    """The abort line, if the engine's log shows one within ``grace_s`` (the reader may lag)."""
    if log_tail is None:
        return ""
    deadline = time.monotonic() + grace_s
    while True:
        line = _classify(log_tail())
        if line or time.monotonic() >= deadline:
            return line
        time.sleep(0.1)


def _failure(client: EngineClient, why: str, steps: list[str], tokens: dict[str, int],
             log_tail: Callable[[], list[str]] | None, diagnostic: bool, grace_s: float) -> SmokeResult:
    line = _last_words(log_tail, grace_s)

    def failed(kind: str, message: str) -> SmokeResult:
        return SmokeResult(False, kind, message, tokens, tuple(steps), line, diagnostic)

    if REALLOC_MARK in line:
        return failed("engine-bug", (
            "the engine aborted with 'unexpected graph reallocation' while two sequences shared "
            "their cells: it re-reserves its compute graph mid-decode — the k-pool shared-sequence "
            "bug fixed in llama.cpp b11412 (#29958, docs/domain.md §5). Use an engine at b11412/43fe9c642 "
            f"or later (on this engine even -np 1 re-reserves once the pool grows). Engine: {line}"))
    if SCATTER_MARK in line:
        return failed("engine-bug", (
            "the engine's scatter check found two entries of one ubatch writing the same pooled k-pool "
            "row while two sequences shared their cells — the data race fixed in llama.cpp 43fe9c642 "
            f"(#29994, docs/domain.md §5). Use an engine with that fix. Engine: {line}"))
    if line:
        return failed("engine-bug", (
            "the engine hit an assertion while two sequences shared their cells — the shared-sequence "
            "engine bug of docs/domain.md §5 (fixed by b11412 and 43fe9c642; partial seq_cp asserts on "
            f"k-pool models). Use a newer engine or serve with -np 1. Engine: {line}"))
    try:
        alive = client.health()
    except EngineError:
        alive = False
    if not alive:
        hint = "" if diagnostic else " Rerun it as a diagnostic launch (GGML_SCHED_DEBUG_REALLOC=1) to name the cause."
        return failed("engine-died", f"the engine exited during the smoke test ({why}).{hint}")
    return failed("no-tokens", why)


def token_counts(tokens: dict[str, int]) -> str:
    """``{'smoke-a': 32, 'smoke-b': 30}`` → ``smoke-a 32 tokens, smoke-b 30 tokens``."""
    return ", ".join(f"{name} {n} tokens" for name, n in tokens.items())


def run_smoke(base_url: str, api_key: str | None = None, log_tail: Callable[[], list[str]] | None = None,
              *, diagnostic: bool = False, n_predict: int = 16,
              on_step: Callable[[str], None] | None = None, log_grace_s: float = LOG_GRACE_S,
              backends: int | None = None) -> SmokeResult:
    """Fork two sessions from one long prompt, continue both; both must produce tokens.

    ``log_tail`` returns the engine's latest log lines (to name an abort); ``diagnostic`` says the
    engine was launched with ``DIAGNOSTIC_ENV``; ``backends`` is how many backends the engine's
    scheduler has (the devices with a compute buffer in its log). A diagnostic pass on ONE backend is
    ``inconclusive``: ggml re-reserves silently when the allocator has a single buffer
    (ggml-alloc.c, ``n_buffers == 1``), so ``GGML_SCHED_DEBUG_REALLOC`` never fires there.
    Never raises for engine trouble: the result says."""
    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(text)
        if on_step is not None:
            on_step(text)

    client = EngineClient(base_url, api_key)
    tokens: dict[str, int] = {"smoke-a": 0, "smoke-b": 0}
    try:
        slots = client.slots()
        if len(slots) < 2:
            return SmokeResult(False, TOO_FEW_SLOTS, f"the engine has {len(slots)} slot{'' if len(slots) == 1 else 's'}; "
                               "shared sessions need -np 2 or more", steps=tuple(steps), diagnostic=diagnostic)
        # a unified pool reports the whole pool as each slot's n_ctx while other sessions hold
        # cells of it: take half, so the fork fits beside them (a fork into a full pool fails
        # with "Invalid input batch" on this engine, which is not what this test looks for)
        room = min(s.n_ctx for s in slots) // 2 - 4 * n_predict
        prompt, n_prompt = _prompt(client, min(REPRO_PROMPT_TOKENS, room))
        step(f"fork: one prompt of {n_prompt} tokens into 2 sequences")
        forked = fork(client, prompt, ["smoke-a", "smoke-b"], Sampling(n_predict, 0.8, 1234), slot=-1)
        for s, c in zip(forked.sessions, forked.completions, strict=True):
            tokens[s.name] += c.tokens_predicted
        sharing = str(forked.proof) if forked.proof else ""
        if forked.error:
            return _failure(client, forked.error, steps, tokens, log_tail, diagnostic, log_grace_s)
        step(f"fork done: {token_counts(tokens)}; {sharing}")
        for s in forked.sessions:
            turn = send(client, s, s.name, " Continue.", Sampling(n_predict, 0.8, 99))
            tokens[s.name] += turn.completions[0].tokens_predicted
            if turn.error:
                return _failure(client, turn.error, steps, tokens, log_tail, diagnostic, log_grace_s)
            step(f"continued {s.name}: +{turn.completions[0].tokens_predicted} tokens")
    except EngineUnreachable as exc:
        return _failure(client, str(exc), steps, tokens, log_tail, diagnostic, log_grace_s)
    except EngineRejected as exc:
        return SmokeResult(False, "refused", str(exc), tokens, tuple(steps), diagnostic=diagnostic)
    except EngineError as exc:
        return _failure(client, str(exc), steps, tokens, log_tail, diagnostic, log_grace_s)
    empty = [n for n, t in tokens.items() if t == 0]
    if empty:
        return SmokeResult(False, "no-tokens", f"no tokens from {', '.join(empty)} after sharing the prompt",
                           tokens, tuple(steps), diagnostic=diagnostic, sharing=sharing)
    if diagnostic and backends == 1:
        return SmokeResult(True, "inconclusive", f"both shared sequences produced tokens ({token_counts(tokens)}), "
                           f"but this engine runs on one backend, where {SINGLE_BACKEND_WHY}; {SECOND_BACKEND_HINT}",
                           tokens, tuple(steps), diagnostic=diagnostic, sharing=sharing)
    mode = " (diagnostic launch: no graph re-reserve)" if diagnostic else ""
    return SmokeResult(True, "ok", f"both shared sequences produced tokens: {token_counts(tokens)}{mode}",
                       tokens, tuple(steps), diagnostic=diagnostic, sharing=sharing)


def _prompt(client: EngineClient, n_tokens: int) -> tuple[str, int]:
    """Filler text of at most ``n_tokens`` tokens in this model's tokenizer, and its length."""
    n_tokens = max(n_tokens, 16)
    per = max(len(client.tokenize(_FILLER)), 1)
    text = _FILLER * max(n_tokens // per, 1)
    n = len(client.tokenize(text))
    while n > n_tokens and len(text) > len(_FILLER):
        text = text[: -len(_FILLER)]
        n = len(client.tokenize(text))
    return text, n
