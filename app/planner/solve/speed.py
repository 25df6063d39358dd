"""Tokens per second a placement should give: prefill and decode, as the context fills.

A model of where the time goes, term by term, each term a number with its source (calibrated on this
machine by app/machine/calibrate.py, or a default named here):

decode, one token (memory-bound: every weight and every used KV byte read once)::

    device   = (device weights read + device KV used) / device bandwidth      (per device)
    host     = (host weights read + host KV the CPU attends over) / host bandwidth
    link     = host KV a device attends over / link bandwidth                  (stock engine, see below)
    splits   = graph splits × seconds per split (a sync and a small copy each)
    fixed    = a token's fixed cost (graph build, scheduling, sampling, the server's bookkeeping: what a
               tiny model is made of; ``SpeedFigures.token_overhead``, measured by the host's engine run)

prefill, per token of a ubatch of ``n_ubatch`` tokens (compute-bound)::

    device   = flops on the device / device flop/s
    host     = flops on the CPU / host flop/s   (-ngl alone, no op offload: a prompt's ubatches overlap
                                                  the two, hiding OVERLAP_SHARE of the smaller)
    stream   = (host weights copied for the device's matmuls + host KV the device attends over)
               / link bandwidth / n_ubatch
    splits   = (graph splits × seconds per split + a token's fixed cost) / n_ubatch

Where each side runs (llama.cpp 0c1e57098, ggml-backend's scheduler; docs/domain.md §4, §8):
- a layer left on the CPU (``-ngl``) runs there: its weights and KV read at host bandwidth; for a
  prefill ubatch of ``OP_OFFLOAD_MIN_BATCH`` tokens or more, op offload copies its weights over the
  link and runs its matmuls on the device (its attention, with no weights, stays on the CPU) — where
  the device's backend offloads at all (CUDA; an RPC worker's does not: ``DeviceSpeed.op_offload``);
- ``-nkvo``: two splits a layer; every layer's attention on the CPU (host KV read at host bandwidth)
  for a patched engine's decode (``host_attention``); a stock engine's decode and any prefill ubatch of
  ``OP_OFFLOAD_MIN_BATCH`` tokens or more run it on the device, the used KV copied over the link, as
  for the host tail (flash attention follows its device neighbours: tests/fixtures/sched_debug);
- the KV host tail by layer (``-ngl`` + ``-ot``): on the stock engine the scheduler puts the layer's
  attention on the device and copies that layer's whole used KV over the link for every token, six
  graph splits a layer (``GGML_SCHED_DEBUG=2``). An engine with Headroom's host-attention
  patch (``host_attention``) runs it on the CPU for a decode batch (under ``OP_OFFLOAD_MIN_BATCH``
  tokens): the KV read at host bandwidth, two splits a layer; large prefill batches still stream it;
- experts on the CPU (``--n-cpu-moe``): their share read at host bandwidth, two splits a layer;
  prefill streams all their experts (op offload);
- RPC workers: each crossing of the hidden state is a split on the network.

Attention on a CPU (the host's, or an RPC worker whose device is a CPU) is not bandwidth-bound:
ggml-cpu's flash attention (ops.cpp ``ggml_compute_forward_flash_attn_ext_f16``) walks every KV cell of
every head one at a time (a dot product, an ``expf``, a multiply-add), and only an f16/f32 prefill
batch takes its tiled path. Its cost, in seconds per KV cell per head by the K cache's type, for decode
and for prefill, is measured by a short run of the engine (app/engine/cpu_attention.py, kept by
app/machine/calibrate.py): where it is known, a side's attention costs ``max(KV bytes / bandwidth,
cells × heads × that cost)``; where it is not (a GPU, or nothing measured), the bandwidth and flop/s
terms above alone.

Pure: the machine's figures come in as a :class:`SpeedFigures` (defaults: :func:`default_figures`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.planner.devices import GpuDevice, Inventory
from app.planner.gpu_table import SIMULATED_SUFFIX
from app.planner.sources import Source, SourceKind

if TYPE_CHECKING:  # a type only: the GGUF reader (and numpy) stay out of what imports the speed types
    from app.planner.gguf.model import ModelShape

# --- Defaults (each an uncalibrated figure; app/machine/calibrate.py replaces what it can measure) ---

#: Host memory bandwidth a CPU reaches reading model data: dual-channel DDR5-5600 is 89.6 GB/s on
#: paper, STREAM-like reads reach about two thirds of that.
HOST_BANDWIDTH = 60e9
#: Host matmul throughput: a desktop's 8 cores with AVX2 FMA at about half their fp32 peak.
HOST_FLOPS = 0.4e12
#: PCIe bandwidth per lane and direction by generation (GB/s after encoding: 8b/10b to gen 2,
#: 128b/130b from gen 3), times about 0.8 reached by large copies.
PCIE_LANE = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
BUS_EFFICIENCY = 0.8
#: A bus NVML does not describe (a simulated card): PCIe 4.0 x16.
DEFAULT_BUS = PCIE_LANE[4] * 16 * BUS_EFFICIENCY
#: An RPC worker's link: 10 Gbit Ethernet, as bytes per second (a loopback worker is faster).
RPC_LINK = 1.25e9
#: Seconds one graph split costs: a synchronisation and a small copy (CUDA: tens of µs).
SPLIT_S_GPU = 30e-6
#: The same across an RPC worker's network: a round trip (loopback ~0.1 ms, a LAN more).
SPLIT_S_RPC = 300e-6
#: Seconds of fixed cost per decoded token, whatever the model's size: building and scheduling the
#: graph, sampling, the server's bookkeeping, waking its threads. The default where the host's engine
#: run did not measure it (app/engine/cpu_attention.py ``server_token``). Seen on this project's 2-core
#: VM with a tiny model: ~1.1 ms a token with a thread on every core (a newcomer's walkthrough, issue
#: 29, where the model without it predicted 58,654 tokens/s); measured by that run, 0.1–0.25 ms with a
#: core to spare and 0.5–0.8 with none.
TOKEN_OVERHEAD_S = 1e-3
#: What llama.cpp's decode reaches of a GPU's nominal memory bandwidth, and its prefill of the
#: nominal dense FP16 tensor throughput (quantized matmuls, attention, small kernels).
DECODE_BANDWIDTH_EFFICIENCY = 0.75
PREFILL_COMPUTE_EFFICIENCY = 0.4
#: A device without a table entry: an RTX 4070-class card.
DEVICE_BANDWIDTH = 500e9
DEVICE_FLOPS = 50e12
#: Nominal memory bandwidth (bytes/s) and dense FP16 tensor throughput (flop/s) by NVML name: the
#: vendors' specification sheets. Not measured: a calibrated figure replaces them.
CARD_SPEED: dict[str, tuple[float, float]] = {
    "NVIDIA GeForce RTX 3060": (360e9, 25e12),
    "NVIDIA GeForce RTX 3070": (448e9, 40e12),
    "NVIDIA GeForce RTX 3080": (760e9, 60e12),
    "NVIDIA GeForce RTX 3090": (936e9, 71e12),
    "NVIDIA GeForce RTX 4060": (272e9, 45e12),
    "NVIDIA GeForce RTX 4070": (504e9, 58e12),
    "NVIDIA GeForce RTX 4070 Ti SUPER": (672e9, 88e12),
    "NVIDIA GeForce RTX 4080": (717e9, 97e12),
    "NVIDIA GeForce RTX 4090": (1008e9, 165e12),
    "NVIDIA GeForce RTX 5070": (672e9, 62e12),
    "NVIDIA GeForce RTX 5080": (960e9, 113e12),
    "NVIDIA GeForce RTX 5090": (1792e9, 210e12),
    "NVIDIA RTX A4000": (448e9, 38e12),
    "NVIDIA RTX A6000": (768e9, 77e12),
    "NVIDIA L40S": (864e9, 181e12),
    "NVIDIA A100-SXM4-40GB": (1555e9, 312e12),
    "NVIDIA A100-SXM4-80GB": (2039e9, 312e12),
    "NVIDIA H100 80GB HBM3": (3350e9, 989e12),
    "NVIDIA H200": (4800e9, 989e12),
    "NVIDIA RTX PRO 6000 Blackwell": (1792e9, 250e12),
}
#: ggml's ``GGML_OP_OFFLOAD_MIN_BATCH`` (ggml-cuda.cu ``ggml_backend_cuda_device_offload_op``): a
#: batch of at least this many tokens runs host weights' matmuls on the device.
OP_OFFLOAD_MIN_BATCH = 32
#: Of the shorter side of a prefill ubatch (the CPU's layers, or the device's), the share that hides
#: behind the other where a prompt's ubatches overlap (``_overlaps``). Measured between a third and a
#: half: three layers on the CPU of a loopback worker's 8, four ubatches, ran +30 % over fully resident
#: where no overlap prices +23 % and a whole one +60 % (``llama-batched-bench``); priced whole, the
#: placement bench's ``-ngl`` prefill rows read ×0.66–0.89 of predicted where the fully resident ones
#: read ×0.77–1.07 in the same runs (bench/results/placement-cpu-2026-12-02f.md).
OVERLAP_SHARE = 0.4
#: Splits of a graph that runs wholly on one device: the token embedding (always on the CPU) in,
#: the logits out.
BASE_SPLITS = 2
#: Splits each host-tail layer adds to a decode graph: the stock engine's (FLASH_ATTN on the device,
#: the K/V write on the CPU) and the host-attention patch's (attention on the CPU).
SPLITS_PER_HOST_KV_LAYER_STOCK = 6
SPLITS_PER_HOST_KV_LAYER_PATCHED = 2
#: Splits each layer with its attention (-nkvo) or its experts (--n-cpu-moe) on the CPU adds.
SPLITS_PER_CPU_OP_LAYER = 2
#: One typical turn, what the choice compares: a 2048-token prompt and a 256-token reply, with the
#: context half full.
TURN_PROMPT = 2048
TURN_REPLY = 256
TURN_FILL = 0.5
#: The fills a speed row reports: an empty context, half full, full.
FILLS = (0.0, 0.5, 1.0)

_DEFAULT = SourceKind.DEFAULT


#: Measured ÷ predicted outside this band is a measurement's fault, not the machine's: it is neither
#: learned nor applied (app/engine/speed_check.py, app/machine/calibrate.py). A chat turn's 89 new
#: prompt tokens had taught prefill ×0.0037, which then scaled every later plan of the model.
PLAUSIBLE_RATIO = (0.05, 20.0)


def plausible_ratio(ratio: object) -> bool:
    return isinstance(ratio, (int, float)) and PLAUSIBLE_RATIO[0] <= ratio <= PLAUSIBLE_RATIO[1]


def bus_bandwidth(pcie_gen: int | None, pcie_width: int | None) -> float:
    """Bytes per second to a GPU over its link (NVML's generation and width), else DEFAULT_BUS."""
    if not pcie_gen or not pcie_width or pcie_gen not in PCIE_LANE:
        return DEFAULT_BUS
    return PCIE_LANE[pcie_gen] * pcie_width * BUS_EFFICIENCY


@dataclass(frozen=True)
class Figure:
    """One number of the model with where it came from (calibrated here, or a default)."""

    value: float
    source: Source

    @property
    def calibrated(self) -> bool:
        return self.source.kind in (SourceKind.CALIBRATED, SourceKind.MEASURED_HERE, SourceKind.FROM_NVML)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source.to_json(), "calibrated": self.calibrated}


