"""The pass-1 probe for real (llama-cpp-python on the engine build's libllama, in a child process),
and the errors a user gets when it cannot measure: each says what to change, the app survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.engine.process import pid_alive
from app.planner.errors import PlannerError
from app.planner.measurement import (
    PROBE_SOURCE,
    DeviceMeasurement,
    MeasuredBy,
    Measurement,
    MeasurementSource,
)
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.units import MiB
from app.probe.measure import MeasureCancelled, MeasureError, gpu_caveat, measure

ROOT = Path(__file__).resolve().parents[3]


def test_probe_measures_compute_and_kv(engine_build: EngineBuild, tiny_model: Path) -> None:
    m = measure(tiny_model, LaunchSettings(n_ctx=8192))
    (cpu,) = m.devices
    assert cpu.name == "CPU" and cpu.host
    assert cpu.compute > 1 * MiB
    # tiny-llama: 2 layers x 8192 cells x (2 heads x 16 dims) x (K + V) x f16
    assert m.kv_total == 2 * 8192 * 32 * 2 * 2 == cpu.kv
    assert m.backend == "CPU"
    assert m.llama_commit == engine_build.commit
    assert m.source.kind is MeasuredBy.PROBE and "no_alloc" in str(m.source)


def test_compute_follows_the_launch_settings(engine_build: EngineBuild, tiny_model: Path) -> None:
    base = measure(tiny_model, LaunchSettings(n_ctx=8192, n_ubatch=512))
    bigger = measure(tiny_model, LaunchSettings(n_ctx=8192, n_ubatch=2048))
    no_fa = measure(tiny_model, LaunchSettings(n_ctx=8192, flash_attn=FlashAttn.OFF))
    assert bigger.devices[0].compute > base.devices[0].compute
    assert no_fa.devices[0].compute > base.devices[0].compute


def test_iswa_shape_reports_both_caches(engine_build: EngineBuild, shape_model: Callable[[str], Path]) -> None:
    m = measure(shape_model("gemma-3-12b-it-q4_k_m"), LaunchSettings(n_ctx=32768))
    assert len(m.kv_lines) == 2  # the global cache at n_ctx and the sliding-window cache
    assert "32768 cells" in m.kv_lines[0] and "32768 cells" not in m.kv_lines[1]


def test_quantized_v_without_flash_attention_says_what_to_change(engine_build: EngineBuild,
                                                                 tiny_model: Path) -> None:
    with pytest.raises(MeasureError) as err:
        measure(tiny_model, LaunchSettings(flash_attn=FlashAttn.OFF, type_k="f16", type_v="q4_0"))
    assert "flash attention" in err.value.hint
    assert any("quantized V cache requires flash_attn" in line for line in err.value.log_tail)
    assert isinstance(err.value, PlannerError)


def test_a_file_that_is_not_a_model(engine_build: EngineBuild, tmp_path: Path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(MeasureError) as err:
        measure(bad, LaunchSettings())
    assert "not a GGUF model" in err.value.hint
    assert "could not load" in str(err.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MeasureError, match="model file not found"):
        measure(tmp_path / "nope.gguf", LaunchSettings())


def _fake_worker(tmp_path: Path, body: str) -> tuple[str, ...]:
    """A real child process standing in for a worker that crashes or hangs."""
    script = tmp_path / "worker.py"
    script.write_text(body)
    return (sys.executable, str(script))


def test_a_worker_that_aborts_leaves_the_parent_running(tmp_path: Path, tiny_model: Path) -> None:
    worker = _fake_worker(tmp_path, """import os, sys
sys.stdin.read()
sys.stderr.write("llama_context: constructing llama_context\\n")
sys.stderr.write("/src/llama-graph.cpp:123: GGML_ASSERT(n_tokens > 0) failed\\n")
# what ggml_print_backtrace's gdb prints after it (from a real abort of the probe)
sys.stderr.write("warning: File \\"python3.11-gdb.py\\" auto-loading has been declined\\n")
for n in range(20):
    sys.stderr.write(f"{n}\\tPython/ceval.c: No such file or directory.\\n")
sys.stderr.flush()
os.abort()
""")
    with pytest.raises(MeasureError) as err:
        measure(tiny_model, LaunchSettings(), worker=worker)
    assert "aborted" in str(err.value) and "the app is unaffected" in str(err.value)
    assert err.value.reason == "/src/llama-graph.cpp:123: GGML_ASSERT(n_tokens > 0) failed"
    assert err.value.reason in str(err.value).splitlines()[0]  # said first, not buried in the tail
    assert err.value.log_tail[-1] == err.value.reason  # the backtrace after it is dropped
    assert "No such file or directory" not in str(err.value)
    assert "assertion" in err.value.hint


class _HungOnceWritten(threading.Event):
    """A cancel event never set; its first check waits until the worker has logged its line, so the
    1.5 s run out on a hung worker, not on one that a loaded machine has not started yet."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = marker

    def is_set(self) -> bool:
        deadline = time.monotonic() + 60
        while not self.marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return False


