"""The ~30 GB shape fixture is the published Qwen3-30B-A3B Q8_0 file as llama.cpp itself reads it:
the benchmarks' size claims (issues 3 and 4: shape read, pass 1 "on the 30 GB fixture") rest on it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.settings import LaunchSettings
from app.probe.measure import run_worker
from tests.fixtures import shapes

pytestmark = pytest.mark.engine

#: bartowski/Qwen3-30B-A3B-GGUF lists ``Qwen3-30B-A3B-Q8_0.gguf`` at 32.48 GB.
PUBLISHED_GB = 32.48


def test_the_30gb_fixture_is_the_published_q8_0_model(engine_build: EngineBuild,
                                                       shape_model: Callable[[str], Path]) -> None:
    path = shape_model(shapes.QWEN3_30B_A3B_Q8.name)
    assert round(path.stat().st_size / 1e9, 2) == PUBLISHED_GB
    _, lines = run_worker(path, LaunchSettings(n_ctx=4096), timeout=60)
    log = "\n".join(lines)
    # llama_model_loader: - type q8_0:  338 tensors
    assert {k: int(v) for k, v in re.findall(r"- type\s+(\w+):\s+(\d+) tensors", log)} == {"f32": 241, "q8_0": 338}
    # print_info: file size   = 30.25 GiB (8.51 BPW)
    assert re.search(r"print_info: file size\s+= 30\.25 GiB", log), log[-2000:]
    # print_info: model type            = 30B.A3B
    assert re.search(r"print_info: model type\s+= 30B\.A3B$", log, re.MULTILINE)
    # print_info: model params          = 30.53 B
    assert re.search(r"print_info: model params\s+= 30\.53 B$", log, re.MULTILINE)
