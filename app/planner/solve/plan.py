"""The solver: a model shape, the devices and the launch settings → a :class:`Plan`.

Modes:
- *window* (an engine with a position window, opencoti): every layer on the GPU; the resident
  window is ⌊(budget − weights − compute − overhead − safety − fixed KV) / KV-bytes-per-cell⌋, aligned
  down to 256 and capped at the context; the rest of the context is the host tail.
- *stock*: no position split. The settings as given; else the KV of the fewest layers in host RAM
  with every weight resident (``-ngl`` + ``-ot``), the experts of the fewest layers on the CPU
  (``--n-cpu-moe``, MoE models), the fewest layers moved to the host (``-ngl``), the whole KV on the
  host (``-nkvo``), a smaller KV type, or a shorter context — each with its predicted tokens/s
  (app/planner/solve/speed.py: prefill and decode as the context fills), all listed. The fastest
  (the shortest typical turn) that keeps the asked context and KV type is chosen; else the smaller KV
  type; else a shorter context, where both ends are offered: the largest context fully resident
  (the fastest, chosen) and the longest any of those placements fits (placed the fastest way there).
- *cpu*: no GPU; everything in host RAM.

The data types live in :mod:`app.planner.plan_types` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.planner import words
from app.planner.devices import Inventory
from app.planner.errors import PlannerError
from app.planner.gguf.beside import NOTHING, Beside
from app.planner.gguf.model import ModelShape
from app.planner.measurement import Measurement
from app.planner.memory.compute import estimate_compute
from app.planner.memory.kv import CTX_PAD, context_size
from app.planner.memory.weights import (
    resolve_overrides,
    weight_split,
)
from app.planner.plan_types import (
    Alternative,
    AlternativeKind,
    ContextFit,
    DevicePlan,
    HostPlan,
    KvSummary,
    NetworkCost,
    Plan,
    PlanMode,
)
from app.planner.settings import ALL_LAYERS, LaunchSettings
from app.planner.solve.speed import (
    TURN_FILL,
    TURN_PROMPT,
    TURN_REPLY,
    SpeedFigures,
    SpeedRow,
    default_figures,
    for_inventory,
    predict,
    speed_row,
)
from app.planner.solve.split import network_cost, shares, with_split
from app.planner.solve.stack import Compute, compute_for, kv_per_layer, stack
from app.planner.solve.workload import workload
from app.planner.units import MiB

__all__ = ["Alternative", "AlternativeKind", "ContextFit", "DevicePlan", "HostPlan", "KvSummary",
           "Plan", "PlanMode", "grown_measurement", "make_plan", "max_context", "over_training", "price_as_set"]

#: Above this context, flash attention off means a KQ matrix of gigabytes (docs/domain.md §2).
LONG_CONTEXT_FA = 32768
#: A slot with fewer tokens than this cannot hold a real conversation (a prompt plus an answer).
SHORT_SLOT = 1024


def _kv_summary(shape: ModelShape, settings: LaunchSettings) -> KvSummary:
    kvp = kv_per_layer(shape, settings)
    lay = kvp.layout
    caches: tuple[dict[str, Any], ...] = tuple({"swa": c.swa, "cells": c.cells, "n_stream": c.n_stream, "layers": len(c.layers),
                    "k_bytes": c.k_bytes, "v_bytes": c.v_bytes, "size": c.size} for c in lay.caches)
    if lay.recurrent is not None:
        rs = lay.recurrent
        caches += ({"recurrent": True, "cells": rs.cells, "layers": len(rs.layers), "size": rs.size},)
    return KvSummary(total=lay.total, bytes_per_cell=sum(kvp.per_cell.values()), n_ctx=lay.ctx.n_ctx,
                     n_ctx_seq=lay.ctx.n_ctx_seq, n_seq=lay.ctx.n_seq, caches=caches)


def _fits(gpus: tuple[DevicePlan, ...], host: HostPlan, vram_target: int | None) -> str:
    """'' when everything fits, else the first reason it does not."""
    for g in gpus:
        if g.free < 0:
            return words.gpu_short(g.name, -g.free)
        if vram_target is not None and g.used + g.safety > vram_target:
            return words.over_vram_target(g.name, g.used + g.safety, vram_target)
        if g.budget is not None and g.used + g.safety > g.budget:
            return words.over_vram_target(g.name, g.used + g.safety, g.budget)
    if host.free < 0:
        return words.host_short(-host.free)
    return ""


def _common_warnings(shape: ModelShape, settings: LaunchSettings, compute: Compute,
                     measurement: Measurement | None = None) -> list[str]:
    w = []
    if settings.flash_attn_off and settings.n_ctx > LONG_CONTEXT_FA:
        w.append(words.flash_attention_off(settings.n_ctx))
    caveat = words.compute_source_warning(compute.source, measurement)
    if caveat:
        w.append(caveat)
    n_ctx_seq = kv_per_layer(shape, settings).layout.ctx.n_ctx_seq
    if settings.cache_ram_mib == -1:
        w.append(words.UNLIMITED_PROMPT_CACHE)
    if settings.n_parallel > 1 and n_ctx_seq < SHORT_SLOT:
        w.append(words.short_slots(settings, n_ctx_seq))
    if (past := over_training(shape, settings)) is not None:
        w.append(past)
    return w


def over_training(shape: ModelShape, settings: LaunchSettings) -> str | None:
    """The warning for a context per sequence past the model's training context, or None (``plan``'s
    warnings and ``measure``'s)."""
    n_ctx_seq = kv_per_layer(shape, settings).layout.ctx.n_ctx_seq
    return words.over_training_context(n_ctx_seq, shape.n_ctx_train) if n_ctx_seq > shape.n_ctx_train else None