def test_a_worker_that_hangs_is_stopped(tmp_path: Path, tiny_model: Path) -> None:
    hung = tmp_path / "hung"
    worker = _fake_worker(tmp_path, f"""import sys, threading
sys.stderr.write("load_tensors: loading model tensors\\n")
sys.stderr.flush()
open({str(hung)!r}, "w").close()  # (before reading the request: the marker never waits on the parent)
sys.stdin.read()
threading.Event().wait()
""")
    with pytest.raises(MeasureError) as err:
        measure(tiny_model, LaunchSettings(), worker=worker, timeout=1.5, cancel=_HungOnceWritten(hung))
    assert "did not finish within 1.5 s" in str(err.value)
    assert err.value.log_tail == ("load_tensors: loading model tensors",)


def test_cpu_numbers_for_a_gpu_plan_carry_a_caveat(engine_build: EngineBuild) -> None:
    cpu = Measurement((DeviceMeasurement("CPU", 8 * MiB, 4 * MiB, True),), "CPU", "x", 0.1)
    text = gpu_caveat(cpu, targets_gpu=True, engine=engine_build)
    assert text is not None
    assert "headroom measure --with fit-params" in text and "llama-server's context parameters" in text
    assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in text and "build the engine with CUDA (`headroom engine build`" in text
    assert gpu_caveat(cpu, targets_gpu=False) is None
    cuda = Measurement((DeviceMeasurement("CUDA0", 600 * MiB, 0, False),), "CUDA", "x", 1.2)
    assert gpu_caveat(cuda, targets_gpu=True) is None


def test_a_cuda_engine_log_becomes_a_gpu_measurement(shared_fixtures: Path) -> None:
    # The same conversion serves the engine's own log (recorded on an H200: CUDA0 + pinned host).
    from app.llamacpp.logs import parse_log
    from app.probe.measure import backend_of, measurement_from_log

    log = (shared_fixtures / "h200" / "llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log").read_text()
    buffers = parse_log(log)
    m = measurement_from_log(buffers, backend=backend_of(buffers), commit="0c1e57098", seconds=6.2,
                             source=MeasurementSource(MeasuredBy.LOG, "llama-server log"))
    assert m.backend == "CUDA"
    assert m.gpu_compute == {"CUDA0": round(623.01 * MiB)}
    assert m.host_compute == round(532.01 * MiB)
    assert m.device("CUDA0") == DeviceMeasurement("CUDA0", round(623.01 * MiB), 98304 * MiB, False)
    assert m.kv_total == 98304 * MiB
    assert gpu_caveat(m, targets_gpu=True) is None


def test_missing_bindings_say_how_to_get_them(tmp_path: Path, tiny_model: Path) -> None:
    worker = _fake_worker(tmp_path, """import json, sys
sys.stdin.read()
print(json.dumps({"ok": False, "error": "ImportError: llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)"}))
sys.exit(1)
""")
    with pytest.raises(MeasureError) as err:
        measure(tiny_model, LaunchSettings(), worker=worker)
    assert "./dev setup" in err.value.hint and "the bundle carries it" in err.value.hint


def test_a_missing_library_says_what_a_user_can_do(tmp_path: Path, tiny_model: Path) -> None:
    """No libllama anywhere (an engine file chosen without its build): the user's words, no developer advice."""
    worker = _fake_worker(tmp_path, """import json, sys
sys.stdin.read()
print(json.dumps({"ok": False, "error": "FileNotFoundError: Shared library with base name 'llama' not found"}))
sys.exit(1)
""")
    with pytest.raises(MeasureError) as err:
        measure(tiny_model, LaunchSettings(), worker=worker)
    assert "Build engine…" in err.value.hint and "libllama.so beside llama-server" in err.value.hint
    assert "./dev" not in err.value.hint and "CMAKE_ARGS" not in err.value.hint


