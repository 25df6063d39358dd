"""The k-pool shared-sequence bugs (docs/domain.md §5) on Headroom's own engine: llama.cpp 0c1e57098 plus
its two patches (native/patches, docs/engine-patches.md), CPU build. Every scenario that aborted
the unpatched engine now runs to the end.

The aborts need two scheduler backends (tests/fixtures/kpool.py says why, from the source): a CPU
launch has one and re-reserves silently, so these tests give the same CPU engine a real second
device, a local ``ggml-rpc-server``, as a GPU launch has CUDA0 beside the CPU. On a GPU machine
``HEADROOM_KPOOL_DEVICE=cuda`` runs them on the CUDA build with CUDA0 as that device
(bench/h200/run.sh).

``HEADROOM_KPOOL_ENGINE=unpatched`` runs the same tests against the vendored tree as it is (build it
with ``python native/build.py --unpatched``): each one then fails, which docs/engine-patches.md
records — except the qwen4exp cases, which pass there too: in 0c1e57098 qwen4exp pools its QSA
blocks inside the graph and never touches the k-pool cache these bugs live in. The variable also
takes the path of a ``llama-server`` in any build with a ``build.json`` (patch 1 alone, say).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from app.engine.capabilities import engine_env
from app.engine.native_build import EngineBuild
from app.engine.process import ServerProcess
from app.llamacpp.failures import REALLOC_MARK, SCATTER_MARK
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling, send
from app.sessions.smoke import DIAGNOSTIC_ENV, run_smoke
from tests.fixtures import gguf_factory
from tests.fixtures.kpool import (
    KPOOL8,
    KPOOL8_GLM5_NEXT,
    REPRO_BENCH,
    SCATTER_CHECK_ENV,
    SCATTER_CHECK_ON,
    TINY_QWEN4EXP,
    bench_rows,
    kpool_engine_for_tests,
    kpool_of,
    kpool_pad,
    n_kv_padded,
    n_pool_padded,
    run_bench,
    run_shared_seq,
    second_backend,
)
from tests.fixtures.server_proc import free_port
from tests.fixtures.shapes import TINY_GLM5_NEXT
from tests.fixtures.spec import ModelSpec

pytestmark = pytest.mark.engine

#: What Headroom passes once it has planned, with the smoke test's session pool and buffer lines.
POOL = ("-c", "32768", "-np", "2", "-kvu", "--metrics", "--fit", "off", "-lv", "4")
N_PREDICT = 16
#: The shared-sequence program's run: upstream's test sizes (prompt 128, ubatch 64), decoded far
#: enough that the pool count and n_kv both step three times (see the test).
SHARED_SEQ = ("--n-prompt", "128", "--n-continue", "400", "--ctx", "4096", "--batch", "256", "--ubatch", "64")
#: sched_reserve:        CPU compute buffer size =    49.77 MiB
_COMPUTE_RE = re.compile(r"sched_reserve:\s+(?P<dev>\S+) compute buffer size")
#: sched_reserve: graph: nodes = 321, splits = 1, input objects = 4, input tensors = 13
#: sched_reserve: graph (pp bs=512, tg bs=2): nodes = 321 / 300, splits = 2 / 2, input objects = ...
_GRAPH_RE = re.compile(r"sched_reserve: graph(?P<two> \(pp bs=\d+, tg bs=\d+\))?: nodes = (?P<nodes>[\d /]+),")
#: Both k-pool architectures the seeds name.
MODELS = [pytest.param(TINY_GLM5_NEXT, id="glm5-next"), pytest.param(TINY_QWEN4EXP, id="qwen4exp")]


@pytest.fixture(scope="module")
def kpool_engine(engine_build: EngineBuild) -> EngineBuild:
    """Headroom's engine, or the unpatched one under ``HEADROOM_KPOOL_ENGINE=unpatched``."""
    return kpool_engine_for_tests(engine_build)


@contextlib.contextmanager
def _engine(build: EngineBuild, model: Path, log: Path, extra: Sequence[str] = (),
            diagnostic: bool = True) -> Iterator[ServerProcess]:
    """Headroom's supervisor running the real llama-server; stopped on exit."""
    port = free_port()
    env = {k: v for k, v in engine_env().items() if k not in DIAGNOSTIC_ENV}
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


