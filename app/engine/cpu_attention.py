"""A device's attention and matmul rates, measured by a short run of the engine: what the speed model
cannot derive for a CPU (app/planner/solve/speed.py, "Attention on a CPU").

ggml-cpu's flash attention walks every KV cell of every head one at a time, so on a CPU its cost per
cell is set by that loop (and the thread count the engine or the RPC worker runs with), not by memory
bandwidth; the f16 and the quantized KV paths differ (only f16/f32 prefill is tiled). No spec sheet
gives it: ``measure`` times it. It runs the build's ``llama-batched-bench`` on the self-test model
(app/engine/selftest.py: 2 layers, 4 heads as wide as the planned model's, Q4_0 matrices) with flash attention on, for each KV
type in ``KV_TYPES``, at two prompt lengths (``PROMPTS``) with ``DECODE`` tokens after each, the median of
``REPEATS``; on the host CPU (``-ngl 0``, the engine's default threads) or on an RPC worker's device
(``-ngl 99 --rpc ENDPOINT``, the worker's own threads). From the engine's own timings:

- decode: seconds per token grow with the cells attended over; that slope over the model's heads (all
  layers) is the decode cost per cell and head;
- the decode with query heads sharing a KV head (``decode_gqa``, f16 KV): the same run on the GQA run's
  model (app/engine/selftest.py ``deep_attention_model``: ``GQA_RUN`` query heads over each of the 4 KV
  heads), per query head. Each KV row read serves every query head over it, so a GQA model's query head
  costs less (128-wide heads on this project's VM: 162–250 ns one over one, 76–84 five over one); the
  speed model prices a model's own ratio between the two (app/planner/solve/speed.py ``attention_cost``;
  bench/results/attention-footprint-cpu-2026-12-02.md). Not for a quantized KV: its prefill, not tiled,
  takes seconds a run with four times the query heads, and that KV is priced at the whole cost;
- the decode by the KV a token reads (``decode_curve``, the largest's ``decode_deep``): the self-test
  model's KV is a few MiB a token, which a CPU's caches hold, while a real model's is hundreds of MiB and
  more, read from memory. The deep runs' models (``deep_attention_model``: the same 4 heads, as many
  layers as make each of ``DEEP_FOOTPRINTS`` of f16 KV at the long prompt) time that decode; 32-wide
  heads on this project's AMD VM: 53 ns a cell and head in cache, 110–130 from 4 MiB to 64
  (bench/results/placement-cpu-2026-12-02e.md); on a Xeon VM 77–94 up to 12 MiB, 155–183 past 32 at
  496 cells. The speed model prices a decode between the two around its KV (app/planner/solve/speed.py
  ``attention_cost``, ``CpuAttention.decode_over``);
- prefill: seconds per prompt token grow with the mean fill (half the prompt); the same ratio is the
  prefill cost per cell and head; the seconds per token at no fill are the model's matmuls, whose
  flops over them give the device's matmul rate (Q4_0 weights: a quantized model's);
- a decoded token's seconds at no cells (``decode_base``): on a worker's device against the host's
  own, the difference is what its two graph splits cost (the embeddings in, the logits out: the RPC
  round trips and the graph sent each token), app/machine/calibrate.py's split cost for it;
- the host's only: what a token costs ``llama-server`` whatever the model's size (``server_token``:
  the graph, sampling, the server's bookkeeping and its threads' wake-ups): the server beside the
  bench (its ``llama-server``) on the self-test model, with the same threads, its own ``timings`` of
  a few short answers, less their attention at the f16 run's rate and the model's weights read at the
  host's bandwidth. On this project's 2-core VM: 0.01–0.2 ms (bench/results/placement-cpu-2026-12-02f.md);
  the speed model's default was 1 ms.

A few seconds in all; app/machine/calibrate.py keeps the result with the device's identity.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.engine import speed_check
from app.engine.capabilities import free_port
from app.engine.process import EngineFailed, ServerProcess
from app.engine.selftest import deep_attention_model, selftest_model
from app.machine.calibrate import SERVER_RUN
from app.planner.devices import GpuDevice
from app.planner.gguf.checks import LLAMA_MAX_LAYERS
from app.planner.gguf.model import read_shape
from app.planner.memory.kv import cache_block, row_bytes
from app.planner.solve.speed import FLOAT_KV, active_weights

#: Prompt lengths (tokens) and tokens decoded after each; the context they need.
PROMPTS = (256, 2048)
#: (16 tokens at 256 cells took ~5 ms on the 2-core CI machine: timer-sized, the slope moved by ×1.5
#: between runs; 64 cost well under a second more)
DECODE = 64
N_CTX = 4096
KV_TYPES = ("f16", "q8_0")
REPEATS = 5
#: A KV type whose runs disagreed is run once more before it is left out: left out, it is priced at
#: memory bandwidth, and a kept run is not made again (a loopback worker's q8_0 runs disagreed in three
#: of nine bench runs, twice with nothing else running; bench/results/placement-cpu-2026-12-02f.md).
ATTEMPTS = 2
#: The runs' decode costs may differ by this factor at most (the largest over the smallest); more and
#: the figure is not kept. On an idle 2-core VM five runs on the host spread ×1.1–1.8, but a loopback
#: worker's q8_0 ×1.6–4 (10–45 ns a cell and head: a quarter millisecond a token beside its round trips;
#: 256 tokens decoded instead of 64 spread as much); a core taken by something else made one run ×28.
#: Their median is what is kept.
NOISY_SPREAD = 4.0
TIMEOUT_S = 120.0
#: The deep runs: the f16 KV a decoded token reads at their long prompt, from what a desktop's L2 and
#: a small L3 hold to past a large desktop's last-level cache (the largest is ``decode_deep``); their
#: prompts and tokens decoded, how many runs each. Where the cost of a cell turns differs between CPUs:
#: a 2-core AMD EPYC VM's by 4 MiB, a 2-core Xeon VM's between 24 and 32 (32-wide heads), and the speed
#: model prices a decode between the two runs around its KV (app/planner/solve/speed.py
#: ``CpuAttention.decode_over``). A float KV's runs fill 2,048 cells (1,008 + 16 and 2,032 + 16 fill
#: 256-cell blocks): past the caches a cell costs less over a longer context at the same bytes (64 MiB
#: on that Xeon: 168 ns a cell and head at 496 cells, 130–143 at 1,024, 104–126 at 2,048, 110–126 at
#: 4,096; a model's context is thousands of cells), and a prompt that long costs seconds, not more. A
#: quantized KV's stay at 496 (its prefill, not tiled, takes four times as long; its cost moves little
#: with the bytes: 18–20 ns on the Xeon from 1 to 26 MiB).
DEEP_FOOTPRINTS = (4 * 1024 * 1024, 16 * 1024 * 1024, 64 * 1024 * 1024)
DEEP_BYTES = DEEP_FOOTPRINTS[-1]
DEEP_PROMPTS = (1008, 2032)
DEEP_PROMPTS_QUANTIZED = (240, 496)
DEEP_DECODE = 16
DEEP_REPEATS = 3
#: The GQA run: query heads over each KV head, the KV types it is made for, how many runs.
GQA_RUN = 4
GQA_KV_TYPES = ("f16",)
GQA_REPEATS = 3

#: The server run: its context (one slot: a prompt of the rest after the answer), the tokens of each
#: answer, how many answers (after one not counted: the first answer after a start ran ×2 slow in some
#: runs); how long the 1 MiB model may take to load.
SERVER_CTX = 128
SERVER_DECODE = 64
SERVER_REPEATS = 5
SERVER_READY_S = 60.0

#: |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
_ROW = re.compile(r"^\|\s*(?P<pp>\d+)\s*\|\s*(?P<tg>\d+)\s*\|\s*1\s*\|\s*\d+\s*\|\s*(?P<t_pp>[\d.]+)\s*\|"
                  r"\s*(?P<s_pp>[\d.]+)\s*\|\s*(?P<t_tg>[\d.]+)\s*\|\s*(?P<s_tg>[\d.]+)\s*\|")


def batched_bench(server: Path) -> Path | None:
    """The ``llama-batched-bench`` beside a build's ``llama-server`` (None when the build has none)."""
    path = server.with_name("llama-batched-bench")
    return path if path.is_file() else None


