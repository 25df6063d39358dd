"""Placement that uses all of a device: the KV host tail by layer on the stock engine, checked on a
real ggml device (a loopback RPC worker standing in for the GPU, tests/fixtures/rpc.py).

With a device budget too small for the whole KV, the plan offers the KV of the first layers in host
RAM and every weight on the device (``-ngl`` + ``-ot``), and ``headroom serve --alternative`` launches
it; the engine's own buffers match the plan per device and part within 1 MiB, and 32 greedy tokens are
those of the fully resident launch.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.llamacpp.sched import sched_graphs
from tests.fixtures.rpc import rpc_worker
from tests.fixtures.sched_record import COMMON
from tests.fixtures.server_proc import headroom_serving, running_server

pytestmark = pytest.mark.engine

#: 32k tokens: 16 MiB of KV per layer (128 MiB in all) beside 7 MiB of weights; the budget below holds
#: the weights, the compute buffer and six layers' KV, not eight.
CTX = ("-c", "32768", "--safety", "0")
PROMPT = "The quick brown fox"


def _greedy(url: str) -> list[int]:
    body = {"prompt": PROMPT, "n_predict": 32, "temperature": 0, "top_k": 1, "cache_prompt": False,
            "return_tokens": True, "ignore_eos": True}
    req = urllib.request.Request(url + "/completion", headers={"Content-Type": "application/json"},
                                 data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=300) as r:
        reply = json.loads(r.read())
    tokens: list[int] = reply["tokens"]
    assert len(tokens) == 32, reply
    return tokens


def _rows(lines: list[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """serve's plan-vs-actual table: (device, part) -> (planned, verdict)."""
    rows = {}
    for line in lines:
        cells = line.split()
        if len(cells) >= 8 and cells[1] in ("weights", "kv", "compute") and cells[-1] in ("ok", "OFF", "?"):
            rows[(cells[0], cells[1])] = (cells[2], cells[-1])
    return rows


def test_a_small_device_budget_gets_a_kv_host_tail_that_matches_and_answers_the_same(
        engine_build: EngineBuild, tiny_deep_model: Path) -> None:
    with rpc_worker() as (worker, _):
        dev = f"RPC0[{worker}]"
        with headroom_serving([str(tiny_deep_model), *CTX, "--rpc", worker]) as (url, full_lines):
            resident = _greedy(url)
        full = "".join(full_lines)
        assert "-ot" not in full and "every buffer within 1 MiB" in full, full
        # the budget leaves the KV of two layers out; the plan lists that way among others (which it
        # chooses is the speed model's: tests/unit/planner/test_speed.py), and serve launches it asked
        budget = ("--vram-target", "RPC0=160MiB", "--alternative", "KV of")
        with headroom_serving([str(tiny_deep_model), *CTX, "--rpc", worker, *budget]) as (url, lines):
            tail = _greedy(url)
    out = "".join(lines)
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert " -ot " in command and f"={dev}" in command and " -ngl " in command, command
    rows = _rows(lines)
    for part in ("weights", "kv", "compute"):
        assert rows[(dev, part)][1] == "ok", out
    assert rows[("host", "kv")][1] == "ok" and rows[("host", "kv")][0] != "0.00", out  # the tail is there
    assert "every buffer within 1 MiB" in out, out
    assert tail == resident


def test_a_moe_model_gets_its_experts_on_the_cpu_that_match_and_answer_the_same(
        engine_build: EngineBuild, tiny_moe_model: Path) -> None:
    ctx = ("-c", "4096", "--safety", "0")
    with rpc_worker() as (worker, _):
        dev = f"RPC0[{worker}]"
        with headroom_serving([str(tiny_moe_model), *ctx, "--rpc", worker]) as (url, full_lines):
            resident = _greedy(url)
        assert "every buffer within 1 MiB" in "".join(full_lines)
        # the model's 13 MiB of weights (12 of them experts), 8 MiB of KV and 8 of compute need 29 MiB
        budget = ("--vram-target", "RPC0=26MiB", "--alternative=--n-cpu-moe")
        with headroom_serving([str(tiny_moe_model), *ctx, "--rpc", worker, *budget]) as (url, lines):
            offloaded = _greedy(url)
    out = "".join(lines)
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert " --n-cpu-moe " in command and " -ot " not in command, command
    rows = _rows(lines)
    for part in ("weights", "kv", "compute"):
        assert rows[(dev, part)][1] == "ok", out
    host_weights = float(rows[("host", "weights")][0])
    assert rows[("host", "weights")][1] == "ok" and host_weights > 1.0, out  # experts mapped on the host
    assert "every buffer within 1 MiB" in out, out
    assert offloaded == resident


def test_the_host_tails_layers_attend_on_the_cpu_for_every_decoded_token(
        engine_build: EngineBuild, tiny_deep_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch 5 (docs/engine-patches.md): the layers whose KV is in host RAM read it on the CPU when
    decoding, two graph splits each, and no KV crosses to the device; the answer is unchanged."""
    monkeypatch.setenv("GGML_SCHED_DEBUG", "2")
    log = tmp_path / "server.log"
    with rpc_worker() as (worker, _):
        tail = ("-ngl", "7", "-ot", rf"blk\.(0|1)\.=RPC0[{worker}]")  # the KV of layers 0 and 1 on the host
        with running_server(engine_build.server, tiny_deep_model, log, ("--rpc", worker, *COMMON, *tail)) as srv:
            tokens = srv.post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "top_k": 1,
                                              "return_tokens": True, "ignore_eos": True})["tokens"]
        with running_server(engine_build.server, tiny_deep_model, tmp_path / "resident.log",
                            ("--rpc", worker, *COMMON, "-ngl", "999")) as srv:
            resident = srv.post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "top_k": 1,
                                                "return_tokens": True, "ignore_eos": True})["tokens"]
    text = log.read_text(errors="replace")
    assert "host-KV attention: a layer whose KV is in host memory attends on the CPU" in text
    decode = [g for g in sched_graphs(text) if g.n_tokens == 1]
    assert decode, text[-2000:]
    for graph in decode:
        attention = graph.attention()
        assert attention[0] == attention[1] == "CPU", attention
        assert all(attention[il] == f"RPC0[{worker}]" for il in range(2, 8)), attention
        assert graph.kv_copied() == set() and len(graph.splits) == 6
    assert tokens == resident
