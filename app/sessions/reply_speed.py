"""Speed after launch, in the window: the plan's predicted tokens/s beside
what the engine measured — a chat reply's own ``timings`` (``prompt_n``, ``prompt_per_second``,
``predicted_n``, ``predicted_per_second``) and ``/metrics``' averages (``prompt_tokens_seconds``,
``predicted_tokens_seconds``: the engine averages them over the time between two reads of
``/metrics``, so a read right after a reply covers that reply and whatever else ran since the read
before).

The prediction is ``check_speed``'s (app/engine/speed_check.py, as ``headroom serve``'s speed line):
the plan's speed model at the fill of the context the reply used. ``reply_speed`` reads ``/metrics``
(blocking: the window runs it in its task pool); the rest is pure. ``ServingSpeed``: the same
``/metrics`` read while ``headroom serve`` serves, what the engine did for its clients in a line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.speed_check import SpeedCheck, Timings, check_speed
from app.planner import words
from app.planner.plan_types import Plan
from app.sessions.chat import Reply
from app.sessions.client import EngineClient, EngineError, EngineRejected
from app.sessions.metrics import Counters

#: What the row says until a reply has been measured.
WAITING = "measured: after the first chat reply"
#: The window engine's placement has no speed model (the planner says none).
NOT_PREDICTED = "not predicted for this placement (the rolling KV window's engine)"


def predicted_line(plan: Plan) -> str:
    """"Speed predicted: decode 41 / 16 / 10 tok/s (context empty / half / full), prefill 729 tok/s half-way"."""
    row = plan.speed
    if row is None:
        return f"Speed {NOT_PREDICTED}"
    empty, half, full = row.at[0], row.at_fill(0.5), row.at_fill(1.0)
    return (f"Speed predicted: decode {words.tokens_per_s(empty.decode)} / {words.tokens_per_s(half.decode)} / "
            f"{words.tokens_per_s(full.decode)} tok/s (context empty / half / full), prefill "
            f"{words.tokens_per_s(half.prefill)} tok/s half-way")


def timings_of(reply: Reply) -> Timings | None:
    """A finished reply's timings as the engine reported them (None: it generated nothing)."""
    if reply.predicted < 1 or reply.tokens_per_second <= 0:
        return None
    return Timings(reply.prompt_evaluated, reply.prompt_per_second, reply.predicted, reply.tokens_per_second,
                   reply.prompt_cached)


@dataclass(frozen=True)
class ReplySpeed:
    """One reply measured: its timings, the plan's prediction at its fill (None: none predicted),
    and ``/metrics``' averages (None: not read, ``metrics_note`` says why)."""

    measured: Timings
    check: SpeedCheck | None
    metrics: Counters | None
    metrics_note: str = ""
    #: The calibration learned measured ÷ predicted from it (False: the cache could not be written;
    #: None: nothing to learn, or not asked).
    learned: bool | None = None

    def text(self) -> str:
        """"Speed of the last reply (predicted at its fill of the context): decode 41 tok/s measured (10
        tokens), 38 predicted; prefill …"."""
        m, c = self.measured, self.check
        decode = f"decode {words.tokens_per_s(m.predicted_per_second)} tok/s measured ({m.predicted_n:,} tokens)"
        prefill = (f"prefill {words.tokens_per_s(m.prompt_per_second)} tok/s measured ({m.prompt_n:,} prompt tokens)"
                   if m.prompt_n > 0 and m.prompt_per_second > 0 else "prefill: the whole prompt came from the cache")
        if c is not None:
            decode += f", {words.tokens_per_s(c.decode_predicted)} predicted"
            if m.prompt_n > 0 and m.prompt_per_second > 0:
                prefill += f", {c.prefill_words()}"
        # (its predictions are at the reply's own fill, not half-way: a short chat predicts faster)
        out = f"Speed of the last reply (predicted at its fill of the context): {decode}; {prefill}"
        if c is None:
            out += f" — {NOT_PREDICTED}"
        if self.metrics is not None:
            out += (f". /metrics since its last read: decode {words.tokens_per_s(self.metrics.predicted_per_second)}, "
                    f"prefill {words.tokens_per_s(self.metrics.prompt_per_second)} tok/s")
        elif self.metrics_note:
            out += f". {self.metrics_note}"
        if self.learned is not None and c is not None:
            ratios = ", ".join(f"{name} ×{r:.2g}" for name, r in (("decode", c.decode_ratio),
                                                                   ("prefill", c.prefill_ratio)) if r)
            # (the ratio is to the speed model's own figure: a prediction already scaled by an earlier
            # launch's ratio reads differently beside the measured rate, and that is said)
            carried = ", ".join(f"{name} ×{scale:.2g}" for name, scale, r in (
                ("decode", c.decode_scale, c.decode_ratio), ("prefill", c.prefill_scale, c.prefill_ratio))
                if r and abs(scale - 1) > 1e-9)
            out += (f". Later plans of this model on these devices scale their predictions by it ({ratios}"
                    + (f": measured ÷ the speed model's own figure; this reply's prediction already carried "
                       f"the earlier launches' {carried}" if carried else "") + ")"
                    if self.learned else ". Not learned: the calibration cache is not writable")
        elif c is not None and (why := c.not_learned()):  # (a rate timed beside other work: said, not learned)
            out += f". {why[0].upper()}{why[1:]}"
        return out

    def short(self) -> str:
        """The window speed row's second line (``text`` is its tooltip: the token counts, ``/metrics``,
        what was learned): "Last reply: decode 41 tok/s, 38 predicted at its fill; prefill 300, 290
        predicted"."""
        m, c = self.measured, self.check
        decode = f"decode {words.tokens_per_s(m.predicted_per_second)} tok/s"
        prefill = (f"prefill {words.tokens_per_s(m.prompt_per_second)}" if m.prompt_n > 0 and m.prompt_per_second > 0
                   else "prefill from the cache")
        if c is None:
            return f"Last reply: {decode}; {prefill} — {NOT_PREDICTED}"
        decode += f", {words.tokens_per_s(c.decode_predicted)} predicted at its fill"
        if c.prefill_compared:
            prefill += f", {words.tokens_per_s(c.prefill_predicted)} predicted"
        elif m.prompt_n > 0 and m.prompt_per_second > 0:
            prefill += " (too short a prompt to compare)"
        return f"Last reply: {decode}; {prefill}"