def default(value: float, detail: str) -> Figure:
    return Figure(value, Source(_DEFAULT, detail))


#: KV types whose CPU flash attention takes the float path (the tiled prefill); any other (quantized)
#: type is priced with a measured quantized type's rate, ``QUANTIZED_KV_PROXY``.
FLOAT_KV = ("f32", "f16", "bf16")
QUANTIZED_KV_PROXY = "q8_0"


@dataclass(frozen=True)
class CpuAttention:
    """Seconds a CPU's flash-attention kernel spends per KV cell per head with one K cache type: for a
    decoded token (one query row over every used cell) and per token of a prefill ubatch (module
    docstring: its loop is per cell and head, so heads, not flops, are what it is counted in)."""

    kv_type: str
    #: The K head size it was measured at: ggml's f16 vector code steps 64 elements at a time with
    #: AVX-512 (simd-mappings.h ``GGML_F16_STEP``), so a 32-wide head runs scalar and costs more per
    #: cell than a 64-wide one; a cost holds for its head size.
    head_dim: int
    decode: Figure
    prefill: Figure
    #: The decode's cost a query head with ``gqa`` query heads over each KV head (None: not measured; the
    #: engine run's model for ``decode`` has one a KV head, so each KV row's read is one head's alone).
    decode_gqa: Figure | None = None
    gqa: float = 1.0
    #: The decode's cost over more KV than the CPU's caches hold (None: not measured): ``decode`` is timed
    #: over a few MiB of KV a token, a real model's decode reads hundreds of MiB and more from memory.
    decode_deep: Figure | None = None
    #: The decode's cost a cell and head by the KV bytes a decoded token reads, (bytes, seconds) from the
    #: smallest (the in-cache run's) to the largest (the deep run's): where the cost turns differs between
    #: CPUs (a 2-core AMD EPYC VM: past ~2 MiB; a 2-core Xeon VM: between 24 and 32 MiB,
    #: bench/results/placement-cpu-intel-2026-12-02.md). Empty: not measured (``decode_deep`` alone).
    decode_curve: tuple[tuple[float, float], ...] = ()

    @property
    def decode_read(self) -> float:
        """A decode's cost a cell and head over a model's KV, one query head a KV head: the deep run's
        where it measured more than the in-cache run (a model's KV is read from memory)."""
        return max(self.decode.value, self.decode_deep.value) if self.decode_deep is not None else self.decode.value

    def decode_over(self, kv_bytes: float | None) -> float:
        """A decode's cost a cell and head (one query head a KV head) where a token reads ``kv_bytes`` of
        KV: between the two measured footprints around it, linear in the bytes' logarithm; the smallest's
        below them, the largest's above; a footprint never costs less than a smaller one did (a run's noise
        under a smaller one's is not a cache getting faster). Without a curve or bytes: ``decode_read``."""
        pts = sorted(self.decode_curve)
        if len(pts) < 2 or kv_bytes is None:
            return self.decode_read
        costs = [max(c for _, c in pts[:i + 1]) for i in range(len(pts))]
        if kv_bytes <= pts[0][0]:
            return costs[0]
        for (b0, _), (b1, _), c0, c1 in zip(pts, pts[1:], costs, costs[1:], strict=False):
            if kv_bytes <= b1:
                k = math.log(kv_bytes / b0) / math.log(b1 / b0) if b1 > b0 else 1.0
                return c0 + (c1 - c0) * k
        return costs[-1]

    def curve_words(self) -> str:
        """The decode curve said: "79 ns over 1.1 MiB of KV a token, 85 ns over 4.1 MiB, 104 ns over 16 MiB,
        170 ns over 64 MiB" (a cell and head; empty: no curve)."""
        if len(self.decode_curve) < 2:
            return ""
        return ", ".join(f"{c * 1e9:.3g} ns over {b / 2**20:.2g} MiB" + (" of KV a token" if i == 0 else "")
                         for i, (b, c) in enumerate(sorted(self.decode_curve)))

    def to_json(self) -> dict[str, Any]:
        return {"kv_type": self.kv_type, "head_dim": self.head_dim, "decode": self.decode.to_json(),
                "prefill": self.prefill.to_json()} | (
                    {"decode_gqa": self.decode_gqa.to_json(), "gqa": self.gqa} if self.decode_gqa is not None else {}) | (
                    {"decode_deep": self.decode_deep.to_json()} if self.decode_deep is not None else {}) | (
                    {"decode_curve": [[b, c] for b, c in self.decode_curve]} if self.decode_curve else {})


