"""When nothing fits at the asked context, the shorter context the stock plan offers is the largest
one that some placement it knows fits (experts on the CPU, the KV of some layers on the host, fewer
layers, -nkvo), launched the cheapest way there; and the words around the largest contexts say
where they live (a new-user walkthrough: "nothing offered for an MoE at long context")."""

from __future__ import annotations

import pytest

from app.commands.plan import render
from app.planner import words
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.plan_types import AlternativeKind, Plan
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan, max_context
from app.planner.units import GiB, format_tokens
from tests.fixtures import gguf_factory, shapes

ASKED = LaunchSettings(n_ctx=128 * 1024)


@pytest.fixture(scope="module")
def qwen30b() -> ModelShape:
    """Qwen3-30B-A3B Q4_K_M's shape: 17 GiB of weights, 128 experts a layer, trained for 40k."""
    return read_shape(gguf_factory.ensure(shapes.BY_NAME["qwen3-30b-a3b-q4_k_m"]))


def rtx4060(host_gib: int) -> Inventory:
    """An 8 GB card on a desktop with ``host_gib`` of RAM (a GiB of it in use by others)."""
    return Inventory((GpuDevice(0, "NVIDIA GeForce RTX 4060", 8 * GiB, 8 * GiB, kind=DeviceKind.SIMULATED),),
                     HostMemory(host_gib * GiB, (host_gib - 1) * GiB))


def keeps_context(plan: Plan, n_ctx: int) -> bool:
    """Whether ``plan`` found a launch at ``n_ctx`` with the KV type as asked."""
    return any(a.feasible and a.launch.n_ctx == n_ctx and a.kind is not AlternativeKind.SMALLER_KV_TYPE
               for a in plan.alternatives)


def test_an_moe_at_long_context_is_offered_the_largest_context_its_experts_on_the_cpu_allow(qwen30b: ModelShape) -> None:
    inv = rtx4060(24)
    plan = make_plan(qwen30b, inv, ASKED)
    assert not keeps_context(plan, ASKED.n_ctx)  # 128k: not as set, -nkvo or any layer move
    assert max_context(qwen30b, inv, ASKED).resident == 0  # the weights alone do not fit the card
    shorter = next(a for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT)
    n_ctx = shorter.launch.n_ctx
    assert plan.feasible and shorter.chosen and plan.launch == shorter.launch
    assert 32 * 1024 <= n_ctx < ASKED.n_ctx and shorter.launch.n_cpu_moe > 0  # 32k fits with experts moved
    # It says both: the context and the placement, in the label, the note and the CLI's first line.
    assert shorter.placement == f"--n-cpu-moe {shorter.launch.n_cpu_moe}"
    assert shorter.label == f"-c {n_ctx} --n-cpu-moe {shorter.launch.n_cpu_moe}"
    assert shorter.note.startswith(f"a shorter context ({format_tokens(n_ctx)}); the expert weights of")
    assert words.changed(plan, ASKED).endswith(
        f"planned instead: -c {n_ctx} --n-cpu-moe {shorter.launch.n_cpu_moe}")
    # The largest: 256 more tokens fit no placement; and it is the launch a plan at that context chooses.
    assert not keeps_context(make_plan(qwen30b, inv, ASKED.with_(n_ctx=n_ctx + 256)), n_ctx + 256)
    there = make_plan(qwen30b, inv, ASKED.with_(n_ctx=n_ctx))
    assert there.feasible and there.launch == shorter.launch


def test_while_a_placement_keeps_the_asked_context_the_shorter_one_is_fully_resident(qwen30b: ModelShape) -> None:
    # 24 GB: at 128k --n-cpu-moe keeps the context (chosen); the shorter context on offer is the trade
    # of context for speed, the largest the settings hold as set. At 256k nothing keeps it: still the
    # largest the settings hold fully resident (no host cost a turn), not a longer one with a host tail.
    big = Inventory((GpuDevice(0, "NVIDIA GeForce RTX 4090", 24 * GiB, 24 * GiB, kind=DeviceKind.SIMULATED),),
                    HostMemory(24 * GiB, 23 * GiB))
    resident = max_context(qwen30b, big, ASKED).resident
    plan = make_plan(qwen30b, big, ASKED)
    shorter = next(a for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT)
    assert keeps_context(plan, ASKED.n_ctx) and plan.launch.n_ctx == ASKED.n_ctx and not shorter.chosen
    assert shorter.launch.n_ctx == resident > 0 and shorter.label == f"-c {resident}" and shorter.placement == ""
    assert shorter.note == f"a shorter context ({format_tokens(resident)}), fully resident"
    longer = make_plan(qwen30b, big, ASKED.with_(n_ctx=256 * 1024))
    placed = next(a for a in longer.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT)
    assert placed.chosen and placed.launch.n_ctx == resident and placed.placement == ""
    # ... and the longest end beside it (issue 30): longer, with part of it in host RAM, slower to decode
    longest = [a for a in longer.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT][-1]
    assert longest.feasible and not longest.chosen and longest.launch.n_ctx > resident and longest.placement
    assert placed.speed is not None and longest.speed is not None
    assert placed.speed.at_fill(0.5).decode > longest.speed.at_fill(0.5).decode