def _host_short(host: HostPlan, *, kv_tail: bool = False) -> list[str]:
    return [words.host_short(-host.free, kv_tail=kv_tail)] if host.free < 0 else []


def make_plan(shape: ModelShape, inventory: Inventory, settings: LaunchSettings, *,
              engine_window: bool = False, measurement: Measurement | None = None, safety: int = 256 * MiB,
              vram_target: int | None = None, overhead: int | None = None,
              measured: Mapping[LaunchSettings, Measurement] | None = None,
              speed: SpeedFigures | None = None, beside: Beside = NOTHING) -> Plan:
    """Plan one launch. Cheap (no I/O): the GUI calls it on every slider move. ``measured``: pass 1
    for other launches already run (a stock plan prices each alternative with its own numbers when
    it has them, else with ``measurement``). The launch gets the
    inventory's RPC workers (``--rpc``) and, over several devices, the planner's ``-ts`` unless the
    settings carry one. ``speed``: the machine's speed figures (app/machine/calibrate.py; None: the
    defaults), what the alternatives' tokens/s are predicted with. ``beside``: the shapes of the files
    the settings load beside the model (app/planner/gguf/beside.py ``read_beside``)."""
    if inventory.rpc_endpoints and not settings.rpc:
        settings = settings.with_(rpc=inventory.rpc_endpoints)
    figures = for_inventory(speed or default_figures(inventory), inventory)
    if not inventory.gpus:
        plan = _cpu_plan(shape, inventory, settings, measurement, figures, beside)
    elif engine_window:
        plan = _window_plan(shape, inventory, settings, measurement, safety, vram_target, overhead, beside)
    else:
        plan = _stock_plan(shape, inventory, settings, Pass1(measurement, measured or {}, figures, beside), safety,
                           vram_target, overhead)
    plan = replace(plan, speed_figures=figures)
    if inventory.dead_workers:
        dead = tuple(words.dead_worker(ep, why) for ep, why in inventory.dead_workers)
        plan = replace(plan, warnings=dead + plan.warnings)
    return plan