def attention_cost(rates: tuple[CpuAttention, ...], kv_type: str, head_dim: int, *, decode: bool,
                   gqa: float = 1.0, kv_bytes: float | None = None) -> float | None:
    """The measured seconds per cell and query head for ``kv_type`` (a type not measured: f16's for a
    float type, ``QUANTIZED_KV_PROXY``'s for a quantized one) at the nearest measured head size; None
    when nothing was measured. A decode with ``gqa`` query heads over each KV head, where a GQA run
    measured one (``decode_gqa`` at ``r.gqa``): each KV row's read is shared by the query heads over it,
    so a query head costs ``own + read / gqa``, the two parts from the runs at one and at ``r.gqa``
    (128-wide heads on the 2-core VM: 162–250 ns one over one, 77–128 four over one, 76–84 five over
    one; bench/results/attention-footprint-cpu-2026-12-02.md). A decode is priced over KV read from
    memory (``decode_deep``, where measured): a model's KV a token is far more than a CPU's caches hold
    (32-wide heads on the VM: 53 ns a cell and head over a few MiB, 110–130 over 4–64 MiB;
    bench/results/placement-cpu-2026-12-02e.md), at the KV a token reads there (``kv_bytes``, where the
    engine run measured a curve: ``CpuAttention.decode_over``)."""
    want = kv_type if any(r.kv_type == kv_type for r in rates) else "f16" if kv_type in FLOAT_KV else QUANTIZED_KV_PROXY
    found = [r for r in rates if r.kv_type == want]
    if not found:
        return None
    r = min(found, key=lambda r: abs(r.head_dim - head_dim))
    if not decode:
        return r.prefill.value
    one = r.decode_over(kv_bytes)
    if gqa <= 1 or r.decode_gqa is None or r.gqa <= 1 or r.decode_gqa.value >= r.decode.value:
        return one  # (a GQA run no cheaper than one a KV head: no sharing seen)
    # a query head's own work from the two in-cache runs; the rest of a decode over memory is the KV
    # row's read, which the query heads over it share
    own = max(0.0, r.decode.value - (r.decode.value - r.decode_gqa.value) / (1 - 1 / r.gqa))
    read = one - own
    return own + read / gqa


