"""Where a number came from: each source's words (what the CLI prints and the window's tooltip
shows), and the plan's JSON string read back as the same source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.machine.overhead import Overhead, known_overhead
from app.planner.gguf.model import ModelShape
from app.planner.memory.weights import DEFAULT_GPU_OVERHEAD_SOURCE
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.sources import Source, Sourced, SourceKind
from app.planner.units import MiB
from tests.unit.planner.test_plan import H200_MEASURED, h200

#: Every kind of source with the words a user reads for it (today's phrases, PLAN_JSON_VERSION 1).
WORDS = [
    (Source(SourceKind.MEASURED), "measured by pass 1"),
    (Source(SourceKind.MEASURED_ELSEWHERE, "-c 4096 (not 8192)"),
     "measured by pass 1 for other settings at -c 4096 (not 8192)"),
    (Source(SourceKind.MEASURED_HERE, "NVML, pid 42"), "measured on this GPU and driver (NVML, pid 42)"),
    (Source(SourceKind.CALIBRATED, "a 64 MiB copy"), "calibrated on this machine (a 64 MiB copy)"),
    (Source(SourceKind.FROM_GGUF), "from the GGUF"),
    (Source(SourceKind.FROM_GGUF, "mapped file + 4.8 GiB repacked copy for the CPU backend"),
     "from the GGUF (mapped file + 4.8 GiB repacked copy for the CPU backend)"),
    (Source(SourceKind.FROM_LAW, "at -c 4096; the estimate does not know olmo"),
     "from the law pass 1 measured (at -c 4096; the estimate does not know olmo)"),
    (Source(SourceKind.FROM_NVML), "from NVML"),
    (Source(SourceKind.FROM_NVML, "2 processes hold 1.2 GiB, the driver keeps 615 MiB"),
     "from NVML: 2 processes hold 1.2 GiB, the driver keeps 615 MiB"),
    (Source(SourceKind.FROM_OS), "from the OS"),
    (Source(SourceKind.FROM_RPC), "from the RPC worker"),
    (Source(SourceKind.FROM_PSUTIL), "from psutil"),
    (Source(SourceKind.ESTIMATED), "estimated"),
    (Source(SourceKind.GIVEN), "given"),
    (Source(SourceKind.DEFAULT, "~590 MiB measured on an H200 (driver 580)"),
     "default: ~590 MiB measured on an H200 (driver 580)"),
    (Source(SourceKind.SIMULATED), "simulated"),
    (Source(SourceKind.LEFT_OVER), "what is left"),
]


@pytest.mark.parametrize(("source", "text"), WORDS, ids=[s.kind.name + ("+" if s.detail else "") for s, _ in WORDS])
def test_a_source_says_its_words_and_reads_back_from_them(source: Source, text: str) -> None:
    assert str(source) == text == f"{source}"
    assert source.to_json() == text
    assert Source.from_json(json.loads(json.dumps(source.to_json()))) == source


def test_every_kind_is_covered_and_reads_back_without_a_detail() -> None:
    assert {s.kind for s, _ in WORDS} == set(SourceKind)
    for kind in SourceKind:
        assert Source.from_json(kind.value) == Source(kind)


def test_a_detail_that_itself_has_brackets_survives_the_round_trip() -> None:
    src = Source(SourceKind.MEASURED_HERE, "measured on NVIDIA H200 (driver 580.159.04) with NVML")
    assert str(src) == "measured on this GPU and driver (measured on NVIDIA H200 (driver 580.159.04) with NVML)"
    assert Source.from_json(str(src)) == src


@pytest.mark.parametrize("text", ["", "measured", "from the GGUF (", "from the moon", "given (by whom)x"])
def test_words_no_kind_has_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a source a plan names"):
        Source.from_json(text)


def test_a_plans_json_sources_read_back_as_the_plans_sources(qwen14b: ModelShape) -> None:
    plan = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192), measurement=H200_MEASURED)
    data = json.loads(json.dumps(plan.to_json()))
    gpu, host = data["gpus"][0]["sources"], data["host"]["sources"]
    assert all(isinstance(v, str) for v in (*gpu.values(), *host.values()))  # the JSON shape is unchanged
    assert gpu["total"] == "simulated" and gpu["compute"] == "measured by pass 1" and gpu["safety"] == "given"
    assert {k: Source.from_json(v) for k, v in gpu.items()} == plan.gpus[0].sources
    assert {k: Source.from_json(v) for k, v in host.items()} == plan.host.sources


def test_a_sourced_count_is_still_the_number() -> None:
    n = Sourced(612 * MiB, Source(SourceKind.GIVEN))
    assert n == 612 * MiB and n + 1 == 612 * MiB + 1 and n.source.kind is SourceKind.GIVEN


def test_a_stored_overhead_measurement_is_planned_as_measured_on_this_gpu(qwen14b: ModelShape,
                                                                         tmp_path: Path) -> None:
    measured = Overhead(612 * MiB, "measured on NVIDIA H200 (driver 580.159.04) with NVML", True).sourced()
    gpu = make_plan(qwen14b, h200(), LaunchSettings(n_ctx=8192), overhead=measured).gpus[0]
    assert gpu.overhead == 612 * MiB
    assert str(gpu.sources["overhead"]) == ("measured on this GPU and driver (measured on NVIDIA H200 "
                                            "(driver 580.159.04) with NVML)")
    default = known_overhead("NVIDIA H200", "580.159.04", path=tmp_path / "overhead.json")
    assert not default.measured and default.sourced().source == DEFAULT_GPU_OVERHEAD_SOURCE
    assert default.source == "default: ~590 MiB measured on an H200 (driver 580)"