def _cpu_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
              measurement: Measurement | None, figures: SpeedFigures, beside: Beside) -> Plan:
    launch = settings.with_(n_gpu_layers=0, mmproj_offload=not settings.mmproj)  # the projector too on the CPU
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, measurement, kvp.layout, beside)
    ws = weight_split(shape, 0, [], cpu=inv.cpu)
    stacked = stack(shape, inv, launch, ws, kvp, 0, compute, None, 0)
    why = _fits(stacked.gpus, stacked.host, None)
    warnings = _common_warnings(shape, launch, compute, measurement)
    if inv.reason:
        warnings.insert(0, words.no_gpu(inv.reason))
    warnings += _host_short(stacked.host)
    return Plan(launch=launch, mode=PlanMode.CPU, gpus=stacked.gpus, host=stacked.host, feasible=not why,
                reason=why or words.FITS_IN_HOST_RAM, warnings=tuple(warnings), window_cells=0,
                tail_cells=kvp.cells, vram_target=None, kv=_kv_summary(shape, launch), projector=compute.projector,
                speed=speed_row(workload(shape, inv, launch, ws, kvp, None), figures))


def _window_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings, measurement: Measurement | None,
                 safety: int, vram_target: int | None, overhead: int | None, beside: Beside) -> Plan:
    warnings: list[str] = []
    launch = settings
    if settings.kv_unified:  # the window engine refuses -kvu (app.engine.argv); one slot: the same cache
        launch = settings.with_(kv_unified=False)
        if settings.n_parallel > 1:
            warnings.append(words.WINDOW_WITHOUT_KVU)
    launch = launch.with_(offload_kqv=True)
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, measurement, kvp.layout, beside)
    free = [g.free for g in inv.gpus]
    ws = weight_split(shape, launch.n_gpu_layers, free)
    # Everything but the window, then what is left per GPU buys cells of that GPU's layers.
    gpus0 = stack(shape, inv, launch, ws, kvp, 0, compute, overhead, safety).gpus
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
    stacked = stack(shape, inv, launch, ws, kvp, window, compute, overhead, safety)
    why = _fits(stacked.gpus, stacked.host, vram_target)
    warnings += _common_warnings(shape, launch, compute, measurement)
    if window < launch.effective_n_ubatch and not why:
        warnings.append(words.window_below_ubatch(window, launch.effective_n_ubatch))
    warnings += _host_short(stacked.host, kv_tail=True)
    return Plan(launch=launch, mode=PlanMode.WINDOW, gpus=stacked.gpus, host=stacked.host, feasible=not why,
                reason=why or words.window_reason(window, kvp.cells), warnings=tuple(warnings),
                window_cells=window, tail_cells=kvp.cells - window, vram_target=vram_target,
                kv=_kv_summary(shape, launch), projector=compute.projector)


@dataclass(frozen=True)
class Pass1:
    """The pass-1 numbers a stock plan prices with: ``exact`` ones for launches measured as such
    (a fallback measured once is priced with its own numbers, not the settings-as-given's), else
    ``default``."""

    default: Measurement | None
    exact: Mapping[LaunchSettings, Measurement] = field(default_factory=dict)
    #: The machine's speed figures the alternatives' tokens/s are predicted with.
    speed: SpeedFigures | None = None
    #: The shapes of the files the launch loads beside the model (app/planner/gguf/beside.py).
    beside: Beside = NOTHING

    def at(self, launch: LaunchSettings) -> Measurement | None:
        return self.exact.get(launch, self.default)


@dataclass(frozen=True)
class Priced:
    """One configuration priced: the alternative it is, what each device holds, why it does not fit
    ('' when it does) and the compute buffers it was priced with."""

    alternative: Alternative
    gpus: tuple[DevicePlan, ...]
    host: HostPlan
    why: str
    compute: Compute
    network: NetworkCost | None = None