@dataclass(frozen=True)
class DeviceSpeed:
    """One offload device's terms: its memory bandwidth (bytes/s), matmul throughput (flop/s), the
    link to the host (bytes/s) and the seconds one graph split costs."""

    name: str
    bandwidth: Figure
    flops: Figure
    link: Figure
    split_s: Figure
    #: The device is a CPU (an RPC worker's) whose flash attention was measured (empty: a GPU, or not measured).
    attention: tuple[CpuAttention, ...] = ()
    #: Its backend takes host weights' matmuls for a large batch (op offload: CUDA does; ggml-rpc's
    #: device has no ``offload_op``, so a host layer's prefill stays on the CPU there).
    op_offload: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bandwidth": self.bandwidth.to_json(), "flops": self.flops.to_json(),
                "link": self.link.to_json(), "split_s": self.split_s.to_json()} | (
                    {"attention": [a.to_json() for a in self.attention]} if self.attention else {})


@dataclass(frozen=True)
class SpeedFigures:
    """The machine's terms (``devices`` in the inventory's order) and what the engine can do.
    ``decode_scale``/``prefill_scale``: measured ÷ predicted, learned after a launch (1: none)."""

    host_bandwidth: Figure
    host_flops: Figure
    devices: tuple[DeviceSpeed, ...] = ()
    decode_scale: Figure = field(default_factory=lambda: default(1.0, "nothing measured after a launch yet"))
    prefill_scale: Figure = field(default_factory=lambda: default(1.0, "nothing measured after a launch yet"))
    #: The engine runs a host-KV layer's attention on the CPU for decode (Headroom's patch).
    host_attention: bool = False
    #: The host CPU's flash attention, measured (empty: priced at host bandwidth and flop/s).
    host_cpu_attention: tuple[CpuAttention, ...] = ()
    #: Seconds every decoded token and prefill ubatch costs whatever the model (``TOKEN_OVERHEAD_S``).
    token_overhead: Figure = field(default_factory=lambda: default(
        TOKEN_OVERHEAD_S, "a tiny model's token with a thread on every core of a 2-core VM"))

    @property
    def calibrated(self) -> bool:
        """Every figure measured on this machine."""
        figs = [self.host_bandwidth, self.host_flops, *(f for d in self.devices
                                                        for f in (d.bandwidth, d.flops, d.link))]
        return all(f.calibrated for f in figs)

    def to_json(self) -> dict[str, Any]:
        return {"host_bandwidth": self.host_bandwidth.to_json(), "host_flops": self.host_flops.to_json(),
                "devices": [d.to_json() for d in self.devices], "decode_scale": self.decode_scale.to_json(),
                "prefill_scale": self.prefill_scale.to_json(), "host_attention": self.host_attention,
                "token_overhead": self.token_overhead.to_json(), "calibrated": self.calibrated} | ({"host_cpu_attention": [a.to_json() for a in self.host_cpu_attention]}
                                                  if self.host_cpu_attention else {})


