"""Pass 1 by the engine itself: the opencoti two-pass number (replayed by a small fake executable,
since no opencoti binary runs here) and the stock build's own llama-fit-params (real)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.fit_params import KVU_WARNING, engine_pass1, fit_params_argv, fit_params_measure
from app.probe.measure import MeasureError

OPENCOTI = Path(__file__).resolve().parents[2] / "fixtures" / "opencoti"

REPLAYER = """import os, sys, threading
log, pidfile, then = sys.argv[1], sys.argv[2], sys.argv[3]
open(pidfile, "w").write(str(os.getpid()))
for line in open(log, encoding="utf-8"):
    if not line.startswith("#"):
        sys.stdout.write(line)
        sys.stdout.flush()
if then == "exit":
    sys.exit(1)
threading.Event().wait()  # like the engine: keep serving until stopped
"""


def fake_engine(tmp_path: Path, log: str, then: str) -> tuple[list[str], Path]:
    script = tmp_path / "opencoti-llamafile.py"
    script.write_text(REPLAYER)
    pidfile = tmp_path / "pid"
    return [sys.executable, str(script), str(OPENCOTI / log), str(pidfile), then], pidfile


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_engine_pass1_reads_the_measured_compute_and_stops_the_engine(tmp_path: Path) -> None:
    argv, pidfile = fake_engine(tmp_path, "window-boot-two-pass.log", then="serve")
    m = engine_pass1(argv, timeout=30)
    assert m.gpu_compute == {"CUDA0": 635 * MiB}
    assert m.host_compute == round(76.01 * MiB)
    assert m.source.startswith("the engine's own two-pass")
    assert not _alive(int(pidfile.read_text())), "the engine was left running"


def test_an_engine_that_exits_before_measuring(tmp_path: Path) -> None:
    argv, _ = fake_engine(tmp_path, "window-boot-exits.log", then="exit")
    with pytest.raises(MeasureError) as err:
        engine_pass1(argv, timeout=30)
    assert "exited (status 1)" in str(err.value)
    assert "opencoti" in err.value.hint
    assert err.value.log_tail == ("error: invalid argument: --kv-residency-mode",)


def test_fit_params_argv_is_the_launch_without_kvu(engine_build: EngineBuild, tiny_model: Path) -> None:
    s = LaunchSettings(n_ctx=131072, n_parallel=4, kv_unified=True, type_k="q8_0", type_v="q8_0",
                       n_ubatch=2048, offload_kqv=False)
    argv = fit_params_argv(engine_build, tiny_model, s)
    assert argv[:5] == [str(engine_build.fit_params), "-m", str(tiny_model), "-fitp", "on"]
    for flag, value in (("-c", "131072"), ("-np", "4"), ("-ub", "2048"), ("-ctk", "q8_0"), ("-fa", "on")):
        assert argv[argv.index(flag) + 1] == value
    assert "-nkvo" in argv and "-kvu" not in argv


def test_fit_params_measures_with_the_engine_build(engine_build: EngineBuild, tiny_model: Path) -> None:
    m = fit_params_measure(engine_build, tiny_model, LaunchSettings(n_ctx=8192, n_parallel=4, kv_unified=True))
    (host,) = m.devices  # a CPU build: everything on the host row
    assert host.name == "Host" and host.host and host.compute > 0
    assert m.warnings[0] == KVU_WARNING
    assert m.llama_commit == engine_build.commit