def _priced(shape: ModelShape, inv: Inventory, launch: LaunchSettings, kind: AlternativeKind, label: str,
            note: str, pass1: Pass1, safety: int, vram_target: int | None,
            overhead: int | None) -> Priced:
    kvp = kv_per_layer(shape, launch)
    compute = compute_for(shape, inv, launch, pass1.at(launch), kvp.layout, pass1.beside)
    split = with_split(shape, inv, launch, kvp, compute, overhead, safety, vram_target)
    if split != launch:  # pass 1's numbers are for a launch with its -ts: look again with this one
        launch = split
        compute = compute_for(shape, inv, launch, pass1.at(launch), kvp.layout, pass1.beside)
    ws = weight_split(shape, launch.n_gpu_layers, shares(inv, launch),
                      overrides=resolve_overrides(launch, [g.engine_name for g in inv.gpus]))
    resident = kvp.cells if launch.offload_kqv else 0
    stacked = stack(shape, inv, launch, ws, kvp, resident, compute, overhead, safety)
    why = _fits(stacked.gpus, stacked.host, vram_target)
    network = network_cost(shape, ws.devices, [g.engine_name for g in inv.gpus], [g.is_rpc for g in inv.gpus],
                           ws.gpu, launch.effective_n_ubatch, min(launch.n_batch, launch.n_parallel))
    row: SpeedRow | None = None
    decode_s = prefill_s = 0.0
    if pass1.speed is not None and label:  # (a search step has no label: its speed is never shown)
        work = workload(shape, inv, launch, ws, kvp, network)
        row = speed_row(work, pass1.speed)
        turn = predict(work, pass1.speed, TURN_FILL)
        decode_s, prefill_s = TURN_REPLY / turn.decode, TURN_PROMPT / turn.prefill
    alt = Alternative(kind=kind, label=label, launch=launch, feasible=not why,
                      host_bytes_per_token=stacked.host_bytes_per_token, note=why or note,
                      prefill_bytes_per_ubatch=stacked.prefill_bytes_per_ubatch,
                      decode_s=decode_s, prefill_s=prefill_s, speed=row)
    return Priced(alt, stacked.gpus, stacked.host, why, compute, network)


def price_as_set(shape: ModelShape, inventory: Inventory, launch: LaunchSettings, *,
                 measurement: Measurement | None = None, safety: int = 256 * MiB, vram_target: int | None = None,
                 overhead: int | None = None, speed: SpeedFigures | None = None,
                 beside: Beside = NOTHING) -> Priced:
    """``launch`` exactly as set, priced: what each device holds and why it does not fit ('' when it
    does), with none of the alternatives a stock plan looks for (the context chart, app/planner/
    curve.py, prices one per context and KV type), and its predicted speed (``speed``: the machine's
    figures, None: the defaults). It gets the inventory's RPC workers as a plan does."""
    if inventory.rpc_endpoints and not launch.rpc:
        launch = launch.with_(rpc=inventory.rpc_endpoints)
    figures = for_inventory(speed or default_figures(inventory), inventory)
    return _priced(shape, inventory, launch, AlternativeKind.AS_SET, words.AS_SET, "",
                   Pass1(measurement, speed=figures, beside=beside), safety, vram_target, overhead)


def _fits_as(shape: ModelShape, inv: Inventory, launch: LaunchSettings, pass1: Pass1,
             safety: int, vram_target: int | None, overhead: int | None) -> bool:
    """Whether ``launch`` fits (priced without words: a search step, not an alternative)."""
    return _priced(shape, inv, launch, AlternativeKind.AS_SET, "", "", pass1, safety, vram_target,
                   overhead).alternative.feasible


def _fewest_layers_moved(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
                         pass1: Pass1, safety: int, vram_target: int | None,
                         overhead: int | None) -> int | None:
    """Largest -ngl that fits (binary search: fewer layers on the GPU never needs more there)."""
    def ok(ngl: int) -> bool:
        return _fits_as(shape, inv, settings.with_(n_gpu_layers=ngl), pass1, safety, vram_target, overhead)
    lo, hi = 0, shape.n_layer  # n_layer + 1 would be everything
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def kv_host_launch(shape: ModelShape, inv: Inventory, settings: LaunchSettings, n_host: int) -> LaunchSettings:
    """The KV of the first ``n_host`` layers in host RAM, every weight on the devices: ``-ngl`` leaves
    those layers (and so their KV, src/llama-kv-cache.cpp: a layer's KV is on its device) on the CPU,
    and ``-ot 'blk\\.(0|1|…)\\.=DEV'`` brings their weights back to the first device."""
    layers = "|".join(str(i) for i in range(n_host))
    return settings.with_(n_gpu_layers=shape.n_layer + 1 - n_host,
                          tensor_overrides=(*settings.tensor_overrides, (f"blk\\.({layers})\\.", inv.gpus[0].engine_name)))