def default_device(gpu: GpuDevice) -> DeviceSpeed:
    """A device's default terms: its card's nominal figures (``CARD_SPEED``), its PCIe link from
    NVML's generation and width (or PCIe 4.0 x16); an RPC worker's device over ``RPC_LINK``."""
    if gpu.is_rpc:
        return DeviceSpeed(gpu.engine_name, default(HOST_BANDWIDTH, "an RPC worker's device: host-class memory"),
                           default(HOST_FLOPS, "an RPC worker's device: a CPU's"),
                           default(RPC_LINK, "an RPC worker over 10 Gbit Ethernet"),
                           default(SPLIT_S_RPC, "a network round trip"), op_offload=False)
    name = gpu.name.removesuffix(SIMULATED_SUFFIX)
    bw, fl = CARD_SPEED.get(name, (DEVICE_BANDWIDTH, DEVICE_FLOPS))
    card = "the card's specification" if name in CARD_SPEED else "a mid-range card's (not in the table)"
    if gpu.pcie_gen and gpu.pcie_width:
        link = Figure(bus_bandwidth(gpu.pcie_gen, gpu.pcie_width),
                      Source(SourceKind.FROM_NVML, f"PCIe {gpu.pcie_gen}.0 x{gpu.pcie_width}"))
    else:
        link = default(DEFAULT_BUS, "PCIe 4.0 x16")
    return DeviceSpeed(gpu.engine_name,
                       default(bw * DECODE_BANDWIDTH_EFFICIENCY, f"{card}, {bw / 1e9:.0f} GB/s × "
                               f"{DECODE_BANDWIDTH_EFFICIENCY}"),
                       default(fl * PREFILL_COMPUTE_EFFICIENCY, f"{card}, {fl / 1e12:.0f} TFLOP/s × "
                               f"{PREFILL_COMPUTE_EFFICIENCY}"),
                       link, default(SPLIT_S_GPU, "a CUDA synchronisation and copy"))


def default_figures(inventory: Inventory, *, host_attention: bool = False) -> SpeedFigures:
    """Every term a default (nothing calibrated)."""
    return SpeedFigures(default(HOST_BANDWIDTH, "dual-channel DDR5 at two thirds of its 89.6 GB/s"),
                        default(HOST_FLOPS, "8 AVX2 cores at half their fp32 peak"),
                        tuple(default_device(g) for g in inventory.gpus), host_attention=host_attention)


def for_inventory(figures: SpeedFigures, inventory: Inventory) -> SpeedFigures:
    """``figures`` with one device entry per inventory device (a default for any it lacks, matched by
    engine name), so a plan never indexes past them."""
    by_name = {d.name: d for d in figures.devices}
    devs = tuple(by_name.get(g.engine_name) or default_device(g) for g in inventory.gpus)
    return figures if devs == figures.devices else replace(figures, devices=devs)


@dataclass(frozen=True)
class Workload:
    """What one placement asks of each side, per token (bytes, flops) and per cell of context."""

    #: Weights each device reads per decoded token (its experts' share only), device order.
    device_weights: tuple[int, ...]
    #: Weights of layers left on the CPU a decoded token reads there (``-ngl``, ``--n-cpu-moe``).
    host_weights: int
    #: Host layer weights a prefill ubatch copies to the first device (op offload, every expert).
    streamed_weights: int
    #: Matmul flops per token (2 × active parameters), and the share of them in host layers.
    flops: float
    host_flop_share: float
    #: KV bytes per cell of one sequence: per device (device order), and in host RAM split by who
    #: attends over it: the CPU (``-ngl`` layers, ``-nkvo``) or a device (the KV host tail by layer).
    kv_device_cell: tuple[int, ...]
    kv_host_cpu_cell: int
    kv_host_tail_cell: int
    #: Attention flops per cell per token over all layers, and the share whose attention the CPU runs.
    attn_flops_cell: float
    attn_host_share: float
    #: Cells one sequence fills at a full context.
    n_ctx_seq: int
    n_ubatch: int
    #: Of ``kv_host_cpu_cell`` and the host's attention: the -nkvo layers' (weights on a device, KV in
    #: host RAM). The CPU attends over them only on a patched engine's decode; a stock engine's decode
    #: and every prefill ubatch of ``OP_OFFLOAD_MIN_BATCH`` or more run their attention on the device,
    #: the used KV copied over the link (tests/fixtures/sched_debug/nkvo*.log).
    kv_nkvo_cell: int = 0
    attn_nkvo_cell: float = 0.0
    #: Host-tail layers (KV in host RAM, weights on a device), and other layers with CPU ops
    #: (attention under -nkvo, experts under --n-cpu-moe); whether a block of layers runs on the CPU.
    host_tail_layers: int = 0
    cpu_op_layers: int = 0
    cpu_layers: bool = False
    #: Crossings of the hidden state between devices over RPC, per token.
    rpc_crossings: int = 0
    #: No device at all: everything on the CPU.
    cpu_only: bool = False
    #: The K cache's type (what a CPU's attention rate depends on), and the attention flops per cell
    #: each device runs for a decoded token (device order; a stock engine's host tail: the first's).
    kv_type: str = "f16"
    attn_device_cell: tuple[float, ...] = ()
    #: Attention flops per cell of the host-tail layers (on the CPU for decode with the patch).
    attn_tail_cell: float = 0.0
    #: Flops per cell of one head's attention: 2 × (K head size + V head size); attention flops ÷
    #: this = cell-heads, what a CPU's attention is priced by (0: no attention).
    attn_head_flops: int = 0
    #: The K head size (a CPU's attention cost is measured per head size).
    head_dim: int = 0
    #: Query heads per KV head (GQA; 1: none), over the layers with KV: they share each KV row's read.
    gqa: float = 1.0


