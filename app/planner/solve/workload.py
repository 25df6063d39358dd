"""What one placement asks of each side per token: the :class:`~app.planner.solve.speed.Workload`
the speed model prices, read off the placement's weight split and KV layout (app/planner/solve/
speed.py says where llama.cpp runs each part)."""

from __future__ import annotations

import re
from functools import lru_cache

from app.planner.devices import Inventory
from app.planner.gguf.model import ModelShape
from app.planner.gguf.reader import TensorInfo
from app.planner.memory.weights import WeightSplit, resolve_overrides, tensor_device
from app.planner.plan_types import NetworkCost
from app.planner.settings import LaunchSettings
from app.planner.solve.speed import Workload, active_weights, attention_flops_per_cell
from app.planner.solve.stack import KvPerLayer


@lru_cache(maxsize=64)
def _active(shape: ModelShape) -> tuple[int, float]:
    return active_weights(shape)


def _attn_tensor(shape: ModelShape, il: int) -> TensorInfo | None:
    """A tensor of layer ``il``'s attention (its Q or QKV projection), to see where -ot put it."""
    prefix = f"blk.{il}.attn_"
    return next((t for t in shape.loaded if t.name.startswith(prefix)), None)


def workload(shape: ModelShape, inv: Inventory, launch: LaunchSettings, ws: WeightSplit, kvp: KvPerLayer,
             network: NetworkCost | None) -> Workload:
    """The placement's workload: weights per side (a token's experts only), KV per cell by where it
    lies and who attends over it, flops, splits' causes (host-tail layers, CPU ops, CPU layers)."""
    active, flops = _active(shape)
    n_dev = len(inv.gpus)
    device_active = max(0, active - ws.host_layers)
    gpu_total = sum(ws.gpu) or 1
    device_weights = tuple(int(device_active * g / gpu_total) for g in ws.gpu) if n_dev else ()
    overrides = resolve_overrides(launch, [g.engine_name for g in inv.gpus]) if n_dev else ()
    kv_dev = [0] * n_dev
    attn_dev = [0.0] * n_dev
    attn_tail = 0.0
    kv_cpu = kv_tail = kv_nkvo = 0
    attn_nkvo = 0.0
    tail_layers = cpu_layers = 0
    attn_total = attention_flops_per_cell(shape) or 1.0
    attn_host = 0.0
    for il, per_cell in kvp.per_cell.items():
        dev = ws.devices[il] if n_dev else None
        layer_attn = 2 * shape.n_head[il] * (shape.head_dim_k + shape.head_dim_v) if shape.n_head_kv[il] else 0
        if dev is not None and launch.offload_kqv:
            kv_dev[dev] += per_cell
            attn_dev[dev] += layer_attn
            continue
        # KV in host RAM: is the layer's attention (its weights) on a device (-ot: the host tail)?
        t = _attn_tensor(shape, il)
        weights_dev = tensor_device(t, shape.n_layer, ws.devices, overrides) if t is not None and n_dev else None
        if weights_dev is not None and launch.offload_kqv:
            kv_tail += per_cell
            attn_tail += layer_attn
            tail_layers += 1
        else:
            kv_cpu += per_cell
            attn_host += layer_attn
            cpu_layers += 1 if dev is None else 0
            if dev is not None:  # -nkvo: the layer on a device, its KV in host RAM
                kv_nkvo += per_cell
                attn_nkvo += layer_attn
    n_ctx_seq = kvp.layout.ctx.n_ctx_seq
    moe_layers = 0
    if launch.n_cpu_moe and shape.n_expert:
        rx = re.compile(r"blk\.(\d+)\.ffn_\w*exps")
        moe_layers = len({int(m.group(1)) for t in shape.loaded if (m := rx.match(t.name))
                          and int(m.group(1)) < launch.n_cpu_moe and ws.devices[int(m.group(1))] is not None})
    nkvo_layers = sum(1 for il in kvp.per_cell if ws.devices[il] is not None) if n_dev and not launch.offload_kqv else 0
    return Workload(
        device_weights=device_weights, host_weights=ws.host_layers, streamed_weights=ws.prefill_host_weights,
        flops=flops, host_flop_share=ws.host_layers / active if active else 0.0,
        kv_device_cell=tuple(kv_dev), kv_host_cpu_cell=kv_cpu, kv_host_tail_cell=kv_tail,
        attn_flops_cell=attn_total, attn_host_share=attn_host / attn_total, n_ctx_seq=n_ctx_seq,
        n_ubatch=launch.effective_n_ubatch, host_tail_layers=tail_layers,
        cpu_op_layers=moe_layers + nkvo_layers, cpu_layers=cpu_layers > 0 and launch.offload_kqv,
        rpc_crossings=len(network.boundaries) if network is not None else 0, cpu_only=n_dev == 0,
        kv_type=launch.type_k, attn_device_cell=tuple(attn_dev), attn_tail_cell=attn_tail,
        attn_head_flops=2 * (shape.head_dim_k + shape.head_dim_v), head_dim=shape.head_dim_k,
        kv_nkvo_cell=kv_nkvo, attn_nkvo_cell=attn_nkvo, gqa=_gqa(shape))


def _gqa(shape: ModelShape) -> float:
    """Query heads per KV head over the layers with KV (Qwen2.5-14B: 40 over 8, 5)."""
    kv = sum(h for h in shape.n_head_kv if h > 0)
    q = sum(shape.n_head[il] for il in range(shape.n_layer) if shape.n_head_kv[il] > 0)
    return q / kv if kv else 1.0
