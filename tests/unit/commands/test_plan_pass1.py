"""``headroom plan`` and pass 1: a cached measurement for exactly this launch is used without running
anything; ``--measure`` runs it first; CPU numbers for a GPU plan carry the caveat; the engine
advisories for the discovered engine are printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import cli
from app.engine.native_build import EngineBuild
from app.probe import cache as measure_cache


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "measurements"
    monkeypatch.setattr(measure_cache, "measurements_dir", lambda: root)
    return root


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = cli.main(["plan", *argv])
    return rc, capsys.readouterr().out


def test_no_cached_pass1_means_estimated_and_nothing_runs(engine_build: EngineBuild, tiny_model: Path,
                                                          _private_cache: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _plan(capsys, str(tiny_model), "-c", "4096")
    assert rc == 0
    assert "pass 1: none cached for this launch" in out
    assert "compute buffers are an estimate" in out
    assert not _private_cache.exists()  # no probe ran, nothing was stored


def test_measure_then_plan_uses_the_cache(engine_build: EngineBuild, tiny_model: Path, _private_cache: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _plan(capsys, str(tiny_model), "-c", "4096", "-np", "2", "-kvu", "--measure")
    assert rc == 0
    assert "measured by pass 1" in out and "pass 1: llama-cpp-python" in out and "run now" in out
    stored = sorted(_private_cache.glob("*.json"))
    assert len(stored) == 1
    rc, out = _plan(capsys, str(tiny_model), "--ctx", "4096", "--parallel", "2", "--kv-unified")
    assert rc == 0
    assert "compute pinned" in out and "measured by pass 1" in out
    assert f"cached in {_private_cache}" in out
    assert sorted(_private_cache.glob("*.json")) == stored  # the cache was read, not written
    # other settings are another launch: not measured
    rc, out = _plan(capsys, str(tiny_model), "-c", "4096", "-np", "2")
    assert "pass 1: none cached for this launch" in out


def test_headroom_measure_output_is_reused_by_plan(engine_build: EngineBuild, tiny_model: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["measure", str(tiny_model), "-c", "8192", "-ub", "256"]) == 0
    capsys.readouterr()
    rc = cli.main(["plan", str(tiny_model), "-c", "8192", "-ub", "256", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["measurement"]["cached"] is True and data["measurement"]["backend"] == "CPU"
    assert data["host"]["sources"]["compute_pinned"] == "measured by pass 1"


def test_cpu_numbers_for_a_gpu_plan_say_so(engine_build: EngineBuild, tiny_model: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _plan(capsys, str(tiny_model), "-c", "4096", "--gpu", "H200", "--measure")
    assert rc == 0
    assert "warning: Pass 1 measured with the CPU backend" in out
    assert "estimates their compute buffers" in out
    gpu_compute = next(line for line in out.splitlines() if line.strip().startswith("compute ") and "MiB" in line)
    assert gpu_compute.rstrip().endswith("estimated (never compared with CUDA below 32,768 context)")


def test_plan_names_the_engine_and_its_advisories(engine_build: EngineBuild, tiny_model: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _plan(capsys, str(tiny_model), "-np", "2", "-kvu")
    assert rc == 0
    assert "engine: llama-server" in out and str(engine_build.server) in out
    assert "(llama.cpp 0c1e57098 + 5 Headroom patches)" in out
    assert "advisories: none known" in out
    rc = cli.main(["plan", str(tiny_model), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["path"] == str(engine_build.server) and data["advisories"] == []
    assert data["engine"]["llama_cpp"] == "llama.cpp 0c1e57098 + 5 Headroom patches"
    assert data["engine"]["fixes"] == ["b11412", "43fe9c642", "fork-in-a-full-pool", "host-kv-attention"]


def test_a_model_the_estimate_does_not_know_is_planned_from_pass_1_with_its_advisories(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", str(tiny_glm5_next_model), "-np", "2", "-kvu"])
    out, err = capsys.readouterr()
    assert rc == 0 and "not modelled" not in err
    assert "planned from pass 1's measurement (the estimate does not know glm5-next)" in out
    assert "glm5-next with shared sessions: fixed in this build" in out
    rc = cli.main(["plan", str(tiny_glm5_next_model), "-np", "2", "-kvu", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["planned_from"] == "pass 1's measured law" and data["arch"] == "glm5-next"
    assert [a["key"] for a in data["advisories"]] == ["kpool-fixed-in-build"]


def test_a_model_pass_1_cannot_measure_is_refused_with_pass_1s_reason(
        engine_build: EngineBuild, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The estimate does not know it and the engine refuses it: the engine's reason, not "not modelled"."""
    from tests.fixtures import gguf_factory, shapes

    rc = cli.main(["plan", str(gguf_factory.ensure(shapes.TINY_OLMO_NO_GATE))])  # (llama.cpp requires ffn_gate)
    err = capsys.readouterr().err
    assert rc == 2 and "cannot plan olmo (the estimate does not know it) because pass 1" in err
    assert "tensor 'blk.0.ffn_gate.weight' not found" in err