@dataclass(frozen=True)
class Speed:
    """Predicted tokens per second at one fill of the context (0 = empty, 1 = full)."""

    fill: float
    prefill: float
    decode: float
    #: Seconds each prefill ubatch costs whatever its size (its graph and splits, the weights and KV a
    #: device streams for it), already spread over ``n_ubatch`` tokens in ``prefill`` and divided by
    #: the learned prefill scale as ``prefill`` is: a prompt that runs as a smaller ubatch spreads them
    #: over fewer tokens (:meth:`prefill_for`).
    ubatch_fixed_s: float = 0.0
    n_ubatch: int = 0
    #: Seconds a prompt token's work on one side hides behind the other's where a prompt's ubatches
    #: overlap (``_overlaps``; scaled as ``prefill``): ``prefill`` is the rate of many ubatches, each of
    #: ``k`` ubatches pays it back ``1 / k`` (one ubatch overlaps nothing).
    overlap_s: float = 0.0

    def prefill_for(self, tokens: int) -> float:
        """Tokens/s of a prompt of ``tokens`` new tokens: ``k = ceil(tokens / n_ubatch)`` ubatches, each
        with its fixed seconds, where ``prefill`` spreads them over whole ubatches, and its overlap
        (``overlap_s``) lost once: the first ubatch's CPU layers run before the device has work."""
        if tokens <= 0 or self.n_ubatch <= 0 or self.prefill <= 0:
            return self.prefill
        k = math.ceil(tokens / self.n_ubatch)
        extra = self.ubatch_fixed_s * (k / tokens - 1 / self.n_ubatch) + self.overlap_s / k
        return 1 / (1 / self.prefill + extra)


@dataclass(frozen=True)
class SpeedRow:
    """A placement's predicted speed at the ``FILLS`` (empty, half, full) and the seconds of one
    typical turn; ``calibrated``: every machine figure behind it was measured here."""

    at: tuple[Speed, ...]
    turn_s: float
    calibrated: bool
    #: Cells one sequence fills at a full context (0: not known; ``prompt_s`` then reads an empty one).
    n_ctx_seq: int = 0

    def prompt_s(self, tokens: int) -> float:
        """Seconds a prompt of ``tokens`` takes into an empty context: its tokens attend over half of it
        on average (the rate ``between`` there), as the ubatches it runs as (``Speed.prefill_for``).
        The empty context's own rate leaves its attention out: a tiny model's 2k prompt read "~0.001 s"
        where it took 0.025 s (a newcomer's walkthrough)."""
        fill = min(1.0, tokens / 2 / self.n_ctx_seq) if self.n_ctx_seq > 0 else 0.0
        rate = self.between(fill).prefill_for(tokens)
        return tokens / rate if rate > 0 else math.inf

    def at_fill(self, fill: float) -> Speed:
        return min(self.at, key=lambda s: abs(s.fill - fill))

    def between(self, fill: float) -> Speed:
        """The speed at any ``fill`` in [0, 1]: seconds per token linear between the two ``FILLS``
        around it (exact where seconds per token grow linearly with the cells used; a CPU's attention
        priced by the KV a token reads grows a little faster, ``CpuAttention.decode_over``, and reads
        slightly slow between the fills)."""
        pts = sorted(self.at, key=lambda s: s.fill)
        fill = min(max(fill, pts[0].fill), pts[-1].fill)
        hi = next((i for i, s in enumerate(pts) if s.fill >= fill), len(pts) - 1)
        a, b = pts[max(0, hi - 1)], pts[hi]
        k = 0.0 if b.fill == a.fill else (fill - a.fill) / (b.fill - a.fill)

        def rate(x: float, y: float) -> float:
            return 1 / (1 / x + (1 / y - 1 / x) * k)

        return Speed(fill, rate(a.prefill, b.prefill), rate(a.decode, b.decode),
                     a.ubatch_fixed_s + (b.ubatch_fixed_s - a.ubatch_fixed_s) * k, b.n_ubatch,
                     a.overlap_s + (b.overlap_s - a.overlap_s) * k)

    def to_json(self) -> dict[str, Any]:
        return {"prefill": [round(s.prefill, 1) for s in self.at], "decode": [round(s.decode, 2) for s in self.at],
                "fills": [s.fill for s in self.at], "turn_s": round(self.turn_s, 2), "calibrated": self.calibrated}


