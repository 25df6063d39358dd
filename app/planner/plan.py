"""The solver: a model shape, the devices and the launch settings → a :class:`Plan`.

Modes (issue 3):
- *window* (an engine with a position window, opencoti): every layer on the GPU; the resident
  window is ⌊(budget − weights − compute − overhead − safety − fixed KV) / KV-bytes-per-cell⌋, aligned
  down to 256 and capped at the context; the rest of the context is the host tail.
- *stock*: no position split. The settings as given; else the fewest layers moved to the host
  (``-ngl``), the whole KV on the host (``-nkvo``), or a shorter context — each priced by the bytes
  the host must read per decoded token, the cheapest feasible one chosen, all listed.
- *cpu*: no GPU; everything in host RAM.

The data types live in :mod:`app.planner.plan_types` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.planner.devices import Inventory
from app.planner.errors import PlannerError
from app.planner.estimate import estimate_compute
from app.planner.gguf_model import ModelShape
from app.planner.kv import CTX_PAD, context_size
from app.planner.measurement import gpu_caveat
from app.planner.measurement import Measurement
from app.planner.plan_types import (
    ESTIMATED,
    MEASURED,
    MEASURED_ELSEWHERE,
    Alternative,
    ContextFit,
    DevicePlan,
    HostPlan,
    KvSummary,
    Plan,
)
from app.planner.settings import ALL_LAYERS, LaunchSettings
from app.planner.stack import Compute, compute_for, kv_per_layer, stack
from app.planner.units import Bytes, MiB, format_tokens
from app.planner.weights import weight_split

__all__ = ["Alternative", "ContextFit", "DevicePlan", "HostPlan", "KvSummary", "Plan", "make_plan",
           "max_context"]

#: Above this context, flash attention off means a KQ matrix of gigabytes (docs/domain.md §2).
LONG_CONTEXT_FA = 32768


def _kv_summary(shape: ModelShape, settings: LaunchSettings) -> KvSummary:
    kvp = kv_per_layer(shape, settings)
    lay = kvp.layout
    caches: tuple[dict[str, Any], ...] = tuple({"swa": c.swa, "cells": c.cells, "n_stream": c.n_stream, "layers": len(c.layers),
                    "k_bytes": c.k_bytes, "v_bytes": c.v_bytes, "size": c.size} for c in lay.caches)
    if lay.recurrent is not None:
        rs = lay.recurrent
        caches += ({"recurrent": True, "cells": rs.cells, "layers": len(rs.layers), "size": rs.size},)
    return KvSummary(lay.total, sum(kvp.per_cell.values()), lay.ctx.n_ctx, lay.ctx.n_ctx_seq,
                     lay.ctx.n_seq, caches)


def _fits(gpus: tuple[DevicePlan, ...], host: HostPlan, vram_target: int | None) -> str:
    """'' when everything fits, else the first reason it does not."""
    for g in gpus:
        if g.free < 0:
            return f"{g.name} is short by {Bytes(-g.free)}"
        if vram_target is not None and g.used + g.safety > vram_target:
            return f"{g.name} needs {Bytes(g.used + g.safety)}, over the VRAM target {Bytes(vram_target)}"
    if host.free < 0:
        return f"host RAM is short by {Bytes(-host.free)}"
    return ""


#: The label of the alternative that is the settings as given (priced first; its note says why not).
AS_SET = "as set"
#: A slot with fewer tokens than this cannot hold a real conversation (a prompt plus an answer).
SHORT_SLOT = 1024


def _common_warnings(shape: ModelShape, settings: LaunchSettings, compute: Compute,
                     measurement: Measurement | None = None) -> list[str]:
    w = []
    if settings.flash_attn == "off" and settings.n_ctx > LONG_CONTEXT_FA:
        w.append(f"flash attention is off at {format_tokens(settings.n_ctx)} context: the compute buffer "
                 "grows with context × ubatch × heads (gigabytes); turn it on")
    if compute.source == ESTIMATED and measurement is not None:
        # Whose numbers (issue 4): the one sentence the CLI and the UI both show, from gpu_caveat.
        w.append(gpu_caveat(measurement, targets_gpu=True) or
                 f"pass 1 measured {', '.join(d.name for d in measurement.devices)}, not these GPUs: "
                 "compute buffers are an estimate")
    elif compute.source == ESTIMATED:
        w.append("compute buffers are an estimate: run pass 1 (headroom measure) for measured numbers")
    elif compute.source.startswith(MEASURED_ELSEWHERE):
        w.append(f"compute buffers were {compute.source.removeprefix('measured by ')}: run pass 1 again "
                 "for this launch (headroom measure) before trusting them")
    n_ctx_seq = kv_per_layer(shape, settings).layout.ctx.n_ctx_seq
    if settings.n_parallel > 1 and n_ctx_seq < SHORT_SLOT:
        w.append(f"each of the {settings.n_parallel} slots holds only {n_ctx_seq:,} tokens (-c "
                 f"{settings.n_ctx:,} split by -np {settings.n_parallel}): raise -c, lower -np, or use -kvu")
    if n_ctx_seq > shape.n_ctx_train:
        w.append(f"context per sequence {format_tokens(n_ctx_seq)} exceeds the model's training "
                 f"context {format_tokens(shape.n_ctx_train)}")
    return w


def _host_short(host: HostPlan, what: str = "") -> list[str]:
    """The issue's "host RAM short" warning, the same words in every mode."""
    return [f"host RAM is short by {Bytes(-host.free)}{what}"] if host.free < 0 else []


