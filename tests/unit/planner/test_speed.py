"""The speed model's terms, hand-computed (app/planner/solve/speed.py), and the choice it drives:
the fastest placement that keeps the asked context; when none keeps it, both ends offered with their
speeds (issue 30's case: a 14B at 512k on a 24 GB card with 23.5 GB of RAM)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from app.commands.plan import render
from app.planner import words
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.gguf.model import read_shape
from app.planner.plan_types import AlternativeKind
from app.planner.settings import LaunchSettings
from app.planner.solve import speed
from app.planner.solve.plan import make_plan, max_context
from app.planner.solve.speed import (
    BASE_SPLITS,
    SPLITS_PER_HOST_KV_LAYER_PATCHED,
    SPLITS_PER_HOST_KV_LAYER_STOCK,
    CpuAttention,
    DeviceSpeed,
    Figure,
    Speed,
    SpeedFigures,
    SpeedRow,
    Workload,
    attention_cost,
    decode_seconds,
    default,
    prefill_seconds,
)
from app.planner.sources import Source, SourceKind
from app.planner.units import GiB
from tests.fixtures import gguf_factory, shapes

SPLIT = 1e-4


@pytest.fixture(autouse=True)
def no_fixed_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test below prices one term by hand; the fixed cost per token has its own test."""
    monkeypatch.setattr(speed, "TOKEN_OVERHEAD_S", 0.0)


def test_a_token_costs_its_fixed_overhead_whatever_the_models_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny model's weights and KV take microseconds; llama.cpp's graph, scheduling and sampling a
    millisecond (903 tokens/s measured on the tiny test model): without it the model predicted 58,654.
    Where the host's server run measured it, its figure is the cost (0.1–0.25 ms on the 2-core VM)."""
    bare_decode, bare_prefill = decode_seconds(work(), figures(), 0.5), prefill_seconds(work(), figures(), 0.5)
    monkeypatch.setattr(speed, "TOKEN_OVERHEAD_S", 1e-3)
    assert figures().token_overhead.value == 1e-3 and not figures().token_overhead.calibrated
    assert decode_seconds(work(), figures(), 0.5) == pytest.approx(bare_decode + 1e-3)
    assert prefill_seconds(work(), figures(), 0.5) == pytest.approx(bare_prefill + 1e-3 / 512)  # once a ubatch
    measured = replace(figures(), token_overhead=Figure(0.2e-3, Source(SourceKind.CALIBRATED, "a server run")))
    assert decode_seconds(work(), measured, 0.5) == pytest.approx(bare_decode + 0.2e-3)
    assert prefill_seconds(work(), measured, 0.5) == pytest.approx(bare_prefill + 0.2e-3 / 512)


def figures(*, host_attention: bool = False, split: float = SPLIT) -> SpeedFigures:
    """Round numbers: host 50 GB/s and 1 TFLOP/s; one device at 1 TB/s and 100 TFLOP/s over a 10 GB/s link."""
    dev = DeviceSpeed("CUDA0", default(1e12, "t"), default(100e12, "t"), default(10e9, "t"), default(split, "t"))
    return SpeedFigures(default(50e9, "t"), default(1e12, "t"), (dev,), host_attention=host_attention)


def work(**kw: object) -> Workload:
    base: dict[str, object] = dict(device_weights=(10 * 10**9,), host_weights=0, streamed_weights=0, flops=20e9,
                                   host_flop_share=0.0, kv_device_cell=(100_000,), kv_host_cpu_cell=0,
                                   kv_host_tail_cell=0, attn_flops_cell=0.0, attn_host_share=0.0,
                                   n_ctx_seq=100_000, n_ubatch=512)
    return Workload(**(base | kw))  # type: ignore[arg-type]


def test_decode_reads_weights_and_used_kv_at_the_device_bandwidth_plus_its_splits() -> None:
    # 10 GB of weights + half of 100k cells × 100 kB = 5 GB, at 1 TB/s: 15 ms, plus 2 splits
    assert decode_seconds(work(), figures(), 0.5) == pytest.approx(0.015 + BASE_SPLITS * SPLIT)
    assert decode_seconds(work(), figures(), 0.0) == pytest.approx(0.010 + 0.1e-6 + BASE_SPLITS * SPLIT)


