"""``headroom serve`` checks its speed after launch (issue 30): the engine's own timings of one
completion beside the plan's predicted tokens/s, and the calibration keeps measured ÷ predicted for
this machine, so the next plan's speeds are scaled by it (CPU build, the tiny test model)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def test_serve_prints_measured_beside_predicted_and_the_calibration_learns(engine_build: EngineBuild,
                                                                           tiny_model: Path, tmp_path: Path) -> None:
    env = dict(os.environ, HEADROOM_CACHE_DIR=str(tmp_path / "cache"), HEADROOM_CONFIG_DIR=str(tmp_path / "config"),
               LLAMA_CPP_LIB_PATH=engine_build.bin_dir)
    served = subprocess.run([sys.executable, "-m", "app", "serve", str(tiny_model), "-c", "4k", "--no-measure",
                             "--smoke", "--engine", str(engine_build.server)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stdout + served.stderr
    line = next((ln for ln in served.stdout.splitlines() if ln.startswith("speed (")), "")
    m = re.fullmatch(r"speed \(the engine's timings of a (\d+)-token prompt and (\d+) tokens\): decode ([\d.,]+) "
                     r"tok/s measured, ([\d.,]+) predicted; prefill ([\d.,]+) tok/s measured, ([\d.,]+) predicted", line)
    assert m is not None, served.stdout
    assert int(m[1]) > 100 and int(m[2]) == 32 and all(float(m[i].replace(",", "")) > 0 for i in range(3, 7))
    store = json.loads((tmp_path / "cache" / "speed-calibration.json").read_text())
    learned = store["learned"]["cpu"]
    assert learned["decode_scale"] > 0 and learned["prefill_scale"] > 0
    # The next plan on this machine is scaled by what the launch measured, and says so.
    planned = subprocess.run([sys.executable, "-m", "app", "plan", str(tiny_model), "-c", "4k", "--json"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120)
    fig = json.loads(planned.stdout)["speed_figures"]
    assert fig["decode_scale"]["value"] == pytest.approx(learned["decode_scale"]) and fig["decode_scale"]["calibrated"]
    assert fig["host_bandwidth"]["calibrated"] and fig["host_bandwidth"]["source"].startswith("calibrated on this machine")
