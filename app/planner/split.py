"""Which layers go to which device: the ``-ts`` Headroom chooses, and what crosses the network.

The engine assigns layers to devices itself, from ``-ts`` (src/llama-model.cpp ``load_tensors``):
the shares are summed and normalised into split points, and offloaded layer ``j`` (of ``act``, the
output layer last) goes to the first device whose split point is above ``j / act`` (``upper_bound``,
in float32). So a ``-ts`` of *layer counts* ``n_0, n_1, …`` gives device 0 exactly the first ``n_0``
offloaded layers, device 1 the next ``n_1``, and so on (the split points are ``(n_0 + … + n_i) / act``
and ``j / act`` is below them exactly while ``j < n_0 + … + n_i``): the plan chooses counts and
writes them as ``-ts``, and ``layer_devices`` (app/planner/weights.py) replays the engine's rule on
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

from app.planner.gguf_model import ModelShape
from app.planner.plan_types import NetworkCost

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