def parse_rows(text: str) -> dict[int, tuple[float, float]]:
    """``llama-batched-bench``'s table: per prompt length, (seconds of its prefill, seconds per token of
    the decode after it). Read from its rates (``S_PP``, ``S_TG``: tokens/s to two decimals), not its
    seconds, which it prints to the millisecond: the self-test model's 256-token prefill at 32-wide heads
    takes 3-6 ms, and its matmul rate read off the seconds moved by half between runs (36-57 GFLOP/s)."""

    def seconds(tokens: str, rate: str, printed: str) -> float:
        return int(tokens) / float(rate) if float(rate) > 0 else float(printed)

    return {int(m["pp"]): (seconds(m["pp"], m["s_pp"], m["t_pp"]),
                           seconds(m["tg"], m["s_tg"], m["t_tg"]) / max(1, int(m["tg"])))
            for line in text.splitlines() if (m := _ROW.match(line.strip()))}


def rates(rows: dict[int, tuple[float, float]], heads: int, flops_token: float, *,
          decode_only: bool = False) -> dict[str, float] | None:
    """Decode and prefill seconds per cell and head (``heads``: over all layers) and the matmul flop/s
    (left out when the rows leave none) from the first and the last row of the table (module
    docstring); None when the rows do not show attention growing with the cells (too noisy to say)."""
    if len(rows) < 2:
        return None
    ordered = sorted(rows.items())
    (p1, (pp1, tg1)), (p2, (pp2, tg2)) = ordered[0], ordered[-1]
    decode_slope = (tg2 - tg1) / (p2 - p1)  # seconds per token per cell
    prefill_slope = (pp2 / p2 - pp1 / p1) / ((p2 - p1) / 2)
    matmul_s = pp1 / p1 - prefill_slope * p1 / 2
    if decode_slope <= 0 or (prefill_slope <= 0 and not decode_only):
        return None
    if decode_only:  # (the deep run: its prefill is not read)
        return {"decode": decode_slope / heads}
    out = {"decode": decode_slope / heads, "prefill": prefill_slope / heads}
    # a decoded token's seconds at no cells: the graph, its splits, the weights (read at the short
    # prompt's length; the cells its own decode adds are a few µs here)
    # (a host's is tens of µs: noise can take it below zero, where it is none)
    base = max(0.0, tg1 - decode_slope * p1)
    out |= {"compute": flops_token / matmul_s} if matmul_s > 0 else {}
    return out | {"decode_base": base}


