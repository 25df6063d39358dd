"""The largest-context search stops at max(trained, asked) context: a result at that cap says so,
so "largest that fits: 4k" on a card with 138 GiB free is not read as the card's limit."""

from __future__ import annotations

import json
from pathlib import Path

from app.planner.gguf.model import ModelShape, read_shape
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import max_context
from tests.unit.planner.test_plan import h200


def test_a_tiny_model_on_an_h200_is_stopped_by_the_search_not_the_memory(tiny_model: Path) -> None:
    shape = read_shape(tiny_model)
    fit = max_context(shape, h200(), LaunchSettings(n_ctx=1024))
    assert fit.searched_to == max(shape.n_ctx_train, 1024) // 256 * 256
    assert fit.resident == fit.searched_to and fit.resident_capped
    assert fit.with_tail == fit.searched_to and fit.tail_capped
    assert json.loads(json.dumps(fit.to_json()))["searched_to"] == fit.searched_to


def test_a_model_that_fills_the_card_is_not_capped(qwen14b: ModelShape) -> None:
    fit = max_context(qwen14b, h200(), LaunchSettings(n_ctx=qwen14b.n_ctx_train))
    assert fit.resident < fit.searched_to and not fit.resident_capped  # the memory stopped it
