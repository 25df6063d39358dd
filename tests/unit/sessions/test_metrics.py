"""/metrics as llama-server writes it, and the counter growth a fork proof is read from."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.sessions.metrics import Counters, parse_prometheus

DATA = Path(__file__).parent / "data"


def test_recorded_metrics_after_a_fork_show_the_prompt_decoded_once() -> None:
    text = (DATA / "metrics_after_fork.txt").read_text()
    c = Counters.from_text(text)
    # the fork's final results say tokens_evaluated = 26: one prompt, not three
    assert c.prompt_tokens == 26
    assert c.tokens_predicted == 18  # 3 replies x n_predict 6
    assert parse_prometheus(text)["n_busy_slots_per_decode"] == 3.0
    # the engine's throughput averaged since the read before (the window's speed row shows them)
    assert (c.prompt_per_second, c.predicted_per_second) == (34574.5, 877.912)


def test_since_gives_counter_growth_and_keeps_gauges() -> None:
    before = Counters(100, 10, 50, 20, 0, 0)
    after = Counters(140, 10, 80, 30, 1, 2)
    d = after.since(before)
    assert (d.prompt_tokens, d.prompt_tokens_cached, d.tokens_predicted) == (40, 0, 30)
    assert (d.requests_processing, d.requests_deferred) == (1, 2)


def test_text_that_is_not_llama_server_metrics_is_refused() -> None:
    with pytest.raises(ValueError, match="prompt_tokens_total"):
        Counters.from_text("# HELP go_goroutines\ngo_goroutines 12\n")