def test_a_host_tail_streams_its_kv_over_the_link_on_the_stock_engine_and_is_read_in_place_when_patched() -> None:
    # 4 host-tail layers holding 200 kB a cell: a full context is 20 GB in host RAM
    w = work(kv_host_tail_cell=200_000, host_tail_layers=4, kv_device_cell=(0,))
    stock = decode_seconds(w, figures(), 1.0)
    patched = decode_seconds(w, figures(host_attention=True), 1.0)
    assert stock == pytest.approx(0.010 + 20e9 / 10e9 + (BASE_SPLITS + 4 * SPLITS_PER_HOST_KV_LAYER_STOCK) * SPLIT)
    assert patched == pytest.approx(0.010 + 20e9 / 50e9 + (BASE_SPLITS + 4 * SPLITS_PER_HOST_KV_LAYER_PATCHED) * SPLIT)
    # prefill streams that KV per ubatch either way (attention of a large batch on the device)
    assert prefill_seconds(w, figures(), 1.0) == prefill_seconds(w, figures(host_attention=True), 1.0)


def test_prefill_is_compute_on_the_device_plus_host_weights_streamed_per_ubatch() -> None:
    w = work(host_weights=2 * 10**9, streamed_weights=2 * 10**9, host_flop_share=0.2, cpu_layers=True)
    # op offload (512 ≥ 32): all 20 GFLOP on the device, 2 GB over 10 GB/s shared by 512 tokens, 4 splits a ubatch
    assert prefill_seconds(w, figures(), 0.0) == pytest.approx(20e9 / 100e12 + 2e9 / 10e9 / 512 + 4 * SPLIT / 512)
    small = work(host_weights=2 * 10**9, streamed_weights=2 * 10**9, host_flop_share=0.2, n_ubatch=16,
                 cpu_layers=True)
    # below 32 tokens: the host layers' share computed on the CPU, nothing streamed; the CPU's layers of
    # the next ubatch run while the device computes the last one: the sum less the share of the shorter
    # side that hides (OVERLAP_SHARE)
    assert prefill_seconds(small, figures(), 0.0) == pytest.approx(
        16e9 / 100e12 + 4e9 / 1e12 - speed.OVERLAP_SHARE * min(16e9 / 100e12, 4e9 / 1e12) + 4 * SPLIT / 16)
    # where the CPU has ops between a layer's device ops (-nkvo, a host tail, CPU experts), they add up
    for between in ({"kv_nkvo_cell": 1}, {"host_tail_layers": 1}, {"cpu_op_layers": 1}):
        mixed = replace(small, **between)  # type: ignore[arg-type]
        splits = speed._splits(mixed, figures(), decode=False) / 16
        assert prefill_seconds(mixed, figures(), 0.0) - splits == pytest.approx(16e9 / 100e12 + 4e9 / 1e12)


def test_a_prompt_shorter_than_a_ubatch_spreads_the_ubatchs_fixed_seconds_over_its_own_tokens() -> None:
    """A 300-token prompt on a 2048-token ubatch runs as one ubatch of 300: its graph, splits and streamed
    weights are paid once for 300 tokens, not spread over 2048 as the plan's rate is. The speed check
    compares a launch's prompt at that rate, so a short prompt no longer teaches a low prefill ratio."""
    w = work(host_weights=2 * 10**9, streamed_weights=2 * 10**9, host_flop_share=0.2, cpu_layers=True,
             n_ubatch=2048)
    learned = replace(figures(), prefill_scale=default(0.5, "t"))
    for fig, scale in ((figures(), 1.0), (learned, 0.5)):
        at = speed.predict(w, fig, 0.0)
        assert at.prefill_for(2048) == pytest.approx(at.prefill)
        # 20 GFLOP a token at 100 TFLOP/s; 2 GB of host weights over 10 GB/s and 4 splits once a ubatch,
        # here paid by 300 tokens (the plan's rate spreads them over 2048: ×2.9 faster)
        assert at.prefill_for(300) == pytest.approx(scale / (20e9 / 100e12 + (2e9 / 10e9 + 4 * SPLIT) / 300))
        # which is what a plan whose ubatch is 300 predicts
        assert at.prefill_for(300) == pytest.approx(speed.predict(replace(w, n_ubatch=300), fig, 0.0).prefill)
        # 3000 tokens: two ubatches' fixed seconds over 3000 tokens
        per_token = 1 / at.prefill + at.ubatch_fixed_s * (2 / 3000 - 1 / 2048)
        assert at.prefill_for(3000) == pytest.approx(1 / per_token)
    # a row's speed between its fills carries the fixed seconds between them
    row = speed.speed_row(replace(w, kv_host_tail_cell=100_000), figures())
    half = row.between(0.25)
    assert row.at[0].ubatch_fixed_s < half.ubatch_fixed_s < row.at[1].ubatch_fixed_s and half.n_ubatch == 2048


