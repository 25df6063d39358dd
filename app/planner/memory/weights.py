"""Where the weights go for a given ``-ngl``, and the other fixed per-model allocations.

Mirrors src/llama-model.cpp ``llama_model_base::load_tensors``:
- ``i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)``, ``act_gpu_layers = min(n_gpu_layers, n_layer + 1)``;
  layer ``il`` (and the output layer, index ``n_layer``) is on a GPU when ``il >= i_gpu_start``, which
  GPU chosen by ``upper_bound`` over the cumulative free-memory split;
- the input layer (token embedding) always stays on the CPU ("very little benefit to offloading");
- a model without ``output.weight`` ties the output to the token embedding: the output layer's
  device gets a duplicate (``TENSOR_DUPLICATED``);
- host weights are mapped from the file: the ``CPU_Mapped`` buffer spans the first to the last host
  tensor of each file (src/llama-model-loader.cpp ``get_mapping_range``). The whole file is mapped
  (src/llama-mmap.cpp) and only what lies outside that span is unmapped after loading; inside it,
  memory is the pages the tensors' bytes lie on: whole pages between two tensors are never read
  (``host_mapped``: a ``general.alignment`` of 2^31 pads each tensor to 2 GiB, a sparse 470 GiB file
  whose span llama-server maps but whose tensors take a few MiB);
- GPU buffers place each tensor at the backend's alignment (ggml-alloc; CUDA aligns to 128 bytes;
  an RPC worker's device at its remote backend's, which the client does not print: 128 is used
  for it too, at most 96 bytes per tensor more than a CPU worker's 32, ggml-impl.h
  ``TENSOR_ALIGNMENT``);
- on an engine without GPUs, host matmul weights of a repackable type are *copied* into the CPU
  backend's ``CPU_REPACK`` buffer (app/planner/memory/repack.py); they no longer bound the ``CPU_Mapped``
  range, which still covers them when they lie between mapped tensors (the usual case); with a
  GPU device the first GPU's pinned host type comes before ``CPU_REPACK`` in the host list
  (llama-model.cpp ``make_cpu_buft_list``) and, as the model is mapped, the loader swaps it for the
  plain CPU type ("avoid using a host buffer when using mmap", llama-model-loader.cpp): nothing is
  repacked.
The output buffer (logits, src/llama-context.cpp ``output_reserve``) is ``n_vocab × n_seq_max`` floats.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from app.planner.gguf.model import ModelShape
from app.planner.gguf.reader import TensorInfo
from app.planner.memory.repack import NO_REPACK, CpuFeatures, is_repacked, repack_bytes
from app.planner.settings import LaunchSettings, buffer_overrides
from app.planner.sources import Source, SourceKind

#: Pages of a mapped file that no tensor touches are not counted (4 KiB: the x86-64 and usual arm64
#: Linux page; on a larger page fewer bytes are unread, and the gaps this matters for are GiBs).
PAGE = 4096
#: ggml-cuda ``ggml_backend_cuda_buffer_type_get_alignment``.
GPU_ALIGNMENT = 128
#: MiB of GPU memory each engine process uses beyond llama.cpp's buffers: the CUDA context and
#: libraries, measured ~590 MiB on an H200 (docs/domain.md §2). Overridable; a measured value wins.
DEFAULT_GPU_OVERHEAD = 590 * 1024 * 1024
DEFAULT_GPU_OVERHEAD_SOURCE = Source(SourceKind.DEFAULT, "~590 MiB measured on an H200 (driver 580)")


def layer_devices(n_layer: int, n_gpu_layers: int, gpu_free: Sequence[int | float]) -> tuple[int | None, ...]:
    """Device index (None = CPU) of each layer ``0..n_layer-1`` and then of the output layer.
    ``gpu_free``: the split shares, one per device: ``-ts`` when given, else (the engine's
    default) each device's free memory."""
    n_dev = len(gpu_free)
    i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)
    act = 0 if n_dev == 0 else min(n_gpu_layers, n_layer + 1)
    # Split points as the engine computes them, in float32 (llama-model.cpp ``splits``).
    free = np.asarray([max(f, 0) for f in gpu_free] or [1], dtype=np.float32)
    if float(free.sum()) == 0.0:
        free = np.ones_like(free)
    splits = [float(x) for x in (np.cumsum(free, dtype=np.float32) / np.float32(free.sum()))]
    out: list[int | None] = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            out.append(None)
            continue
        frac = float(np.float32(il - i_gpu_start) / np.float32(act))
        out.append(min(bisect.bisect_right(splits, frac), n_dev - 1))
    return tuple(out)