def _runs(argv: list[str], repeats: int, heads: int, flops: float, *, decode_only: bool = False) -> list[dict[str, float]]:
    """``repeats`` runs of ``argv``, each its own ``rates`` (its two rows taken under the same conditions:
    a slope is a small difference of two noisy times, and pairing them within a run cancels what the run
    shares, the machine's load, an RPC worker's round trips); the runs that gave them."""
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            break
        if (r := rates(parse_rows(done.stdout + done.stderr), heads, flops, decode_only=decode_only)) is not None:
            runs.append(r)
    return runs


def _agree(runs: list[dict[str, float]], repeats: int) -> bool:
    """Most runs gave a slope, and they agree (a core taken by something else stalls the engine's thread
    barrier: one walkthrough's run came out ×28 slow, f16 ×28 q8_0's); else too noisy to say."""
    decode = sorted(r["decode"] for r in runs)
    return len(runs) * 2 > repeats and decode[-1] <= NOISY_SPREAD * decode[0]


def kv_types_for(head_dim: int) -> tuple[str, ...]:
    """The ``KV_TYPES`` a K cache of ``head_dim``-wide heads can be: a quantized type's block must divide
    the head size (src/llama-context.cpp refuses the context otherwise: a 16-wide model's q8_0 run had
    been said as "failed or disagreed")."""
    return tuple(kv for kv in KV_TYPES if head_dim % cache_block(kv)[0] == 0)


def _heads_and_flops(model: Path) -> tuple[int, float]:
    """A model's heads over its attention layers, and its matmul flops a token."""
    shape = read_shape(model)
    return sum(shape.n_head[il] for il in range(shape.n_layer) if shape.n_head_kv[il] > 0), active_weights(shape)[1]


def _argv(bench: Path, model: Path, kv: str, device_args: list[str], prompts: tuple[int, ...] = PROMPTS,
          decode: int = DECODE, n_ctx: int = N_CTX) -> list[str]:
    """``llama-batched-bench`` timing ``model`` with a ``kv`` cache: ``decode`` tokens after each prompt."""
    return [str(bench), "-m", str(model), "-c", str(n_ctx), "-b", "2048", "-ub", "512", "-fa", "on",
            "-npp", ",".join(map(str, prompts)), "-ntg", str(decode), "-npl", "1", "-ctk", kv, "-ctv", kv,
            *device_args]


