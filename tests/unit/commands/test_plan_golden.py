"""``headroom plan`` says exactly what it said before a refactor (issue 28: "behaviour, CLI text and JSON
unchanged"): five desktop-card cases, text and ``--json``, against files recorded at 799afff, before
app/machine took the machine readers out of the planner. Host RAM is fixed (64 GiB, 60 free) and no
engine or pass-1 cache is found, so the output depends on the planner alone. An intended change to what
``plan`` prints updates these files in the same commit, and says so: the planner's split into gguf/,
memory/ and solve/ changed one thing, the path in the alternatives' heading (app/planner/solve/cost.py);
issue 29 another: the heading names the model's file, as the window does, not its ``general.name``;
issue 30 a third: the alternatives show predicted tokens/s (app/planner/solve/speed.py, with its default
figures here) instead of a turn's host-side seconds, a shorter context is offered at both ends
(fastest and longest), and the speed figures are named; and later a token's fixed cost among them
(its default here; the host's engine run measures it: app/engine/cpu_attention.py ``server_token``); and
the alternatives' heading says why the starred way is chosen, also when none keeps the asked context; and
the pass-1 line says the cache is per engine too (a measurement made with --engine is found with it); and the
JSON says what a launch here runs on (``gpu_reach``: app/engine/gpu_reach.py; no engine here, so nothing); and
(issue 46) a plan that fits only with a shorter context than asked exits 1 (``asked_context_planned``), and
the warning past the training context names the RoPE scaling it would need; and the prefill figures carry
their unit, the alternatives' heading no source path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app import cli
from app.machine import devices
from app.machine import request as machine_request
from app.planner.devices import HostMemory
from app.planner.solve.speed import default_figures
from app.planner.units import GiB

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "plan_golden"
CASES = {
    "qwen14b-4090-128k": ("qwen2.5-14b-instruct-1m-q8_0", ["--gpu", "RTX 4090", "-c", "128k"]),
    "qwen14b-4090-512k": ("qwen2.5-14b-instruct-1m-q8_0", ["--gpu", "RTX 4090", "-c", "512k"]),
    "qwen14b-8gib-512k-q8": ("qwen2.5-14b-instruct-1m-q8_0",
                             ["--gpu", "MyCard:8GiB", "-c", "512k", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]),
    "qwen30b-4090-128k": ("qwen3-30b-a3b-q4_k_m", ["--gpu", "RTX 4090", "-c", "128k"]),
    "llama8b-4060-32k-np4": ("llama-3.1-8b-instruct-q4_k_m", ["--gpu", "RTX 4060", "-c", "32k", "-np", "4", "-kvu"]),
}


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_prints_what_it_printed_before(case: str, json_out: bool, shape_model: Callable[[str], Path],
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    name, args = CASES[case]
    model = shape_model(name)  # generated first, in the test models' own cache
    monkeypatch.setattr(devices, "host_memory", lambda: HostMemory(64 * GiB, 60 * GiB, 8 * GiB, 8 * GiB))
    # the speed model's defaults, not this machine's calibration (what the planner alone says)
    monkeypatch.setattr(machine_request, "machine_speed", lambda inv, host_attention=False, **_: default_figures(
        inv, host_attention=host_attention))
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))  # no engine, no pass-1 cache
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(tmp_path / "config"))  # none chosen in the window
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    rc = cli.main(["plan", str(model), *args, *(["--json"] if json_out else [])])
    got = f"exit {rc}\n" + capsys.readouterr().out.replace(str(model), "MODEL").replace(model.name, "MODEL.gguf")
    assert got == (GOLDEN / f"{case}{'.json' if json_out else '.txt'}").read_text()
