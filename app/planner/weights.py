"""Where the weights go for a given ``-ngl``, and the other fixed per-model allocations.

Mirrors src/llama-model.cpp ``llama_model_base::load_tensors``:
- ``i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)``, ``act_gpu_layers = min(n_gpu_layers, n_layer + 1)``;
  layer ``il`` (and the output layer, index ``n_layer``) is on a GPU when ``il >= i_gpu_start``, which
  GPU chosen by ``upper_bound`` over the cumulative free-memory split;
- the input layer (token embedding) always stays on the CPU ("very little benefit to offloading");
- a model without ``output.weight`` ties the output to the token embedding: the output layer's
  device gets a duplicate (``TENSOR_DUPLICATED``);
- host weights are mapped from the file: the ``CPU_Mapped`` buffer spans the first to the last host
  tensor of each file (src/llama-model-loader.cpp ``get_mapping_range``);
- GPU buffers place each tensor at the backend's alignment (ggml-alloc; CUDA aligns to 128 bytes;
  an RPC worker's device at its remote backend's, which the client does not print: 128 is used
  for it too, at most 96 bytes per tensor more than a CPU worker's 32, ggml-impl.h
  ``TENSOR_ALIGNMENT``);
- on an engine without GPUs, host matmul weights of a repackable type are *copied* into the CPU
  backend's ``CPU_REPACK`` buffer (app/planner/repack.py); they no longer bound the ``CPU_Mapped``
  range, which still covers them when they lie between mapped tensors (the usual case); with a
  GPU device the first GPU's pinned host type comes before ``CPU_REPACK`` in the host list
  (llama-model.cpp ``make_cpu_buft_list``) and, as the model is mapped, the loader swaps it for the
  plain CPU type ("avoid using a host buffer when using mmap", llama-model-loader.cpp): nothing is
  repacked.
The output buffer (logits, src/llama-context.cpp ``output_reserve``) is ``n_vocab × n_seq_max`` floats.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from app.planner.gguf_model import ModelShape
from app.planner.gguf_reader import TensorInfo
from app.planner.repack import NO_REPACK, CpuFeatures, host_cpu_features, is_repacked, repack_bytes
from app.planner.settings import LaunchSettings
from app.planner.sources import Source, SourceKind

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

    @property
    def host_weights(self) -> int:
        """All host memory the weights take: the mapped range plus the repacked copy."""
        return self.host + self.repacked

    @property
    def total(self) -> int:
        return sum(self.gpu) + self.host_weights


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
    for t in shape.tensors:
        names.add(t.name)
        slot = _tensor_slot(t, shape.n_layer)
        gpu[slot] = gpu.get(slot, 0) + -(-t.n_bytes // GPU_ALIGNMENT) * GPU_ALIGNMENT
        if is_repacked(t.name, t.shape, t.ggml_type, cpu):
            repacked[slot] = repacked.get(slot, 0) + repack_bytes(t.n_bytes)
            continue  # not in the CPU buffer's context: outside get_mapping_range
        per = spans.setdefault(slot, {})
        span = Span(t.offset, t.offset + t.n_bytes)
        per[t.split] = per[t.split].union(span) if t.split in per else span
    if "output.weight" not in names:
        tok = next((t for t in shape.tensors if t.name == "token_embd.weight"), None)
        if tok is not None:  # tied output: a duplicate lands on the output layer's GPU
            gpu[shape.n_layer] = gpu.get(shape.n_layer, 0) + -(-tok.n_bytes // GPU_ALIGNMENT) * GPU_ALIGNMENT
            # ... or, on the CPU, a MUL_MAT weight that may be repacked (its mapped range is the input's)
            if is_repacked("output.weight", tok.shape, tok.ggml_type, cpu):
                repacked[shape.n_layer] = repacked.get(shape.n_layer, 0) + repack_bytes(tok.n_bytes)
    return _SlotTable(gpu, spans, repacked)


def slot_gpu_bytes(shape: ModelShape) -> dict[int, int]:
    """Bytes each slot's weights take on a GPU: layer ``il``, ``n_layer`` for the output layer
    (with a tied output's duplicate), ``-1`` for the input layer (which stays on the CPU)."""
    return dict(_slot_table(shape, NO_REPACK).gpu_bytes)


def weight_split(shape: ModelShape, n_gpu_layers: int, gpu_free: Sequence[int], *,
                 cpu: CpuFeatures | None = None) -> WeightSplit:
    """Weights per device for ``-ngl n_gpu_layers`` over devices with these split shares (their
    free memory, or ``-ts``: see ``layer_devices``).

    ``cpu``: the CPU backend's features (default: this machine's, as a native build has them). They
    matter only without GPUs: with one, nothing is repacked (see the module notes).
    """
    features = NO_REPACK if gpu_free else (host_cpu_features() if cpu is None else cpu)
    return _weight_split(shape, min(n_gpu_layers, shape.n_layer + 1), tuple(gpu_free), features)


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
    host = sum(span.size for span in merged.values())
    repacked = sum(table.repacked.get(slot, 0) for slot in host_slots)
    host_layers = sum(table.gpu_bytes.get(slot, 0) for slot in host_slots if slot >= 0)
    return WeightSplit(tuple(gpu), host, devices, sum(d is not None for d in devices), host_layers, repacked)


def output_buffer_bytes(shape: ModelShape, settings: LaunchSettings) -> int:
    """Logits buffer in host memory: ``n_vocab × max(n_outputs, n_seq_max) × sizeof(float)``."""
    return shape.n_vocab * max(1, settings.n_parallel) * 4