def _smaller_kv(settings: LaunchSettings) -> LaunchSettings | None:
    """The same launch with a q8_0 KV cache, when the cache is wider than that (a quantized V needs
    flash attention: docs/domain.md §1); None otherwise."""
    wide = ("f32", "f16", "bf16")
    if settings.type_k not in wide and settings.type_v not in wide:
        return None
    if settings.flash_attn_off:
        return None
    return settings.with_(type_k="q8_0" if settings.type_k in wide else settings.type_k,
                          type_v="q8_0" if settings.type_v in wide else settings.type_v)


def _moved_launch(shape: ModelShape, inv: Inventory, settings: LaunchSettings, kind: AlternativeKind,
                  n: int) -> LaunchSettings:
    """``settings`` with ``n`` layers moved the ``kind`` way: their KV to host RAM (KV_HOST_LAYERS),
    their experts to the CPU (EXPERTS_ON_CPU), or every layer's experts and the KV of ``n`` (BOTH)."""
    if kind is AlternativeKind.KV_HOST_LAYERS:
        return kv_host_launch(shape, inv, settings, n)
    if kind is AlternativeKind.BOTH:
        return kv_host_launch(shape, inv, settings.with_(n_cpu_moe=shape.n_layer), n)
    return settings.with_(n_cpu_moe=n)


def _moved_range(shape: ModelShape, settings: LaunchSettings, kind: AlternativeKind) -> tuple[int, int] | None:
    """How many layers a ``kind`` move can take (fewest, most), or None when it does not apply:
    layers already moved, KV already on the host, weights already placed by -ot, a dense model."""
    if settings.n_gpu_layers <= shape.n_layer or not settings.offload_kqv or settings.tensor_overrides:
        return None
    if kind in (AlternativeKind.EXPERTS_ON_CPU, AlternativeKind.BOTH) and not shape.n_expert:
        return None
    hi = shape.n_layer if kind is AlternativeKind.EXPERTS_ON_CPU else shape.n_layer - 1
    return (1, hi) if hi >= 1 else None


def _host_attention(pass1: Pass1) -> bool:
    """The engine attends over host KV on the CPU for decode (Headroom's patch 5): the notes say so."""
    return pass1.speed is not None and pass1.speed.host_attention


#: The layer moves a stock plan searches, in the order it lists them.
MOVES = (AlternativeKind.KV_HOST_LAYERS, AlternativeKind.EXPERTS_ON_CPU, AlternativeKind.BOTH)


def _fewest_moved(shape: ModelShape, inv: Inventory, settings: LaunchSettings, kind: AlternativeKind,
                  pass1: Pass1, safety: int, vram_target: int | None,
                  overhead: int | None) -> Alternative | None:
    """The fewest layers whose KV goes to host RAM (KV_HOST_LAYERS) or whose experts go to the CPU
    (EXPERTS_ON_CPU, MoE models), everything else resident, when such a launch fits; None otherwise
    (or when it does not apply: see ``_moved_range``)."""
    span = _moved_range(shape, settings, kind)
    if span is None:
        return None
    if kind is AlternativeKind.BOTH and _fits_as(shape, inv, settings.with_(n_cpu_moe=shape.n_layer), pass1, safety,
                                                  vram_target, overhead):
        return None  # the experts alone do it: EXPERTS_ON_CPU prices that

    def ok(n: int) -> bool:
        return _fits_as(shape, inv, _moved_launch(shape, inv, settings, kind, n), pass1, safety, vram_target, overhead)

    lo, hi = span
    if not ok(hi):
        return None
    while lo < hi:  # more layers moved never needs more on the devices
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    if kind is AlternativeKind.KV_HOST_LAYERS:
        label, note = words.kv_host_layers_label(lo), words.kv_host_layers_note(shape.n_layer, lo, _host_attention(pass1))
    elif kind is AlternativeKind.BOTH:
        label, note = words.both_label(shape.n_layer, lo), words.both_note(shape.n_layer, lo)
    else:
        label, note = words.experts_on_cpu_label(lo), words.experts_on_cpu_note(shape.n_layer, lo)
    return _priced(shape, inv, _moved_launch(shape, inv, settings, kind, lo), kind, label, note, pass1, safety,
                   vram_target, overhead).alternative


