"""The plan: per GPU the stacked parts, the host's share, the resident window and the host tail.

Documented data (frozen dataclasses, ``to_json`` versioned). The solver that fills them, and the
public entry point for all of these names, is :mod:`app.planner.solve.plan`.

JSON form (``PLAN_JSON_VERSION`` = 1)::

    {"version": 1, "mode": "window"|"stock"|"cpu", "feasible": bool, "reason": str,
     "launch": LaunchSettings.to_json(), "window_cells": int, "tail_cells": int,
     "vram_target": int|null, "warnings": [str],
     "gpus": [{"name", "label", "total", "other_processes", "weights", "compute", "kv_resident",
               "overhead", "safety", "free", "simulated", "driver_reserve", "sources": {part: source}}],
     "host": {"total", "available", "weights_mapped", "kv_tail", "compute_pinned", "free", "sources",
              "weights_repacked"},
     "kv": {"total", "bytes_per_cell", "n_ctx", "n_ctx_seq", "n_seq", "caches": [...]},
     "alternatives": [{"label", "feasible", "chosen", "host_bytes_per_token", "n_ctx", "note",
                       "launch": {...}, "prefill_bytes_per_ubatch", "decode_s", "prefill_s",
                       "speed": SpeedRow|null}],
     "network": {...}|null, "kv_host_layers": int, "speed": SpeedRow|null, "speed_figures": {...}|null}

``speed`` (added within version 1; absent = null): predicted tokens/s, ``{"fills": [0, 0.5, 1],
"prefill": [tok/s…], "decode": [tok/s…], "turn_s", "calibrated"}`` (app/planner/solve/speed.py);
``speed_figures`` the machine's terms it was predicted with, each ``{"value", "source", "calibrated"}``;
a device (``attention``) or the host (``host_cpu_attention``) whose CPU attention an engine run measured
adds ``[{"kv_type", "head_dim", "decode", "prefill", "decode_gqa"?, "gqa"?, "decode_deep"?, "decode_curve"?}]``
(seconds a cell and head; ``decode_gqa``: a query head's with ``gqa`` query heads over each KV head, where
measured; ``decode_deep``: the decode over more KV than the caches hold, where measured; ``decode_curve``:
``[[bytes of KV a token reads, seconds], …]``, the decode by its KV, where measured; absent: not measured).

All sizes are bytes. A ``sources`` value is a :class:`~app.planner.sources.Source` in Python and its
words in JSON (``str(source)``; ``Source.from_json`` reads it back). ``mode`` is a :class:`PlanMode`
(a ``StrEnum``: its value is the JSON string). ``host.weights_repacked`` (added within version 1;
absent = 0) is the part of ``host.weights_mapped`` that the CPU backend holds as a repacked copy
(``CPU_REPACK``). ``host.prompt_cache`` (likewise; absent = 0) is the server's prompt-cache limit
(``--cache-ram``), held back from ``free``.
``host.output_buffer`` (likewise) is the logits buffers, no longer in ``compute_pinned``;
``gpus[].lora``/``host.lora`` and ``draft_weights``/``draft_kv``/``draft_compute`` (likewise; absent
= 0) are what ``--lora`` and a draft model (``-md``) add there (app/planner/memory/extras.py).
``gpus[].driver_reserve`` (likewise; absent = 0) is the part of ``other_processes`` that no process
holds: the driver's own reserve. ``gpus[].remote`` (absent = "") is an RPC worker's endpoint and
``gpus[].budget`` (absent = null) a device's own budget; ``network`` (absent = null) what crosses
the network per token, per ubatch and at load (app/planner/solve/split.py). ``gpus`` are in the engine's
device order (RPC workers first), and ``launch.rpc`` / ``launch.tensor_split`` are its ``--rpc`` and
``-ts``. ``projector`` (absent = null) is the vision projector's plan (app/planner/memory/projector.py),
``gpus[].projector`` / ``host.projector`` (absent = 0) its bytes on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from app.planner.settings import LaunchSettings
from app.planner.solve.speed import SpeedFigures, SpeedRow
from app.planner.sources import Source, Sourced
from app.planner.units import MiB

__all__ = ["PLAN_JSON_VERSION", "Alternative", "AlternativeKind", "ContextFit", "DevicePlan", "Extras", "HostPlan",
           "KvSummary", "NetworkCost", "Plan", "PlanMode", "ProjectorPlan", "Source", "Sourced"]

PLAN_JSON_VERSION = 1


@dataclass(frozen=True)
class ProjectorPlan:
    """Where the projector goes and what it takes there. ``device``: an engine device name or "host".
    ``compute_host``: the part of a GPU projector's compute reserve in the CPU's buffer."""

    file: str
    device: str
    weights: int
    compute: int
    compute_host: int = 0
    sources: dict[str, Source] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.compute

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "device": self.device, "weights": self.weights, "compute": self.compute,
                "compute_host": self.compute_host, "sources": {k: v.to_json() for k, v in self.sources.items()}}


class PlanMode(StrEnum):
    """How the plan runs the model; the value is the word the CLI, the window and the JSON use."""

    #: An engine with a position window (opencoti): every layer on the GPU, the KV tail in host RAM.
    WINDOW = "window"
    #: A stock engine: whole layers (or the whole KV) moved to the host when they do not fit.
    STOCK = "stock"
    #: No GPU: everything in host RAM.
    CPU = "cpu"

    @classmethod
    def asked(cls, window: bool, *, gpu: bool = True) -> PlanMode:
        """The mode a request names before any plan: the window when asked for, else stock (cpu
        without a GPU)."""
        return cls.WINDOW if window else (cls.STOCK if gpu else cls.CPU)


class AlternativeKind(Enum):
    """Which way to run a stock plan an :class:`Alternative` prices."""

    AS_SET = "as set"  # the settings as given
    KV_HOST_LAYERS = "KV host layers"  # the KV of the first layers in host RAM, all weights resident (-ngl + -ot)
    EXPERTS_ON_CPU = "experts on CPU"  # the expert weights of the first layers in host RAM (--n-cpu-moe)
    BOTH = "experts on CPU and KV host layers"  # every layer's experts on the CPU, and the KV of the first layers
    SMALLER_KV_TYPE = "smaller KV type"  # a q8_0 KV cache instead of a wider one (changes what is computed)
    FEWER_LAYERS = "fewer layers"  # the fewest layers moved to the host (-ngl)
    KV_ON_HOST = "KV on the host"  # the whole KV cache in host RAM (-nkvo)
    SHORTER_CONTEXT = "shorter context"  # the largest shorter context that fits (-c), placed as needed


@dataclass(frozen=True, kw_only=True)
class Extras:
    """What the launch's extras take on one device or in host RAM, bytes: LoRA adapters' buffers
    (``--lora``: on the devices of the weights they adapt), a draft model's weights, KV and compute
    buffers (``-md``; app/planner/memory/extras.py), and the vision projector's weights and compute
    (``--mmproj``; app/planner/memory/projector.py). In a plan's JSON they are the device's own keys."""

    lora: int = 0
    draft_weights: int = 0
    draft_kv: int = 0
    draft_compute: int = 0
    projector: int = 0

    @property
    def total(self) -> int:
        return self.lora + self.draft_weights + self.draft_kv + self.draft_compute + self.projector

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: The parts an :class:`Extras` holds, by the names the sources, the JSON and the window use.
EXTRA_PARTS: tuple[str, ...] = tuple(Extras.__dataclass_fields__)


def _part(plan: DevicePlan | HostPlan, key: str) -> int:
    value = getattr(plan.extras, key) if key in EXTRA_PARTS else getattr(plan, key)
    return int(value)


@dataclass(frozen=True, kw_only=True)
class DevicePlan:
    name: str  # llama.cpp device name, "CUDA0"
    label: str  # "NVIDIA H200 (simulated)"
    total: int
    other_processes: int
    weights: int
    compute: int
    kv_resident: int
    overhead: int
    safety: int
    free: int
    simulated: bool = False
    sources: dict[str, Source] = field(default_factory=dict)
    #: The part of ``other_processes`` no process holds: what the driver keeps (615 MiB on an idle H200).
    driver_reserve: int = 0
    #: An RPC worker's device: its endpoint ("" for a local GPU).
    remote: str = ""
    #: This device's own budget (``--vram-target RPC0=2GiB``), safety included; None: none.
    budget: int | None = None
    #: What a LoRA, a draft model and the vision projector take here (the projector: when it is on this device).
    extras: Extras = field(default_factory=Extras)

    @property
    def used(self) -> int:
        """What this engine process takes on the GPU (everything but others and the safety margin)."""
        return self.weights + self.compute + self.kv_resident + self.overhead + self.extras.total

    def part(self, key: str) -> int:
        """A part by its name (``"weights"``, ``"draft_kv"``): the name its source and JSON key have."""
        return _part(self, key)

    def to_json(self) -> dict[str, Any]:
        return ({k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extras"} | self.extras.to_json()
                | {"sources": {k: v.to_json() for k, v in self.sources.items()}})


@dataclass(frozen=True, kw_only=True)
class HostPlan:
    total: int
    available: int
    weights_mapped: int  # all host weight memory: the mapped file range plus any repacked copy
    kv_tail: int
    compute_pinned: int  # pinned/CPU compute buffers (the logits are ``output_buffer``)
    free: int
    sources: dict[str, Source] = field(default_factory=dict)
    weights_repacked: int = 0  # the part of weights_mapped that is the CPU backend's CPU_REPACK copy
    #: llama-server's prompt cache (``--cache-ram``): host RAM it may fill over time, held back.
    prompt_cache: int = 0
    #: The output (logits) buffers: ``n_vocab × slots`` floats, the draft model's too.
    output_buffer: int = 0
    #: A LoRA's host buffers, a draft model's host weights, KV and compute (``--lora``, ``-md``), and the
    #: vision projector in host RAM (``--no-mmproj-offload``, no GPU, or the CPU's share of a GPU
    #: projector's compute).
    extras: Extras = field(default_factory=Extras)

    @property
    def allocated(self) -> int:
        """What the engine allocates in host RAM at load: every part but the prompt cache (a limit
        it fills over time) — what the plan holds of ``available`` less the cache."""
        return self.available - self.free - self.prompt_cache

    def part(self, key: str) -> int:
        """A part by its name (``"kv_tail"``, ``"lora"``): the name its source and JSON key have."""
        return _part(self, key)

    def to_json(self) -> dict[str, Any]:
        # PLAN_JSON_VERSION 1's key order: the logits buffer between the draft's parts and the projector
        own = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("extras", "output_buffer")}
        extras = self.extras.to_json()
        projector = extras.pop("projector")
        return (own | extras | {"output_buffer": self.output_buffer, "projector": projector}
                | {"sources": {k: v.to_json() for k, v in self.sources.items()}})


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """One way to run on a stock engine, priced by what the host must read per decoded token."""

    kind: AlternativeKind
    label: str  # "as set", "-ngl 40", "-nkvo", "-c 262144"
    launch: LaunchSettings
    feasible: bool
    host_bytes_per_token: int  # weights and KV the CPU side touches for each token (lower is faster)
    note: str
    chosen: bool = False
    #: Bytes moved or read on the host side per prefill ubatch: host weights streamed to a GPU for
    #: its matmuls (op offload) and host KV the CPU reads for attention (app/planner/solve/stack.py).
    prefill_bytes_per_ubatch: int = 0
    #: One typical chat turn, seconds (app/planner/solve/speed.py: ``TURN_PROMPT`` tokens prefilled and
    #: ``TURN_REPLY`` decoded, the context half full): what the stock plan chooses by.
    decode_s: float = 0.0
    prefill_s: float = 0.0
    #: Predicted tokens/s, prefill and decode, at an empty, half and full context (None: not priced).
    speed: SpeedRow | None = None
    #: A shorter context's placement when the settings as given do not hold it: the label of the
    #: alternative a stock plan chose at that context ("--n-cpu-moe 39"); "" otherwise.
    placement: str = ""

    @property
    def turn_s(self) -> float:
        return self.decode_s + self.prefill_s

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "feasible": self.feasible, "chosen": self.chosen,
                "host_bytes_per_token": self.host_bytes_per_token,
                "prefill_bytes_per_ubatch": self.prefill_bytes_per_ubatch, "decode_s": round(self.decode_s, 4),
                "prefill_s": round(self.prefill_s, 4), "n_ctx": self.launch.n_ctx,
                "note": self.note, "launch": self.launch.to_json(),
                "speed": self.speed.to_json() if self.speed is not None else None}


@dataclass(frozen=True, kw_only=True)
class KvSummary:
    total: int
    bytes_per_cell: int  # of the context-sized (non-SWA) cache, all layers
    n_ctx: int
    n_ctx_seq: int
    n_seq: int
    caches: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "bytes_per_cell": self.bytes_per_cell, "n_ctx": self.n_ctx,
                "n_ctx_seq": self.n_ctx_seq, "n_seq": self.n_seq, "caches": [dict(c) for c in self.caches]}


@dataclass(frozen=True)
class NetworkCost:
    """What crosses the network for one launch over RPC workers (bytes)."""

    #: Crossings of the hidden state per token: a (from, to) pair of device names each.
    boundaries: tuple[tuple[str, str], ...]
    per_token: int  # activations at the boundaries, plus the logits when a worker holds the output
    per_ubatch: int  # the same for a prefill ubatch (the logits of its outputs only)
    load: dict[str, int]  # weights sent to each worker at load (device name -> bytes)

    def to_json(self) -> dict[str, object]:
        return {"boundaries": [list(b) for b in self.boundaries], "per_token": self.per_token,
                "per_ubatch": self.per_ubatch, "load": dict(self.load)}


@dataclass(frozen=True, kw_only=True)
class Plan:
    launch: LaunchSettings
    mode: PlanMode
    gpus: tuple[DevicePlan, ...]
    host: HostPlan
    feasible: bool
    reason: str
    warnings: tuple[str, ...]
    window_cells: int
    tail_cells: int
    vram_target: int | None
    alternatives: tuple[Alternative, ...] = ()
    kv: KvSummary | None = None
    #: What crosses the network when RPC workers hold layers (None: no worker holds anything).
    network: NetworkCost | None = None
    #: Layers whose KV is in host RAM (a stock plan's layers on the CPU, all of them with -nkvo);
    #: the window engine's host tail is ``tail_cells`` instead.
    kv_host_layers: int = 0
    #: The vision projector (``--mmproj``): where it goes, what it takes (None: no projector).
    projector: ProjectorPlan | None = None
    #: Predicted tokens/s of the launch (app/planner/solve/speed.py; None: not modelled, the window
    #: engine) and the machine's figures it was predicted with.
    speed: SpeedRow | None = None
    speed_figures: SpeedFigures | None = None

    @property
    def cache_ram_mib(self) -> int:
        """``--cache-ram`` as launched: the size given, or the one the plan sized (auto)."""
        given = self.launch.cache_ram_mib
        return given if given is not None else self.host.prompt_cache // MiB

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PLAN_JSON_VERSION, "mode": self.mode.value, "feasible": self.feasible,
            "reason": self.reason, "launch": self.launch.to_json(), "window_cells": self.window_cells,
            "tail_cells": self.tail_cells, "vram_target": self.vram_target,
            "warnings": list(self.warnings), "gpus": [g.to_json() for g in self.gpus],
            "host": self.host.to_json(), "kv": self.kv.to_json() if self.kv else None,
            "alternatives": [a.to_json() for a in self.alternatives],
            "network": self.network.to_json() if self.network else None,
            "kv_host_layers": self.kv_host_layers,
            "projector": self.projector.to_json() if self.projector else None,
            "speed": self.speed.to_json() if self.speed is not None else None,
            "speed_figures": self.speed_figures.to_json() if self.speed_figures is not None else None,
        }


@dataclass(frozen=True)
class ContextFit:
    """Largest context (tokens, a multiple of 256) for a budget: fully resident, and with a host tail.

    ``with_tail`` assumes an engine with a position window (the tail in host RAM); on a stock engine it
    is what ``-nkvo``-style host KV would have to hold.
    """

    resident: int
    with_tail: int
    n_ctx_train: int
    #: The largest context the search tried (the larger of the trained and the asked context, padded);
    #: a result equal to it means the search stopped there, not the memory. 0: not known.
    searched_to: int = 0
    #: The predicted speed of ``resident`` with the settings as given (None: not priced). A plan that fits
    #: as set prices no alternative, so the window's "Largest context" row had none to show.
    resident_speed: SpeedRow | None = field(default=None, compare=False)

    @property
    def resident_capped(self) -> bool:
        """The fully resident result is the search's cap: more may fit."""
        return 0 < self.searched_to <= self.resident

    @property
    def tail_capped(self) -> bool:
        """The with-a-host-tail result is the search's cap: more may fit."""
        return 0 < self.searched_to <= self.with_tail

    @property
    def beyond_trained(self) -> bool:
        """The search went past the trained context (an asked context longer than it): a capped result
        there may be exceeded. A result capped at the trained context is all the model was trained
        for: the window says it plainly, not "≥ 4,096"."""
        return self.searched_to > self.n_ctx_train

    def to_json(self) -> dict[str, Any]:
        return {"resident": self.resident, "with_tail": self.with_tail, "n_ctx_train": self.n_ctx_train,
                "searched_to": self.searched_to}