def test_an_rpc_workers_device_takes_no_host_matmuls_so_host_layers_prefill_on_the_cpu() -> None:
    """ggml-rpc's device has no ``offload_op``: a 512-token ubatch leaves the host layers' matmuls on the
    CPU (at its 1 TFLOP/s), nothing streamed; a CUDA device takes them (the test above)."""
    w = work(host_weights=2 * 10**9, streamed_weights=2 * 10**9, host_flop_share=0.2, cpu_layers=True)
    rpc = figures()
    rpc = replace(rpc, devices=(replace(rpc.devices[0], op_offload=False),))
    # (the rate of a long prompt: the CPU's layers of each ubatch run while the device computes the last
    # one's, hiding OVERLAP_SHARE of the shorter side, the device's here. A prompt of one ubatch overlaps
    # nothing, one of four hides three quarters of that)
    hidden = speed.OVERLAP_SHARE * 16e9 / 100e12
    assert 0 < speed.OVERLAP_SHARE < 1
    assert prefill_seconds(w, rpc, 0.0) == pytest.approx(16e9 / 100e12 + 4e9 / 1e12 - hidden + 4 * SPLIT / 512)
    at = speed.predict(w, rpc, 0.0)
    assert at.overlap_s == pytest.approx(hidden)
    assert 1 / at.prefill_for(512) == pytest.approx(16e9 / 100e12 + 4e9 / 1e12 + 4 * SPLIT / 512)
    assert 1 / at.prefill_for(2048) == pytest.approx(16e9 / 100e12 + 4e9 / 1e12 - hidden * 3 / 4 + 4 * SPLIT / 512)
    # on a device that takes the host layers' matmuls (op offload, CUDA) they run between the CPU's
    # attention and the device's work: nothing overlaps
    assert speed.predict(replace(w, attn_flops_cell=1e6, attn_host_share=0.2), figures(), 0.5).overlap_s == 0
    assert speed.default_device(GpuDevice(0, "RPC worker 10.0.0.2:50052", GiB, GiB, kind=DeviceKind.RPC,
                                          endpoint="10.0.0.2:50052")).op_offload is False


def test_without_a_device_everything_is_the_hosts() -> None:
    w = work(device_weights=(), host_weights=10 * 10**9, kv_device_cell=(), kv_host_cpu_cell=100_000, cpu_only=True)
    assert decode_seconds(w, figures(), 1.0) == pytest.approx((10e9 + 10e9) / 50e9)
    assert prefill_seconds(w, figures(), 1.0) == pytest.approx(20e9 / 1e12)


# A CPU device (an RPC worker's one-thread CPU), its flash attention measured: f16 100 ns a cell and head
# for decode and 10 ns for prefill, q8_0 50 and 20 ns, at 32-wide heads; 10 GB/s, 50 GFLOP/s.
def cpu_attention(head: int = 32, f16: float = 100e-9, q8: float = 50e-9) -> tuple[CpuAttention, ...]:
    return (CpuAttention("f16", head, default(f16, "t"), default(f16 / 10, "t")),
            CpuAttention("q8_0", head, default(q8, "t"), default(q8 / 2.5, "t")))


def cpu_device_figures(attention: tuple[CpuAttention, ...]) -> SpeedFigures:
    dev = DeviceSpeed("RPC0[10.0.0.2:50052]", default(10e9, "t"), default(50e9, "t"), default(1e9, "t"),
                      default(SPLIT, "t"), attention=attention)
    return SpeedFigures(default(50e9, "t"), default(1e12, "t"), (dev,))


