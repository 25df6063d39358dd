"""``headroom plan``: the table and the JSON a user reads, for the headline case on a simulated H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from tests.fixtures import gguf_factory, shapes


def test_plan_json_for_the_512k_case(capsys: pytest.CaptureFixture[str]) -> None:
    model = gguf_factory.ensure(shapes.QWEN25_14B_1M)
    rc = main(["plan", str(model), "--ctx", "512k", "--np", "4", "--kvu", "--gpu", "H200", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["version"] == 1 and data["feasible"]
    assert data["kv"]["total"] == 98304 * 1024 * 1024
    assert data["gpus"][0]["name"] == "CUDA0" and data["gpus"][0]["simulated"]
    assert round(data["gpus"][0]["weights"] / 2**20) == 14180
    assert data["max_context"]["resident"] >= 524288


def test_plan_table_names_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    model = gguf_factory.ensure(shapes.GEMMA3_12B)
    rc = main(["plan", str(model), "--ctx", "128k", "--ctk", "q8_0", "--ctv", "q8_0", "--np", "4",
               "--gpu", "Small:8GiB"])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    for words in ("CUDA0", "weights", "kv resident", "overhead", "safety", "host RAM", "KV cache",
                  "largest context", "alternatives"):
        assert words in out


def test_plan_a_model_the_estimate_does_not_know_from_pass_1(capsys: pytest.CaptureFixture[str]) -> None:
    model = gguf_factory.ensure(shapes.BY_NAME["tiny-glm5-next"])  # a k-pool model the engine knows
    assert main(["plan", str(model), "--gpu", "H200"]) == 0
    out, err = capsys.readouterr()
    assert "planned from pass 1's measurement (the estimate does not know glm5-next)" in out
    assert "not modelled" not in err


def test_plan_bad_context(capsys: pytest.CaptureFixture[str]) -> None:
    model = gguf_factory.ensure(shapes.QWEN25_14B_1M)
    assert main(["plan", str(model), "--ctx", "lots", "--json"]) == 2
    out, err = capsys.readouterr()
    assert "not a token count" in err and out == ""  # a `--json > plan.json` gets no error text


def test_plan_missing_file_names_the_path_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "models" / "nope.gguf"
    assert main(["plan", str(missing), "--gpu", "H200"]) == 2
    assert capsys.readouterr().err == f"headroom plan: {missing}: cannot read: No such file or directory\n"