def make_plan(shape: ModelShape, inventory: Inventory, settings: LaunchSettings, *,
              engine_window: bool = False, measurement: Measurement | None = None, safety: int = 256 * MiB,
              vram_target: int | None = None, overhead: int | None = None) -> Plan:
    """Plan one launch. Cheap (no I/O): the GUI calls it on every slider move."""
    if not inventory.gpus:
        return _cpu_plan(shape, inventory, settings, measurement)
    if engine_window:
        return _window_plan(shape, inventory, settings, measurement, safety, vram_target, overhead)
    return _stock_plan(shape, inventory, settings, measurement, safety, vram_target, overhead)


def _cpu_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
              measurement: Measurement | None) -> Plan:
    launch = settings.with_(n_gpu_layers=0)
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, measurement, kvp.layout)
    gpus, host, _ = stack(shape, inv, launch, weight_split(shape, 0, []), kvp, 0, compute, None, 0)
    why = _fits(gpus, host, None)
    warnings = _common_warnings(shape, launch, compute, measurement)
    if inv.reason:
        warnings.insert(0, f"no GPU: {inv.reason}")
    warnings += _host_short(host)
    return Plan(launch, "cpu", gpus, host, not why, why or "fits in host RAM", tuple(warnings), 0, kvp.cells,
                None, (), _kv_summary(shape, launch))


def _window_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings, measurement: Measurement | None,
                 safety: int, vram_target: int | None, overhead: int | None) -> Plan:
    warnings: list[str] = []
    launch = settings
    if settings.kv_unified:  # the window engine refuses -kvu (app.engine.argv); one slot: the same cache
        launch = settings.with_(kv_unified=False)
        if settings.n_parallel > 1:
            warnings.append("the position window cannot be combined with --kv-unified: planned per-slot caches")
    launch = launch.with_(offload_kqv=True)
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, measurement, kvp.layout)
    free = [g.free for g in inv.gpus]
    ws = weight_split(shape, launch.n_gpu_layers, free)
    # Everything but the window, then what is left per GPU buys cells of that GPU's layers.
    gpus0, _, _ = stack(shape, inv, launch, ws, kvp, 0, compute, overhead, safety)
    window = kvp.cells
    for i, g in enumerate(gpus0):
        left = g.free if vram_target is None else min(g.free, vram_target - g.used - g.safety)
        per_cell = sum(c for il, c in kvp.per_cell.items() if ws.devices[il] == i)
        if left < 0:
            window = -1
            break
        if per_cell:
            window = min(window, left // per_cell)
    window = max(window, 0) // CTX_PAD * CTX_PAD if window >= 0 else 0
    window = min(window, kvp.cells)
    gpus, host, _ = stack(shape, inv, launch, ws, kvp, window, compute, overhead, safety)
    why = _fits(gpus, host, vram_target)
    warnings += _common_warnings(shape, launch, compute, measurement)
    if window < launch.effective_n_ubatch and not why:
        warnings.append(f"the resident window ({window} cells) is smaller than one ubatch "
                        f"({launch.effective_n_ubatch}): prefill will stream from host RAM")
    warnings += _host_short(host, " for the KV tail")
    reason = why or (f"window {format_tokens(window)} of {format_tokens(kvp.cells)} cells resident, "
                     f"host tail {format_tokens(kvp.cells - window)}")
    return Plan(launch, "window", gpus, host, not why, reason, tuple(warnings), window, kvp.cells - window,
                vram_target, (), _kv_summary(shape, launch))


def _priced(shape: ModelShape, inv: Inventory, launch: LaunchSettings, label: str, note: str,
            measurement: Measurement | None, safety: int, vram_target: int | None, overhead: int | None,
            ) -> tuple[Alternative, tuple[DevicePlan, ...], HostPlan, str, Compute]:
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, measurement, kvp.layout)
    ws = weight_split(shape, launch.n_gpu_layers, [g.free for g in inv.gpus])
    resident = kvp.cells if launch.offload_kqv else 0
    gpus, host, per_token = stack(shape, inv, launch, ws, kvp, resident, compute, overhead, safety)
    why = _fits(gpus, host, vram_target)
    return Alternative(label, launch, not why, per_token, why or note), gpus, host, why, compute


