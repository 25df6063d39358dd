"""The k-pool re-reserve abort (docs/domain.md §5) reproduced on Headroom's own engine (llama.cpp
0c1e57098, CPU build) with the tiny glm5-next, and why a CPU-only launch cannot show it.

The abort needs two scheduler backends (tests/fixtures/kpool.py says why, from the source): a CPU
launch has one and re-reserves silently, so these tests give the same CPU engine a real second
device, a local ``ggml-rpc-server``, as a GPU launch has CUDA0 beside the CPU.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.engine.capabilities import engine_env
from app.engine.native_build import EngineBuild
from app.engine.process import ServerProcess
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, send
from app.sessions.smoke import DIAGNOSTIC_ENV, REALLOC_MARK, run_smoke
from tests.fixtures import gguf_factory
from tests.fixtures.kpool import (
    KPOOL8,
    KPOOL8_GLM5_NEXT,
    REPRO_BENCH,
    bench_rows,
    kpool_of,
    n_kv_padded,
    n_pool_padded,
    rpc_backend,
    run_bench,
    second_backend_args,
)
from tests.fixtures.server_proc import free_port
from tests.fixtures.shapes import TINY_GLM5_NEXT

pytestmark = pytest.mark.engine

#: What Headroom passes once it has planned, with the smoke test's session pool and buffer lines.
POOL = ("-c", "32768", "-np", "2", "-kvu", "--metrics", "--fit", "off", "-lv", "4")
N_PREDICT = 16
#: sched_reserve:        CPU compute buffer size =    49.77 MiB
_COMPUTE_RE = re.compile(r"sched_reserve:\s+(?P<dev>\S+) compute buffer size")
#: sched_reserve: graph (pp bs=512, tg bs=2): nodes = 321 / 300, splits = 2 / 2, input objects = ...
_GRAPH_RE = re.compile(r"sched_reserve: graph \(pp bs=\d+, tg bs=\d+\): nodes = (?P<pp>\d+) / (?P<tg>\d+)")


@contextlib.contextmanager
def _engine(build: EngineBuild, model: Path, log: Path, extra: Sequence[str] = (),
            diagnostic: bool = True) -> Iterator[ServerProcess]:
    """Headroom's supervisor running the real llama-server; stopped on exit."""
    port = free_port()
    env = {k: v for k, v in engine_env().items() if k != "GGML_SCHED_DEBUG_REALLOC"}
    if diagnostic:
        env.update(DIAGNOSTIC_ENV)
    argv = [str(build.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *POOL, *extra]
    server = ServerProcess(argv, "127.0.0.1", port, log_path=log, env=env)
    server.start()
    try:
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()


def _devices(server: ServerProcess) -> list[str]:
    return [m.group("dev") for line in server.log_lines() if (m := _COMPUTE_RE.search(line))]


def _exited(server: ServerProcess, deadline_s: float = 30.0) -> bool:
    end = time.monotonic() + deadline_s
    while server.running() and time.monotonic() < end:
        time.sleep(0.1)
    return not server.running()


def _prompt(client: EngineClient, word: str, n_tokens: int) -> str:
    """``word`` repeated to about ``n_tokens`` tokens of this model (a byte vocab: ~1 per char)."""
    text = word * max(n_tokens // len(word), 1)
    while len(client.tokenize(text)) > n_tokens:
        text = text[: -len(word)]
    return text


def test_cpu_only_engine_reserves_two_graph_shapes_but_never_aborts(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    with _engine(engine_build, tiny_glm5_next_model, tmp_path / "server.log") as server:
        assert _devices(server) == ["CPU"], "a CPU launch: one scheduler backend"
        shapes = [(int(m["pp"]), int(m["tg"])) for line in server.log_lines() if (m := _GRAPH_RE.search(line))]
        assert shapes and shapes[0][0] != shapes[0][1], (
            f"the engine's own reserve shows prompt and generation graphs of different sizes: {shapes}")
        result = run_smoke(server.base_url, None, server.tail, diagnostic=True, n_predict=N_PREDICT)
        assert result.kind == "ok", str(result)
        assert result.sharing.startswith("prompt evaluated once, shared by 2"), result.sharing
        assert all(t > N_PREDICT for t in result.tokens.values()), result.tokens
        assert server.running()
        assert not any(REALLOC_MARK in line for line in server.log_lines())


def test_diagnostic_smoke_names_the_kpool_bug_on_a_second_backend(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    kpool = kpool_of(TINY_GLM5_NEXT)
    with rpc_backend(engine_build, tmp_path / "rpc.log") as rpc, \
            _engine(engine_build, tiny_glm5_next_model, tmp_path / "server.log", second_backend_args(rpc)) as server:
        assert _devices(server) == [f"RPC0[{rpc}]", "CPU"], "two scheduler backends, as on a GPU"
        result = run_smoke(server.base_url, None, server.tail, diagnostic=True, n_predict=N_PREDICT)
        assert result.kind == "engine-bug", str(result)
        assert REALLOC_MARK in result.log_line, result.log_line
        assert "b11412" in result.message and "#29958" in result.message, result.message
        assert _exited(server), "the engine aborted"
        # the shared generation re-pools every pool, one more each kpool tokens: it dies within kpool
        assert all(1 <= t <= kpool + 1 for t in result.tokens.values()), result.tokens


def test_same_launch_without_sharing_generates_past_the_point_the_fork_died(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    with rpc_backend(engine_build, tmp_path / "rpc.log") as rpc, \
            _engine(engine_build, tiny_glm5_next_model, tmp_path / "server.log", second_backend_args(rpc)) as server:
        client = EngineClient(server.base_url)
        prompt = _prompt(client, "One session reads this alone. ", 2400)
        turn = send(client, None, "solo", prompt, Sampling(N_PREDICT, 0.8, 1234))
        assert turn.ok, turn.error
        assert turn.completions[0].tokens_predicted == N_PREDICT
        assert server.running()
        assert not any(REALLOC_MARK in line for line in server.log_lines())


def test_one_session_is_no_escape_a_second_long_prompt_aborts(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    """With -np 1: after any generation, a prompt of several ubatches re-reserves its first ubatch's
    graph at that size and aborts on the next one, bigger — serving with -np 1 does not avoid it."""
    with rpc_backend(engine_build, tmp_path / "rpc.log") as rpc, \
            _engine(engine_build, tiny_glm5_next_model, tmp_path / "server.log",
                    (*second_backend_args(rpc), "-np", "1")) as server:
        client = EngineClient(server.base_url)
        first = send(client, None, "first", _prompt(client, "alpha ", 2400), Sampling(N_PREDICT, 0.8, 1))
        assert first.ok and first.completions[0].tokens_predicted == N_PREDICT, first.error
        second = send(client, None, "second", _prompt(client, "bravo ", 2400), Sampling(N_PREDICT, 0.8, 1))
        assert not second.ok and second.completions[0].tokens_predicted == 0
        assert _exited(server)
        assert any(REALLOC_MARK in line for line in server.log_lines())


def test_upstream_repro_aborts_only_with_a_second_backend_and_the_flag(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    both = [(2500, 32, 1), (2500, 32, 2)]
    cpu = run_bench(engine_build, tiny_glm5_next_model, REPRO_BENCH, diagnostic=True)
    assert cpu.returncode == 0 and bench_rows(cpu.stdout) == both, cpu.stdout + cpu.stderr[-2000:]
    with rpc_backend(engine_build, tmp_path / "rpc.log") as rpc:
        args = (*REPRO_BENCH, *second_backend_args(rpc))
        diag = run_bench(engine_build, tiny_glm5_next_model, args, diagnostic=True)
        assert diag.returncode != 0 and REALLOC_MARK in diag.stdout + diag.stderr
        assert bench_rows(diag.stdout) == both[:1], "one sequence finishes; the shared pair aborts"
        plain = run_bench(engine_build, tiny_glm5_next_model, args, diagnostic=False)
        assert plain.returncode == 0 and bench_rows(plain.stdout) == both, "without the flag: silent re-reserves"


def test_one_sequence_aborts_when_the_pool_count_steps_not_when_n_kv_does(
        engine_build: EngineBuild, tmp_path: Path) -> None:
    model = gguf_factory.ensure(KPOOL8_GLM5_NEXT)
    n_gen = 32
    kv_only, pools = 2300, 3060
    assert n_kv_padded(kv_only) != n_kv_padded(kv_only + n_gen)
    assert n_pool_padded(kv_only, KPOOL8) == n_pool_padded(kv_only + n_gen, KPOOL8)
    assert n_pool_padded(pools, KPOOL8) != n_pool_padded(pools + n_gen, KPOOL8)
    with rpc_backend(engine_build, tmp_path / "rpc.log") as rpc:
        for npp, aborts in ((kv_only, False), (pools, True)):
            args = ("-npp", str(npp), "-ntg", str(n_gen), "-npl", "1", "-c", "32768", "-kvu",
                    *second_backend_args(rpc))
            out = run_bench(engine_build, model, args, diagnostic=True)
            text = out.stdout + out.stderr
            assert (REALLOC_MARK in text) == aborts, f"npp {npp}: {text[-2000:]}"
            assert bench_rows(out.stdout) == ([] if aborts else [(npp, n_gen, 1)])