def _some_placement_fits(shape: ModelShape, inv: Inventory, settings: LaunchSettings, pass1: Pass1,
                         safety: int, vram_target: int | None, overhead: int | None) -> bool:
    """Whether a stock plan of ``settings`` finds a launch that keeps its context and KV type: the
    settings as given, or a placement at the most it moves (each search above gives up when that
    does not fit: ``_fewest_moved``, ``_fewest_layers_moved``), or -nkvo."""
    tries = [settings, settings.with_(n_gpu_layers=0)]
    if settings.offload_kqv:
        tries.append(settings.with_(n_gpu_layers=ALL_LAYERS, offload_kqv=False))
    for kind in MOVES:
        span = _moved_range(shape, settings, kind)
        if span is not None:
            tries.append(_moved_launch(shape, inv, settings, kind, span[1]))
    return any(_fits_as(shape, inv, t, pass1, safety, vram_target, overhead) for t in tries)


def _longest_placed(shape: ModelShape, inv: Inventory, settings: LaunchSettings, top: int, pass1: Pass1,
                    safety: int, vram_target: int | None, overhead: int | None) -> int:
    """The longest context up to ``top`` that some placement the planner knows fits (experts on the
    CPU, the KV of some layers on the host, fewer layers, -nkvo; ``_some_placement_fits``); 0 when
    not even the shortest does (the weights alone do not)."""
    args = (pass1, safety, vram_target, overhead)
    # (a longer context never needs less, whatever the placement)
    return _largest_context(settings, top, lambda n: _some_placement_fits(shape, inv, settings.with_(n_ctx=n), *args))