def deep_prompts(kv: str) -> tuple[int, int]:
    """A deep run's two prompts for a ``kv`` cache (``DEEP_PROMPTS`` for a float type)."""
    return DEEP_PROMPTS if kv in FLOAT_KV else DEEP_PROMPTS_QUANTIZED


def deep_layers(head_dim: int, footprint: int = DEEP_BYTES, prompts: tuple[int, int] = DEEP_PROMPTS) -> int:
    """Layers of a deep run's model: its 4 heads' f16 KV at the long prompt make ``footprint`` bytes, at
    most llama.cpp's ``LLAMA_MAX_LAYERS`` (heads narrower than 32 read less)."""
    per_layer = prompts[-1] * 4 * head_dim * 2 * 2  # cells × heads × K and V × f16
    return min(LLAMA_MAX_LAYERS, -(-footprint // per_layer))


def deep_models(head_dim: int, kv: str) -> list[Path]:
    """The deep runs' models for a ``kv`` cache, one a footprint (``DEEP_FOOTPRINTS``), written once."""
    return [deep_attention_model(head_dim, deep_layers(head_dim, b, deep_prompts(kv))) for b in DEEP_FOOTPRINTS]


def kv_read(model: Path, kv: str, cells: float) -> float:
    """Bytes of ``kv`` KV a decoded token of ``model`` reads over ``cells`` cells (K and V, every layer
    with KV): the x of a run's point on the decode curve (``CpuAttention.decode_curve``; a 64 MiB deep
    run's point is at 48 MiB, the middle of the cells its slope spans)."""
    shape = read_shape(model)
    per_cell = sum(shape.n_head_kv[il] * (row_bytes(kv, shape.head_dim_k) + row_bytes(kv, shape.head_dim_v))
                   for il in range(shape.n_layer) if shape.n_head_kv[il] > 0)
    return per_cell * cells


def measure(bench: Path, model: Path, device_args: list[str], gqa_model: Path | None = None,
            deep_model: Path | Sequence[Path] | Callable[[str], Sequence[Path]] | None = None,
            ) -> dict[str, dict[str, Any]]:
    """Per KV type, ``rates`` on the device ``device_args`` selects (``-ngl 0``: the host CPU;
    ``-ngl 99 --rpc ENDPOINT``: a worker's), the median of the runs; with ``gqa_model`` (``GQA_RUN``
    query heads a KV head), for ``GQA_KV_TYPES`` its decode a query head too (``decode_gqa``, with ``gqa``);
    with ``deep_model`` (one, several from the smallest KV to the largest, or those for a KV type: its
    prompts are ``deep_prompts``), each one's decode over its
    KV (``decode_curve``: [bytes a token reads, seconds a cell and head], the in-cache run's first) and the
    largest's as ``decode_deep``, over KV past the caches; a type whose runs failed or disagreed is left
    out (a GQA or deep run alone: that figure is)."""
    heads, flops = _heads_and_flops(model)
    g_heads, g_flops = _heads_and_flops(gqa_model) if gqa_model is not None else (0, 0.0)
    out: dict[str, dict[str, Any]] = {}
    for kv in kv_types_for(read_shape(model).head_dim_k):
        for _attempt in range(ATTEMPTS):
            runs = _runs(_argv(bench, model, kv, device_args), REPEATS, heads, flops)
            if _agree(runs, REPEATS):
                break
        else:
            continue
        out[kv] = {key: statistics.median(r[key] for r in runs) for key in runs[0] if all(key in r for r in runs)}
        if gqa_model is not None and kv in GQA_KV_TYPES and _agree(
                g_runs := _runs(_argv(bench, gqa_model, kv, device_args), GQA_REPEATS, g_heads, g_flops), GQA_REPEATS):
            out[kv] |= {"decode_gqa": statistics.median(r["decode"] for r in g_runs), "gqa": float(GQA_RUN)}
        # (each point at the cells its slope spans the middle of: between the two prompts, and half the
        # tokens decoded after them)
        curve = [[kv_read(model, kv, sum(PROMPTS[::len(PROMPTS) - 1]) / 2 + DECODE / 2), out[kv]["decode"]]]
        paths = ([deep_model] if isinstance(deep_model, Path) else list(deep_model(kv)) if callable(deep_model)
                 else list(deep_model or ()))
        prompts = deep_prompts(kv)
        for i, deep_path in enumerate(paths):
            d_heads, d_flops = _heads_and_flops(deep_path)
            deep = _argv(bench, deep_path, kv, device_args, prompts, DEEP_DECODE, prompts[-1] + DEEP_DECODE)
            if _agree(d_runs := _runs(deep, DEEP_REPEATS, d_heads, d_flops, decode_only=True), DEEP_REPEATS):
                cost = statistics.median(r["decode"] for r in d_runs)
                curve.append([kv_read(deep_path, kv, sum(prompts) / 2 + DEEP_DECODE / 2), cost])
                out[kv] |= {"decode_deep": cost} if i == len(paths) - 1 else {}
        if len(curve) > 1:
            out[kv]["decode_curve"] = curve
    return out


def server_token(server: Path, model: Path, threads: int | None, decode_cell_head: float) -> float | None:
    """``llama-server``'s seconds a decoded token costs on ``model`` (the self-test model) whatever the
    model: the median of ``SERVER_REPEATS`` answers' own timings (after a first one not counted), less
    each one's attention over its cells at ``decode_cell_head`` (the f16 run's rate) and the model's
    weights read at the host's bandwidth (both priced on their own: the 128-wide self-test model's
    3.3 MiB are 0.1 ms of its 0.16; a walkthrough's tiny model was then priced ×1.45 slow); None when
    the server did not start, or answered fewer than most of them. (Not held to ``NOISY_SPREAD``: a
    tenth of a millisecond is timer-sized, and the median of five is what is kept.)"""
    from app.machine.calibrate import measure_host_bandwidth

    heads, _flops = _heads_and_flops(model)
    weights_s = active_weights(read_shape(model))[0] / measure_host_bandwidth()
    port = free_port()
    argv = [str(server), "-m", str(model), "-c", str(SERVER_CTX), "-np", "1", "-ngl", "0", "-fa", "on",
            "--host", "127.0.0.1", "--port", str(port), *(["-t", str(threads)] if threads else [])]
    seconds: list[float] = []
    try:
        with ServerProcess(argv, "127.0.0.1", port) as proc:
            proc.start()
            proc.wait_ready(timeout=SERVER_READY_S, stall=SERVER_READY_S)
            for i in range(SERVER_REPEATS + 1):
                t = speed_check.measure(proc.base_url, slot_tokens=SERVER_CTX, n_predict=SERVER_DECODE,
                                        timeout=TIMEOUT_S)
                if i and isinstance(t, speed_check.Timings) and t.predicted_n > 0 and t.predicted_per_second > 0:
                    cells = t.prompt_n + t.predicted_n / 2  # (the mean cells its tokens attended over)
                    seconds.append(max(0.0, 1 / t.predicted_per_second - cells * heads * decode_cell_head
                                       - weights_s))
    except EngineFailed:
        return None
    if len(seconds) * 2 <= SERVER_REPEATS:
        return None
    return statistics.median(seconds)


def bench_run(bench: Path, threads: int | None = None) -> Callable[[GpuDevice | None, int], dict[str, dict[str, Any]]]:
    """``measure`` with ``bench`` on the host CPU (None) or an RPC worker's device, with the self-test
    model's heads as wide as a model's (``head_dim``): what app/machine/calibrate.py calls for a device
    and head size it has no engine run for. ``threads``: the host's (``-t``; None: the engine's
    default), as the launches it predicts for will run."""

    def run(device: GpuDevice | None, head_dim: int) -> dict[str, dict[str, Any]]:
        args = ["-ngl", "0"] if device is None else ["-ngl", "99", "--rpc", device.endpoint]
        args += ["-t", str(threads)] if threads else []
        model = selftest_model(head_dim=head_dim)
        out = measure(bench, model, args, deep_attention_model(head_dim, 2, n_head=4 * GQA_RUN, n_head_kv=4),
                      lambda kv: deep_models(head_dim, kv))
        server = bench.with_name("llama-server")
        if device is None and "f16" in out and server.is_file() and (
                token := server_token(server, model, threads, out["f16"]["decode"])) is not None:
            out[SERVER_RUN] = {"token": token}
        return out

    return run


def engine_run(server: Path, threads: int | None = None) -> Callable[[GpuDevice | None, int], dict[str, dict[str, Any]]]:
    """``bench_run`` with the ``llama-batched-bench`` of ``server``'s build (runs nothing, every figure
    empty, when the build has none)."""
    bench = batched_bench(server)
    return bench_run(bench, threads) if bench is not None else (lambda _device, _head: {})
