"""The largest-context search stops at max(trained, asked) context: a result at that cap says so,
so "largest that fits: 4k" on a card with 138 GiB free is not read as the card's limit."""

from __future__ import annotations

import json
from pathlib import Path

from app.planner.devices import HostMemory, Inventory
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.units import GiB
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


def test_three_slots_at_the_trained_context_fit_and_the_search_says_so(tiny_chat_model: Path) -> None:
    """-np 3 without -kvu at 4,096: each slot's 1,365 is padded to 1,536 (4,608 cells). The plan fits,
    so the largest context is the whole 4,096, not the 3,840 a search in steps of 768 stopped at."""
    shape = read_shape(tiny_chat_model)
    assert shape.n_ctx_train == 4096
    settings = LaunchSettings(n_ctx=4096, n_parallel=3)
    no_gpu = Inventory((), HostMemory(22 * GiB, 22 * GiB))
    for inventory in (no_gpu, h200()):
        plan = make_plan(shape, inventory, settings)
        assert plan.feasible and plan.launch.n_ctx == 4096 and plan.window_cells + plan.tail_cells == 4608
        fit = max_context(shape, inventory, settings)
        assert fit.resident == 4096 and fit.searched_to == 4096


def test_a_context_short_of_three_slots_fits_in_steps_of_the_slots(qwen14b: ModelShape) -> None:
    """Where the memory stops the search, the largest context is a whole number of padded slots."""
    fit = max_context(qwen14b, h200(), LaunchSettings(n_ctx=qwen14b.n_ctx_train, n_parallel=3))
    assert 0 < fit.resident < fit.searched_to and fit.resident % (3 * 256) == 0
