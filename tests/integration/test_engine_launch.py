"""The real engine (CPU build) on the tiny model: plan → launch → healthy → tokens → the check shows
weights, KV and compute within 1 MiB of the plan → stop → no engine process left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app.engine.check import HOST
from app.engine.discover import discover_engines
from app.engine.launch import plan_check, prepare
from app.engine.process import ServerStatus
from app.machine.devices import resolve_gpus
from app.planner.gguf.model import read_shape
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.probe.measure import measure

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)



def _read_until_serving(proc: subprocess.Popen[str], out: list[str]) -> None:
    """Collect ``headroom serve``'s lines into ``out`` until it says "serving at" (or 200 lines)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line.rstrip())
        if line.startswith("serving at ") or len(out) > 200:
            break

def test_plan_launch_tokens_check_within_a_mib_and_stop(engine_build: object, tiny_model: Path) -> None:
    settings = LaunchSettings(n_ctx=4096, n_parallel=2, kv_unified=True)
    shape, inv = read_shape(tiny_model), resolve_gpus([])
    plan = make_plan(shape, inv, settings)
    plan = make_plan(shape, inv, settings, measurement=measure(tiny_model, plan.launch))
    assert plan.mode == PlanMode.CPU and plan.feasible
    spec = prepare(plan, tiny_model, discover_engines())
    assert spec.host == "127.0.0.1" and spec.api_key is None and "--api-key" not in spec.argv
    assert spec.argv[spec.argv.index("-np") + 1] == "2" and "-kvu" in spec.argv
    seen: list[ServerStatus] = []
    server = spec.server()
    server.add_listener(lambda status, detail: seen.append(status))
    try:
        server.start()
        server.wait_ready(timeout=60)
        body = json.dumps({"prompt": "Hello", "n_predict": 8, "temperature": 0}).encode()
        req = urllib.request.Request(f"{server.base_url}/completion", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            reply = json.loads(resp.read())
        assert reply["tokens_predicted"] == 8
        check = plan_check(plan, server)
        for part in ("weights", "kv", "compute"):
            row = check.row(HOST, part)
            assert row is not None and row.actual and row.ok, check.table()
        assert check.ok, check.table()
    finally:
        pid = server.pid
        server.stop()
    assert pid is not None and _wait_gone(pid)
    assert seen[0] == ServerStatus.STARTING and ServerStatus.READY in seen and seen[-1] == ServerStatus.STOPPED


CHILD = """
import sys, time
from app.engine.process import ServerProcess
server = ServerProcess(sys.argv[1:-1], "127.0.0.1", int(sys.argv[-1]))
server.start()
server.wait_ready(timeout=60)
print(server.pid, flush=True)
time.sleep(600)
"""


def test_the_engine_dies_with_headroom_even_on_sigkill(llama_server: Path, tiny_model: Path) -> None:
    from app.engine.capabilities import free_port

    port = free_port()
    argv = [str(llama_server), "-m", str(tiny_model), "-c", "512", "-ngl", "0", "--fit", "off",
            "--host", "127.0.0.1", "--port", str(port)]
    child = subprocess.Popen([sys.executable, "-c", CHILD, *argv, str(port)], stdout=subprocess.PIPE,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True)
    try:
        assert child.stdout is not None
        engine_pid = int(child.stdout.readline())
        assert not _gone(engine_pid)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert _wait_gone(engine_pid), "the engine outlived a SIGKILLed Headroom"
    finally:
        child.kill()
        child.wait()


def test_a_leftover_engine_from_a_dead_headroom_is_reaped_at_the_next_start(
        llama_server: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PID file whose owner is dead and whose engine still runs (PR_SET_PDEATHSIG can be lost,
    e.g. across a setuid exec): the next start kills it."""
    from app.engine.capabilities import free_port
    from app.engine.process import reap_leftovers

    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    argv = [str(llama_server), "-m", str(tiny_model), "-c", "512", "-ngl", "0", "--fit", "off",
            "--port", str(free_port())]
    orphan = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    run = tmp_path / "running"
    run.mkdir()
    (run / f"engine-{orphan.pid}.json").write_text(json.dumps({"pid": orphan.pid, "owner": dead_owner.pid,
                                                               "argv": argv}))
    try:
        assert reap_leftovers() == [orphan.pid]
        orphan.wait(10)
        assert not list(run.glob("engine-*.json"))
    finally:
        orphan.kill()
        orphan.wait()


def test_headroom_serve_plans_launches_checks_smokes_and_stops_on_ctrl_c(engine_build: object,
                                                                        tiny_model: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", str(tiny_model), "-c", "8k", "-np", "2", "-kvu",
                             "--smoke", "--then-serve"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out: list[str] = []
    try:
        _read_until_serving(proc, out)
        text = "\n".join(out)
        assert out[-1].startswith("serving at http://127.0.0.1:"), text
        assert "every buffer within 1 MiB" in text
        assert "smoke: ok — both shared sequences produced tokens" in text
        assert "--fit off -lv 4 --metrics --alias headroom-tiny --host 127.0.0.1" in text
        assert "advisory:" not in text  # tiny llama shares sessions on this engine without a known issue
        pid = int(next(ln for ln in out if ln.startswith("engine: starting")).rsplit(" ", 1)[1])
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "engine stopped" in rest
    assert _wait_gone(pid)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_headroom_serve_started_in_the_background_still_stops_on_sigint(engine_build: object,
                                                                       tiny_model: Path) -> None:
    """`headroom serve … &` from a script (no job control) inherits SIGINT ignored; kill -INT still stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", str(tiny_model), "--no-measure"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=_ignore_sigint)
    out: list[str] = []
    try:
        _read_until_serving(proc, out)
        assert out[-1].startswith("serving at "), "\n".join(out)
        pid = int(next(ln for ln in out if ln.startswith("engine: starting")).rsplit(" ", 1)[1])
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "engine stopped" in rest, rest
    assert _wait_gone(pid)


def test_headroom_serve_slot_save_path_lets_sessions_save_a_slot(engine_build: object, tiny_model: Path,
                                                                 tmp_path: Path) -> None:
    # `sessions save` tells the user to restart with --slot-save-path: serve must be able to say it.
    slots = tmp_path / "slots"
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", str(tiny_model), "-np", "2", "-kvu",
                             "--no-measure", "--slot-save-path", str(slots)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), HEADROOM_CACHE_DIR=str(tmp_path / "cache"))  # the session store
    out: list[str] = []
    try:
        _read_until_serving(proc, out)
        assert out[-1].startswith("serving at "), "\n".join(out)
        url = out[-1].split()[2]
        sessions = [sys.executable, "-m", "app", "sessions", "--url", url]
        sent = subprocess.run([*sessions, "send", "a", "Hello there", "--n-predict", "4"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert sent.returncode == 0, sent.stderr
        saved = subprocess.run([*sessions, "save", "a"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=60, check=False)
        assert saved.returncode == 0 and saved.stdout.startswith("saved a: "), saved.stderr
        assert list(slots.iterdir())  # the engine wrote the slot file where serve was told
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
