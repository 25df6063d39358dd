"""llama-server's ``/metrics`` (Prometheus text, only with ``--metrics``).

tools/server/server-task.cpp ``server_task_result_metrics::to_metrics`` writes, per item::

    # HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
    # TYPE llamacpp:prompt_tokens_total counter
    llamacpp:prompt_tokens_total 37

Counters (cumulative since start): ``prompt_tokens_total`` (prompt tokens decoded; a child of an
``n_cmpl`` fork adds nothing), ``prompt_tokens_cached_total`` (reused from a slot's cache),
``tokens_predicted_total``, ``n_decode_total``; gauges: ``requests_processing``,
``requests_deferred``, ``n_busy_slots_per_decode``. This build exports no KV-usage gauge; pool
usage comes from ``/slots`` (each slot's ``n_prompt_tokens``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "llamacpp:"

# llamacpp:prompt_tokens_total 37
# llamacpp:prompt_tokens_seconds 1.23e+03
_SAMPLE_RE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """``{"prompt_tokens_total": 37.0, ...}``: samples by name, the ``llamacpp:`` prefix removed."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        name = m.group("name")
        values[name.removeprefix(PREFIX)] = value
    return values


@dataclass(frozen=True)
class Counters:
    """The counters a session view needs, read from one ``/metrics`` answer."""

    prompt_tokens: int
    prompt_tokens_cached: int
    tokens_predicted: int
    decode_calls: int
    requests_processing: int
    requests_deferred: int
    #: Gauges averaged by the engine over the time between two reads of /metrics (tokens/s; 0: none
    #: processed since the last read): ``prompt_tokens_seconds``, ``predicted_tokens_seconds``.
    prompt_per_second: float = 0.0
    predicted_per_second: float = 0.0
    #: Counters of the engine's own seconds spent reading prompts and decoding (``prompt_seconds_total``,
    #: ``tokens_predicted_seconds_total``): with the token counters, the rate of the tokens counted, whoever
    #: else read /metrics in between (the gauges above are reset by every read).
    prompt_seconds: float = 0.0
    predicted_seconds: float = 0.0

    @property
    def decode_rate(self) -> float | None:
        """Tokens decoded a second of the engine's decoding, for these counters (of ``since``: over that
        time); None when nothing was decoded."""
        return self.tokens_predicted / self.predicted_seconds if self.predicted_seconds > 0 else None

    @property
    def prompt_rate(self) -> float | None:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else None

    @classmethod
    def from_text(cls, text: str) -> Counters:
        v = parse_prometheus(text)
        if "prompt_tokens_total" not in v:
            raise ValueError("no llamacpp:prompt_tokens_total in /metrics: not llama-server's format")

        def n(name: str) -> int:
            return int(v.get(name, 0.0))

        return cls(n("prompt_tokens_total"), n("prompt_tokens_cached_total"), n("tokens_predicted_total"),
                   n("n_decode_total"), n("requests_processing"), n("requests_deferred"),
                   v.get("prompt_tokens_seconds", 0.0), v.get("predicted_tokens_seconds", 0.0),
                   v.get("prompt_seconds_total", 0.0), v.get("tokens_predicted_seconds_total", 0.0))

    def since(self, before: Counters) -> Counters:
        """The growth of each counter since ``before`` (gauges are kept as they are now)."""
        return Counters(self.prompt_tokens - before.prompt_tokens,
                        self.prompt_tokens_cached - before.prompt_tokens_cached,
                        self.tokens_predicted - before.tokens_predicted,
                        self.decode_calls - before.decode_calls,
                        self.requests_processing, self.requests_deferred,
                        self.prompt_per_second, self.predicted_per_second,
                        self.prompt_seconds - before.prompt_seconds, self.predicted_seconds - before.predicted_seconds)