def _fewest_layers_moved(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
                         measurement: Measurement | None, safety: int, vram_target: int | None,
                         overhead: int | None) -> int | None:
    """Largest -ngl that fits (binary search: fewer layers on the GPU never needs more there)."""
    def ok(ngl: int) -> bool:
        return _priced(shape, inv, settings.with_(n_gpu_layers=ngl), "", "", measurement, safety,
                       vram_target, overhead)[0].feasible
    lo, hi = 0, shape.n_layer  # n_layer + 1 would be everything
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _on_cpu_text(shape: ModelShape, moved: int) -> str:
    """``-ngl`` counts the output layer as one more (llama.cpp: "offloaded 33/33 layers" for 32):
    say which are on the CPU in the model's own terms."""
    if moved > shape.n_layer:
        return f"all {shape.n_layer} layers, the output layer"
    return f"{moved} of {shape.n_layer} layers"


def _as_set_note(shape: ModelShape, settings: LaunchSettings) -> str:
    """What the settings as given put where, in words."""
    on_cpu = shape.n_layer + 1 - min(settings.n_gpu_layers, shape.n_layer + 1)
    parts = []
    if on_cpu:
        parts.append(f"{_on_cpu_text(shape, on_cpu)} and their KV on the CPU (-ngl {settings.n_gpu_layers})")
    if not settings.offload_kqv:
        parts.append("the whole KV cache in host RAM (-nkvo)")
    return "; ".join(parts) or "everything resident on the GPU"


