"""A LoRA adapter (``--lora``) and a draft model (``-md``) on the real engine: planned per device,
measured by pass 1 where llama.cpp lets it (the draft's compute), passed explicitly and checked
against the engine's own buffer lines within 1 MiB."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from app.engine.native_build import EngineBuild
from app.planner.units import MiB
from tests.fixtures import adapters, shapes
from tests.fixtures.server_proc import headroom_serving

pytestmark = pytest.mark.engine


def _row(lines: list[str], part: str) -> tuple[float, float, str]:
    """The plan-vs-actual row for ``host <part>``: planned MiB, actual MiB, verdict."""
    words = part.split()
    row = next((ln.split() for ln in lines if ln.split()[:1 + len(words)] == ["host", *words]), None)
    assert row is not None, f"no host {part} row:\n" + "".join(lines)
    cells = row[1 + len(words):]  # planned MiB actual MiB error MiB verdict
    return float(cells[0].replace(",", "")), float(cells[2].replace(",", "")), cells[-1]


def _plan_json(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "app", "plan", *args, "--json"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def test_a_lora_adapter_is_planned_beside_its_weights_and_checked(engine_build: EngineBuild, tiny_deep_model: Path,
                                                                 tmp_path: Path) -> None:
    lora = adapters.write_lora(shapes.TINY_DEEP, tmp_path / "deep-lora.gguf", rank=64,
                               targets=("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"))
    args = [str(tiny_deep_model), "-c", "8192", "--lora", str(lora)]
    with headroom_serving(args) as (_, lines):
        pass
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert f" --lora {lora} " in command, command
    planned, actual, verdict = _row(lines, "lora")
    # 8 layers × 7 tensors × rank 64 of f32 pairs: 5 MiB, every byte of it where the plan said
    assert verdict == "ok" and 4.5 < actual < 5.5 and abs(actual - planned) <= 1.0, (planned, actual)
    assert "every buffer within 1 MiB" in "".join(lines), "".join(lines)
    host = _plan_json(args)["host"]
    assert isinstance(host, dict) and abs(host["lora"] - actual * MiB) <= MiB
    assert host["sources"]["lora"].startswith("from the GGUF")


def test_a_draft_model_is_measured_launched_checked_and_drafts(engine_build: EngineBuild, tiny_deep_model: Path) -> None:
    draft = adapters.draft_model()
    args = [str(tiny_deep_model), "-c", "32768", "-md", str(draft), "-ctkd", "q8_0"]
    with headroom_serving(args) as (url, lines):
        body = json.dumps({"prompt": "The quick brown fox", "n_predict": 24, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            timings = json.loads(r.read())["timings"]
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert f" -md {draft} " in command and " -ctkd q8_0 -ctvd q8_0 " in command, command
    assert " --spec-type draft-simple --spec-draft-n-max 3 " in command, command
    assert timings.get("draft_n", 0) > 0, timings  # the draft proposed tokens: it speculated
    for part in ("draft weights", "draft kv", "draft compute", "output", "compute"):
        planned, actual, verdict = _row(lines, part)
        assert verdict == "ok" and abs(actual - planned) <= 1.0, (part, planned, actual)
    _, kv, _ = _row(lines, "draft kv")
    assert 4.0 < kv < 4.6, kv  # 32k cells of one q8_0 layer (64 K and 64 V values): 4.25 MiB
    assert "every buffer within 1 MiB" in "".join(lines), "".join(lines)
    plan = _plan_json(args)  # pass 1 ran for this launch in serve: the draft's compute is measured
    host = plan["host"]
    assert isinstance(host, dict) and host["sources"]["draft_compute"] == "measured by pass 1", host["sources"]
