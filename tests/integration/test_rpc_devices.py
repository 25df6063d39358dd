"""RPC workers as devices, end to end on loopback: two real ``ggml-rpc-server`` workers started with
``headroom rpc-worker``, each with a budget that holds only part of a real 8-layer model, so the
plan must split it. ``headroom plan --rpc A,B`` puts layers on both; ``headroom serve`` launches
with ``--rpc`` and ``-ts`` as planned, answers with tokens, and the engine's own buffers on
RPC0[A], RPC0[B] and the host match the plan within 1 MiB. A worker that is gone before the plan is
named and planned without; one killed while serving stops the engine with words that say so, and
nothing of Headroom's is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from app.engine.native_build import EngineBuild
from app.planner.units import MiB
from tests.fixtures.rpc import rpc_worker
from tests.fixtures.server_proc import free_port, headroom_serving

pytestmark = pytest.mark.engine

#: What each worker may hold beyond its compute buffer: the model's 7 MiB of weights and 16 MiB of
#: KV (-c 4096, f16) need 23 MiB, so neither worker can hold everything and both must hold some.
LAYER_ROOM = 14 * MiB
CTX = ("-c", "4096", "--safety", "0")


def _headroom(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _budgets(model: Path, a: str, b: str) -> list[str]:
    """``--vram-target`` flags: each worker its measured compute buffer plus LAYER_ROOM."""
    done = _headroom("measure", str(model), *CTX[:2], "--rpc", f"{a},{b}", "--json")
    assert done.returncode == 0, done.stderr
    devices = {d["name"]: d for d in json.loads(done.stdout)["measurement"]["devices"]}
    flags = []
    for i, ep in enumerate((a, b)):
        compute = devices[f"RPC0[{ep}]"]["compute"]
        flags += ["--vram-target", f"RPC{i}={(compute + LAYER_ROOM) // MiB + 1}MiB"]
    return flags


def test_plan_puts_layers_on_both_workers_within_their_budgets(engine_build: EngineBuild,
                                                               tiny_deep_model: Path) -> None:
    with rpc_worker() as (a, _), rpc_worker() as (b, _):
        budgets = _budgets(tiny_deep_model, a, b)
        done = _headroom("plan", str(tiny_deep_model), *CTX, "--rpc", f"{a},{b}", *budgets, "--measure", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads(done.stdout)
    assert plan["feasible"] and plan["launch"]["rpc"] == [a, b]
    assert [g["name"] for g in plan["gpus"]] == [f"RPC0[{a}]", f"RPC0[{b}]"]
    split = plan["launch"]["tensor_split"]
    assert len(split) == 2 and all(n > 0 for n in split) and sum(split) == 9  # 8 layers + the output layer
    for g in plan["gpus"]:
        assert g["weights"] > 0 and g["kv_resident"] > 0, g
        assert g["weights"] + g["kv_resident"] + g["compute"] + g["safety"] <= g["budget"], g
        assert g["remote"] and g["overhead"] == 0
    assert plan["host"]["kv_tail"] == 0
    net = plan["network"]
    assert net["per_token"] > 0 and set(net["load"]) == {f"RPC0[{a}]", f"RPC0[{b}]"}


def _check_rows(lines: list[str]) -> dict[tuple[str, str], str]:
    """The plan-vs-actual table serve printed: (device, part) -> verdict."""
    rows = {}
    for line in lines:
        cells = line.split()
        if len(cells) >= 5 and cells[1] in ("weights", "kv", "compute") and cells[-1] in ("ok", "OFF", "?"):
            rows[(cells[0], cells[1])] = cells[-1]
    return rows


def _engine_pids(model: Path) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] and "llama-server" in p.info["cmdline"][0] and str(model) in p.info["cmdline"]]


def test_serve_launches_with_rpc_and_ts_and_matches_the_plan_per_device(engine_build: EngineBuild,
                                                                        tiny_deep_model: Path) -> None:
    with rpc_worker() as (a, _), rpc_worker() as (b, _):
        budgets = _budgets(tiny_deep_model, a, b)
        with headroom_serving([str(tiny_deep_model), *CTX, "--rpc", f"{a},{b}", *budgets]) as (url, lines):
            command = next(ln for ln in lines if ln.startswith("command: "))
            req = urllib.request.Request(url + "/completion", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"prompt": "Hello", "n_predict": 8,
                                                          "temperature": 0}).encode())
            with urllib.request.urlopen(req, timeout=120) as r:
                reply = json.loads(r.read())
        assert not _engine_pids(tiny_deep_model), "the engine outlived serve"
    out = "".join(lines)
    assert f"--rpc {a},{b}" in command and " -ts " in command, command
    assert reply["tokens_predicted"] == 8 and reply["content"], reply
    rows = _check_rows(lines)
    for dev in (f"RPC0[{a}]", f"RPC0[{b}]"):
        for part in ("weights", "kv", "compute"):
            assert rows.get((dev, part)) == "ok", out
    # exact, not only within 1 MiB: pass 1 counts the second worker's pipeline copies of its input, which
    # the engine shares (app/probe/measure.py pipeline_copies_counted); once it planned 4.50 MiB high
    errors = [ln.split()[6] for ln in lines if ln.split()[1:2] == ["compute"] and ln.startswith("RPC0[")]
    assert errors == ["+0.00", "+0.00"], out
    assert rows.get(("host", "weights")) == "ok" and rows.get(("host", "compute")) == "ok", out
    assert "every buffer within 1 MiB" in out, out


def test_a_worker_gone_before_the_plan_is_named_and_left_out(engine_build: EngineBuild,
                                                             tiny_deep_model: Path) -> None:
    gone = f"127.0.0.1:{free_port()}"
    with rpc_worker() as (a, _):
        started = time.monotonic()
        done = _headroom("plan", str(tiny_deep_model), *CTX, "--rpc", f"{gone},{a}", "--json")
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"RPC worker {gone} did not answer" in done.stderr and "planning without it" in done.stderr
    plan = json.loads(done.stdout)
    assert plan["launch"]["rpc"] == [a] and [g["name"] for g in plan["gpus"]] == [f"RPC0[{a}]"]
    assert any(gone in w for w in plan["warnings"])
    assert took < 60, "a dead worker must not hang the plan"


def test_a_worker_killed_while_serving_stops_the_engine_with_words(engine_build: EngineBuild,
                                                                   tiny_deep_model: Path) -> None:
    with rpc_worker() as (a, _), rpc_worker() as (b, _):
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve", str(tiny_deep_model), *CTX, "--no-measure",
                                 "--rpc", f"{a},{b}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("serving at "):
                    url = line.split()[2]
                    _kill_rpc_server(a)  # the worker itself, SIGKILL: no goodbye on the socket
                    req = urllib.request.Request(url + "/completion", headers={"Content-Type": "application/json"},
                                                 data=json.dumps({"prompt": "Hi", "n_predict": 4}).encode())
                    with contextlib.suppress(OSError):
                        urllib.request.urlopen(req, timeout=60).read()
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = "".join(lines)
    assert rc == 1, out
    assert "An RPC worker stopped answering" in out, out
    assert not _engine_pids(tiny_deep_model), "the engine outlived serve"


def _kill_rpc_server(endpoint: str) -> None:
    """SIGKILL the ggml-rpc-server listening on ``endpoint`` (the worker, not its wrapper)."""
    port = endpoint.rsplit(":", 1)[1]
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0].endswith("ggml-rpc-server") and port in cmd:
            p.kill()
