"""Models the estimate does not know, planned from pass 1's measured law (app/planner/law.py): the law
read from one pass 1 gives the KV caches pass 1 itself measures at other contexts, slot counts and KV
types (within 1 MiB); ``plan`` marks such a plan as measured, not ``not modelled``; ``serve --smoke``
ends with every buffer as planned.

The models are real GGUFs the tests write from llama.cpp's tensor names (tests/fixtures/tables.py):
olmo (a plain cache), glm5-next (MLA, a k-pool indexer cache beside it, recurrent state on both
layers), and gemma3 read as if the estimate did not know it (an iSWA model: two caches)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.errors import PlannerError
from app.planner.gguf.model import read_shape
from app.planner.law import fit_shape
from app.planner.memory.kv import kv_layout
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.measure import MeasureError, measure
from tests.fixtures import gguf_factory, shapes

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]

#: Where the law is read (pass 1 once), and the other settings it must predict.
FIT_AT = LaunchSettings(n_ctx=4096)
OTHERS = (LaunchSettings(n_ctx=16384), LaunchSettings(n_ctx=12288, n_parallel=2, kv_unified=True),
          LaunchSettings(n_ctx=8192, n_parallel=3), LaunchSettings(n_ctx=8192, type_k="q8_0", type_v="q8_0"))


def _lib(engine_build: EngineBuild) -> str:
    return str(engine_build.bin_dir)


@pytest.mark.parametrize("spec", [shapes.TINY_OLMO, shapes.TINY_GLM5_NEXT, shapes.TINY_GEMMA3],
                         ids=lambda s: s.arch)
def test_the_law_from_one_pass_1_gives_the_kv_pass_1_measures_elsewhere(spec, engine_build: EngineBuild) -> None:
    path = gguf_factory.ensure(spec)
    shape = replace(read_shape(path), modelled=False)  # (gemma3: as if the estimate did not know it)
    law = fit_shape(shape, measure(path, FIT_AT, lib_dir=_lib(engine_build)))
    assert law.law and not law.modelled
    for settings in OTHERS:
        if shape.is_mla and settings.type_k != settings.type_v:
            continue
        try:
            m = measure(path, settings, lib_dir=_lib(engine_build))
        except MeasureError:  # (the engine refuses it: a q8_0 cache over 16-wide heads) -- and so does the law
            with pytest.raises(PlannerError):
                kv_layout(law, settings)
            continue
        planned = kv_layout(law, settings).total
        assert abs(planned - (m.kv_total + m.recurrent)) <= 1 * MiB, (settings.flags(), planned, m.kv_lines)


def _headroom(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)


def test_plan_of_an_architecture_the_estimate_does_not_know_is_measured_not_refused(engine_build: EngineBuild) -> None:
    path = gguf_factory.ensure(shapes.TINY_OLMO)
    done = _headroom("plan", str(path), "-c", "8192", "--engine", str(engine_build.server), "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["planned_from"] == "pass 1's measured law" and plan["arch"] == "olmo"
    assert plan["measurement"] is not None and "not modelled" not in done.stderr
    assert plan["host"]["sources"]["kv_tail"].startswith("from the law pass 1 measured")
    text = _headroom("plan", str(path), "-c", "8192", "--engine", str(engine_build.server))
    assert "planned from pass 1's measurement (the estimate does not know olmo)" in text.stdout


def test_serve_smoke_of_it_ends_with_every_buffer_as_planned(engine_build: EngineBuild) -> None:
    path = gguf_factory.ensure(shapes.TINY_OLMO)
    done = _headroom("serve", str(path), "-c", "8192", "--engine", str(engine_build.server), "--smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "The engine allocated what the plan said (every buffer within 1 MiB)." in done.stdout
    assert "smoke: ok" in done.stdout