def small_heads(**kw: object) -> Workload:
    """8 layers of 4 heads 32 wide, all on the device: 512 B of f16 KV and 4,096 attention flops a
    cell (128 a cell and head: 32 cell-heads a cell); 10 MB of weights, 100 MFLOP a token."""
    return work(**({"device_weights": (10**7,), "flops": 1e8, "kv_device_cell": (4096,), "attn_flops_cell": 4096.0,
                    "attn_device_cell": (4096.0,), "attn_head_flops": 128, "head_dim": 32, "n_ctx_seq": 10_000}
                   | kw))


def test_attention_on_a_measured_cpu_costs_its_cells_times_heads_not_its_kv_bytes() -> None:
    fig = cpu_device_figures(cpu_attention())
    # half full: 5,000 cells × 32 heads × 100 ns = 16 ms, above the 2 MB of KV at 10 GB/s (0.2 ms)
    assert decode_seconds(small_heads(), fig, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 32 * 100e-9
                                                                    + BASE_SPLITS * SPLIT)
    # q8_0 at its own cost; a q4_0 KV (not measured) at q8_0's, bf16 at f16's
    q8 = 1e7 / 10e9 + 5000 * 32 * 50e-9 + BASE_SPLITS * SPLIT
    assert decode_seconds(small_heads(kv_type="q8_0"), fig, 0.5) == pytest.approx(q8)
    assert decode_seconds(small_heads(kv_type="q4_0"), fig, 0.5) == pytest.approx(q8)
    assert decode_seconds(small_heads(kv_type="bf16"), fig, 0.5) == decode_seconds(small_heads(), fig, 0.5)
    # prefill: 2 ms of matmuls at 50 GFLOP/s, 5,000 × 32 × 10 ns of attention, the splits over a ubatch
    assert prefill_seconds(small_heads(), fig, 0.5) == pytest.approx(1e8 / 50e9 + 5000 * 32 * 10e-9
                                                                     + BASE_SPLITS * SPLIT / 512)
    # nothing measured (a GPU): the KV read at the device's bandwidth, attention flops at its flop/s
    plain = cpu_device_figures(())
    assert decode_seconds(small_heads(), plain, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 4096 / 10e9
                                                                      + BASE_SPLITS * SPLIT)
    assert prefill_seconds(small_heads(), plain, 0.5) == pytest.approx((1e8 + 5000 * 4096) / 50e9
                                                                       + BASE_SPLITS * SPLIT / 512)


def test_a_cpu_attention_cost_holds_for_the_head_size_it_was_measured_at() -> None:
    # 64-wide heads measured at 10 ns (a SIMD step), 32-wide at 100 ns (scalar): a model's own size
    # is priced with its own, another with the nearest
    fig = cpu_device_figures(cpu_attention(64, 10e-9, 10e-9) + cpu_attention(32))
    assert decode_seconds(small_heads(), fig, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 32 * 100e-9
                                                                    + BASE_SPLITS * SPLIT)
    wide = small_heads(head_dim=64, attn_head_flops=256, kv_device_cell=(8192,), attn_flops_cell=8192.0,
                       attn_device_cell=(8192.0,))
    # 5,000 cells × 32 heads × 10 ns = 1.6 ms, under the 40 MB of KV at 10 GB/s (4 ms): the read wins
    assert decode_seconds(wide, fig, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 8192 / 10e9 + BASE_SPLITS * SPLIT)
    assert decode_seconds(small_heads(head_dim=40), fig, 0.5) == decode_seconds(small_heads(), fig, 0.5)



