"""Stacking one configuration onto the devices: what each GPU and the host hold.

Pure bookkeeping for :mod:`app.planner.solve.plan`: given where the weights go (weights.py), the KV
layout (kv.py), the compute buffers and a number of resident KV cells, it fills DevicePlan and
HostPlan. KV follows its layer's device (src/llama-kv-cache.cpp: ``model.dev_layer(il)`` when
``offload_kqv``, else the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from app.planner import words
from app.planner.devices import Backend, Inventory
from app.planner.errors import PlannerError
from app.planner.gguf.beside import NOTHING, Beside, draft_problem
from app.planner.gguf.model import ModelShape
from app.planner.measurement import Measurement
from app.planner.memory import extras
from app.planner.memory.compute import cuda_fit_gap, estimate_compute
from app.planner.memory.kv import KvLayout, kv_layout
from app.planner.memory.projector import HOST, projector_for
from app.planner.memory.weights import (
    DEFAULT_GPU_OVERHEAD,
    DEFAULT_GPU_OVERHEAD_SOURCE,
    WeightSplit,
    output_buffer_bytes,
    resolve_overrides,
    weight_split,
)
from app.planner.plan_types import DevicePlan, Extras, HostPlan, ProjectorPlan
from app.planner.settings import (
    AUTO_CACHE_MIN_MIB,
    AUTO_CACHE_RESERVE_MIB,
    DEFAULT_CACHE_RAM_MIB,
    LaunchSettings,
)
from app.planner.sources import Source, Sourced, SourceKind
from app.planner.units import MiB


@dataclass(frozen=True)
class KvPerLayer:
    """For each trunk layer: bytes that do not grow with the window (SWA caches), bytes per cell."""

    layout: KvLayout
    fixed: dict[int, int]
    per_cell: dict[int, int]
    cells: int  # context-sized cells across streams (= n_ctx)


@lru_cache(maxsize=256)
def kv_per_layer(shape: ModelShape, settings: LaunchSettings) -> KvPerLayer:
    layout = kv_layout(shape, settings)
    fixed: dict[int, int] = {}
    per_cell: dict[int, int] = {}
    base = layout.base
    for c in layout.caches:
        for il, kb, vb in zip(c.layers, c.k_layer, c.v_layer, strict=True):
            if c is base:
                per_cell[il] = (kb + vb) // (c.cells * c.n_stream)
            else:
                fixed[il] = fixed.get(il, 0) + kb + vb
    rs = layout.recurrent
    if rs is not None:  # recurrent state does not grow with the context: it stays with its layer
        for il in rs.layers:
            fixed[il] = fixed.get(il, 0) + rs.r_bytes + rs.s_bytes
    return KvPerLayer(layout, fixed, per_cell, base.cells * base.n_stream)


@dataclass(frozen=True)
class Compute:
    gpu: dict[str, int]  # engine device name -> bytes
    host: int
    source: Source
    #: The draft model's own compute buffers (``-md``; None: no draft).
    draft: Compute | None = None
    projector: ProjectorPlan | None = None  # the vision projector (weights too), app/planner/memory/projector.py
    #: The shapes of the files beside the model these were priced for (app/planner/gguf/beside.py): ``stack``
    #: lays out the LoRAs' and the draft's weights from them.
    beside: Beside = NOTHING


@dataclass(frozen=True)
class Stacked:
    """One configuration on the devices: each GPU's stack, the host's, and the host-side bytes the
    CPU touches per decoded token (weights of host layers plus host KV; lower is faster)."""

    gpus: tuple[DevicePlan, ...]
    host: HostPlan
    host_bytes_per_token: int
    #: Per prefill ubatch: host layer weights streamed to a GPU, plus the host KV attention reads.
    prefill_bytes_per_ubatch: int = 0


def compute_for(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
                measurement: Measurement | None, ctx_kv: KvLayout, beside: Beside = NOTHING) -> Compute:
    """Measured compute buffers when pass 1 saw these devices; otherwise the marked estimate. A
    draft model's are its own pass 1's (``measurement.draft``), or its own estimate; with the vision
    projector's plan (``--mmproj``). ``beside``: the shapes of the files the settings load beside the
    model (PlannerError when they are not those files, or llama.cpp would refuse one for this model)."""
    beside.check(settings)
    main = replace(_compute_for(shape, inv, settings, measurement, ctx_kv), beside=beside,
                   projector=projector_for(shape, inv, settings, measurement, beside.projector))
    if beside.draft is None:
        return main
    if problem := draft_problem(shape, beside.draft):
        raise PlannerError(f"{beside.draft.path.name}: {problem}")
    dshape, ds = beside.draft, settings.draft_settings()
    draft = _compute_for(dshape, inv, ds, measurement.draft if measurement is not None else None,
                         kv_layout(dshape, ds))
    return replace(main, draft=draft)


def _compute_for(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
                 measurement: Measurement | None, ctx_kv: KvLayout) -> Compute:
    names = [g.engine_name for g in inv.gpus]
    if measurement is not None:
        label = Source(SourceKind.MEASURED)
        measured_for = measurement.launch
        if measured_for is not None and not names and measurement.backend == Backend.CPU:
            # no GPU: -ngl and --no-mmproj-offload are moot
            measured_for = measured_for.with_(n_gpu_layers=settings.n_gpu_layers, mmproj_offload=settings.mmproj_offload)
        if measured_for is not None and measured_for != settings:
            # Pass 1 is only exact for its own launch: say which settings these numbers are for.
            label = Source(SourceKind.MEASURED_ELSEWHERE, measured_for.differences(settings))
        if not names:
            return Compute({}, sum(d.compute for d in measurement.devices), label)
        seen = [measurement.device(n) is not None for n in names]
        same_devices = measured_for is not None and (measured_for.rpc, measured_for.tensor_split) == (
            settings.rpc, settings.tensor_split)
        if all(seen) or (same_devices and any(seen)):
            # On the very devices and split pass 1 ran with, a device it gave no layers logs no
            # compute buffer: it gets none.
            gpu = {n: (d.compute if (d := measurement.device(n)) is not None else 0) for n in names}
            return Compute(gpu, measurement.host_compute, label)
    est = estimate_compute(shape, settings, ctx_kv.ctx)
    if not names:
        return Compute({}, est.cpu, Source(SourceKind.ESTIMATED))
    # The CUDA terms were fitted to one H200's pass 1: outside those launches the number says so.
    return Compute(dict.fromkeys(names, est.gpu), est.host, Source(SourceKind.ESTIMATED,
                                                                  words.cuda_gap(cuda_fit_gap(shape, settings))))



def prompt_cache_bytes(cache_ram_mib: int | None, host_left: int, context_kv: int) -> int:
    """What the plan holds back in host RAM for the server's prompt cache: a size given as given
    (-1, no limit, cannot be held back: a warning says so); auto (None), ``context_kv`` (one full
    context's KV) but at least AUTO_CACHE_MIN_MIB and at most the engine's default, or what
    ``host_left`` (host RAM after the rest of the launch) leaves less AUTO_CACHE_RESERVE_MIB, in
    whole MiB (``--cache-ram`` takes MiB)."""
    if cache_ram_mib is not None:
        return max(cache_ram_mib, 0) * MiB
    wanted = min(DEFAULT_CACHE_RAM_MIB, max(AUTO_CACHE_MIN_MIB, -(-context_kv // MiB)))
    return max(0, min(wanted, (host_left // MiB) - AUTO_CACHE_RESERVE_MIB)) * MiB

def stack(shape: ModelShape, inv: Inventory, settings: LaunchSettings, ws: WeightSplit, kvp: KvPerLayer,
          resident_cells: int, compute: Compute, overhead: int | None, safety: int,
          ) -> Stacked:
    """The per-device stacks for this configuration, and the host-side bytes touched per token."""
    # Each layer's KV with its layer's device (all of it on the host with -nkvo); summed per device
    # first, then sized: a plan prices hundreds of launches (the searches, the context chart).
    n_gpu = len(inv.gpus)
    fixed_on, cell_on = [0] * (n_gpu + 1), [0] * (n_gpu + 1)  # [n_gpu]: the host
    fixed_get, cell_get = kvp.fixed.get, kvp.per_cell.get
    for il, dev in enumerate(ws.devices[:shape.n_layer]):
        d = n_gpu if dev is None or not settings.offload_kqv else dev
        fixed_on[d] += fixed_get(il, 0)
        cell_on[d] += cell_get(il, 0)
    kv_gpu = [fixed_on[i] + cell_on[i] * resident_cells for i in range(n_gpu)]
    kv_host = (fixed_on[n_gpu] + cell_on[n_gpu] * kvp.cells
               + sum(cell_on[:n_gpu]) * (kvp.cells - resident_cells))
    more, host_more = _extras(shape, inv, settings, ws, compute)
    ovh = DEFAULT_GPU_OVERHEAD if overhead is None else overhead
    ovh_src = (DEFAULT_GPU_OVERHEAD_SOURCE if overhead is None
               else overhead.source if isinstance(overhead, Sourced) else Source(SourceKind.GIVEN))
    gpus = []
    for i, g in enumerate(inv.gpus):
        comp = compute.gpu.get(g.engine_name, 0) if any(d == i for d in ws.devices) else 0
        # A worker's own process (and its CUDA context, if any) was running when it reported its free
        # memory: this engine adds no process there.
        dev_ovh, dev_ovh_src = (0, Source(SourceKind.FROM_RPC)) if g.is_rpc else (ovh, ovh_src)
        other = max(g.total - g.free, 0)
        held = sum(p.used for p in g.processes)
        # What no process holds is the driver's (a simulated card has no processes, only that reserve).
        reserve = other if g.simulated else (max(other - held, 0) if g.processes_known else 0)
        src_total = Source(g.kind.source)
        src_other = src_total
        if not g.simulated and g.processes_known:
            src_other = Source(SourceKind.FROM_NVML,
                               words.nvml_processes_detail(len(g.processes), min(held, other), reserve))
        proj = compute.projector.total if compute.projector and compute.projector.device == g.engine_name else 0
        free = g.free - ws.gpu[i] - comp - kv_gpu[i] - dev_ovh - safety - more[i].total - proj
        gguf = Source(SourceKind.FROM_GGUF)
        kv_src = Source(SourceKind.FROM_LAW, shape.law) if shape.law else gguf
        gpus.append(DevicePlan(
            name=g.engine_name, label=g.label, total=g.total,
            other_processes=other, weights=ws.gpu[i], compute=comp, kv_resident=kv_gpu[i], overhead=dev_ovh,
            safety=safety, free=free, simulated=g.simulated, driver_reserve=reserve,
            sources={"total": src_total, "other_processes": src_other, "weights": gguf,
                     "compute": compute.source, "kv_resident": kv_src, "overhead": dev_ovh_src,
                     "safety": Source(SourceKind.GIVEN)},
            remote=g.endpoint if g.is_rpc else "", budget=g.budget, extras=replace(more[i].extras, projector=proj)))
        gpus[-1].sources.update(more[i].sources)
    pinned = compute.host
    output = output_buffer_bytes(shape, settings) + host_more.output
    pr = compute.projector
    host_proj = (pr.total if pr.device == HOST else pr.compute_host) if pr is not None else 0
    before_cache = (inv.host.available - ws.host_weights - kv_host - pinned - output - host_more.total
                    - host_proj)
    context_kv = sum(fixed_on) + sum(cell_on) * kvp.cells
    prompt_cache = prompt_cache_bytes(settings.cache_ram_mib, before_cache, context_kv)
    weights_src = Source(SourceKind.FROM_GGUF, words.repacked_detail(ws.repacked) if ws.repacked else "")
    from_os = Source(SourceKind.FROM_OS)
    host = HostPlan(
        total=inv.host.total, available=inv.host.available, weights_mapped=ws.host_weights, kv_tail=kv_host,
        compute_pinned=pinned, free=before_cache - prompt_cache,
        sources={"total": from_os, "available": from_os, "weights_mapped": weights_src,
                 "kv_tail": Source(SourceKind.FROM_LAW, shape.law) if shape.law else Source(SourceKind.FROM_GGUF),
                 "compute_pinned": compute.source,
                 "prompt_cache": Source(SourceKind.GIVEN if settings.cache_ram_mib is not None
                                        else SourceKind.DEFAULT,
                                        words.prompt_cache_detail(settings.cache_ram_mib, prompt_cache // MiB,
                                                                  context_kv, kvp.cells))},
        prompt_cache=prompt_cache, weights_repacked=ws.repacked, output_buffer=output,
        extras=replace(host_more.extras, projector=host_proj))
    host.sources.update(host_more.sources)
    host.sources["output_buffer"] = Source(SourceKind.FROM_GGUF, words.output_buffer_detail(settings))
    return Stacked(tuple(gpus), host, ws.host_layers + kv_host, ws.prefill_host_weights + kv_host)


@dataclass(frozen=True)
class Extra:
    """What a LoRA and a draft model add on one device (or the host): the plan's record (its
    projector filled in by ``stack``), the draft's logits buffer (host only) and their sources."""

    extras: Extras = field(default_factory=Extras)
    output: int = 0
    sources: dict[str, Source] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.extras.total