def reply_speed(plan: Plan, timings: Timings, base_url: str, api_key: str | None,
                *, timeout: float = 10.0) -> ReplySpeed:
    """``timings`` beside ``plan``'s prediction, with ``/metrics`` read now. Blocking (one request)."""
    metrics: Counters | None = None
    note = ""
    try:
        metrics = EngineClient(base_url, api_key, timeout=timeout).metrics()
    except EngineRejected:
        note = "/metrics: off (the engine runs without --metrics)"
    except (EngineError, ValueError) as exc:
        note = f"/metrics: not read ({exc})"
    return ReplySpeed(timings, check_speed(plan, timings), metrics, note)


#: While ``headroom serve`` serves, the engine's /metrics is read this often; a line is printed when it
#: decoded since.
SERVING_SPEED_EVERY_S = 10.0


class ServingSpeed:
    """What the engine did for its clients while ``serve`` runs, from its ``/metrics`` (as the window's
    speed row reads it): tokens decoded and read since the last line, at the engine's own average rates,
    beside the plan's predicted decode (its context empty and full: a client's fill is not known here).
    ``poll`` returns a line every ``SERVING_SPEED_EVERY_S`` when there was work, else None; an engine
    without ``--metrics`` (not one serve launches) or one that does not answer is said once."""

    def __init__(self, plan: Plan, base_url: str, api_key: str | None, *,
                 every_s: float = SERVING_SPEED_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.plan, self.every_s, self.clock = plan, every_s, clock
        self.client = EngineClient(base_url, api_key, timeout=5.0)
        self.next_at = clock() + every_s
        self.error: Exception | None = None
        self.said_why = False
        self.last = self._read()  # (what was done before serving: the check's completion)

    def _read(self) -> Counters | None:
        try:
            return self.client.metrics()
        except (EngineError, ValueError) as exc:  # (as reply_speed: not there, or not llama-server's)
            self.error = exc
            return None

    def poll(self) -> str | None:
        if self.clock() < self.next_at:
            return None
        self.next_at = self.clock() + self.every_s
        now = self._read()
        if now is None:
            if self.said_why:
                return None
            self.said_why = True
            return f"speed: /metrics not read ({self.error}); clients' speeds are not shown"
        before, self.last = self.last, now
        if before is None:  # (no reading to compare with yet)
            return None
        grown = now.since(before)
        if grown.tokens_predicted <= 0:
            return None
        # (the rate of the tokens counted: the counters' own seconds, not the gauges another reader resets)
        decode, prompt = grown.decode_rate, grown.prompt_rate
        read = (f"{grown.prompt_tokens:,} prompt tokens read at {words.tokens_per_s(prompt)} tok/s" if prompt
                else f"{grown.prompt_tokens:,} prompt tokens read")
        said = (f"speed while serving (the engine's /metrics over the last {self.every_s:.0f} s): "
                f"{grown.tokens_predicted:,} tokens decoded at "
                + (f"{words.tokens_per_s(decode)} tok/s" if decode else "an unknown rate (no decode time counted)")
                + f", {read}")
        if self.plan.speed is not None:
            empty, full = self.plan.speed.at[0], self.plan.speed.at_fill(1.0)
            said += (f"; predicted decode {words.tokens_per_s(empty.decode)} tok/s with the context empty, "
                     f"{words.tokens_per_s(full.decode)} full")
        return said