def test_a_decode_is_priced_over_kv_read_from_memory_where_the_deep_run_measured_it() -> None:
    """The self-test model's KV is a few MiB a token, which a CPU's caches hold; a model's is far more.
    On this project's VM (32-wide heads) the in-cache run said 53 ns a cell and head, the deep run 110,
    and the placement bench's 8-layer model decoded at 108–130 (bench/results/placement-cpu-2026-12-02e.md).
    The deep figure prices a decode (its GQA share read off against it); prefill keeps the in-cache run's."""
    cached = CpuAttention("f16", 32, default(53e-9, "t"), default(3e-9, "t"), default(48e-9, "t"), 4.0)
    deep = replace(cached, decode_deep=default(110e-9, "t"))
    assert attention_cost((cached,), "f16", 32, decode=True) == pytest.approx(53e-9)
    assert attention_cost((deep,), "f16", 32, decode=True) == pytest.approx(110e-9)
    assert attention_cost((deep,), "f16", 32, decode=False) == pytest.approx(3e-9)
    # a query head's own work from the in-cache runs (53 at one, 48 at four: 46.3 ns); the rest of the
    # deep figure is the KV row's read from memory, shared by the query heads over it
    own = 53e-9 - (53e-9 - 48e-9) / (1 - 1 / 4)
    assert attention_cost((deep,), "f16", 32, decode=True, gqa=5) == pytest.approx(own + (110e-9 - own) / 5)
    # more query heads a KV head never cost more, and over memory a GQA model costs more than in cache
    def cost(rates: CpuAttention, gqa: float) -> float:
        c = attention_cost((rates,), "f16", 32, decode=True, gqa=gqa)
        assert c is not None
        return c

    costs = [cost(deep, g) for g in (1, 2, 4, 5, 8)]
    assert costs == sorted(costs, reverse=True)
    assert all(cost(deep, g) > cost(cached, g) for g in (2, 5, 8))
    # a deep run that came out under the in-cache one (noise, or heads too narrow to fill the run): not taken
    assert attention_cost((replace(cached, decode_deep=default(40e-9, "t")),), "f16", 32, decode=True) == pytest.approx(
        53e-9)
    assert deep.to_json()["decode_deep"]["value"] == 110e-9 and "decode_deep" not in cached.to_json()


def test_a_decode_is_priced_by_the_kv_a_token_reads_between_the_footprints_measured() -> None:
    """Where a cell's cost turns differs between CPUs: on a 2-core Xeon VM (32-wide heads, f16) 77–94 ns
    a cell and head from 1 to 12 MiB of KV a token, 101–104 at 16–24, 155–183 from 32 to 64
    (bench/results/placement-cpu-intel-2026-12-02.md), where the AMD EPYC VM's turned by 4 MiB. Priced
    at the deep run's alone, the placement bench's 8–17 MiB stand-in decoded ×1.3–1.6 faster than
    predicted on the Xeon. A decode is priced between the two footprints around its KV, linear in the
    bytes' logarithm; the smallest's below, the largest's above."""
    mib = 2**20
    curve = ((1.2 * mib, 80e-9), (4 * mib, 85e-9), (16 * mib, 104e-9), (64 * mib, 170e-9))
    xeon = CpuAttention("f16", 32, default(80e-9, "t"), default(3e-9, "t"), decode_deep=default(170e-9, "t"),
                        decode_curve=curve)
    assert xeon.decode_over(0.5 * mib) == pytest.approx(80e-9)
    assert xeon.decode_over(8 * mib) == pytest.approx(94.5e-9)  # halfway (in log) from 4 to 16 MiB
    assert xeon.decode_over(32 * mib) == pytest.approx(137e-9)
    assert xeon.decode_over(1024 * mib) == pytest.approx(170e-9)  # a real model's hundreds of MiB: the deepest
    assert xeon.decode_over(None) == xeon.decode_read == pytest.approx(170e-9)  # (no bytes said: the deep run's)
    # a footprint's run that came out under a smaller one's (noise) is priced at the smaller's
    noisy = replace(xeon, decode_curve=((1.2 * mib, 80e-9), (4 * mib, 120e-9), (16 * mib, 100e-9), (64 * mib, 170e-9)))
    assert noisy.decode_over(16 * mib) == pytest.approx(120e-9)
    assert noisy.decode_over(8 * mib) == pytest.approx(120e-9)
    # the decode of the 8-layer model on that CPU: half full (5,000 cells, 19.5 MiB a token) between 16
    # and 64 MiB, full (39 MiB) further up; a GQA model's query heads share the read off the same curve
    fig = cpu_device_figures((xeon,))
    for fill in (0.5, 1.0):
        kv = 4096 * 10_000 * fill
        per_cell = 104e-9 + 66e-9 * math.log(kv / (16 * mib)) / math.log(4)
        assert decode_seconds(small_heads(), fig, fill) == pytest.approx(
            1e7 / 10e9 + 10_000 * fill * 32 * per_cell + BASE_SPLITS * SPLIT)
    assert attention_cost((xeon,), "f16", 32, decode=True, kv_bytes=8 * mib) == pytest.approx(94.5e-9)
    assert xeon.to_json()["decode_curve"] == [list(p) for p in curve]
    assert xeon.curve_words() == ("80 ns over 1.2 MiB of KV a token, 85 ns over 4 MiB, 104 ns over 16 MiB, "
                                  "170 ns over 64 MiB")


