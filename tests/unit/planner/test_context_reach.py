"""One answer to "how far can I go" and the choice a plan made, in words (issue 29): the CLI's
"largest context" line, the window's context control and its verdict all read words.context_reach
and words.automatic_choice, so the figures are the same everywhere; the expected speed in words."""

from __future__ import annotations

import pytest

from app.commands.plan import _largest_lines
from app.planner import words
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.plan_types import AlternativeKind
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.solve.speed import Speed, SpeedRow
from app.planner.units import GiB, format_tokens
from tests.fixtures import gguf_factory, shapes

ASKED = LaunchSettings(n_ctx=512 * 1024)


@pytest.fixture(scope="module")
def qwen14b() -> ModelShape:
    """Qwen2.5-14B-Instruct-1M Q8_0's shape: 15 GiB of weights, trained for 1M."""
    return read_shape(gguf_factory.ensure(shapes.BY_NAME["qwen2.5-14b-instruct-1m-q8_0"]))


def card(gib: int) -> Inventory:
    return Inventory((GpuDevice(0, "RTX", gib * GiB, gib * GiB, kind=DeviceKind.SIMULATED),),
                     HostMemory(64 * GiB, 60 * GiB))


def test_when_512k_fits_no_way_both_ends_are_said_with_their_speeds_as_the_cli_says_them(qwen14b) -> None:
    inv = card(24)
    plan, fit = make_plan(qwen14b, inv, ASKED), max_context(qwen14b, inv, ASKED)
    ends = words.context_ends(plan)
    assert ends is not None
    fast, longest = ends
    reach = words.context_reach(plan, fit)
    assert [(e.n_ctx, e.resident, e.alternative) for e in reach] == [
        (fast.launch.n_ctx, True, fast), (longest.launch.n_ctx, False, longest)]
    assert words.end_words(reach[1]) == (f"{format_tokens(longest.launch.n_ctx)} with {longest.placement} "
                                         f"({words.short_speed(longest)})")
    cli = _largest_lines(plan, fit)[0]  # the CLI prints the same two figures
    assert f"{format_tokens(fast.launch.n_ctx)} fully resident ({words.speed_words(fast)})" in cli
    assert f"{format_tokens(longest.launch.n_ctx)} with {longest.placement} ({words.speed_words(longest)})" in cli
    choice = words.automatic_choice(plan, ASKED, fit)
    assert choice is not None
    assert choice.head.startswith("512k does not fit as set (CUDA0 is short by ")
    assert choice.rest == (f"planned {words.end_words(reach[0])}. Longest: {words.end_words(reach[1])}.")
    assert choice.other == longest.launch  # one click away: the other end, its placement included
    assert "tok/s" in choice.rest.split("Longest")[0] and "tok/s" in choice.other_label


def test_a_shorter_context_found_by_the_search_carries_the_plans_placement_and_speed(qwen14b) -> None:
    inv = card(8)  # 8 GiB: not even the weights fit; the plan moves layers to the CPU
    plan, fit = make_plan(qwen14b, inv, ASKED), max_context(qwen14b, inv, ASKED)
    chosen = next(a for a in plan.alternatives if a.chosen)
    assert chosen.kind is AlternativeKind.SHORTER_CONTEXT and chosen.placement
    reach = words.context_reach(plan, fit)
    assert [e.resident for e in reach] == [False] and reach[0].alternative == chosen
    assert f"{format_tokens(chosen.launch.n_ctx)} with {chosen.placement} ({words.speed_words(chosen)})" in \
        _largest_lines(plan, fit)[0]
    choice = words.automatic_choice(plan, ASKED, fit)
    assert choice is not None and choice.other is None  # nothing else fits: no button
    assert choice.rest == f"planned {words.end_words(reach[0])}."


def test_a_plan_as_asked_has_no_choice_to_say(qwen14b) -> None:
    asked = LaunchSettings(n_ctx=8192)
    inv = card(24)
    plan = make_plan(qwen14b, inv, asked)
    assert plan.launch == asked and words.automatic_choice(plan, asked, max_context(qwen14b, inv, asked)) is None


def test_the_expected_speed_in_words() -> None:
    row = SpeedRow((Speed(0.0, 2048.0, 38.4), Speed(0.5, 1500.0, 34.0), Speed(1.0, 900.0, 31.2)), 9.0, False)
    assert words.speed_sentence(row) == ("~38 tokens/s when you start, ~34 half-way, ~31 at a full context; "
                                         "reads a 2k prompt in ~1 s")
    slow = SpeedRow((Speed(0.0, 20.0, 2.1), Speed(0.5, 15.0, 1.5), Speed(1.0, 10.0, 0.9)), 900.0, False)
    assert words.speed_sentence(slow) == ("~2.1 tokens/s when you start, ~1.5 half-way, ~0.90 at a full "
                                          "context; reads a 2k prompt in ~2 min")
    assert words.seconds_text(0.42) == "~0.4 s"
    # a prompt's tokens attend over the prompt before them: a 2k prompt into an empty 4k context reads
    # at the rate a quarter full, not the empty context's (a tiny model's walkthrough: 1.5M tokens/s
    # empty, 54,906 half-way; "~0.001 s" said where it took 0.025 s)
    tiny = SpeedRow((Speed(0.0, 1.5e6, 10_132.0), Speed(0.5, 54_906.0, 2_903.0), Speed(1.0, 27_953.0, 1_694.0)),
                    0.1, True, n_ctx_seq=4096)
    quarter = 1 / ((1 / 1.5e6 + 1 / 54_906.0) / 2)
    assert tiny.prompt_s(2048) == pytest.approx(2048 / quarter)
    assert words.speed_sentence(tiny).endswith("reads a 2k prompt in ~0.02 s")