@dataclass(frozen=True)
class WeightSplit:
    """Model weights per device. ``gpu[i]`` bytes on GPU ``i``; ``host`` bytes mapped on the host
    (``CPU_Mapped``), ``repacked`` bytes copied into ``CPU_REPACK`` on top of them."""

    gpu: tuple[int, ...]
    host: int
    devices: tuple[int | None, ...]  # layer_devices() for this split
    n_offloaded: int  # layers (incl. output) on a GPU, as "offloaded N/M layers" prints
    host_layers: int = 0  # bytes of repeating/output layers left on the CPU (read for every token)
    repacked: int = 0
    #: Host layer bytes a prefill ubatch streams to a GPU (op offload copies whole tensors, all
    #: experts); None: ``host_layers`` (no experts read in part).
    host_layers_streamed: int | None = None

    @property
    def prefill_host_weights(self) -> int:
        return self.host_layers if self.host_layers_streamed is None else self.host_layers_streamed

    @property
    def host_weights(self) -> int:
        """All host memory the weights take: the mapped range plus the repacked copy."""
        return self.host + self.repacked

    @property
    def total(self) -> int:
        return sum(self.gpu) + self.host_weights


def _gpu_size(n_bytes: int) -> int:
    """A tensor's bytes in a GPU buffer: placed at the backend's alignment."""
    return -(-n_bytes // GPU_ALIGNMENT) * GPU_ALIGNMENT


def _tied_duplicate(shape: ModelShape) -> TensorInfo | None:
    """The token embedding a model without ``output.weight`` duplicates for its output layer."""
    if any(t.name == "output.weight" for t in shape.loaded):
        return None
    return next((t for t in shape.loaded if t.name == "token_embd.weight"), None)


def _tensor_slot(t: TensorInfo, n_layer: int) -> int:
    """Which device slot a tensor follows: its layer, -1 for the input layer, n_layer for the output."""
    il = t.layer
    if il is not None and il < n_layer:
        return il
    if t.name.startswith("token_embd"):
        return -1  # dev_input: always the CPU
    if t.name.startswith("rope_freqs"):
        return 0  # a repeating-layer tensor created for layer 0 (others hold 256-byte duplicates)
    return n_layer  # output layer (output, output_norm, …)


class Span(NamedTuple):
    """A byte range of one file: from the first mapped byte to one past the last."""

    first: int
    end: int

    def union(self, other: Span) -> Span:
        return Span(min(self.first, other.first), max(self.end, other.end))

    @property
    def size(self) -> int:
        return self.end - self.first


@lru_cache(maxsize=16)
def _unread_pages(shape: ModelShape) -> dict[int, tuple[Span, ...]]:
    """Per split file, the whole pages between two consecutive tensors (in file order) that hold no
    tensor byte: padding no computation reads. Empty for a file written with a usual alignment."""
    by_file: dict[int, list[TensorInfo]] = {}
    for t in shape.loaded:
        by_file.setdefault(t.split, []).append(t)
    out: dict[int, tuple[Span, ...]] = {}
    for split, ts in by_file.items():
        ts.sort(key=lambda t: t.offset)
        holes = []
        for a, b in itertools.pairwise(ts):
            first, end = -(-(a.offset + a.n_bytes) // PAGE) * PAGE, b.offset // PAGE * PAGE
            if end > first:
                holes.append(Span(first, end))
        if holes:
            out[split] = tuple(holes)
    return out


def host_mapped(shape: ModelShape, spans: dict[int, Span]) -> int:
    """Host memory of the mapped ranges ``spans`` (split file → first to last host tensor byte): each
    span less the whole pages inside it that no tensor touches (``_unread_pages``)."""
    holes = _unread_pages(shape)
    total = 0
    for split, span in spans.items():
        total += span.size - sum(h.size for h in holes.get(split, ()) if span.first <= h.first and h.end <= span.end)
    return total


@dataclass(frozen=True)
class _SlotTable:
    gpu_bytes: dict[int, int]  # slot -> bytes if that slot is on a GPU (aligned, with tied output)
    spans: dict[int, dict[int, Span]]  # slot -> split file -> the mapped byte range
    repacked: dict[int, int]  # slot -> CPU_REPACK bytes if that slot is on the CPU


@lru_cache(maxsize=16)
def _slot_table(shape: ModelShape, cpu: CpuFeatures) -> _SlotTable:
    gpu: dict[int, int] = {}
    spans: dict[int, dict[int, Span]] = {}
    repacked: dict[int, int] = {}
    names = set()
    for t in shape.loaded:
        names.add(t.name)
        slot = _tensor_slot(t, shape.n_layer)
        gpu[slot] = gpu.get(slot, 0) + _gpu_size(t.n_bytes)
        if is_repacked(t.name, t.shape, t.ggml_type, cpu):
            repacked[slot] = repacked.get(slot, 0) + repack_bytes(t.n_bytes)
            continue  # not in the CPU buffer's context: outside get_mapping_range
        per = spans.setdefault(slot, {})
        span = Span(t.offset, t.offset + t.n_bytes)
        per[t.split] = per[t.split].union(span) if t.split in per else span
    if "output.weight" not in names:
        tok = next((t for t in shape.loaded if t.name == "token_embd.weight"), None)
        if tok is not None:  # tied output: a duplicate lands on the output layer's GPU
            gpu[shape.n_layer] = gpu.get(shape.n_layer, 0) + _gpu_size(tok.n_bytes)
            # ... or, on the CPU, a MUL_MAT weight that may be repacked (its mapped range is the input's)
            if is_repacked("output.weight", tok.shape, tok.ggml_type, cpu):
                repacked[shape.n_layer] = repacked.get(shape.n_layer, 0) + repack_bytes(tok.n_bytes)
    return _SlotTable(gpu, spans, repacked)


def slot_gpu_bytes(shape: ModelShape) -> dict[int, int]:
    """Bytes each slot's weights take on a GPU: layer ``il``, ``n_layer`` for the output layer
    (with a tied output's duplicate), ``-1`` for the input layer (which stays on the CPU)."""
    return dict(_slot_table(shape, NO_REPACK).gpu_bytes)


#: A tensor-buffer override resolved to a device: (pattern, device index or None for the CPU).
Override = tuple[str, int | None]

def resolve_overrides(settings: LaunchSettings, names: Sequence[str]) -> tuple[Override, ...]:
    """``buffer_overrides`` with each buffer name turned into a device index (``names``: the
    devices' buffer names in order; ``CPU`` is the host). ValueError for a name no device has."""
    out: list[Override] = []
    for pattern, buft in buffer_overrides(settings):
        if buft == "CPU":
            out.append((pattern, None))
        elif buft in names:
            out.append((pattern, list(names).index(buft)))
        else:
            raise ValueError(f"no device {buft} for -ot {pattern}={buft} (devices: {', '.join(names) or 'none'})")
    return tuple(out)


def weight_split(shape: ModelShape, n_gpu_layers: int, gpu_free: Sequence[int], *,
                 cpu: CpuFeatures | None = None, overrides: tuple[Override, ...] = ()) -> WeightSplit:
    """Weights per device for ``-ngl n_gpu_layers`` over devices with these split shares (their
    free memory, or ``-ts``: see ``layer_devices``).

    ``cpu``: the CPU backend's features (``Inventory.cpu``: the engine's, else this machine's as a
    native build has them; None: unknown, nothing repacked). They matter only without GPUs: with one,
    nothing is repacked (see the module notes).
    """
    features = NO_REPACK if gpu_free or cpu is None else cpu
    ngl = min(n_gpu_layers, shape.n_layer + 1)
    if overrides and gpu_free:
        return _overridden_split(shape, ngl, tuple(gpu_free), overrides)
    return _weight_split(shape, ngl, tuple(gpu_free), features)


def override_shifts(shape: ModelShape, n_gpu_layers: int, n_devices: int,
                    overrides: tuple[Override, ...]) -> tuple[dict[int, int], list[int]]:
    """For choosing a split under overrides: each offloaded slot's GPU bytes less what overrides send
    elsewhere, and the bytes overrides pin to each device whatever the split (``-ot …=CUDA0`` for
    layers left on the CPU by ``-ngl``)."""
    start = max(shape.n_layer + 1 - min(n_gpu_layers, shape.n_layer + 1), 0)
    compiled = [(re.compile(p), dev) for p, dev in overrides]
    slots: dict[int, int] = {}
    pinned = [0] * n_devices
    for t in shape.loaded:
        slot = _tensor_slot(t, shape.n_layer)
        hit = next((dev for rx, dev in compiled if rx.search(t.name)), -1)
        if hit is not None and hit >= 0:
            pinned[hit] += _gpu_size(t.n_bytes)
        elif hit == -1 and slot >= start:
            slots[slot] = slots.get(slot, 0) + _gpu_size(t.n_bytes)
    tied = _tied_duplicate(shape)
    if tied is not None:  # the output layer's copy of the token embedding
        slots[shape.n_layer] = slots.get(shape.n_layer, 0) + _gpu_size(tied.n_bytes)
    return slots, pinned


def tensor_device(t: TensorInfo, n_layer: int, devices: Sequence[int | None],
                  overrides: tuple[Override, ...] = ()) -> int | None:
    """The device (None: the CPU) a model tensor is loaded to: the first override whose pattern it
    matches, else its layer's device (``layer_devices``); the input layer stays on the CPU."""
    for pattern, dev in overrides:
        if re.search(pattern, t.name):
            return dev
    slot = _tensor_slot(t, n_layer)
    return None if slot < 0 else devices[slot]


def _expert_fraction(shape: ModelShape, name: str) -> float:
    """The share of a tensor a decoded token reads: ``n_expert_used / n_expert`` for expert tensors."""
    if "_exps" in name and shape.n_expert:
        return shape.n_expert_used / shape.n_expert
    return 1.0


@lru_cache(maxsize=256)
def _overridden_split(shape: ModelShape, n_gpu_layers: int, gpu_free: tuple[int, ...],
                      overrides: tuple[Override, ...]) -> WeightSplit:
    """``_weight_split`` with tensor-buffer overrides, tensor by tensor: a tensor goes to its layer's
    device unless an override matches its name (the first that does). Overridden to the CPU, it is
    mapped from the file (the CPU buffer type with mmap: ``CPU_Mapped``; with a GPU nothing is
    repacked, see the module notes)."""
    devices = layer_devices(shape.n_layer, n_gpu_layers, gpu_free)
    compiled = [(re.compile(p), dev) for p, dev in overrides]
    gpu = [0] * len(gpu_free)
    spans: dict[int, Span] = {}
    host_layers = streamed = 0

    def place(name: str, slot: int) -> int | None:
        for rx, dev in compiled:
            if rx.search(name):
                return dev
        return None if slot < 0 else devices[slot]

    for t in shape.loaded:
        slot = _tensor_slot(t, shape.n_layer)
        dev = place(t.name, slot)
        if dev is not None:
            gpu[dev] += _gpu_size(t.n_bytes)
            continue
        span = Span(t.offset, t.offset + t.n_bytes)
        spans[t.split] = spans[t.split].union(span) if t.split in spans else span
        if slot >= 0:
            host_layers += int(t.n_bytes * _expert_fraction(shape, t.name))
            streamed += t.n_bytes
    tok = _tied_duplicate(shape)
    if tok is not None:
        out_dev = devices[shape.n_layer]
        if out_dev is not None:  # the tied output's duplicate on the output's GPU
            gpu[out_dev] += _gpu_size(tok.n_bytes)
        else:
            host_layers += tok.n_bytes
            streamed += tok.n_bytes
    return WeightSplit(tuple(gpu), host_mapped(shape, spans), devices, sum(d is not None for d in devices),
                       host_layers, 0, streamed)


@lru_cache(maxsize=1024)
def _weight_split(shape: ModelShape, n_gpu_layers: int, gpu_free: tuple[int, ...],
                  cpu: CpuFeatures) -> WeightSplit:
    devices = layer_devices(shape.n_layer, n_gpu_layers, gpu_free)
    table = _slot_table(shape, cpu)
    gpu = [0] * len(gpu_free)
    host_slots = [-1]
    for slot, dev in enumerate(devices):
        if dev is None:
            host_slots.append(slot)
        else:
            gpu[dev] += table.gpu_bytes.get(slot, 0)
    merged: dict[int, Span] = {}
    for slot in host_slots:
        for split, span in table.spans.get(slot, {}).items():
            merged[split] = merged[split].union(span) if split in merged else span
    host = host_mapped(shape, merged)
    repacked = sum(table.repacked.get(slot, 0) for slot in host_slots)
    host_layers = sum(table.gpu_bytes.get(slot, 0) for slot in host_slots if slot >= 0)
    return WeightSplit(tuple(gpu), host, devices, sum(d is not None for d in devices), host_layers, repacked)


def output_buffer_bytes(shape: ModelShape, settings: LaunchSettings) -> int:
    """Logits buffer in host memory: ``n_vocab × max(n_outputs, n_seq_max) × sizeof(float)``."""
    return shape.n_vocab * max(1, settings.n_parallel) * 4