def _aborted(server: ServerProcess) -> list[str]:
    return [line for line in server.log_lines() if REALLOC_MARK in line or SCATTER_MARK in line]


def _why(text: str) -> str:
    """The engine's abort line(s) when it printed one, else the end of its output."""
    marks = (REALLOC_MARK, SCATTER_MARK, "GGML_ASSERT")
    lines = [line for line in text.splitlines() if any(m in line for m in marks)]
    return "\n".join(lines) if lines else text[-3000:]


def _prompt(client: EngineClient, word: str, n_tokens: int) -> str:
    """``word`` repeated to about ``n_tokens`` tokens of this model (a byte vocab: ~1 per char)."""
    text = word * max(n_tokens // len(word), 1)
    while len(client.tokenize(text)) > n_tokens:
        text = text[: -len(word)]
    return text


def test_the_engine_reserves_one_graph_shape_for_prompt_and_generation(
        kpool_engine: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    """b11412's point, in the engine's own reserve log: the prompt and the generation graph are one
    shape (unpatched: ``graph (pp bs=512, tg bs=2): nodes = 321 / 300``)."""
    # (-dev none: a GPU build would put the layers on its GPU, or with -ngl 0 still reserve it for op
    # offload; this launch is the CPU's alone)
    with _engine(kpool_engine, tiny_glm5_next_model, tmp_path / "server.log", ("-dev", "none")) as server:
        assert _devices(server) == ["CPU"], "a CPU launch: one scheduler backend"
        shapes = [m for line in server.log_lines() if (m := _GRAPH_RE.search(line))]
        assert shapes, "the engine printed no sched_reserve graph line"
        assert all(m["two"] is None for m in shapes), [m.group(0) for m in shapes]
        result = run_smoke(server.base_url, None, server.tail, diagnostic=True, n_predict=N_PREDICT)
        assert result.kind == "ok", str(result)
        assert server.running() and not _aborted(server)


@pytest.mark.parametrize("spec", MODELS)
def test_upstream_repro_finishes_both_rows_on_a_second_backend(
        kpool_engine: EngineBuild, spec: ModelSpec, tmp_path: Path) -> None:
    """``GGML_SCHED_DEBUG_REALLOC=1 llama-batched-bench -npp 2500 -ntg 32 -npl 1,2 -c 32768 -pps -kvu``
    with a second backend: the shared pair used to abort after the single-sequence row."""
    model = gguf_factory.ensure(spec)
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device:
        out = run_bench(kpool_engine, model, (*REPRO_BENCH, *device.engine_args), diagnostic=True)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and REALLOC_MARK not in text, _why(text)
    assert bench_rows(out.stdout) == [(2500, 32, 1), (2500, 32, 2)], out.stdout


@pytest.mark.parametrize("spec", MODELS)
def test_two_sequences_sharing_a_prompt_decode_past_several_pool_count_steps(
        kpool_engine: EngineBuild, spec: ModelSpec, tmp_path: Path) -> None:
    """b11412's regression test (tests/native/kpool_shared_seq.cpp): a prompt into seq 0,
    ``llama_memory_seq_cp`` to seq 1, then both decode under ``GGML_SCHED_DEBUG_REALLOC=1`` with two
    backends while the pool count (two sequences' pools, padded by 64) and n_kv (padded by 256) step."""
    n_prompt, n_continue, kpool = 128, 400, 4
    first, last = n_prompt, n_prompt + n_continue  # positions per sequence, both sequences alike
    assert (kpool_pad(2 * (last // kpool)) - kpool_pad(2 * (first // kpool))) // 64 >= 3
    assert (n_kv_padded(2 * last - n_prompt) - n_kv_padded(n_prompt)) // 256 >= 3
    model = gguf_factory.ensure(spec)
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device:
        out = run_shared_seq(kpool_engine, model, (*SHARED_SEQ, *device.program_args), env=DIAGNOSTIC_ENV)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and REALLOC_MARK not in text, _why(text)
    assert f"shared-seq decode ok: {n_continue} tokens per sequence after seq_cp" in out.stdout


def test_every_pooled_row_a_shared_decode_scatters_is_written_once(
        kpool_engine: EngineBuild, tiny_glm5_next_model: Path) -> None:
    """43fe9c642's race, caught deterministically: with the engine's scatter check on, two scatter
    entries of one ubatch naming the same pooled row abort (``k-pool scatter race``). Two sequences
    sharing a prompt on the CPU backend with four threads, as the upstream report. Patch 1 alone
    aborts here at the first shared decode; the unpatched engine has no check to turn on."""
    args = ("--n-prompt", "128", "--n-continue", "64", "--threads", "4")
    out = run_shared_seq(kpool_engine, tiny_glm5_next_model, args, env=SCATTER_CHECK_ENV)
    text = out.stdout + out.stderr
    assert SCATTER_CHECK_ON in text, f"the engine does not check its k-pool scatter rows (no '{SCATTER_CHECK_ON}')"
    assert out.returncode == 0 and SCATTER_MARK not in text, _why(text)
    assert "shared-seq decode ok: 64 tokens per sequence after seq_cp" in out.stdout


def test_diagnostic_smoke_passes_on_a_second_backend(
        kpool_engine: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device, \
            _engine(kpool_engine, tiny_glm5_next_model, tmp_path / "server.log", device.engine_args) as server:
        assert _devices(server) == [device.device_name, device.host_name], "two scheduler backends, as on a GPU"
        result = run_smoke(server.base_url, None, server.tail, diagnostic=True, n_predict=N_PREDICT, backends=2)
        assert result.kind == "ok", str(result)
        assert result.sharing.startswith("prompt evaluated once, shared by 2"), result.sharing
        assert all(t > N_PREDICT for t in result.tokens.values()), result.tokens
        assert server.running() and not _aborted(server)


def test_one_session_serves_two_long_prompts_in_a_row(
        kpool_engine: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path) -> None:
    """With -np 1: a prompt of several ubatches after a generation used to re-reserve its first
    ubatch's graph at that size and abort on the next, bigger one."""
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device, \
            _engine(kpool_engine, tiny_glm5_next_model, tmp_path / "server.log",
                    (*device.engine_args, "-np", "1")) as server:
        client = EngineClient(server.base_url)
        for name, word in (("first", "alpha "), ("second", "bravo ")):
            turn = send(client, None, name, _prompt(client, word, 2400), Sampling(N_PREDICT, 0.8, 1, ignore_eos=True))
            assert turn.ok, f"{name}: {turn.error}"
            assert turn.completions[0].tokens_predicted == N_PREDICT
        assert server.running() and not _aborted(server)


def test_one_sequence_crosses_the_pool_count_step(kpool_engine: EngineBuild, tmp_path: Path) -> None:
    """One sequence whose generation steps the padded pool count (kpool 8: every 512 tokens) used
    to abort there; one that steps only n_kv never did. Both finish."""
    model = gguf_factory.ensure(KPOOL8_GLM5_NEXT)
    n_gen = 32
    kv_only, pools = 2300, 3060
    assert n_kv_padded(kv_only) != n_kv_padded(kv_only + n_gen)
    assert n_pool_padded(kv_only, KPOOL8) == n_pool_padded(kv_only + n_gen, KPOOL8)
    assert n_pool_padded(pools, KPOOL8) != n_pool_padded(pools + n_gen, KPOOL8)
    assert kpool_of(KPOOL8_GLM5_NEXT) == KPOOL8
    with second_backend(kpool_engine, tmp_path / "rpc.log") as device:
        for npp in (kv_only, pools):
            args = ("-npp", str(npp), "-ntg", str(n_gen), "-npl", "1", "-c", "32768", "-kvu", *device.engine_args)
            out = run_bench(kpool_engine, model, args, diagnostic=True)
            text = out.stdout + out.stderr
            assert REALLOC_MARK not in text, f"npp {npp}: {_why(text)}"
            assert bench_rows(out.stdout) == [(npp, n_gen, 1)], f"npp {npp}: {out.stdout}"