def test_partial_offload_kv_is_split_by_layer_device() -> None:
    from app.llamacpp.logs import parse_log
    from app.probe.measure import measurement_from_log

    log = "\n".join([*(f"llama_kv_cache: layer {i:3d}: dev = {'CPU' if i < 12 else 'CUDA0'}" for i in range(48)),
                     "llama_kv_cache:      CUDA0 KV buffer size =     0.00 MiB",
                     "llama_kv_cache:        CPU KV buffer size =     0.00 MiB",
                     "llama_kv_cache: size = 6144.00 MiB ( 32768 cells,  48 layers,  1/1 seqs), "
                     "K (f16): 3072.00 MiB, V (f16): 3072.00 MiB",
                     "sched_reserve:      CUDA0 compute buffer size =   300.00 MiB",
                     "sched_reserve:  CUDA_Host compute buffer size =    80.00 MiB"])
    m = measurement_from_log(parse_log(log), backend="CUDA", commit="c", seconds=1.0, source=PROBE_SOURCE)
    assert m.device("CUDA0") == DeviceMeasurement("CUDA0", 300 * MiB, 4608 * MiB, False)
    assert m.device("CPU") == DeviceMeasurement("CPU", 0, 1536 * MiB, True)
    assert m.host_compute == 80 * MiB



