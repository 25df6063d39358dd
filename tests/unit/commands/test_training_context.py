"""The training context is the edge (issue 46): a plan offers nothing past it unless the user asks past
it, and then warns with the RoPE scaling the model would need; a context that is not planned as asked
is exit 1, not a success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app import cli


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    rc = cli.main(["plan", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_a_4k_trained_model_is_offered_nothing_past_4096_unless_asked(
        tiny_chat_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, plan = _plan(capsys, str(tiny_chat_model), "-c", "2048", "--gpu", "H200")
    assert rc == 0 and plan["asked_context_planned"] is True
    assert plan["max_context"] == {"resident": 4096, "with_tail": 4096, "n_ctx_train": 4096, "searched_to": 4096}
    assert not any("training context" in w for w in plan["warnings"])


def test_asking_past_it_warns_with_the_rope_scaling_and_a_context_not_planned_is_exit_1(
        tiny_chat_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, plan = _plan(capsys, str(tiny_chat_model), "-c", "16384", "--gpu", "H200")
    assert rc == 0 and plan["launch"]["n_ctx"] == 16384
    assert ("context per sequence 16,384 exceeds the model's training context 4,096: past it the model needs RoPE "
            "scaling (llama-server: --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 4096), which Headroom does "
            "not set; without it replies degrade past 4,096 tokens") in plan["warnings"]
    rc = cli.main(["plan", str(tiny_chat_model), "-c", "99999999", "--gpu", "RTX 4090"])
    out, err = capsys.readouterr()
    assert rc == 1 and out.startswith("99,999,999 DOES NOT FIT as asked")
    assert "the context asked for (99,999,999) does not fit; the plan is for " in err
