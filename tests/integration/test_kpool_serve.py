"""``headroom serve --smoke --diagnostic`` on a k-pool model the estimate does not model (glm5-next): it is
planned from pass 1's measured law (app/planner/law.py) and served with plan vs actual per buffer, or, with
``--unplanned``, launched with the flags as given; the advisories come first, then the diagnostic smoke
test says what it could and could not show.

On one backend (a CPU launch) ggml re-reserves silently, so a passing smoke test is *inconclusive*;
with a second backend (a local ggml-rpc-server, as a GPU launch has CUDA0 beside the CPU) the engine
Headroom builds — llama.cpp 0c1e57098 with its two k-pool patches (docs/engine-patches.md) — passes,
and serves two sessions forked from one prompt well past the k-pool's pool-count steps
(tests/fixtures/kpool.py, tests/integration/test_kpool_repro.py). ``HEADROOM_KPOOL_ENGINE=unpatched``
serves the unpatched build instead (``--engine``), where the smoke test names the bug and the fork dies.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, fork, send
from tests.fixtures.kpool import kpool_engine_for_tests, second_backend
from tests.fixtures.server_proc import headroom_serve, headroom_serving

pytestmark = pytest.mark.engine

FIXED = "advisory: [info] glm5-next with shared sessions: fixed in this build"


@pytest.fixture(scope="module")
def kpool_engine(engine_build: EngineBuild) -> EngineBuild:
    """Headroom's engine, or the unpatched one under ``HEADROOM_KPOOL_ENGINE=unpatched``."""
    return kpool_engine_for_tests(engine_build)


def _args(model: Path, engine: EngineBuild, extra: Sequence[str], *, smoke: bool = True,
          unplanned: bool = False) -> list[str]:
    return [str(model), "-c", "32768", "-np", "2", "-kvu", *(["--unplanned"] if unplanned else []), "--diagnostic",
            *(["--smoke"] if smoke else []), "--engine", str(engine.server), *extra]


def _serve(model: Path, engine: EngineBuild, extra: Sequence[str], deadline_s: float = 150.0, *,
           unplanned: bool = False) -> tuple[int, str]:
    """Run ``headroom serve`` until it serves (then SIGTERM, as Ctrl-C) or exits by itself."""
    return headroom_serve(_args(model, engine, extra, unplanned=unplanned), deadline_s)


def _every_buffer_as_planned(out: str) -> None:
    assert "plan vs actual:" in out and "The engine allocated what the plan said (every buffer within 1 MiB)." in out, out


def test_a_model_the_estimate_does_not_know_is_planned_from_pass_1_not_refused(tiny_glm5_next_model: Path,
                                                                              engine_build: EngineBuild) -> None:
    out = subprocess.run([sys.executable, "-m", "app", "plan", str(tiny_glm5_next_model), "-c", "32768", "-np", "2",
                          "-kvu", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "not modelled" not in out.stdout + out.stderr
    import json

    plan = json.loads(out.stdout)
    assert plan["planned_from"] == "pass 1's measured law" and plan["measurement"] is not None
    assert "from the law pass 1 measured" in plan["host"]["sources"]["kv_tail"]


def test_one_backend_diagnostic_smoke_is_inconclusive_also_unplanned(tiny_glm5_next_model: Path,
                                                                     kpool_engine: EngineBuild) -> None:
    rc, out = _serve(tiny_glm5_next_model, kpool_engine, ["-ngl", "0"], unplanned=True)
    assert rc == 0, out
    assert "warning: not planned: not modelled: glm5-next (asked with --unplanned)" in out
    assert out.count(FIXED) == 1 and "advisory: [warning]" not in out
    assert "llama.cpp 0c1e57098 + 5 Headroom patches" in out
    assert "smoke: inconclusive" in out and "--rpc" in out
    assert "engine stopped" in out


def test_with_a_second_backend_the_diagnostic_smoke_passes(
        tiny_glm5_next_model: Path, kpool_engine: EngineBuild, tmp_path: Path) -> None:
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device:
        rc, out = _serve(tiny_glm5_next_model, kpool_engine, list(device.serve_args))
    assert rc == 0, out
    _every_buffer_as_planned(out)
    smoke = next((line for line in out.splitlines() if line.startswith("smoke:")), "")
    assert smoke.startswith("smoke: ok"), out
    assert "diagnostic launch: no graph re-reserve" in smoke
    assert "serving at" not in out and "engine stopped (exit code 0)" in out  # --smoke: the verdict, then it stops


def test_two_sessions_forked_from_one_prompt_both_generate_past_512_tokens(
        tiny_glm5_next_model: Path, kpool_engine: EngineBuild, tmp_path: Path) -> None:
    """The issue's "must show": ``headroom serve … -np 2 -kvu`` with GGML_SCHED_DEBUG_REALLOC=1 and two
    backends; one prompt forked into two shared sessions, both continued past 512 generated tokens —
    past two steps of the padded pool count (64 pools of 4 tokens, both sequences counted)."""
    n_fork, n_more = 520, 24
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device, \
            headroom_serving(_args(tiny_glm5_next_model, kpool_engine, list(device.serve_args),
                                   smoke=False)) as (url, lines):
            client = EngineClient(url, timeout=600)
            prompt = "One prompt, decoded once, shared by two sessions. " * 40
            forked = fork(client, prompt, ["left", "right"], Sampling(n_fork, 0.8, 7, ignore_eos=True))
            assert forked.ok, forked.error
            assert forked.proof is not None and forked.proof.shared, str(forked.proof)
            assert [c.tokens_predicted for c in forked.completions] == [n_fork, n_fork]
            for session in forked.sessions:
                turn = send(client, session, session.name, " And on.", Sampling(n_more, 0.8, 8, ignore_eos=True))
                assert turn.ok, f"{session.name}: {turn.error}"
                assert turn.completions[0].tokens_predicted == n_more
            assert client.health()
    out = "".join(lines)
    assert "unexpected graph reallocation" not in out and "engine stopped (exit code 0)" in out, out
    _every_buffer_as_planned(out)
