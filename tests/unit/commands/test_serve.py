"""``headroom serve`` before anything starts: the advisories for the model on the engine it would use,
and a model the planner does not model is refused after them (nothing is launched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import cli
from app.engine.native_build import EngineBuild


def test_glm5_next_with_shared_sessions_gets_both_kpool_warnings_then_is_refused(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serve", str(tiny_glm5_next_model), "-c", "4096", "-np", "2", "-kvu"])
    out, err = capsys.readouterr()
    assert rc == 2
    advisories = [line for line in out.splitlines() if line.startswith("advisory: [warning]")]
    assert len(advisories) == 2
    assert "without b11412" in advisories[0] and "#29958" in advisories[0]
    assert "without 43fe9c642" in advisories[1] and "#29994" in advisories[1]
    assert "llama.cpp 0c1e57098" in advisories[0]  # the engine Headroom built, placed by its commit
    assert "cannot plan: not modelled: glm5-next" in err and "serves only models it can plan" in err
    assert "engine: starting" not in out


def test_glm5_next_alone_has_no_shared_session_warning(engine_build: EngineBuild, tiny_glm5_next_model: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", str(tiny_glm5_next_model), "-np", "1"]) == 2
    out, err = capsys.readouterr()
    assert "with shared sessions" not in out and "not modelled: glm5-next" in err
    assert "advisory: [info] glm5-next: decode-time graph re-reserve on this engine" in out


def test_serve_plans_for_the_gpus_it_is_given(engine_build: EngineBuild, tiny_model: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # --gpu reaches the plan: a card too small for the settings is refused before any launch
    rc = cli.main(["serve", str(tiny_model), "-c", "4096", "--gpu", "Tiny:256MiB", "--no-measure"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "refused: the plan does not fit" in err and "CUDA0" in err