def _stock_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings, measurement: Measurement | None,
                safety: int, vram_target: int | None, overhead: int | None) -> Plan:
    args = (measurement, safety, vram_target, overhead)
    first = _priced(shape, inv, settings, AS_SET, _as_set_note(shape, settings), *args)
    options = [first[0]]
    if not first[0].feasible:
        ngl = _fewest_layers_moved(shape, inv, settings, *args)
        if ngl is not None:
            moved = shape.n_layer + 1 - ngl
            options.append(_priced(shape, inv, settings.with_(n_gpu_layers=ngl), f"-ngl {ngl}",
                                   f"{_on_cpu_text(shape, moved)} and their KV run on the CPU", *args)[0])
        if settings.offload_kqv:
            options.append(_priced(shape, inv, settings.with_(n_gpu_layers=ALL_LAYERS, offload_kqv=False),
                                   "-nkvo", "the whole KV cache in host RAM; attention runs on the CPU",
                                   *args)[0])
        fit = max_context(shape, inv, settings, measurement=measurement, safety=safety,
                          vram_target=vram_target, overhead=overhead).resident
        if fit >= CTX_PAD:
            options.append(_priced(shape, inv, settings.with_(n_ctx=fit), f"-c {fit}",
                                   f"a shorter context ({format_tokens(fit)}), fully resident", *args)[0])
    keep_ctx = [a for a in options if a.feasible and a.launch.n_ctx == settings.n_ctx]
    shorter = [a for a in options if a.feasible and a.launch.n_ctx != settings.n_ctx]
    best = min(keep_ctx, key=lambda a: a.host_bytes_per_token) if keep_ctx else (shorter[0] if shorter else first[0])
    alts = tuple(Alternative(a.label, a.launch, a.feasible, a.host_bytes_per_token, a.note, a is best)
                 for a in options)
    _, gpus, host, why, compute = _priced(shape, inv, best.launch, best.label, best.note, *args)
    warnings = _common_warnings(shape, best.launch, compute, measurement)
    if best is not first[0] and best.feasible:
        warnings.append(f"the settings as given do not fit ({first[3]}); chose {best.label}: {best.note}")
        if compute.source == MEASURED or (measurement is not None and measurement.launch is None):
            # (a recorded measurement of unknown settings: assumed to be the settings as given)
            warnings.append(f"compute buffers were measured for the settings as given: measure {best.label} "
                            "again before launching")
    warnings += _host_short(host)
    kvp = kv_per_layer(shape, best.launch)
    window = kvp.cells if best.launch.offload_kqv else 0
    reason = why or (best.note if best is first[0] else f"{best.label}: {best.note}")
    return Plan(best.launch, "stock", gpus, host, not why, reason, tuple(warnings), window, kvp.cells - window,
                vram_target, alts, _kv_summary(shape, best.launch))


def max_context(shape: ModelShape, inventory: Inventory, settings: LaunchSettings, *,
                engine_window: bool = False, measurement: Measurement | None = None,
                safety: int = 256 * MiB, vram_target: int | None = None,
                overhead: int | None = None) -> ContextFit:
    """The largest context (multiple of 256, up to the training context or the asked one) that is
    fully resident, and the largest that fits with a host tail (window engine)."""
    cap = max(shape.n_ctx_train, settings.n_ctx) // CTX_PAD * CTX_PAD
    if cap < CTX_PAD:
        raise PlannerError(f"context {settings.n_ctx} is below the engine's minimum of {CTX_PAD}")
    per = CTX_PAD * max(1, settings.n_parallel) if not settings.kv_unified else CTX_PAD

    def largest(ok: object) -> int:
        assert callable(ok)
        lo, hi = 0, cap // per
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid * per) else (lo, mid - 1)
        return lo * per

    def resident(n: int) -> bool:
        s, m = settings.with_(n_ctx=n), _grown(shape, settings, measurement, n)
        if not inventory.gpus:
            return make_plan(shape, inventory, s, measurement=m).feasible
        return _priced(shape, inventory, s, "", "", m, safety, vram_target, overhead)[0].feasible

    def with_tail(n: int) -> bool:
        return make_plan(shape, inventory, settings.with_(n_ctx=n), engine_window=bool(inventory.gpus),
                         measurement=_grown(shape, settings, measurement, n), safety=safety,
                         vram_target=vram_target, overhead=overhead).feasible

    return ContextFit(largest(resident), largest(with_tail), shape.n_ctx_train, cap // per * per)


def _grown(shape: ModelShape, settings: LaunchSettings, measurement: Measurement | None,
           n_ctx: int) -> Measurement | None:
    """Pass 1 measured at ``settings``; at a larger context its compute buffers are a floor. Add the
    growth the estimate gives between the two contexts (the KQ mask; without flash attention the KQ
    matrix, gigabytes), so the largest context is never priced at a small context's compute."""
    if measurement is None or n_ctx <= settings.n_ctx:
        return measurement
    larger = settings.with_(n_ctx=n_ctx)
    small = estimate_compute(shape, settings, context_size(settings))
    big = estimate_compute(shape, larger, context_size(larger))
    gpu, host, cpu = (max(0, b - s) for b, s in ((big.gpu, small.gpu), (big.host, small.host), (big.cpu, small.cpu)))
    on_gpu = any(not d.host for d in measurement.devices)  # a CPU-only probe: its CPU buffer is the compute
    return replace(measurement, devices=tuple(
        replace(d, compute=d.compute + ((host if d.host else gpu) if on_gpu else cpu)) for d in measurement.devices))