def test_a_gqa_models_query_heads_share_each_kv_rows_read() -> None:
    """bench/results/attention-footprint-cpu-2026-12-02.md: at 128-wide heads the engine run's model (one
    query head a KV head) decoded at 162–250 ns a query head, its GQA run (four) at 77–128, five at
    76–84: each KV row read serves every query head over it. A query head costs its own work and a
    share of the read, the two read off the runs at one and at four."""
    measured = CpuAttention("f16", 128, default(190e-9, "t"), default(19e-9, "t"), default(100e-9, "t"), 4.0)
    rates = (measured,)
    read = (190e-9 - 100e-9) / (1 - 1 / 4)  # 120 ns a KV row, 70 ns a query head's own
    assert attention_cost(rates, "f16", 128, decode=True) == pytest.approx(190e-9)  # one query head a KV head
    assert attention_cost(rates, "f16", 128, decode=True, gqa=4) == pytest.approx(100e-9)  # the GQA run itself
    assert attention_cost(rates, "f16", 128, decode=True, gqa=5) == pytest.approx(70e-9 + read / 5)
    assert attention_cost(rates, "f16", 128, decode=True, gqa=8) == pytest.approx(70e-9 + read / 8)
    assert attention_cost(rates, "f16", 128, decode=False, gqa=5) == pytest.approx(19e-9)  # prefill: as measured
    # no GQA run, or one no cheaper (noise; 64-wide heads saw no saving): the measured cost as it stands
    plain = (replace(measured, decode_gqa=None, gqa=1.0),)
    assert attention_cost(plain, "f16", 128, decode=True, gqa=5) == pytest.approx(190e-9)
    noisy = (replace(measured, decode_gqa=default(200e-9, "t")),)
    assert attention_cost(noisy, "f16", 128, decode=True, gqa=5) == pytest.approx(190e-9)
    # a GQA run so much cheaper that a query head's own work reads below nothing: it is none, not
    # negative, and the whole cost is the shared read
    steep = (replace(measured, decode_gqa=default(40e-9, "t")),)
    assert attention_cost(steep, "f16", 128, decode=True, gqa=8) == pytest.approx(190e-9 / 8)
    # a plan prices its host attention so: Qwen2.5-14B's shape is 40 query heads over 8, all on the CPU
    from app.planner.solve.workload import _gqa

    qwen = read_shape(gguf_factory.ensure(shapes.QWEN25_14B_1M))
    assert _gqa(qwen) == 5.0
    inv = Inventory((), HostMemory(256 * GiB, 256 * GiB))

    def full_decode(attention: tuple[CpuAttention, ...]) -> float:
        fig = SpeedFigures(default(50e9, "t"), default(1e12, "t"), host_cpu_attention=attention)
        row = make_plan(qwen, inv, LaunchSettings(n_ctx=131072), speed=fig).speed
        assert row is not None
        return row.at_fill(1.0).decode

    # 48 layers × 40 query heads × 131k cells: 190 ns each is 48 s a token; 70 + 24 ns, 24 s (and the weights)
    assert full_decode(rates) / full_decode(plain) == pytest.approx(190 / (70 + 24), rel=0.05)


def test_the_host_cpus_attention_prices_nkvo_and_the_patched_host_tail() -> None:
    host = cpu_attention()
    fig = SpeedFigures(default(50e9, "t"), default(1e12, "t"), cpu_device_figures(()).devices,
                       host_attention=True, host_cpu_attention=host)
    # -nkvo: every layer's attention on the CPU (its KV in host RAM), 16 more splits
    nkvo = small_heads(kv_device_cell=(0,), attn_device_cell=(0.0,), kv_host_cpu_cell=4096, attn_host_share=1.0,
                       cpu_op_layers=8)
    assert decode_seconds(nkvo, fig, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 32 * 100e-9
                                                           + (BASE_SPLITS + 16) * SPLIT)
    # the patched host tail of 2 layers (8 cell-heads a cell) attends on the CPU, 6 on the device
    tail = small_heads(kv_device_cell=(3072,), attn_device_cell=(3072.0,), kv_host_tail_cell=1024,
                       attn_tail_cell=1024.0, host_tail_layers=2)
    assert decode_seconds(tail, fig, 0.5) == pytest.approx(
        1e7 / 10e9 + 5000 * 3072 / 10e9 + 5000 * 8 * 100e-9
        + (BASE_SPLITS + 2 * SPLITS_PER_HOST_KV_LAYER_PATCHED) * SPLIT)