def _splits(w: Workload, fig: SpeedFigures, *, decode: bool) -> float:
    """Seconds the graph's splits cost per graph (a decode token, a prefill ubatch)."""
    if w.cpu_only or not fig.devices:
        return 0.0
    per_tail = SPLITS_PER_HOST_KV_LAYER_PATCHED if (decode and fig.host_attention) else SPLITS_PER_HOST_KV_LAYER_STOCK
    n = BASE_SPLITS + w.host_tail_layers * per_tail + w.cpu_op_layers * SPLITS_PER_CPU_OP_LAYER
    n += 2 if w.cpu_layers else 0
    local = fig.devices[0].split_s.value
    rpc = max((d.split_s.value for d in fig.devices), default=local)
    return n * local + w.rpc_crossings * rpc


def _attend(kv_bytes_s: float, flops: float, rates: tuple[CpuAttention, ...], w: Workload, *,
            decode: bool, kv_bytes: float | None = None) -> float:
    """Seconds one side's attention takes: its KV read (``kv_bytes_s``, at its bandwidth), or on a CPU
    whose flash attention was measured, that kernel's time (cell-heads × its cost, a decode's at the
    ``kv_bytes`` a token reads there) when it is the longer."""
    cost = attention_cost(rates, w.kv_type, w.head_dim, decode=decode, gqa=w.gqa, kv_bytes=kv_bytes)
    return max(kv_bytes_s, flops / w.attn_head_flops * cost) if cost and w.attn_head_flops else kv_bytes_s


def decode_seconds(w: Workload, fig: SpeedFigures, fill: float) -> float:
    """Seconds one decoded token takes at ``fill`` of the context (module docstring: decode)."""
    cells = max(1.0, fill * w.n_ctx_seq)
    host_bw = fig.host_bandwidth.value
    host = fig.host_cpu_attention
    if w.cpu_only or not fig.devices:
        kv = (w.kv_host_cpu_cell + w.kv_host_tail_cell + sum(w.kv_device_cell)) * cells
        return fig.token_overhead.value + (w.host_weights + sum(w.device_weights)) / host_bw + _attend(
            kv / host_bw, w.attn_flops_cell * cells, host, w, decode=True, kv_bytes=kv)
    attn_dev = w.attn_device_cell or (0.0,) * len(w.kv_device_cell)
    t = sum(wt / d.bandwidth.value + _attend(kv * cells / d.bandwidth.value, a * cells, d.attention, w,
                                             decode=True, kv_bytes=kv * cells)
            for wt, kv, a, d in zip(w.device_weights, w.kv_device_cell, attn_dev, fig.devices, strict=False))
    # the KV in host RAM whose attention the device runs: the host tail's and -nkvo's (stock engine)
    streamed, streamed_attn = w.kv_host_tail_cell, w.attn_tail_cell
    cpu_kv, cpu_attn = w.kv_host_cpu_cell, w.attn_flops_cell * w.attn_host_share
    if fig.host_attention:
        cpu_kv, cpu_attn = cpu_kv + streamed, cpu_attn + streamed_attn
        streamed, streamed_attn = 0, 0.0
    else:
        cpu_kv, cpu_attn = cpu_kv - w.kv_nkvo_cell, cpu_attn - w.attn_nkvo_cell
        streamed, streamed_attn = streamed + w.kv_nkvo_cell, streamed_attn + w.attn_nkvo_cell
    t += w.host_weights / host_bw + _attend(cpu_kv * cells / host_bw, cpu_attn * cells, host, w, decode=True,
                                            kv_bytes=cpu_kv * cells)
    if streamed:
        t += streamed * cells / fig.devices[0].link.value + _attend(0.0, streamed_attn * cells,
                                                                    fig.devices[0].attention, w, decode=True,
                                                                    kv_bytes=streamed * cells)
    return fig.token_overhead.value + t + _splits(w, fig, decode=True)


def prefill_seconds(w: Workload, fig: SpeedFigures, fill: float) -> float:
    """Seconds per prompt token of a ubatch at ``fill`` (module docstring: prefill)."""
    per_token, fixed, _hidden = _prefill(w, fig, fill)
    return _per_ubatch_token(per_token, fixed, w)


def _per_ubatch_token(per_token: float, fixed: float, w: Workload) -> float:
    """Seconds a prompt token of a whole ubatch costs: its own, and its share of the ubatch's fixed ones."""
    return per_token + fixed / max(1, w.n_ubatch)


