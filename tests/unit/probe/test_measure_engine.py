"""Pass 1 by the engine itself: the opencoti two-pass number (replayed by a small fake executable,
since no opencoti binary runs here) and the stock build's own library, measured as llama-fit-params
measures (real)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.measurement import MeasuredBy
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.fit_params import engine_pass1, fit_params_measure
from app.probe.measure import MeasureError, measure

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
    assert m.source.kind is MeasuredBy.OPENCOTI and str(m.source).startswith("the engine's own two-pass")
    assert m.llama_label == "llama.cpp opencoti"  # the engine does not say its commit: it is named
    assert not _alive(int(pidfile.read_text())), "the engine was left running"


def test_an_engine_that_exits_before_measuring(tmp_path: Path) -> None:
    argv, _ = fake_engine(tmp_path, "window-boot-exits.log", then="exit")
    with pytest.raises(MeasureError) as err:
        engine_pass1(argv, timeout=30)
    assert "exited (status 1)" in str(err.value)
    assert "opencoti" in err.value.hint
    assert err.value.log_tail == ("error: invalid argument: --kv-residency-mode",)


def test_fit_params_measures_in_the_engine_builds_library_with_the_servers_context(
        engine_build: EngineBuild, tiny_model: Path) -> None:
    """A unified 4-slot cache, which the llama-fit-params binary cannot express (it takes no -kvu)."""
    s = LaunchSettings(n_ctx=8192, n_parallel=4, kv_unified=True)
    m = fit_params_measure(engine_build, tiny_model, s)
    assert m.llama_commit == engine_build.commit  # the build's own libllama measured
    assert m.source.kind is MeasuredBy.FIT_PARAMS and "the engine build's libllama" in str(m.source)
    assert m.kv_lines == measure(tiny_model, s).kv_lines  # the same unified cache the probe sizes
    assert "4/1 seqs" in m.kv_lines[0] and "8192 cells" in m.kv_lines[0]  # 4 slots in one unified stream


def test_pass_1_with_pipeline_copies_is_read_as_the_engine_allocates() -> None:
    """Two loopback RPC workers, -ub 512, an 8-layer model of width 128 (lines as pass 1 printed them):
    the second worker's reserve counts 4 copies of the 128 × 512 f32 hidden state it receives, which the
    engine's allocation shares (it allocated 20.04 MiB on both)."""
    from app.llamacpp.logs import parse_log
    from app.planner.measurement import MeasuredBy, MeasurementSource
    from app.probe.measure import measurement_from_log

    log = "\n".join([
        "print_info: n_embd                = 128",
        "llama_context: pipeline parallelism enabled",
        "sched_reserve: RPC0[127.0.0.1:50991] compute buffer size =    20.04 MiB",
        "sched_reserve: RPC0[127.0.0.1:50992] compute buffer size =    21.04 MiB",
        "sched_reserve:        CPU compute buffer size =    17.30 MiB",
        "sched_reserve: reserve took 3.82 ms, sched copies = 4"])
    m = measurement_from_log(parse_log(log), backend="RPC", commit="0c1e57098", seconds=0.1,
                             source=MeasurementSource(MeasuredBy.PROBE), n_ubatch=512)
    assert [round(d.compute / 2**20, 2) for d in m.devices] == [20.04, 20.04, 17.30]