def test_nkvo_attends_on_the_device_over_the_link_where_the_engine_puts_it_there() -> None:
    """Recorded (tests/fixtures/sched_debug/nkvo*.log): the stock engine's decode and every prefill
    ubatch of 32 or more run -nkvo's flash attention on the device, its KV views inputs of a device
    split; only the patched engine's decode attends on the CPU."""
    host = cpu_attention()
    dev = cpu_device_figures(cpu_attention(f16=200e-9)).devices
    patched = SpeedFigures(default(50e9, "t"), default(1e12, "t"), dev, host_attention=True, host_cpu_attention=host)
    stock = replace(patched, host_attention=False)
    nkvo = small_heads(kv_device_cell=(0,), attn_device_cell=(0.0,), kv_host_cpu_cell=4096, attn_host_share=1.0,
                       kv_nkvo_cell=4096, attn_nkvo_cell=4096.0, cpu_op_layers=8)
    splits = (BASE_SPLITS + 16) * SPLIT
    # decode, half full: the CPU's 100 ns a cell and head (patched); the stock engine copies the 20 MB of
    # used KV over the 1 GB/s link and the device attends at its own 200 ns
    assert decode_seconds(nkvo, patched, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 32 * 100e-9 + splits)
    assert decode_seconds(nkvo, stock, 0.5) == pytest.approx(1e7 / 10e9 + 5000 * 4096 / 1e9 + 5000 * 32 * 200e-9
                                                             + splits)
    # prefill, a 512-token ubatch: on the device (20 ns a cell and head), the KV streamed once a ubatch
    on_device = 1e8 / 50e9 + 5000 * 32 * 20e-9 + 5000 * 4096 / 1e9 / 512 + (splits + 0.0) / 512
    assert prefill_seconds(nkvo, patched, 0.5) == pytest.approx(on_device)
    assert prefill_seconds(nkvo, stock, 0.5) == pytest.approx(on_device)
    # under 32 tokens no op offload: the CPU attends (10 ns), nothing streamed
    small = replace(nkvo, n_ubatch=16)
    assert prefill_seconds(small, patched, 0.5) == pytest.approx(1e8 / 50e9 + 5000 * 32 * 10e-9 + splits / 16)


def test_a_speed_row_gives_the_speed_at_any_fill_linearly_in_seconds_per_token() -> None:
    row = SpeedRow((Speed(0.0, 1000.0, 100.0), Speed(0.5, 500.0, 50.0), Speed(1.0, 250.0, 20.0)), 1.0, False)
    # a quarter full: 1.5 ms a prompt token, 15 ms a decoded one; three quarters: (20 + 50) / 2 ms
    quarter = row.between(0.25)
    assert quarter.prefill == pytest.approx(1 / 1.5e-3) and quarter.decode == pytest.approx(1 / 15e-3)
    assert row.between(0.75).decode == pytest.approx(1 / 35e-3)
    assert row.between(0.0) == Speed(0.0, 1000.0, 100.0) and row.between(2.0).decode == pytest.approx(20.0)


@pytest.fixture(scope="module")
def qwen14b():  # type: ignore[no-untyped-def]
    return read_shape(gguf_factory.ensure(shapes.BY_NAME["qwen2.5-14b-instruct-1m-q8_0"]))


