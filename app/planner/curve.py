"""The context chart's numbers: for the settings now, what the GPUs and host RAM would hold at each
context of a log grid (4k up to the training context, at most 1M), one curve per KV cache type.

Every point is a plan's own stacking, not a formula of its own: on a stock engine the launch exactly
as set (``price_as_set``: no alternatives, the curve is what *these* settings cost), on the window
engine and without a GPU the plan itself (``make_plan``). So a point's GPU use is
``DevicePlan.used`` (weights, compute, resident KV, overhead, adapters, a draft, a projector) and its
host use what ``HostPlan`` holds (mapped weights, KV tail, pinned compute, output buffer, adapters, a
draft, a projector and the prompt cache it holds back).

The usable line is the plan's own budget per device: what it leaves after other processes and the
safety margin (``used + free`` of a DevicePlan), lowered to ``--vram-target`` or a device's own budget;
for host RAM, what the OS says is available. The largest fitting context is the one the plan's
``max_context`` found (``ContextFit``), not read off the curve.

Compute (the one part the GGUF does not give): with pass 1 for the settings now, the curve of the KV
type it ran with uses it, grown by the estimate's growth at larger contexts and kept as a floor at
smaller ones, as ``max_context`` prices it (``grown_measurement``); every other curve, and every curve
without pass 1, uses the estimate. Each point carries its compute's source, and each curve says
which it was (``KvCurve.source``).

Pure: no Qt, no I/O. Fast enough to redraw on every settings change (bench/bench_chart.py): one
priced launch per point (the other KV types' curves at one point per doubling), the model's KV
rows cached (kv.row_bytes, kv._cell_bytes, stack.kv_per_layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from app.planner import words
from app.planner.errors import PlannerError
from app.planner.measurement import Measurement
from app.planner.memory.kv import CTX_PAD
from app.planner.plan_types import ContextFit, DevicePlan, HostPlan, Plan, PlanMode
from app.planner.request import PlanRequest
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import grown_measurement, make_plan, price_as_set
from app.planner.sources import Source, SourceKind
from app.planner.units import format_tokens

#: The cache types the chart draws a curve for (both K and V of that type): exact, half, a quarter.
#: The settings' own types get a curve too when they are not among these.
CHART_KV_TYPES = ("f16", "q8_0", "q4_0")
#: The grid's ends: the context slider's (app/ui/context_control.py), up to the training context.
GRID_LOW = 4 * 1024
GRID_HIGH = 1024 * 1024
#: Grid points per doubling of the context (4k, 6k, 8k, 12k, …: the slider's round sizes).
_HALF_STEPS = (1.0, 1.5)


def grid_top(n_ctx_train: int, n_ctx: int) -> int:
    """The chart's right end: the training context (1M when the model does not say, or says more),
    whatever the context now is below it; 1M (the slider's end) once the context asked for is
    larger than the training context — so the axis does not follow the slider, and "how far can I
    go" is on it — and the context asked for itself past 1M."""
    top = min(n_ctx_train, GRID_HIGH) if n_ctx_train > 0 else GRID_HIGH
    if n_ctx > top:
        top = max(GRID_HIGH, n_ctx)
    return max(top, 4 * CTX_PAD)


def grid_low(top: int) -> int:
    """The chart's left end: 4k, or for a model trained on less than 8k a quarter of its top (1k to
    4k for one trained on 4,096: its axis does not run past what it was trained for)."""
    return GRID_LOW if top >= 2 * GRID_LOW else max(CTX_PAD, top // 4)


def context_grid(n_ctx_train: int, n_ctx: int, *extra: int, coarse: bool = False) -> tuple[int, ...]:
    """The contexts a curve is priced at, ascending: 4k (``grid_low``), 6k, 8k, 12k, … up to ``grid_top``, the top
    itself, the context now and ``extra`` (the largest that fits) — so the points the chart marks lie
    on its curves. ``coarse``: one point per doubling (4k, 8k, 16k, …; the other KV types' curves,
    drawn for comparison: a KV cache grows linearly with the context, so the line between doublings
    is the curve)."""
    top = grid_top(n_ctx_train, n_ctx)
    low = grid_low(top)
    out = {top, n_ctx, *(e for e in extra if low <= e <= top)}
    base = low
    while base <= top:
        out.update(int(base * f) for f in (_HALF_STEPS[:1] if coarse else _HALF_STEPS) if base * f <= top)
        base *= 2
    return tuple(sorted(n for n in out if n >= min(low, n_ctx)))


@dataclass(frozen=True)
class CurvePoint:
    """One context on one curve. Bytes."""

    n_ctx: int
    #: What this engine holds on each device (``DevicePlan.used``), in the engine's device order.
    gpu: tuple[int, ...]
    #: Host RAM the plan holds (everything ``HostPlan`` counts, the prompt cache with it).
    host: int
    #: The plan fits at this context (its reason is ``why`` otherwise).
    fits: bool
    why: str
    #: Where this point's compute buffers came from.
    compute_source: Source
    #: Predicted decode tokens/s of this launch with its context full (app/planner/solve/speed.py);
    #: None: it does not fit, or the plan predicts no speed (the window engine).
    decode: float | None = None

    @property
    def gpu_total(self) -> int:
        return sum(self.gpu)


@dataclass(frozen=True)
class KvCurve:
    """One KV cache type's curve (K and V of ``type_k``/``type_v``)."""

    type_k: str
    type_v: str
    points: tuple[CurvePoint, ...]
    #: The settings' own types: the curve the chart emphasises, and the one the largest fit is for.
    current: bool
    #: Where the curve's compute came from: pass 1 (grown by the estimate) or the estimate.
    source: Source
    #: Why this type gives no curve for this model ('' when it does): no points then.
    problem: str = ""

    @property
    def label(self) -> str:
        return self.type_k if self.type_k == self.type_v else f"{self.type_k}/{self.type_v}"

    def at(self, n_ctx: int) -> CurvePoint | None:
        return next((p for p in self.points if p.n_ctx == n_ctx), None)


@dataclass(frozen=True)
class Reach:
    """One of the largest contexts that fit (``headroom plan``'s "largest context"): fully resident,
    or with part of the KV in host RAM. ``capped``: the search stopped there (more may fit)."""

    n_ctx: int
    where: str
    capped: bool
    #: The figure the plan offers for the settings (``ContextCurve.largest``).
    offered: bool
    #: The plan's predicted decode tokens/s there with the context full, where the plan priced that end
    #: (``words.context_reach``: the longest with a host tail is another placement, not on the curve).
    decode: float | None = None


@dataclass(frozen=True)
class ContextCurve:
    """Everything the chart draws for one set of settings."""

    contexts: tuple[int, ...]
    curves: tuple[KvCurve, ...]
    #: The engine's device names and, per device, the most this engine may hold there (bytes).
    devices: tuple[str, ...]
    gpu_usable: tuple[int, ...]
    #: Host RAM available to the plan (bytes; the prompt cache is counted in each point's use).
    host_usable: int
    #: The context the settings ask for now.
    n_ctx: int
    #: The largest context that fits for the current curve (None: none, or not known), and where.
    largest: int | None
    largest_where: str
    #: The search stopped at its cap there: more may fit.
    largest_capped: bool
    mode: PlanMode
    #: The largest contexts that fit, as ``headroom plan`` says them: fully resident (as set) and,
    #: with a GPU, the longest with part of the KV in host RAM when that is longer.
    reaches: tuple[Reach, ...] = ()

    @property
    def gpu_usable_total(self) -> int:
        return sum(self.gpu_usable)

    @property
    def current(self) -> KvCurve | None:
        return next((c for c in self.curves if c.current), None)

    @property
    def top(self) -> int:
        """The x axis' right end."""
        return self.contexts[-1]


def _usable(d: DevicePlan, vram_target: int | None) -> int:
    """The most this engine may hold on a device, as the plan's fit test has it (plan._fits)."""
    limit = d.used + d.free
    for cap in (vram_target, d.budget):
        if cap is not None:
            limit = min(limit, cap - d.safety)
    return max(limit, 0)


def _host_used(h: HostPlan) -> int:
    """Everything the plan holds in host RAM (what it leaves free of what is available)."""
    return h.available - h.free


def _source(points: Sequence[CurvePoint], measured_at: int | None, n_ctx: int) -> Source:
    """The curve's compute source: pass 1 (where it was taken) when a point used it, else the
    source of the point at the context now (the estimate, with the launches it was never compared at)."""
    if measured_at is not None and any(p.compute_source.kind in (SourceKind.MEASURED, SourceKind.MEASURED_ELSEWHERE)
                                       for p in points):
        return Source(SourceKind.MEASURED, words.chart_measured_detail(format_tokens(measured_at)))
    now = next((p for p in points if p.n_ctx == n_ctx), points[0] if points else None)
    return now.compute_source if now is not None else Source(SourceKind.ESTIMATED)


@lru_cache(maxsize=2048)  # a context move re-prices one point per curve, not the grid (a settings change: all)
def _point(request: PlanRequest, mode: PlanMode, launch: LaunchSettings,
           measurement: Measurement | None) -> tuple[CurvePoint, tuple[str, ...], tuple[int, ...]]:
    """One point, the devices' names and what each may hold: the launch as set on a stock engine,
    else the plan."""
    shape, inv = request.shape, request.inventory
    if mode is PlanMode.STOCK:
        priced = price_as_set(shape, inv, launch, measurement=measurement, safety=request.safety,
                              vram_target=request.vram_target, overhead=request.overhead, speed=request.speed,
                              beside=request.beside_for(launch))
        gpus, host, why, source = priced.gpus, priced.host, priced.why, priced.compute.source
        speed = priced.alternative.speed
    else:
        plan = make_plan(shape, inv, launch, engine_window=mode is PlanMode.WINDOW, measurement=measurement,
                         safety=request.safety, vram_target=request.vram_target, overhead=request.overhead,
                         speed=request.speed, beside=request.beside_for(launch))
        gpus, host, why = plan.gpus, plan.host, "" if plan.feasible else plan.reason
        source = plan.gpus[0].sources["compute"] if plan.gpus else plan.host.sources["compute_pinned"]
        speed = plan.speed
    decode = speed.at_fill(1.0).decode if speed is not None and not why else None
    point = CurvePoint(launch.n_ctx, tuple(g.used for g in gpus), _host_used(host), not why, why, source, decode)
    return point, tuple(g.name for g in gpus), tuple(_usable(g, request.vram_target) for g in gpus)


def context_curve(request: PlanRequest, settings: LaunchSettings, *, measurement: Measurement | None = None,
                  fit: ContextFit | None = None, kv_types: Sequence[str] = CHART_KV_TYPES,
                  plan: Plan | None = None) -> ContextCurve:
    """The chart for ``settings`` planned through ``request`` (the window's plan request: the same
    overhead, safety, VRAM target and engine). ``measurement``: pass 1 for exactly ``settings``, if
    any. ``fit``: the plan's largest contexts for ``settings`` (the window has them already); ``plan``:
    the plan for them, whose priced ends give those contexts their speeds."""
    shape, inv = request.shape, request.inventory
    window = request.engine_window and bool(inv.gpus)
    mode = PlanMode.CPU if not inv.gpus else PlanMode.WINDOW if window else PlanMode.STOCK
    largest, where, capped = None, "", False
    reaches: list[Reach] = []
    if fit is not None:
        n, where, tail = words.largest_for(bool(inv.gpus), fit.resident, fit.with_tail, window, settings)
        largest = n or None
        capped = (fit.tail_capped if tail else fit.resident_capped) and fit.beyond_trained
        reaches = _reaches(fit, bool(inv.gpus), window, settings, largest)
        if plan is not None:  # (the plan's own ends, priced: the same contexts the window's words name)
            speeds = {e.n_ctx: e.alternative.speed.at_fill(1.0).decode for e in words.context_reach(plan, fit)
                      if e.alternative is not None and e.alternative.speed is not None}
            reaches = [replace(r, decode=speeds.get(r.n_ctx)) for r in reaches]
    marks = [largest] if largest else []
    contexts = context_grid(shape.n_ctx_train, settings.n_ctx, *marks)
    others = context_grid(shape.n_ctx_train, settings.n_ctx, *marks, coarse=True)
    types = [(t, t) for t in kv_types]
    if (settings.type_k, settings.type_v) not in types:
        types.append((settings.type_k, settings.type_v))
    curves: list[KvCurve] = []
    devices: tuple[str, ...] = ()
    usable: tuple[int, ...] = ()
    host_usable = inv.host.available
    for type_k, type_v in types:
        current = (type_k, type_v) == (settings.type_k, settings.type_v)
        base = settings.with_(type_k=type_k, type_v=type_v)
        pass1 = measurement if current else None
        points: list[CurvePoint] = []
        try:
            for n in contexts if current else others:
                point, names, limits = _point(request, mode, base.with_(n_ctx=n),
                                              grown_measurement(shape, settings, pass1, n))
                devices, usable = names, limits
                points.append(point)
        except PlannerError as exc:  # a type this model's heads cannot use: said in the legend
            curves.append(KvCurve(type_k, type_v, (), current, Source(SourceKind.ESTIMATED), str(exc)))
            continue
        measured_at = settings.n_ctx if pass1 is not None else None  # pass 1 is for the settings now
        curves.append(KvCurve(type_k, type_v, tuple(points), current, _source(points, measured_at, settings.n_ctx)))
    return ContextCurve(contexts, tuple(curves), devices, usable, host_usable, settings.n_ctx, largest, where,
                        capped, mode, tuple(reaches))


def _reaches(fit: ContextFit, gpus: bool, window: bool, settings: LaunchSettings, offered: int | None) -> list[Reach]:
    """The "largest context" figures of ``headroom plan`` (app/commands/plan.py ``_largest_lines``),
    in the same words: as set (fully resident, in host RAM without a GPU), then the longest with part
    of the KV in host RAM when a GPU is there and that is longer."""
    out: list[Reach] = []
    if fit.resident > 0:
        where = words.resident_where(settings) if gpus else "in host RAM"
        out.append(Reach(fit.resident, where, fit.resident_capped and fit.beyond_trained, fit.resident == offered))
    if gpus and fit.with_tail > fit.resident:
        tail = "with a host tail" if window else "with part of it in host RAM"
        out.append(Reach(fit.with_tail, tail, fit.tail_capped and fit.beyond_trained, fit.with_tail == offered))
    return out