def _prefill(w: Workload, fig: SpeedFigures, fill: float) -> tuple[float, float, float]:
    """A prefill ubatch at ``fill``: the seconds each of its tokens costs (its ubatches overlapping, where
    they do), the seconds the ubatch costs whatever its size (its graph and splits, and what the device
    streams for it), and the seconds a token's work hides behind the other side's (``_overlaps``)."""
    cells = max(1.0, fill * w.n_ctx_seq)
    attn = w.attn_flops_cell * cells
    if w.cpu_only or not fig.devices:
        return (w.flops / fig.host_flops.value
                + _attend(attn / fig.host_flops.value, attn, fig.host_cpu_attention, w, decode=False)), fig.token_overhead.value, 0.0
    dev = fig.devices[0]
    offload = w.n_ubatch >= OP_OFFLOAD_MIN_BATCH and dev.op_offload
    host_mm = 0.0 if offload else w.flops * w.host_flop_share
    dev_flops = sum(d.flops.value for d in fig.devices)
    dev_attn, host_attn = attn * (1 - w.attn_host_share), attn * w.attn_host_share
    # a large ubatch runs -nkvo's attention on the device too, its KV streamed like the host tail's
    nkvo_kv, nkvo_attn = (w.kv_nkvo_cell, w.attn_nkvo_cell * cells) if offload else (0, 0.0)
    dev_attn, host_attn = dev_attn + nkvo_attn, host_attn - nkvo_attn
    on_device = (w.flops - host_mm) / dev_flops + _attend(dev_attn / dev_flops, dev_attn, dev.attention, w,
                                                          decode=False)
    on_host = host_mm / fig.host_flops.value + _attend(host_attn / fig.host_flops.value, host_attn,
                                                       fig.host_cpu_attention, w, decode=False)
    hidden = OVERLAP_SHARE * min(on_host, on_device) if _overlaps(w, offload) else 0.0
    streamed = (w.streamed_weights if offload else 0) + (w.kv_host_tail_cell + nkvo_kv) * cells
    return on_host + on_device - hidden, streamed / dev.link.value + fig.token_overhead.value + _splits(w, fig, decode=False), hidden


def _overlaps(w: Workload, offload: bool) -> bool:
    """A prompt's ubatches overlap on the two sides: ``-ngl`` leaves whole layers on the CPU and nothing
    else there (no -nkvo, host tail or CPU experts, whose CPU ops sit between a layer's device ops), and
    those layers' matmuls stay on the CPU (no op offload, ``offload``). They come first in the
    graph, and nothing waits on the device between ubatches that have no outputs, so the CPU runs the
    next ubatch's layers while the device still computes the last one (the device's first split waits
    for it: ggml-backend.cpp syncs its backend before copying the user's inputs). Measured with a
    loopback worker (``llama-batched-bench``, three layers on the host, bench/results/
    placement-cpu-2026-12-02e.md): +10 % over fully resident at one ubatch (the host's faster matmuls),
    +30 % at four: the overlap is partial (``OVERLAP_SHARE``)."""
    return not offload and w.cpu_layers and not (w.host_tail_layers or w.cpu_op_layers or w.kv_nkvo_cell)


def predict(w: Workload, fig: SpeedFigures, fill: float) -> Speed:
    """Predicted tokens/s at ``fill``, scaled by what launches on this machine measured."""
    scale = fig.prefill_scale.value
    per_token, fixed, hidden = _prefill(w, fig, fill)  # (once: a re-plan prices every alternative at each fill)
    return Speed(fill, scale / _per_ubatch_token(per_token, fixed, w),
                 fig.decode_scale.value / decode_seconds(w, fig, fill), fixed / scale, max(1, w.n_ubatch),
                 hidden / scale)


def speed_row(w: Workload, fig: SpeedFigures) -> SpeedRow:
    """The speeds at ``FILLS`` and one typical turn's seconds (``TURN_PROMPT`` prefilled and
    ``TURN_REPLY`` decoded at ``TURN_FILL``): what the plan chooses by."""
    turn = predict(w, fig, TURN_FILL)
    return SpeedRow(tuple(predict(w, fig, f) for f in FILLS),
                    TURN_PROMPT / turn.prefill + TURN_REPLY / turn.decode, fig.calibrated, w.n_ctx_seq)


def active_weights(shape: ModelShape) -> tuple[int, float]:
    """Bytes a decoded token reads over the repeating and output layers (experts: their used share;
    the token embedding is a row lookup) and the matmul flops (2 per parameter read)."""
    total, params = 0, 0.0
    for t in shape.loaded:
        if t.name.startswith("token_embd"):
            continue
        share = shape.n_expert_used / shape.n_expert if "_exps" in t.name and shape.n_expert else 1.0
        total += int(t.n_bytes * share)
        params += math.prod(t.shape) * share
    if not any(t.name == "output.weight" for t in shape.loaded):  # tied: the embedding is the output
        tok = next((t for t in shape.loaded if t.name == "token_embd.weight"), None)
        if tok is not None:
            total += tok.n_bytes
            params += math.prod(tok.shape)
    return total, 2.0 * params


def attention_flops_per_cell(shape: ModelShape) -> float:
    """Flops per token per cell of context over all attention layers: QKᵀ and AV, 2 × head size
    each per query head."""
    return float(sum(2 * shape.n_head[il] * (shape.head_dim_k + shape.head_dim_v)
                     for il in range(shape.n_layer) if shape.n_head_kv[il] > 0))
