"""Every number says where it came from: pass-1 numbers reused for another launch say so, and the
"as set" option says what the settings put on the CPU."""

from __future__ import annotations

import dataclasses

from app.planner.gguf.model import ModelShape
from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.sources import Source, SourceKind
from app.planner.units import MiB
from tests.unit.planner.test_plan import H200_MEASURED, LONG, h200

MEASURED_LONG = dataclasses.replace(H200_MEASURED, launch=LONG)


def test_a_measurement_of_this_exact_launch_is_just_measured(qwen14b: ModelShape) -> None:
    plan = make_plan(qwen14b, h200(), LONG, measurement=MEASURED_LONG)
    assert str(plan.gpus[0].sources["compute"]) == "measured by pass 1"
    assert not any("run pass 1 again" in w for w in plan.warnings)


def test_reusing_a_measurement_for_other_settings_says_which(qwen14b: ModelShape) -> None:
    other = LONG.with_(n_ctx=131072, n_ubatch=1024)
    plan = make_plan(qwen14b, h200(), other, measurement=MEASURED_LONG)
    source = plan.gpus[0].sources["compute"]
    assert source.kind is SourceKind.MEASURED_ELSEWHERE
    assert str(source) == "measured by pass 1 for other settings at -c 524288 (not 131072), -ub 512 (not 1024)"
    assert plan.gpus[0].compute == round(623.01 * MiB)  # the numbers are still used, labelled
    assert any("run pass 1 again for this launch" in w for w in plan.warnings)


def test_a_measurement_survives_json_with_its_settings() -> None:
    assert Measurement.from_json(MEASURED_LONG.to_json()) == MEASURED_LONG
    assert Measurement.from_json(H200_MEASURED.to_json()).launch is None


def test_the_settings_as_given_say_what_they_put_on_the_cpu(qwen14b: ModelShape) -> None:
    plan = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192, n_gpu_layers=5), measurement=None)
    assert plan.feasible
    assert plan.reason == "44 of 48 layers and their KV on the CPU (-ngl 5)"
    # -ngl 0: llama.cpp counts the output layer as a 49th; the note says it in the model's terms.
    cpu = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192, n_gpu_layers=0), measurement=None)
    assert cpu.reason == "all 48 layers, the output layer and their KV on the CPU (-ngl 0)"
    nkvo = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192, offload_kqv=False))
    assert nkvo.reason == "the whole KV cache in host RAM (-nkvo)"
    assert make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192)).reason == "everything resident on the GPU"


def test_the_overhead_says_whether_it_was_given_measured_or_the_default(qwen14b: ModelShape) -> None:
    from app.planner.plan_types import Sourced

    settings = LaunchSettings(n_ctx=8192)
    default = make_plan(qwen14b, h200(), settings).gpus[0]
    assert default.overhead == 590 * MiB and str(default.sources["overhead"]).startswith("default: ~590 MiB")
    given = make_plan(qwen14b, h200(), settings, overhead=700 * MiB).gpus[0]
    assert given.overhead == 700 * MiB and str(given.sources["overhead"]) == "given"
    measured = make_plan(qwen14b, h200(), settings,
                         overhead=Sourced(612 * MiB, Source(SourceKind.MEASURED_HERE, "NVML, pid 42"))).gpus[0]
    assert measured.overhead == 612 * MiB
    assert str(measured.sources["overhead"]) == "measured on this GPU and driver (NVML, pid 42)"


def test_slots_too_small_for_a_conversation_are_warned(qwen14b: ModelShape) -> None:
    split = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=4096, n_parallel=8))
    assert any("each of the 8 slots holds only 512 tokens" in w for w in split.warnings)
    unified = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=4096, n_parallel=8, kv_unified=True))
    assert not any("slots holds only" in w for w in unified.warnings)  # one pool: any slot may use it all
