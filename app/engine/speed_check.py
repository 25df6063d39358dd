"""Speed, checked after launch: the engine's own timings beside the plan's prediction.

One short completion (``POST /completion``, ``n_predict`` tokens after a prompt of about
``PROMPT_WORDS`` words, as many of its tokens as a slot's share of the context holds); its ``timings`` (tools/server: ``prompt_n``, ``prompt_per_second``,
``predicted_n``, ``predicted_per_second``) are what the engine measured. The prediction is the plan's
speed model at the context that completion filled (app/planner/solve/speed.py). ``check_speed`` is
pure (the window's speed row takes the same record); ``measure`` runs the request.

What a launch measured teaches the calibration (app/machine/calibrate.py ``learn``): measured ÷ the
unscaled prediction, per machine and devices.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from app.planner import words
from app.planner.plan_types import Plan
from app.planner.solve.speed import OP_OFFLOAD_MIN_BATCH, PLAUSIBLE_RATIO, plausible_ratio
from app.text import printable

#: The completion's prompt: about this many words (one prefill ubatch on any launch), cut to a slot's
#: share of the context (``measure``'s ``slot_tokens``) with the ``N_PREDICT`` tokens after it.
PROMPT_WORDS = 200
N_PREDICT = 32
#: A slot too small for a prompt this long and ``N_PREDICT`` tokens is not checked (said why).
MIN_PROMPT_TOKENS = 16
#: A prompt's prefill rate is compared with the model's from half a ubatch, or this many tokens on a
#: larger ubatch (its one smaller ubatch priced as such: ``Speed.prefill_for``), and never under
#: ``OP_OFFLOAD_MIN_BATCH`` (a device takes no host matmuls for fewer). ``serve``'s check prompt is
#: longer, so it is compared at ``-ub 2048`` too; a chat's next turn of a few new tokens is not.
PREFILL_COMPARE_TOKENS = 256


@dataclass(frozen=True)
class Timings:
    """What the engine reported for one completion (``timings``); rates in tokens/s."""

    prompt_n: int
    prompt_per_second: float
    predicted_n: int
    predicted_per_second: float
    #: Prompt tokens reused from the slot's cache (``cache_n``): a chat's later turn evaluates only its
    #: new ones, but decodes over all of them.
    cache_n: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timings:
        return cls(int(data.get("prompt_n", 0)), float(data.get("prompt_per_second", 0.0)),
                   int(data.get("predicted_n", 0)), float(data.get("predicted_per_second", 0.0)),
                   int(data.get("cache_n", 0) or 0))


@dataclass(frozen=True)
class SpeedCheck:
    """Predicted and measured tokens/s of one launch; ``*_scale``: the calibration's factors the
    prediction already carries (so ``*_ratio`` is measured ÷ the model's own figure)."""

    prefill_predicted: float
    decode_predicted: float
    measured: Timings
    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    #: The fewest prompt tokens whose prefill rate is compared (``check_speed``: half a ubatch, at
    #: most ``PREFILL_COMPARE_TOKENS``).
    prefill_min_tokens: int = 2

    @property
    def prefill_compared(self) -> bool:
        """The prompt was long enough to compare its rate with the model's: a chat's next turn evaluates
        only its new tokens (89 of them measured 466 tok/s where a whole ubatch predicted 127k, and that
        ratio would have scaled every later prefill of the model by ×0.0037). A shorter prompt than a
        ubatch is predicted as the one smaller ubatch it runs as (``Speed.prefill_for``)."""
        return self.measured.prompt_n >= max(2, self.prefill_min_tokens) and self.measured.prompt_per_second > 0

    @property
    def decode_measured_ratio(self) -> float | None:
        """Measured ÷ unscaled predicted decode, however far off (None: nothing decoded)."""
        if self.measured.predicted_n < 2 or self.decode_predicted <= 0:
            return None
        return self.measured.predicted_per_second / (self.decode_predicted / self.decode_scale)

    @property
    def prefill_measured_ratio(self) -> float | None:
        """Measured ÷ unscaled predicted prefill, however far off (None: not ``prefill_compared``)."""
        if not self.prefill_compared or self.prefill_predicted <= 0:
            return None
        return self.measured.prompt_per_second / (self.prefill_predicted / self.prefill_scale)

    @property
    def decode_ratio(self) -> float | None:
        """What the calibration learns of decode: ``decode_measured_ratio`` within ``PLAUSIBLE_RATIO``."""
        ratio = self.decode_measured_ratio
        return ratio if plausible_ratio(ratio) else None

    @property
    def prefill_ratio(self) -> float | None:
        """What the calibration learns of prefill: ``prefill_measured_ratio`` within ``PLAUSIBLE_RATIO``."""
        ratio = self.prefill_measured_ratio
        return ratio if plausible_ratio(ratio) else None

    def not_learned(self, busy: str | None = None) -> str | None:
        """Why a measured side teaches the calibration nothing (its ratio is outside ``PLAUSIBLE_RATIO``),
        with ``busy`` (app/machine/calibrate.py ``busy``: "load 2.6 on 2 cores") when the machine was; None
        when every measured side was learned. A decode timed beside other work on every core ran 6 tok/s
        where 919 were predicted: a figure of that moment, not of the machine."""
        off = [f"{side} ×{_ratio(ratio)}" for side, ratio in (("decode", self.decode_measured_ratio),
                                                                ("prefill", self.prefill_measured_ratio))
               if ratio is not None and not plausible_ratio(ratio)]
        if not off:
            return None
        low, high = PLAUSIBLE_RATIO
        why = f"the machine was busy ({busy})" if busy else "the timing or the prediction is off"
        return (f"speed: not learned: measured ÷ predicted {' and '.join(off)}, outside ×{low:g}–{high:g}: "
                f"{why}; the next launch measures again")

    def line(self) -> str:
        """"speed: decode 41 tok/s measured, 38 predicted; prefill …" (the engine's own timings)."""
        m = self.measured
        return (f"speed (the engine's timings of a {m.prompt_n}-token prompt and {m.predicted_n} tokens): "
                f"decode {words.tokens_per_s(m.predicted_per_second)} tok/s measured, "
                f"{words.tokens_per_s(self.decode_predicted)} predicted; prefill "
                f"{words.tokens_per_s(m.prompt_per_second)} tok/s measured, " + self.prefill_words())

    def prefill_words(self) -> str:
        """"729 predicted", or why the prefill is not compared."""
        if self.prefill_compared:
            return f"{words.tokens_per_s(self.prefill_predicted)} predicted"
        return (f"not compared (a prompt under {self.prefill_min_tokens} tokens: too few to measure the "
                "machine by)")

    def to_json(self) -> dict[str, Any]:
        return {"predicted": {"prefill": self.prefill_predicted, "decode": self.decode_predicted},
                "measured": vars(self.measured), "decode_ratio": self.decode_ratio,
                "prefill_ratio": self.prefill_ratio}


def _ratio(r: float) -> str:
    """A ratio in plain digits: "0.0067", "0.31", "150" (never "1.5e+02")."""
    return f"{r:,.0f}" if r >= 10 else f"{r:.2f}" if r >= 0.01 else f"{r:.2g}"


def check_speed(plan: Plan, timings: Timings) -> SpeedCheck | None:
    """The plan's predicted speed at the fill of the measured completion beside the engine's
    timings; None when the plan predicts none (the window engine)."""
    if plan.speed is None or plan.kv is None:
        return None
    # (the cells the reply decoded over: the cached prefix too, not only the prompt's new tokens)
    fill = min(1.0, (timings.cache_n + timings.prompt_n + timings.predicted_n) / max(1, plan.kv.n_ctx_seq))
    at = plan.speed.between(fill)
    fig = plan.speed_figures
    # (a prompt shorter than a ubatch runs as one smaller ubatch: its fixed seconds over fewer tokens)
    return SpeedCheck(at.prefill_for(timings.prompt_n), at.decode, timings,
                      fig.prefill_scale.value if fig is not None else 1.0,
                      fig.decode_scale.value if fig is not None else 1.0,
                      prefill_min_tokens=max(OP_OFFLOAD_MIN_BATCH,
                                             min(plan.launch.effective_n_ubatch // 2, PREFILL_COMPARE_TOKENS)))


@dataclass(frozen=True)
class NotMeasured:
    """Why the check has no timings: ``str()`` is what ``headroom serve`` says after "speed: "."""

    why: str

    def __str__(self) -> str:
        return self.why


def _post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any],
          headers: dict[str, str]) -> tuple[int, Any]:
    """POST JSON; the status and the decoded answer (None when it is not JSON)."""
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, None


def _error_text(data: Any) -> str:
    """llama-server's error answer (tools/server utils.hpp ``format_error_response``), in its words."""
    err = data.get("error") if isinstance(data, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    return printable(str(message)) if message else "no reason given"


def measure(base_url: str, api_key: str | None = None, *, slot_tokens: int | None = None,
            n_predict: int = N_PREDICT, timeout: float = 120.0) -> Timings | NotMeasured:
    """One completion; the engine's timings of it, or why there are none. The prompt (``PROMPT_WORDS``
    words, tokenized by the engine's ``/tokenize``) is cut to fit ``slot_tokens`` (a slot's share of
    the context, the plan's ``kv.n_ctx_seq``) with the ``n_predict`` tokens after it."""
    budget = None if slot_tokens is None else slot_tokens - n_predict - 1
    if budget is not None and budget < MIN_PROMPT_TOKENS:
        return NotMeasured(f"not checked: a slot holds {slot_tokens:,} tokens, too few for a "
                           f"{MIN_PROMPT_TOKENS}-token prompt and {n_predict} tokens after it")
    host_port = base_url.split("://", 1)[-1].rstrip("/")
    conn = http.client.HTTPConnection(host_port, timeout=timeout)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
    text = " ".join(f"word{i % 50}" for i in range(PROMPT_WORDS))
    try:
        status, data = _post(conn, "/tokenize", {"content": text}, headers)
        tokens = data.get("tokens") if status == 200 and isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return NotMeasured(f"the engine did not tokenize the check's prompt (HTTP {status}: {_error_text(data)})")
        prompt = tokens if budget is None else tokens[:budget]
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False,
                "ignore_eos": True}
        status, data = _post(conn, "/completion", body, headers)
    except (OSError, http.client.HTTPException) as exc:
        return NotMeasured(f"the engine's timings did not come back (no completion answered: {exc})")
    finally:
        conn.close()
    if status != 200:
        return NotMeasured(f"the engine refused the check's completion (HTTP {status}: {_error_text(data)})")
    timings = data.get("timings") if isinstance(data, dict) else None
    if not isinstance(timings, dict):
        return NotMeasured("the engine answered the check's completion without its timings")
    return Timings.from_json(timings)