def test_512k_on_a_4090_with_23_5_gb_offers_the_longest_with_a_tail_beside_the_fastest(qwen14b) -> None:  # type: ignore[no-untyped-def]
    inv = Inventory((GpuDevice(0, "NVIDIA GeForce RTX 4090", 24 * GiB, 24 * GiB, kind=DeviceKind.SIMULATED),),
                    HostMemory(int(23.5e9), int(22.5e9)))
    asked = LaunchSettings(n_ctx=512 * 1024)
    plan = make_plan(qwen14b, inv, asked)
    ends = words.context_ends(plan)
    assert ends is not None
    fast, longest = ends
    assert fast.chosen and fast.launch.n_ctx == 49_664 and plan.launch == fast.launch  # fully resident: fastest
    assert 100_000 < longest.launch.n_ctx < 200_000 and longest.placement.startswith("KV of")  # the issue's ~168k
    assert fast.speed is not None and longest.speed is not None
    assert fast.speed.at_fill(0.5).decode > longest.speed.at_fill(0.5).decode
    # One answer everywhere: the first line, the largest-context line and the JSON name the same two.
    fit = max_context(qwen14b, inv, asked)
    assert fit.resident == fast.launch.n_ctx and fit.with_tail == longest.launch.n_ctx
    text = render(plan, "Qwen2.5 14B", fit, asked)
    first, largest = text.splitlines()[0], next(ln for ln in text.splitlines() if "largest context" in ln)
    # (the first line's flags are written as llama-server takes them, digits only: -c 49664)
    assert "-c 49664 " in first and f"-c {longest.launch.n_ctx} " in first and "tok/s decode" in first
    assert "49,664" in largest and f"{longest.launch.n_ctx:,}" in largest and "tok/s decode" in largest
    js = [a.to_json() for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT]
    assert [a["n_ctx"] for a in js] == [49_664, longest.launch.n_ctx] and all(a["speed"]["decode"] for a in js)
    assert len({a.launch for a in plan.alternatives}) == len(plan.alternatives)  # each way once


def test_the_chosen_placement_is_the_fastest_that_keeps_the_context(qwen14b) -> None:  # type: ignore[no-untyped-def]
    inv = Inventory((GpuDevice(0, "NVIDIA GeForce RTX 4090", 24 * GiB, 24 * GiB, kind=DeviceKind.SIMULATED),),
                    HostMemory(64 * GiB, 60 * GiB))
    plan = make_plan(qwen14b, inv, LaunchSettings(n_ctx=128 * 1024))
    keep = [a for a in plan.alternatives if a.feasible and a.launch.n_ctx == 128 * 1024
            and a.kind is not AlternativeKind.SMALLER_KV_TYPE]
    chosen = next(a for a in plan.alternatives if a.chosen)
    assert len(keep) > 1 and chosen in keep and chosen.turn_s == min(a.turn_s for a in keep)
    assert plan.speed == chosen.speed and all(a.speed is not None for a in keep)


def test_the_plan_text_names_the_decode_cost_it_priced_with_over_memory_beside_the_in_cache_one() -> None:
    """`headroom plan`'s figures line: the host's f16 decode a cell and head as priced (the deep run's,
    over KV read from memory), the in-cache run's beside it, and a GQA run's a query head."""
    from app.commands.plan import _figures_line

    cached = CpuAttention("f16", 128, default(14e-9, "t"), default(3e-9, "t"), default(13e-9, "t"), 4.0)
    deep = replace(cached, decode_deep=default(61e-9, "t"))
    shape = read_shape(gguf_factory.ensure(shapes.TINY))
    inv = Inventory((), HostMemory(16 * GiB, 12 * GiB))
    for rates, said in ((deep, "61 ns (128-wide heads; 14 ns over KV the caches hold; 13 ns a query head, 4 over a "
                                "KV head)"),
                        (cached, "14 ns (128-wide heads; 13 ns a query head, 4 over a KV head)")):
        fig = SpeedFigures(default(50e9, "t"), default(1e12, "t"), host_cpu_attention=(rates,))
        line = _figures_line(make_plan(shape, inv, LaunchSettings(n_ctx=4096), speed=fig))
        assert f"host CPU attention (f16 decode, a KV cell and head) {said}" in line
    # of several head sizes' runs, a model is told the one its speeds were priced by (the nearest)
    wide = replace(cached, head_dim=64, decode=default(30e-9, "t"))
    fig = SpeedFigures(default(50e9, "t"), default(1e12, "t"), host_cpu_attention=(wide, cached))
    line = _figures_line(make_plan(shape, inv, LaunchSettings(n_ctx=4096), speed=fig), head_dim=128)
    assert "(128-wide heads" in line and "64-wide" not in line, line
    assert "64-wide" in _figures_line(make_plan(shape, inv, LaunchSettings(n_ctx=4096), speed=fig)), "0: every run"
