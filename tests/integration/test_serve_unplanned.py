"""``headroom serve --unplanned --smoke --diagnostic`` on a k-pool model the planner does not model:
the advisories come first, then the diagnostic smoke test says what it could and could not show.

On one backend (a CPU launch) ggml re-reserves silently, so a passing smoke test is *inconclusive*;
with a second backend (a local ggml-rpc-server, as a GPU launch has CUDA0 beside the CPU) the
engine Headroom builds aborts on the shared-sequence bug and Headroom names it
(tests/fixtures/kpool.py, tests/integration/test_kpool_repro.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from tests.fixtures.kpool import rpc_backend, second_backend_args
from tests.fixtures.server_proc import headroom_serve

pytestmark = pytest.mark.engine


def _serve(model: Path, extra: Sequence[str], deadline_s: float = 150.0) -> tuple[int, str]:
    """Run ``headroom serve`` until it serves (then SIGTERM, as Ctrl-C) or exits by itself."""
    return headroom_serve([str(model), "-c", "32768", "-np", "2", "-kvu", "--unplanned", "--smoke", "--diagnostic",
                           *extra], deadline_s)


def test_a_model_headroom_cannot_plan_is_refused_unless_unplanned(tiny_glm5_next_model: Path,
                                                                  engine_build: EngineBuild) -> None:
    out = subprocess.run([sys.executable, "-m", "app", "serve", str(tiny_glm5_next_model), "-np", "2", "-kvu"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "advisory: [warning] glm5-next with shared sessions" in out.stdout
    assert "not modelled: glm5-next" in out.stderr and "--unplanned" in out.stderr


def test_one_backend_diagnostic_smoke_is_inconclusive(tiny_glm5_next_model: Path,
                                                      engine_build: EngineBuild) -> None:
    rc, out = _serve(tiny_glm5_next_model, ["-ngl", "0"])
    assert rc == 0, out
    assert "warning: not planned: not modelled: glm5-next" in out
    assert out.count("advisory: [warning] glm5-next with shared sessions") == 2
    assert "smoke: inconclusive" in out and "--rpc" in out
    assert "engine stopped" in out


def test_with_a_second_backend_the_diagnostic_smoke_names_the_engine_bug(
        tiny_glm5_next_model: Path, engine_build: EngineBuild, tmp_path: Path) -> None:
    with rpc_backend(engine_build, tmp_path / "rpc.log") as endpoint:
        extra = [f"--engine-arg={a}" for a in second_backend_args(endpoint)]
        rc, out = _serve(tiny_glm5_next_model, extra)
    assert rc == 1, out
    assert "the smoke test failed; stopping the engine" in out
    assert "serving at" not in out
    smoke = next((line for line in out.splitlines() if line.startswith("smoke:")), "")
    assert smoke.startswith("smoke: engine-bug"), out
    assert "b11412" in smoke or "29958" in smoke, smoke