def test_when_no_placement_fits_at_all_none_is_offered_and_none_is_starred(qwen30b: ModelShape) -> None:
    inv = rtx4060(16)  # 17 GiB of weights: neither the card nor host RAM holds them, at any context
    plan = make_plan(qwen30b, inv, ASKED)
    assert not plan.feasible
    assert all(a.kind is not AlternativeKind.SHORTER_CONTEXT for a in plan.alternatives)
    text = render(plan, "Qwen3 30B A3B", max_context(qwen30b, inv, ASKED), ASKED)
    rows = [ln for ln in text.splitlines() if ln.startswith("   ") and not ln.startswith("    ")]
    assert rows[0] == f"   {words.ALTERNATIVES_LEGEND}" == "   (* chosen, - does not fit, blank: fits, not chosen)"
    assert [r[3] for r in rows[1:]] == ["-"] * len(plan.alternatives)  # the failing "as set" is not starred


def test_the_cli_stars_the_chosen_row_and_explains_the_marks(qwen30b: ModelShape) -> None:
    asked = LaunchSettings(n_ctx=32 * 1024)
    inv = rtx4060(24)
    plan = make_plan(qwen30b, inv, asked)
    lines = render(plan, "Qwen3 30B A3B", max_context(qwen30b, inv, asked), asked).splitlines()
    legend = lines.index(f"   {words.ALTERNATIVES_LEGEND}")
    rows = lines[legend + 1:legend + 1 + len(plan.alternatives)]
    for row, alt in zip(rows, plan.alternatives, strict=True):
        assert row[3] == ("-" if not alt.feasible else "*" if alt.chosen else " ") and row[5:].startswith(alt.label)
    assert [r[3] for r in rows].count("*") == 1 and rows[0].startswith("   - as set")


def test_the_largest_context_says_where_its_kv_lives(qwen30b: ModelShape) -> None:
    """-ngl 0 on a card: the largest context is in host RAM, not "fully on GPU"."""
    inv = rtx4060(64)
    on_cpu = LaunchSettings(n_ctx=32 * 1024, n_gpu_layers=0)
    plan = make_plan(qwen30b, inv, on_cpu)
    fit = max_context(qwen30b, inv, on_cpu)
    assert plan.feasible and fit.resident > 0
    assert words.largest_where(plan, fit.resident, fit.with_tail, False)[1] == "in host RAM"
    nkvo = make_plan(qwen30b, inv, on_cpu.with_(n_gpu_layers=999, offload_kqv=False))
    assert words.largest_where(nkvo, fit.resident, fit.with_tail, False)[1] == "with the KV in host RAM"
    moe = make_plan(qwen30b, inv, on_cpu.with_(n_gpu_layers=999, n_cpu_moe=40))
    assert words.largest_where(moe, fit.resident, fit.with_tail, False)[1] == "with these settings"
    assert words.resident_where(LaunchSettings()) == "fully on GPU"
    assert words.none_fits("fully on GPU") == "none fits fully on GPU"
    text = render(plan, "Qwen3 30B A3B", fit, on_cpu)
    # the search stopped at the trained 40k, not the memory: "at least" (issue 29: one answer at any -c)
    assert fit.resident_capped and f"  largest context: at least {format_tokens(fit.resident)} in host RAM" in text
    assert "fully resident" not in text


def test_the_smaller_kv_types_note_says_the_rule_the_code_follows() -> None:
    assert "chosen only when nothing else fits" not in words.SMALLER_KV_NOTE
    assert "chosen only when nothing that keeps the asked context and KV type fits" in words.SMALLER_KV_NOTE
