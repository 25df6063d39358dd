"""A plan's mode and its alternatives are typed, and still read (and serialize) as today's words."""

from __future__ import annotations

import json

import pytest

from app.planner import words
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import ModelShape
from app.planner.plan_types import AlternativeKind, Plan, PlanMode
from app.planner.settings import AUTO_CACHE_RESERVE_MIB, LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import GiB, MiB
from tests.unit.planner.test_plan import H200_MEASURED, LONG, h200


def test_the_modes_are_the_words_the_cli_and_the_json_use() -> None:
    assert [m.value for m in PlanMode] == ["window", "stock", "cpu"]
    assert f"mode {PlanMode.WINDOW}" == "mode window" and str(PlanMode.CPU) == "cpu"
    word: str = "stock"  # what code written against the old str still compares with
    assert PlanMode(word) is PlanMode.STOCK and word == PlanMode.STOCK
    assert json.dumps({"mode": PlanMode.WINDOW}) == '{"mode": "window"}'


@pytest.mark.parametrize(("window", "gpu", "mode"), [
    (True, True, PlanMode.WINDOW), (False, True, PlanMode.STOCK), (False, False, PlanMode.CPU),
    (True, False, PlanMode.WINDOW),
])
def test_the_mode_a_request_names(window: bool, gpu: bool, mode: PlanMode) -> None:
    assert PlanMode.asked(window, gpu=gpu) is mode


def test_each_solver_gives_its_mode_and_the_json_keeps_the_string(qwen14b: ModelShape) -> None:
    settings = LaunchSettings(n_ctx=8192)
    stock = make_plan(qwen14b, h200(), settings)
    window = make_plan(qwen14b, h200(), settings, engine_window=True)
    cpu = make_plan(qwen14b, Inventory((), h200().host), settings)
    assert (stock.mode, window.mode, cpu.mode) == (PlanMode.STOCK, PlanMode.WINDOW, PlanMode.CPU)
    data = json.loads(json.dumps(window.to_json()))
    assert data["mode"] == "window" and type(window.to_json()["mode"]) is str


def test_the_stock_alternatives_say_which_way_they_run(qwen14b: ModelShape) -> None:
    plan = make_plan(qwen14b, h200(free_mib=80 * 1024), LONG, measurement=H200_MEASURED)
    kinds = [a.kind for a in plan.alternatives]
    assert kinds == [AlternativeKind.AS_SET, AlternativeKind.KV_HOST_LAYERS, AlternativeKind.FEWER_LAYERS,
                     AlternativeKind.KV_ON_HOST, AlternativeKind.SMALLER_KV_TYPE, AlternativeKind.SHORTER_CONTEXT]
    labels = [a.label for a in plan.alternatives]
    assert labels[0] == "as set" and labels[1].startswith("KV of ") and labels[2].startswith("-ngl ")
    assert labels[3] == "-nkvo" and labels[4] == "-ctk q8_0 -ctv q8_0" and labels[5].startswith("-c ")
    assert "kind" not in plan.alternatives[0].to_json()  # the JSON keeps its version-1 keys


def test_the_plans_types_are_built_with_keywords_only() -> None:
    with pytest.raises(TypeError, match="positional"):
        Plan(LaunchSettings(), PlanMode.CPU)  # type: ignore[misc, call-arg]


def test_the_first_line_reads_why_from_the_as_set_alternative(qwen14b: ModelShape) -> None:
    plan = make_plan(qwen14b, h200(free_mib=80 * 1024), LONG, measurement=H200_MEASURED)
    why = plan.alternatives[0].note
    assert why.startswith("CUDA0 is short by")
    first = words.changed(plan, LONG)
    assert first.startswith(f"512k DOES NOT FIT as asked ({why}); planned instead: ")
    assert words.changed(make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192)), LaunchSettings(n_ctx=8192)) == ""


def test_the_layer_counts_in_the_models_terms() -> None:
    assert words.layers_on_cpu(48, 5) == "5 of 48 layers"
    assert words.layers_on_cpu(48, 49) == "all 48 layers, the output layer"
    assert words.ngl_text(999) == "all" and words.ngl_text(20) == "20"
    assert words.host_short(512 * MiB, kv_tail=True) == "host RAM is short by 512 MiB for the KV tail"


def test_the_prompt_cache_is_held_back_from_host_ram_and_named(qwen14b: ModelShape) -> None:
    """llama-server's --cache-ram fills host RAM over time: the plan holds it back. Auto sizes it for one
    full context's KV (8k of Qwen2.5-14B: 1.5 GiB), not the server's 8192 MiB, which it keeps as the most."""
    base = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192, cache_ram_mib=0))
    default = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192))
    assert default.host.prompt_cache == 1536 * MiB and default.cache_ram_mib == 1536
    assert base.host.free - default.host.free == default.host.prompt_cache
    assert ("--cache-ram 1536: room for one full context's KV (8,192 tokens) in the server's prompt cache, not "
            "its 8192 MiB default") in str(default.host.sources["prompt_cache"])
    long = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=65536))  # 12 GiB of KV: the server's default
    assert long.cache_ram_mib == 8192 and "--cache-ram 8192: the server's default" in str(
        long.host.sources["prompt_cache"])
    unlimited = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192, cache_ram_mib=-1))
    assert unlimited.host.prompt_cache == 0 and any("no limit" in w for w in unlimited.warnings)


def test_a_short_host_gets_a_smaller_prompt_cache_not_a_plan_that_does_not_fit(qwen14b: ModelShape) -> None:
    """One context's KV (32k: 6 GiB) would not fit beside the layers a 16 GB card leaves on a busy desktop:
    auto sizes the cache to what host RAM leaves (less 1 GiB for the desktop) and says so; a size given
    is kept."""
    inv = Inventory((GpuDevice(0, "NVIDIA GeForce RTX 5080", 16 * GiB, 16 * GiB, kind=DeviceKind.SIMULATED),),
                    HostMemory(24 * GiB, 8 * GiB))  # 8 GiB available: other apps hold the rest
    auto = make_plan(qwen14b, inv, LaunchSettings(n_ctx=32768))
    assert auto.feasible, auto.reason
    assert 0 < auto.host.prompt_cache < 6144 * MiB
    assert AUTO_CACHE_RESERVE_MIB * MiB <= auto.host.free < (AUTO_CACHE_RESERVE_MIB + 1) * MiB
    assert auto.cache_ram_mib == auto.host.prompt_cache // MiB
    assert "less than one full context's KV (6,144 MiB)" in str(auto.host.sources["prompt_cache"])
    given = make_plan(qwen14b, inv, auto.launch.with_(cache_ram_mib=8192))
    assert not given.feasible and "host RAM is short" in given.reason
