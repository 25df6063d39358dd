"""``headroom measure`` end to end through the CLI entry point (real probe, cache in a temp dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import cli
from app.engine.native_build import EngineBuild
from app.probe import cache as measure_cache


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure_cache, "measurements_dir", lambda: tmp_path / "measurements")


def test_measure_json_carries_the_launch_and_the_numbers(engine_build: EngineBuild, tiny_model: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["measure", str(tiny_model), "--ctx", "16k", "--np", "4", "--kvu", "--fa", "on",
                   "--ub", "512", "--ctk", "f16", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["settings"]["n_ctx"] == 16384 and out["settings"]["kv_unified"] is True
    assert out["settings"]["n_parallel"] == 4
    (dev,) = out["measurement"]["devices"]
    assert dev["name"] == "CPU" and dev["compute"] > 0
    assert "16384 cells" in out["measurement"]["kv_lines"][0]
    assert out["cached"] is False
    # 16k over 4 slots in one pool: each sequence may reach 16,384, past the tiny model's 4,096
    assert len(out["warnings"]) == 1
    assert out["warnings"][0].startswith("context per sequence 16,384 exceeds the model's training context 4,096: "
                                         "past it the model needs RoPE scaling (llama-server: --rope-scaling yarn "
                                         "--rope-scale 4 --yarn-orig-ctx 4096)")


@pytest.mark.parametrize("gpus", [(), ("H200",)], ids=["cpu-only", "with-a-gpu"])
def test_the_cuda_caveat_only_where_the_launch_has_a_gpu(gpus: tuple[str, ...], engine_build: EngineBuild,
                                                          tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Walkthrough finding 14: on a CPU-only machine ``-ngl all`` is a CPU plan and its CPU numbers are its
    own (no caveat); with a GPU (a simulated card: none here) they are not the GPU's, and it says so."""
    from app.machine import devices
    from app.planner.devices import Inventory

    real = devices.resolve_gpus
    monkeypatch.setattr(devices, "resolve_gpus", lambda specs, nvml=None: real(list(gpus)) if gpus else
                        Inventory(gpus=(), host=devices.host_memory()))
    assert cli.main(["measure", str(tiny_model), "--ctx", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    caveat = out["caveat"]
    assert (caveat is not None and "CMAKE_ARGS" in caveat) if gpus else caveat is None
    assert out["warnings"] == []  # 4,096 is the model's own training context
    assert cli.main(["measure", str(tiny_model), "--ctx", "4096"]) == 0
    assert ("caveat: Pass 1 measured with the CPU backend" in capsys.readouterr().out) == bool(gpus)


def test_measure_text_says_cached_the_second_time(engine_build: EngineBuild, tiny_model: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["measure", str(tiny_model), "--ctx", "8192"]) == 0
    first = capsys.readouterr().out
    assert cli.main(["measure", str(tiny_model), "--ctx", "8192"]) == 0
    second = capsys.readouterr().out
    assert "compute" in first and "[cached]" not in first
    assert any(line.startswith("  warning: context per sequence 8,192 exceeds the model's training context 4,096: ")
               for line in first.splitlines())
    assert "[cached]" in second.splitlines()[1]


def test_measure_reports_an_impossible_setting(engine_build: EngineBuild, tiny_model: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["measure", str(tiny_model), "--fa", "off", "--ctk", "f16", "--ctv", "q4_0"])
    err = capsys.readouterr().err
    assert rc == 2  # a setting it cannot use, as `headroom plan` says it
    assert "requires flash attention" in err  # said before any child runs, as `plan` says it


@pytest.mark.parametrize(("content", "says"), [
    (b"hello world\n" * 4, "not a GGUF file"),
    (b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, "not a valid GGUF file"),
    (None, "cannot read: Is a directory"),
], ids=["text", "corrupt", "directory"])
@pytest.mark.parametrize("method", ["probe", "fit-params"])
def test_measure_names_a_file_that_is_not_a_gguf_in_one_line(
        engine_build: EngineBuild, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        content: bytes | None, says: str, method: str) -> None:
    model = tmp_path / "model.gguf"
    if content is None:
        model.mkdir()
    else:
        model.write_bytes(content)
    assert cli.main(["measure", str(model), "--with", method]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1  # one line, not llama.cpp's log or a core-dump backtrace
    assert err.startswith("headroom measure: ") and "model.gguf" in err and says in err


def test_a_probe_that_fails_exits_1_and_bad_input_exits_2(engine_build: EngineBuild, tiny_model: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Scripts can tell "pass 1 ran and failed" (1) from "this model or setting cannot be used" (2)."""
    assert cli.main(["measure", str(tiny_model), "--refresh", "--timeout", "0.001"]) == 1
    assert "headroom measure: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["measure", str(tiny_model), "--timeout", "-5"])
    assert exit_.value.code == 2
    assert "must be more than 0 seconds" in capsys.readouterr().err
