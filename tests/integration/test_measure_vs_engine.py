"""Pass 1 against the real engine: the probe's compute buffer equals what llama-server reserves.

For each launch, the probe (app.probe.measure, no_alloc in a child process) and the real
llama-server built by native/ start from the same ``LaunchSettings``; the server's argv comes from
app.engine.argv.build_argv, the same function Headroom launches with. The server is read until it
prints its compute buffers (``-lv 4``), then stopped: no /health needed.

The shape fixtures are sparse multi-GB files and llama-server maps them with MAP_POPULATE, so the
big shapes get one start each at a small context, and their page cache is dropped afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.engine.argv import build_argv
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.native_build import EngineBuild
from app.llamacpp.logs import LogBuffers, parse_fit_print, parse_log
from app.planner.plan_types import PlanMode
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.units import MiB
from app.probe.measure import measure
from tests.fixtures import pagecache
from tests.fixtures.server_proc import free_port

pytestmark = [pytest.mark.engine, pytest.mark.slow]

#: "within 1 MiB" (issue 4).
TOLERANCE = 1 * MiB
#: The line llama.cpp prints right after the compute buffer lines (src/llama-context.cpp sched_reserve).
_AFTER_COMPUTE = "sched_reserve: graph"


def server_buffers(engine: EngineBuild, model: Path, settings: LaunchSettings, log_path: Path,
                   deadline_s: float = 180.0) -> LogBuffers:
    """Start the real llama-server for this launch, read its log until the compute buffers, stop it."""
    info = EngineInfo(EngineKind.LLAMA_SERVER, str(engine.server), "test", engine.commit, EngineOrigin.HEADROOM_BUILD)
    argv = build_argv(info, settings, PlanMode.STOCK, model, "127.0.0.1", free_port(), extra=["--no-warmup"])
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + deadline_s
        text = ""
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            if _AFTER_COMPUTE in text or proc.poll() is not None:
                break
            time.sleep(0.1)  # polling a log file with a deadline, not waiting for a signal
        assert _AFTER_COMPUTE in text, f"llama-server printed no compute buffers:\n{text[-2000:]}"
        return parse_log(text)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def assert_same_compute(engine: EngineBuild, model: Path, settings: LaunchSettings, tmp_path: Path) -> None:
    probe = measure(model, settings)
    server = server_buffers(engine, model, settings, tmp_path / "server.log")
    assert server.compute, "the server log had no compute buffer lines"
    probed = {d.name: d.compute for d in probe.devices if d.compute}
    assert set(probed) == set(server.compute), (probed, server.compute)
    for dev, size in server.compute.items():
        assert abs(probed[dev] - size) <= TOLERANCE, (
            f"{dev}: probe {probed[dev] / MiB:.2f} MiB, llama-server {size / MiB:.2f} MiB for {settings}")
    # The KV cache (and recurrent state) the probe sized is what the server allocated.
    assert [*(c.line for c in server.kv_caches), *server.recurrent_lines] == list(probe.kv_lines)


#: The tiny model's head size (16) is below q8_0's block (32): its q8_0 case is on the 8B shape.
TINY_CASES = {
    "fa-on-ub512-f16-np1": LaunchSettings(n_ctx=8192),
    "fa-off": LaunchSettings(n_ctx=8192, flash_attn=FlashAttn.OFF),
    "ub2048": LaunchSettings(n_ctx=8192, n_ubatch=2048),
    "bf16-kv": LaunchSettings(n_ctx=8192, type_k="bf16", type_v="bf16"),
    "np4-kvu": LaunchSettings(n_ctx=8192, n_parallel=4, kv_unified=True),
    "np4-split": LaunchSettings(n_ctx=8192, n_parallel=4, kv_unified=False, n_ubatch=1024),
}


@pytest.mark.parametrize("settings", list(TINY_CASES.values()), ids=list(TINY_CASES))
def test_probe_matches_server_on_tiny_model(engine_build: EngineBuild, tiny_model: Path,
                                            settings: LaunchSettings, tmp_path: Path) -> None:
    assert_same_compute(engine_build, tiny_model, settings, tmp_path)


#: (shape, settings): between them FA on/off, ubatch 512/2048, f16/q8_0, -np 1 and -np 4 -kvu, iSWA.
SHAPE_CASES = {
    # A dense GQA model, quantized KV, 4 slots sharing one unified cache.
    "llama8b-q8_0-np4-kvu": ("llama-3.1-8b-instruct-q4_k_m",
                             LaunchSettings(n_ctx=4096, n_parallel=4, kv_unified=True, type_k="q8_0", type_v="q8_0")),
    "llama8b-fa-off-ub2048": ("llama-3.1-8b-instruct-q4_k_m",
                              LaunchSettings(n_ctx=4096, flash_attn=FlashAttn.OFF, n_ubatch=2048)),
    # iSWA: two caches (8 global layers at n_ctx, 40 local at the window), swa_full off as llama-server.
    "gemma3-iswa-fa-off-ub2048": ("gemma-3-12b-it-q4_k_m", LaunchSettings(n_ctx=8192, flash_attn=FlashAttn.OFF, n_ubatch=2048)),
    "gemma3-iswa-np4-kvu-q8_0": ("gemma-3-12b-it-q4_k_m",
                                 LaunchSettings(n_ctx=8192, n_parallel=4, kv_unified=True, type_k="q8_0", type_v="q8_0")),
    # Hybrid: 4 attention layers with a KV cache, 36 Mamba layers with recurrent state, 2 split slots.
    "granite-hybrid-np2": ("granite-4.0-h-tiny-q8_0", LaunchSettings(n_ctx=8192, n_parallel=2)),
}


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_probe_matches_server_on_shape(engine_build: EngineBuild, shape_model: Callable[[str], Path],
                                       case: str, tmp_path: Path) -> None:
    name, settings = SHAPE_CASES[case]
    model = shape_model(name)
    try:
        assert_same_compute(engine_build, model, settings, tmp_path)
    finally:
        pagecache.drop(model)  # give back what the server's MAP_POPULATE faulted in


#: Issue 17, §1: "within max(1 %, 64 MiB)" of the server's compute.
def fit_params_tolerance(size: int) -> float:
    return max(0.01 * size, 64 * MiB)


def test_measure_with_fit_params_gives_the_servers_compute_for_a_large_vocabulary(
        engine_build: EngineBuild, shape_model: Callable[[str], Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma 3 270M (262,144 tokens) at ``-c 8192 -ub 2048 -b 2048``: the llama-fit-params binary
    reserves logits for all 2048 tokens of a ubatch (2 GiB here, docs/domain.md §6), llama-server for
    its one slot; ``headroom measure --with fit-params`` gives the server's number."""
    from app.cli import main

    model = shape_model("gemma-3-270m-it-q8_0")
    settings = LaunchSettings(n_ctx=8192, n_ubatch=2048, n_batch=2048)
    try:
        assert main(["measure", str(model), "-c", "8192", "-ub", "2048", "-b", "2048", "--with", "fit-params",
                     "--json"]) == 0
        measured = {d["name"]: d["compute"] for d in json.loads(capsys.readouterr().out)["measurement"]["devices"]
                    if d["compute"]}
        server = server_buffers(engine_build, model, settings, tmp_path / "server.log").compute
        assert set(measured) == set(server), (measured, server)
        for dev, size in server.items():
            assert abs(measured[dev] - size) <= fit_params_tolerance(size), (
                f"{dev}: --with fit-params {measured[dev] / MiB:.2f} MiB, llama-server {size / MiB:.2f} MiB")
        # What the binary itself prints (whole MiB, the host row): the logits of a whole ubatch more.
        out = subprocess.run([str(engine_build.fit_params), "-m", str(model), "-fitp", "on", "-c", "8192",
                              "-ub", "2048", "-b", "2048", "-np", "1", "-fa", "on", "-ngl", "999"],
                             capture_output=True, text=True, timeout=300, check=True).stdout
        binary = sum(r.compute for r in parse_fit_print(out)) * MiB
        logits = 262144 * 2048 * 4
        assert binary - sum(server.values()) >= 0.9 * logits, (binary / MiB, sum(server.values()) / MiB)
    finally:
        pagecache.drop(model)


def test_measure_json_fails_in_json_too(engine_build: object, tmp_path: Path) -> None:
    """Issue 31: ``measure --json`` that fails printed nothing on stdout; a script reads one place: a JSON
    object with the reason, the hint and llama.cpp's last lines (exit 1), or the input's problem (exit 2)."""
    import json
    import subprocess
    import sys

    from tests.fixtures import gguf_factory, shapes

    model = gguf_factory.ensure(shapes.TINY_BAD_ROPE_SCALING)  # llama.cpp aborts on it in pass 1
    proc = subprocess.run([sys.executable, "-m", "app", "measure", str(model), "-c", "4k", "--json"],
                          capture_output=True, text=True, timeout=300)
    answer = json.loads(proc.stdout)
    assert proc.returncode == 1 and answer["ok"] is False
    assert "GGML_ASSERT" in answer["error"] and "assertion" in answer["hint"] and answer["log_tail"]
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"junk!")
    proc = subprocess.run([sys.executable, "-m", "app", "measure", str(junk), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"].startswith("junk.gguf: not a GGUF file")