def _wait_written(path: Path, within: float = 30.0) -> None:
    """Until the worker has written ``path`` (at most ``within`` seconds: then the test's own check fails)."""
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_cancel_kills_the_probe_and_its_children_at_once(tmp_path: Path, tiny_model: Path) -> None:
    # A worker that would run for the whole minute, with a child of its own in its process group.
    pids = tmp_path / "pids"
    worker = _fake_worker(tmp_path, f"""import os, subprocess, sys, threading
sys.stdin.read()
child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
threading.Event().wait()
""")
    cancel = threading.Event()

    def cancel_once_running() -> None:
        _wait_written(pids)
        cancel.set()

    threading.Thread(target=cancel_once_running, daemon=True).start()
    with pytest.raises(MeasureCancelled) as err:
        measure(tiny_model, LaunchSettings(), worker=worker, timeout=60, cancel=cancel)
    assert str(err.value) == "cancelled" and isinstance(err.value, MeasureError)  # not the 60 s timeout
    worker_pid, child_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 10
    while (pid_alive(worker_pid) or pid_alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(worker_pid) and not pid_alive(child_pid)  # the whole process group is gone


def test_a_cancel_event_left_unset_changes_nothing(engine_build: EngineBuild, tiny_model: Path) -> None:
    m = measure(tiny_model, LaunchSettings(n_ctx=4096), cancel=threading.Event())
    assert m.devices[0].compute > 0 and m.kv_total == 2 * 4096 * 32 * 2 * 2


def test_the_probe_measures_while_the_caller_checks_the_file_and_a_refusal_stops_it(tmp_path: Path,
                                                                                   tiny_model: Path) -> None:
    # ``headroom measure`` checks the file while the child measures: the child has its whole request
    # before the check ends, and what the check raises is what the caller gets, the child killed.
    seen = tmp_path / "seen"
    worker = _fake_worker(tmp_path, f"""import json, os, sys, threading
request = json.loads(sys.stdin.read())
open({str(seen)!r}, "w").write(f"{{os.getpid()}} {{request['model']}}")
threading.Event().wait()
""")

    def check_refuses_once_the_probe_runs() -> None:
        _wait_written(seen)
        raise PlannerError("the check's own sentence")

    with pytest.raises(PlannerError) as err:
        measure(tiny_model, LaunchSettings(), worker=worker, timeout=60, meanwhile=check_refuses_once_the_probe_runs)
    assert str(err.value) == "the check's own sentence" and not isinstance(err.value, MeasureError)
    pid, model = seen.read_text().split(" ", 1)
    assert model == str(tiny_model)
    deadline = time.monotonic() + 10
    while pid_alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(int(pid))


class _InterruptedWait(threading.Event):
    """A cancel event whose first check, once the worker has written its pid, is a Ctrl-C."""

    def __init__(self, pid_file: Path) -> None:
        super().__init__()
        self.pid_file = pid_file

    def is_set(self) -> bool:
        if self.pid_file.exists() and self.pid_file.read_text():
            raise KeyboardInterrupt
        return False


def test_ctrl_c_during_pass_1_leaves_no_probe_running(tmp_path: Path, tiny_model: Path) -> None:
    # The probe runs in its own session (a terminal's Ctrl-C never reaches it): Headroom must kill it.
    pids = tmp_path / "pids"
    worker = _fake_worker(tmp_path, f"""import os, sys, threading
sys.stdin.read()
open({str(pids)!r}, "w").write(str(os.getpid()))
threading.Event().wait()
""")
    with pytest.raises(KeyboardInterrupt):
        measure(tiny_model, LaunchSettings(), worker=worker, timeout=60, cancel=_InterruptedWait(pids))
    pid = int(pids.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(pid)


#: Python imports ``sitecustomize`` from PYTHONPATH at start-up, before running ``-m app.probe.worker``:
#: this one holds the real worker there (nothing else changes), so the test kills Headroom while
#: pass 1 is certainly running, however fast or slow the machine.
HOLD_THE_WORKER = """import os, sys, threading
if "app.probe.worker" in sys.orig_argv:
    with open({marker!r}, "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait()
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_probe_dies_with_a_killed_headroom_measure(engine_build: EngineBuild, tiny_model: Path,
                                                       tmp_path: Path, sig: signal.Signals) -> None:
    hold = tmp_path / "hold"
    hold.mkdir()
    marker = tmp_path / "worker-pid"
    (hold / "sitecustomize.py").write_text(HOLD_THE_WORKER.format(marker=str(marker)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hold), str(ROOT)]))
    headroom = subprocess.Popen([sys.executable, "-m", "app", "measure", str(tiny_model), "-c", "512", "--refresh"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    worker = 0
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text()):
            assert headroom.poll() is None, "headroom measure ended before its probe started"
            assert time.monotonic() < deadline, "the probe never started"
            time.sleep(0.05)
        worker = int(marker.read_text())
        assert pid_alive(worker)
        headroom.send_signal(sig)
        headroom.wait(timeout=60)
        deadline = time.monotonic() + 15
        while pid_alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(worker), f"the pass-1 probe outlived headroom measure killed by {sig.name}"
    finally:
        if headroom.poll() is None:
            headroom.kill()
            headroom.wait()
        if worker and pid_alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_child_started_ahead_measures_the_next_pass_1_as_a_fresh_one_and_only_that_one(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> None:
    """The window's pass 1 (app/probe/measure.py ``start_ahead``): the child started when a model was
    opened measures the next pass 1, the same numbers a fresh child gives, then ends; the next is
    started at once; a file that kills a child's load leaves the next one clean; nothing is left when
    the window goes."""
    from app.probe.measure import start_ahead, stop_ahead, waiting_ahead

    settings = LaunchSettings(n_ctx=8192)
    fresh = measure(tiny_model, settings)
    try:
        start_ahead()
        first = _ahead_pid()
        waited = _ahead_proc()
        got = measure(tiny_model, settings, ahead=True)
        assert got.devices == fresh.devices and got.kv_total == fresh.kv_total
        assert _gone(first), "the child that measured is still running"
        assert waited.returncode == 0  # (it measured: a child put aside is killed)
        second = _ahead_pid(other_than=first)
        assert pid_alive(second)
        bad = tmp_path / "model.gguf"
        bad.write_bytes(b"GGUF" + bytes(100))
        with pytest.raises(MeasureError, match="could not load"):
            measure(bad, settings, ahead=True)
        assert _gone(second)
        third = _ahead_pid(other_than=second)
        again = measure(tiny_model, settings, ahead=True)  # (the one started after the failure)
        assert again.devices == fresh.devices and _gone(third)
        _ahead_pid(other_than=third)  # (and the one after it, ended below)
    finally:
        last = waiting_ahead() or 0
        stop_ahead()
    assert waiting_ahead() is None and (not last or _gone(last))


def test_a_child_started_ahead_outlives_the_thread_that_asked_for_it_and_waits_for_its_own_library(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path) -> None:
    """The window asks from a short-lived thread: the child must not die with it (a parent-death signal
    follows the spawning thread). A child started for another libllama (another engine chosen since)
    is not used: a fresh one measures with the library asked for, and the old one is ended."""
    from app.probe.measure import start_ahead, stop_ahead

    try:
        other = tmp_path / "another-engine" / "bin"  # (the engine chosen before: not this library)
        other.mkdir(parents=True)
        asker = threading.Thread(target=start_ahead, args=(str(other),))
        asker.start()
        asker.join()
        time.sleep(0.5)
        mine = _ahead_pid()
        assert pid_alive(mine), "the child started ahead died with the thread that asked for it"
        m = measure(tiny_model, LaunchSettings(n_ctx=4096), ahead=True)  # (the bindings' own library)
        assert m.devices and m.llama_commit == engine_build.commit  # (the other one has no library at all)
        assert _gone(mine) and _ahead_pid(other_than=mine)
    finally:
        stop_ahead()


def _ahead_pid(other_than: int = 0, wait_s: float = 10.0) -> int:
    """The child waiting ahead (one other than ``other_than``: the next is started on a thread of its
    own once a pass 1 has its result)."""
    from app.probe.measure import waiting_ahead

    deadline = time.monotonic() + wait_s
    while (pid := waiting_ahead()) in (None, other_than):
        assert time.monotonic() < deadline, "no child was started ahead"
        time.sleep(0.02)
    assert pid is not None
    return pid


def _ahead_proc() -> subprocess.Popen[str]:
    from app.probe import measure as probe_measure

    child = probe_measure._AHEAD
    assert child is not None
    return child.proc


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)
