"""Which layers go to which device: the ``-ts`` Headroom chooses, and what crosses the network.

The engine assigns layers to devices itself, from ``-ts`` (src/llama-model.cpp ``load_tensors``):
the shares are summed and normalised into split points, and offloaded layer ``j`` (of ``act``, the
output layer last) goes to the first device whose split point is above ``j / act`` (``upper_bound``,
in float32). So a ``-ts`` of *layer counts* ``n_0, n_1, …`` gives device 0 exactly the first ``n_0``
offloaded layers, device 1 the next ``n_1``, and so on (the split points are ``(n_0 + … + n_i) / act``
and ``j / act`` is below them exactly while ``j < n_0 + … + n_i``): the plan chooses counts and
writes them as ``-ts``, and ``layer_devices`` (app/planner/memory/weights.py) replays the engine's rule on
them to place every tensor.

Choosing: each device has a capacity (its free memory or its budget, less the safety margin, the
per-process overhead and its compute buffer); each offloaded layer costs its weights and, when the
KV is offloaded, its KV. The layers are dealt out in order, each device filled to the same fraction
of its capacity (the fraction raised from "just enough" until the last device holds the rest), so
no device is filled to the brim while another idles. When even a full fill does not hold every
offloaded layer, there is no split: the plan then moves layers to the host (``-ngl``) or the KV.

Network (RPC devices): at every boundary between consecutive layers on different devices where one
side is a worker, the activations cross: ``n_embd`` floats per token (the hidden state, f32). The
input embedding is computed on the CPU (the input layer never leaves it), so a worker holding the
first offloaded layer receives it; the logits come back from the device holding the output layer:
``n_vocab`` floats per output token. The weights on a worker cross once, at load (ggml-rpc-server
``-c`` caches them on the worker's disk for the next load).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from app.planner.devices import Inventory
from app.planner.gguf.model import ModelShape
from app.planner.memory.weights import (
    DEFAULT_GPU_OVERHEAD,
    override_shifts,
    resolve_overrides,
    slot_gpu_bytes,
)
from app.planner.plan_types import NetworkCost
from app.planner.settings import LaunchSettings
from app.planner.solve.stack import Compute, KvPerLayer

#: One float per element: the hidden state and the logits travel as f32 (ggml-rpc copies tensors).
F32 = 4


def layer_counts(devices: Sequence[int | None], n_devices: int) -> tuple[int, ...]:
    """How many offloaded layers (output included) each device holds: the ``-ts`` that gives
    ``devices`` (a ``layer_devices`` result)."""
    counts = [0] * n_devices
    for d in devices:
        if d is not None:
            counts[d] += 1
    return tuple(counts)


def deal(costs: Sequence[int], capacities: Sequence[int], *, steps: int = 32) -> tuple[int, ...] | None:
    """Layer counts per device for offloaded layers of these ``costs`` (in order) over devices of
    these ``capacities`` (bytes each may take; <= 0: none), or None when no contiguous deal fits.

    Each device but the last takes layers while it stays within ``fraction × capacity``; the last
    takes the rest. The fraction starts at total cost / total capacity and rises to 1 (a full fill).
    """
    caps = [max(c, 0) for c in capacities]
    total_cost, total_cap = sum(costs), sum(caps)
    if not costs:
        return tuple(0 for _ in caps)
    if total_cap == 0 or total_cost > total_cap:
        return None
    start = total_cost / total_cap
    for k in range(steps + 1):
        fraction = start + (1.0 - start) * k / steps
        counts, j = [], 0
        for i, cap in enumerate(caps):
            if i == len(caps) - 1:
                rest = sum(costs[j:])
                if rest > cap:
                    break
                counts.append(len(costs) - j)
                j = len(costs)
                continue
            used, n = 0, 0
            while j < len(costs) and used + costs[j] <= fraction * cap:
                used += costs[j]
                j += 1
                n += 1
            counts.append(n)
        if j == len(costs) and len(counts) == len(caps):
            return tuple(counts)
    return None


def network_cost(shape: ModelShape, devices: Sequence[int | None], names: Sequence[str],
                 remote: Sequence[bool], weights: Sequence[int], n_ubatch: int, n_outputs: int) -> NetworkCost | None:
    """The network cost of a layer placement (``layer_devices``' result over devices ``names``;
    ``remote[i]``: device ``i`` is an RPC worker's), or None when no worker holds anything."""
    if not any(remote[d] for d in devices if d is not None):
        return None
    cpu = "CPU"
    chain = [cpu] + [cpu if d is None else names[d] for d in devices[:shape.n_layer]]
    out_dev = devices[shape.n_layer] if len(devices) > shape.n_layer else None
    is_remote = {n: r for n, r in zip(names, remote, strict=True)} | {cpu: False}
    boundaries = tuple((a, b) for a, b in itertools.pairwise(chain) if a != b and (is_remote[a] or is_remote[b]))
    # the output layer: the last hidden state goes to its device, the logits come back to the host
    last = chain[-1]
    out_name = cpu if out_dev is None else names[out_dev]
    if last != out_name and (is_remote[last] or is_remote[out_name]):
        boundaries += ((last, out_name),)
    hidden = shape.n_embd * F32
    logits = shape.n_vocab * F32 if is_remote[out_name] else 0
    load = {names[i]: w for i, w in enumerate(weights) if remote[i] and w}
    return NetworkCost(boundaries, hidden * len(boundaries) + logits,
                       hidden * len(boundaries) * n_ubatch + logits * max(1, n_outputs), load)


def shares(inv: Inventory, launch: LaunchSettings) -> list[int]:
    """The split shares the engine will use: ``-ts`` (one per device; missing ones are 0, as
    llama-model.cpp copies ``n_devices`` values), else each device's free memory."""
    if launch.tensor_split:
        ts = list(launch.tensor_split[:len(inv.gpus)])
        return ts + [0] * (len(inv.gpus) - len(ts))
    return [g.free for g in inv.gpus]


def capacities(inv: Inventory, compute: Compute, overhead: int | None, safety: int,
                vram_target: int | None) -> list[int]:
    """What each device can take in weights and KV: its free memory (or budget, or the target)
    less the safety margin, this engine's per-process overhead (none on a worker) and compute."""
    ovh = DEFAULT_GPU_OVERHEAD if overhead is None else overhead
    caps = []
    for g in inv.gpus:
        fixed = (0 if g.is_rpc else ovh) + safety + compute.gpu.get(g.engine_name, 0)
        limits = [g.free] + [b for b in (g.budget, vram_target) if b is not None]
        caps.append(min(limits) - fixed)
    return caps


def with_split(shape: ModelShape, inv: Inventory, launch: LaunchSettings, kvp: KvPerLayer, compute: Compute,
                overhead: int | None, safety: int, vram_target: int | None) -> LaunchSettings:
    """``launch`` with the planner's ``-ts`` over several devices (app/planner/solve/split.py) when it has
    none; unchanged when it has one, on one device, or when no split holds every offloaded layer
    (then the engine's default split stands and the plan says what does not fit)."""
    if launch.tensor_split or len(inv.gpus) < 2:
        return launch
    start = max(shape.n_layer + 1 - launch.n_gpu_layers, 0)
    overrides = resolve_overrides(launch, [g.engine_name for g in inv.gpus])
    if overrides:
        weights, pinned = override_shifts(shape, launch.n_gpu_layers, len(inv.gpus), overrides)
    else:
        weights, pinned = slot_gpu_bytes(shape), [0] * len(inv.gpus)
    cells = kvp.cells if launch.offload_kqv else 0
    costs = [weights.get(il, 0) + (kvp.fixed.get(il, 0) + kvp.per_cell.get(il, 0) * cells
                                   if il < shape.n_layer and launch.offload_kqv else 0)
             for il in range(start, shape.n_layer + 1)]
    caps = [c - p for c, p in zip(capacities(inv, compute, overhead, safety, vram_target), pinned, strict=True)]
    counts = deal(costs, caps)
    return launch if counts is None or not any(counts) else launch.with_(tensor_split=counts)