def _extras(shape: ModelShape, inv: Inventory, settings: LaunchSettings, ws: WeightSplit,
            compute: Compute) -> tuple[list[Extra], Extra]:
    """Per GPU and for the host: the LoRA adapters' buffers on the devices of the weights they adapt
    (app/planner/memory/extras.py) and the draft model stacked as a second model with its own settings."""
    n = len(inv.gpus)
    names = [g.engine_name for g in inv.gpus]
    lora_gpu, lora_host = [0] * n, 0
    if compute.beside.loras:
        lora_gpu, lora_host = extras.lora_bytes(shape, compute.beside.loras, ws.devices, n,
                                                resolve_overrides(settings, names) if n else ())
    d_gpus: tuple[DevicePlan, ...] = ()
    d_host: HostPlan | None = None
    d_src = Source(SourceKind.ESTIMATED)
    if compute.beside.draft is not None and compute.draft is not None:
        dshape, ds = compute.beside.draft, settings.draft_settings()
        share = list(settings.tensor_split[:n]) + [0] * (n - len(settings.tensor_split)) if settings.tensor_split \
            else [g.free for g in inv.gpus]
        dws = weight_split(dshape, ds.n_gpu_layers if n else 0, share if n else [], cpu=inv.cpu)
        dkv = kv_per_layer(dshape, ds)
        drafted = stack(dshape, inv, ds, dws, dkv, dkv.cells if ds.offload_kqv else 0, compute.draft, 0, 0)
        d_gpus, d_host, d_src = drafted.gpus, drafted.host, compute.draft.source
    gguf = Source(SourceKind.FROM_GGUF)
    lora_src = Source(SourceKind.FROM_GGUF, words.LORA_DETAIL)
    srcs: dict[str, Source] = ({"lora": lora_src} if settings.lora else {}) | (
        {"draft_weights": gguf, "draft_kv": gguf, "draft_compute": d_src} if settings.draft_model else {})
    gpus = [Extra(Extras(lora=lora_gpu[i], draft_weights=d_gpus[i].weights if d_gpus else 0,
                         draft_kv=d_gpus[i].kv_resident if d_gpus else 0,
                         draft_compute=d_gpus[i].compute if d_gpus else 0), 0, srcs) for i in range(n)]
    host = Extra(Extras(lora=lora_host, draft_weights=d_host.weights_mapped if d_host else 0,
                        draft_kv=d_host.kv_tail if d_host else 0, draft_compute=d_host.compute_pinned if d_host else 0),
                 d_host.output_buffer if d_host else 0, srcs)
    return gpus, host
