"""Each way the real engine fails to start (or stops serving) turns into its classified, actionable message."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from app.engine.argv import build_argv
from app.engine.capabilities import free_port
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin, identify
from app.engine.process import EngineFailed, ServerProcess, ServerStatus
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings

pytestmark = pytest.mark.engine
CPU = LaunchSettings(n_ctx=512, n_gpu_layers=0)


@pytest.fixture(scope="module")
def engine(llama_server: Path) -> EngineInfo:
    info = identify(llama_server, EngineOrigin.HEADROOM_BUILD)
    assert info is not None and info.kind == EngineKind.LLAMA_SERVER
    return info


def _start(argv: list[str], port: int) -> EngineFailed:
    server = ServerProcess(argv, "127.0.0.1", port)
    statuses: list[ServerStatus] = []
    server.add_listener(lambda s, d: statuses.append(s))
    with pytest.raises(EngineFailed) as info:
        server.start()
        server.wait_ready(timeout=60)
    server.stop()
    assert statuses[-1] == ServerStatus.FAILED and server.failure is info.value.failure
    return info.value


def test_port_in_use(engine: EngineInfo, tiny_model: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = _start(build_argv(engine, CPU, PlanMode.CPU, tiny_model, "127.0.0.1", port), port)
    assert err.failure.kind == "port_in_use"
    assert f"127.0.0.1:{port}" in err.failure.message and "port is in use" in err.failure.message


def test_missing_binary(tiny_model: Path, tmp_path: Path) -> None:
    gone = EngineInfo(EngineKind.LLAMA_SERVER, str(tmp_path / "llama-server"), "?", "?", EngineOrigin.SETTINGS)
    port = free_port()
    err = _start(build_argv(gone, CPU, PlanMode.CPU, tiny_model, "127.0.0.1", port), port)
    assert err.failure.kind == "missing_binary"
    assert "does not exist" in err.failure.message and "headroom engine build" in err.failure.message


def test_an_engine_that_rejects_a_flag(engine: EngineInfo, tiny_model: Path) -> None:
    port = free_port()
    argv = build_argv(engine, CPU, PlanMode.CPU, tiny_model, "127.0.0.1", port, extra=("--bogus-flag",))
    err = _start(argv, port)
    assert err.failure.kind == "unknown_argument"
    assert "does not accept --bogus-flag" in err.failure.message


def test_the_real_engine_refuses_the_window_flags_when_probed(engine: EngineInfo) -> None:
    assert engine.capabilities is not None
    assert engine.capabilities.accepts("-kvu") and engine.capabilities.accepts("-ctk q8_0")
    assert not engine.capabilities.accepts("--kv-residency-mode")


def test_a_model_the_engine_cannot_load(engine: EngineInfo, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 64)
    port = free_port()
    err = _start(build_argv(engine, CPU, PlanMode.CPU, corrupt, "127.0.0.1", port), port)
    assert err.failure.kind == "model_unreadable"
    assert "not a valid GGUF" in err.failure.message
    assert any("exiting due to model loading error" in t for t in err.failure.tail)


def test_out_of_memory_at_load_names_the_buffer(engine: EngineInfo, tiny_model: Path) -> None:
    """A real allocation failure: 16M cells of KV (4 GiB) under a 3 GiB address-space limit."""
    port = free_port()
    big = CPU.with_(n_ctx=16 * 1024 * 1024)
    argv = ["prlimit", f"--as={3 * 1024**3}", "--", *build_argv(engine, big, PlanMode.CPU, tiny_model, "127.0.0.1", port)]
    err = _start(argv, port)
    assert err.failure.kind == "oom", str(err)
    assert "the CPU buffer of 4096 MiB could not be allocated" in err.failure.message


def test_an_engine_killed_while_serving_is_said_to_be_killed_by_sigkill(engine: EngineInfo, tiny_model: Path) -> None:
    port = free_port()
    server = ServerProcess(build_argv(engine, CPU, PlanMode.CPU, tiny_model, "127.0.0.1", port), "127.0.0.1", port)
    try:
        server.start()
        server.wait_ready(timeout=120)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)  # what the kernel's OOM killer (or a user) does
        deadline = time.monotonic() + 30
        while True:
            try:
                server.check_alive()
            except EngineFailed as exc:
                failure = exc.failure
                break
            assert time.monotonic() < deadline, "check_alive never noticed the dead engine"
            time.sleep(0.1)
    finally:
        server.stop()
    assert failure.kind == "killed"
    assert f"was killed by SIGKILL while serving at http://127.0.0.1:{port}" in failure.message
    assert "before it was ready" not in failure.message and "-9" not in failure.message
    log = server.log_path.read_text()
    assert failure.tail and all(line in log for line in failure.tail)  # the log's tail comes with it
    assert "Last engine log lines" in str(failure)