def _largest_context(settings: LaunchSettings, top: int, ok: Callable[[int], bool]) -> int:
    """The largest context up to ``top`` (a multiple of 256, or 0) that ``ok`` accepts, ``ok`` being
    monotonic. Without -kvu each slot's share is padded up to 256 (app/planner/memory/kv.py
    ``context_size``): the steps are 256 × slots, and ``top`` itself is the last one, holding as many
    cells as the next step (-np 3 at 4,096: 4,608 cells, the same as 4,608)."""
    top = top // CTX_PAD * CTX_PAD
    per = CTX_PAD * max(1, settings.n_parallel) if not settings.kv_unified else CTX_PAD

    def at(k: int) -> int:
        return min(k * per, top)

    lo, hi = 0, -(-top // per)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(at(mid)) else (lo, mid - 1)
    return at(lo)


def _shorter_context(shape: ModelShape, inv: Inventory, settings: LaunchSettings, keeps_ctx: bool,
                     pass1: Pass1, safety: int, vram_target: int | None, overhead: int | None) -> list[Alternative]:
    """The SHORTER_CONTEXT alternatives, at both ends. The fastest: the largest context the settings
    as given hold fully resident (no host cost per token). When nothing keeps the asked context
    (``keeps_ctx`` false), also the longest: the largest context below the asked one that some
    placement fits, launched as a stock plan at that context chooses (its fastest) — when it is
    longer than the fully resident one. Empty when neither fits."""
    args = (pass1, safety, vram_target, overhead)
    out: list[Alternative] = []
    fit = max_context(shape, inv, settings, measurement=pass1.default, safety=safety,
                      vram_target=vram_target, overhead=overhead, tail=False, speed=pass1.speed).resident
    if fit >= CTX_PAD:
        out.append(_priced(shape, inv, settings.with_(n_ctx=fit), AlternativeKind.SHORTER_CONTEXT,
                           words.shorter_context_label(fit), words.shorter_context_note(fit), *args).alternative)
    if keeps_ctx:
        return out
    n_ctx = _longest_placed(shape, inv, settings, settings.n_ctx - 1, *args)  # below the asked (it does not fit)
    if n_ctx < CTX_PAD or n_ctx <= fit:
        return out
    at = _stock_plan(shape, inv, settings.with_(n_ctx=n_ctx), *args, look_shorter=False)  # (no search of its own)
    placed = next((a for a in at.alternatives if a.chosen), None)
    if placed is None or not placed.feasible or placed.kind is AlternativeKind.SMALLER_KV_TYPE:
        return out
    if placed.kind is AlternativeKind.AS_SET:
        label, note = words.shorter_context_label(n_ctx), words.shorter_context_note(n_ctx)
    else:
        label, note = (words.shorter_context_label(n_ctx, placed.label),
                       words.shorter_context_note(n_ctx, placed.note))
    alt = _priced(shape, inv, placed.launch, AlternativeKind.SHORTER_CONTEXT, label, note, *args).alternative
    return [*out, replace(alt, placement="" if placed.kind is AlternativeKind.AS_SET else placed.label)]


def _kv_host_layers(shape: ModelShape, launch: LaunchSettings) -> int:
    """How many trunk layers keep their KV in host RAM: those ``-ngl`` leaves on the CPU, or all."""
    if not launch.offload_kqv:
        return shape.n_layer
    return max(0, min(shape.n_layer, shape.n_layer + 1 - launch.n_gpu_layers))


def _stock_plan(shape: ModelShape, inv: Inventory, settings: LaunchSettings, pass1: Pass1,
                safety: int, vram_target: int | None, overhead: int | None, *, look_shorter: bool = True) -> Plan:
    """``look_shorter``: look for a shorter context too (off for the plan ``_shorter_context`` makes at
    the context it found: one level, no recursion)."""
    args = (pass1, safety, vram_target, overhead)
    first = _priced(shape, inv, settings, AlternativeKind.AS_SET, words.AS_SET,
                    words.as_set_note(shape.n_layer, settings), *args)
    options = [first.alternative]
    if not first.alternative.feasible:
        for kind in MOVES:
            found = _fewest_moved(shape, inv, settings, kind, *args)
            if found is not None:
                options.append(found)
        ngl = _fewest_layers_moved(shape, inv, settings, *args)
        if ngl is not None:
            moved = shape.n_layer + 1 - ngl
            options.append(_priced(shape, inv, settings.with_(n_gpu_layers=ngl), AlternativeKind.FEWER_LAYERS,
                                   words.fewer_layers_label(ngl), words.fewer_layers_note(shape.n_layer, moved),
                                   *args).alternative)
        if settings.offload_kqv:
            options.append(_priced(shape, inv, settings.with_(n_gpu_layers=ALL_LAYERS, offload_kqv=False),
                                   AlternativeKind.KV_ON_HOST, words.KV_ON_HOST_LABEL, words.kv_on_host_note(_host_attention(pass1)),
                                   *args).alternative)
        smaller = _smaller_kv(settings)
        if smaller is not None:
            try:
                options.append(_priced(shape, inv, smaller, AlternativeKind.SMALLER_KV_TYPE,
                                       words.smaller_kv_label(smaller), words.SMALLER_KV_NOTE, *args).alternative)
            except PlannerError:  # a type this model cannot use (a head size q8_0 does not divide): not offered
                pass
        if look_shorter:
            keeps = any(a.feasible and a.kind is not AlternativeKind.SMALLER_KV_TYPE for a in options)
            options += _shorter_context(shape, inv, settings, keeps, *args)
    options = _distinct(options)
    # A shorter context or a smaller KV type changes what the model can do or computes: offered,
    # chosen only when nothing that keeps both fits; a smaller KV type (listed first) before a
    # shorter context, and of the shorter contexts the fastest (fully resident: the longest is
    # offered beside it, with its speed).
    keep_ctx = [a for a in options if a.feasible and a.launch.n_ctx == settings.n_ctx
                and a.kind is not AlternativeKind.SMALLER_KV_TYPE]
    shorter = [a for a in options if a.feasible and a not in keep_ctx]
    # The fastest typical turn (app/planner/solve/speed.py) at the asked context; else the shorter context.
    best = min(keep_ctx, key=lambda a: a.turn_s) if keep_ctx else (shorter[0] if shorter else options[0])
    alts = tuple(replace(a, chosen=a is best) for a in options)
    chosen = _priced(shape, inv, best.launch, best.kind, best.label, best.note, *args)
    warnings = _common_warnings(shape, best.launch, chosen.compute, pass1.at(chosen.alternative.launch))
    as_set = best is first.alternative
    if not as_set and best.feasible:
        warnings.append(words.chose_instead(first.why, best.label, best.note))
        used = pass1.at(chosen.alternative.launch)
        if used is not None and used.launch is None:
            # (a recorded measurement of unknown settings: assumed to be the settings as given)
            warnings.append(words.measure_again(best.label))
    warnings += _host_short(chosen.host)
    kvp = kv_per_layer(shape, best.launch)
    window = kvp.cells if best.launch.offload_kqv else 0
    reason = chosen.why or words.stock_reason(best.label, best.note, as_set=as_set)
    return Plan(launch=chosen.alternative.launch, mode=PlanMode.STOCK, gpus=chosen.gpus, host=chosen.host,
                feasible=not chosen.why, reason=reason, warnings=tuple(warnings), window_cells=window,
                tail_cells=kvp.cells - window, vram_target=vram_target, alternatives=alts,
                kv=_kv_summary(shape, best.launch), network=chosen.network,
                kv_host_layers=_kv_host_layers(shape, chosen.alternative.launch), projector=chosen.compute.projector,
                speed=chosen.alternative.speed)


def _distinct(options: list[Alternative]) -> list[Alternative]:
    """Each launch once (the first that names it): a shorter context's placement may be one already
    listed."""
    seen: set[LaunchSettings] = set()
    out = []
    for a in options:
        if a.launch not in seen:
            seen.add(a.launch)
            out.append(a)
    return out


def max_context(shape: ModelShape, inventory: Inventory, settings: LaunchSettings, *,
                engine_window: bool = False, measurement: Measurement | None = None,
                safety: int = 256 * MiB, vram_target: int | None = None,
                overhead: int | None = None, tail: bool = True, speed: SpeedFigures | None = None,
                beside: Beside = NOTHING) -> ContextFit:
    """The largest context (multiple of 256, up to the training context or the asked one) that is
    fully resident, and (``tail``) the largest that fits with part of it in host RAM: the window
    engine's host tail, or on a stock engine any placement a stock plan knows (the KV of some
    layers on the host, fewer layers, -nkvo: the longest end a stock plan offers)."""
    cap = max(shape.n_ctx_train, settings.n_ctx) // CTX_PAD * CTX_PAD
    if cap < CTX_PAD:
        raise PlannerError(f"context {settings.n_ctx} is below the engine's minimum of {CTX_PAD}")

    def largest(ok: Callable[[int], bool]) -> int:
        return _largest_context(settings, cap, ok)

    def resident(n: int) -> bool:
        s, m = settings.with_(n_ctx=n), grown_measurement(shape, settings, measurement, n)
        if not inventory.gpus:
            return make_plan(shape, inventory, s, measurement=m, beside=beside).feasible
        return _fits_as(shape, inventory, s, Pass1(m, beside=beside), safety, vram_target, overhead)

    def with_tail(n: int) -> bool:
        return make_plan(shape, inventory, settings.with_(n_ctx=n), engine_window=bool(inventory.gpus),
                         measurement=grown_measurement(shape, settings, measurement, n), safety=safety,
                         vram_target=vram_target, overhead=overhead, beside=beside).feasible

    fits = largest(resident)
    if not tail:
        longest = 0
    elif engine_window or not inventory.gpus:
        longest = largest(with_tail)
    else:
        pass1 = Pass1(measurement, speed=speed, beside=beside)
        longest = max(fits, _longest_placed(shape, inventory, settings, cap, pass1, safety, vram_target, overhead))
    resident_speed = None
    if fits > 0 and tail:  # (the whole fit, as the window shows it; the plan's own search needs no speed)
        resident_speed = price_as_set(shape, inventory, settings.with_(n_ctx=fits),
                                      measurement=grown_measurement(shape, settings, measurement, fits),
                                      safety=safety, vram_target=vram_target, overhead=overhead,
                                      speed=speed, beside=beside).alternative.speed
    return ContextFit(fits, longest, shape.n_ctx_train, cap, resident_speed)


def grown_measurement(shape: ModelShape, settings: LaunchSettings, measurement: Measurement | None,
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
