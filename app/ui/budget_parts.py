"""The parts of a budget bar: which plan field each segment shows, its colour, where its number came
from, and what the legend says about it. Pure data and functions; the widgets are in budget_view."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.planner.sources import Source, SourceKind
from app.planner.units import Bytes

if TYPE_CHECKING:
    from app.planner.plan_types import DevicePlan, HostPlan

#: (field, label, colour). Colours are mid-tones that read on light and dark palettes (Tableau 20); a
#: host part gets the light shade of its GPU counterpart, so no two different things share a colour.
GPU_PARTS = (
    ("other_processes", "Other apps", "#8c8c8c"),
    ("weights", "Weights", "#4e79a7"),
    ("compute", "Compute", "#f28e2b"),
    ("kv_resident", "KV window", "#59a14f"),
    ("lora", "LoRA", "#9c755f"),
    ("draft_weights", "Draft model", "#76b7b2"),
    ("draft_kv", "Draft KV", "#e15759"),
    ("draft_compute", "Draft compute", "#d37295"),
    ("projector", "Vision projector", "#499894"),
    ("overhead", "Overhead", "#b07aa1"),
    ("safety", "Safety", "#edc948"),
)
HOST_PARTS = (
    ("other", "Other apps", "#8c8c8c"),
    ("weights_mapped", "Mapped weights", "#a0cbe8"),
    ("kv_tail", "KV host tail", "#8cd17d"),
    ("compute_pinned", "Pinned compute", "#ffbe7d"),
    ("output_buffer", "Output buffer", "#f1ce63"),
    ("lora", "Host LoRA", "#d7b5a6"),
    ("draft_weights", "Host draft model", "#86bcb6"),
    ("draft_kv", "Host draft KV", "#ff9d9a"),
    ("draft_compute", "Host draft compute", "#fabfd2"),
    ("projector", "Host vision projector", "#9fd3cf"),
    ("prompt_cache", "Prompt cache", "#d4a6c8"),  # a limit the server may fill over time (--cache-ram)
)
DRIVER_COLOR = "#bab0ac"
RED = "#d62728"
AMBER = "#c77800"
#: Sources for parts the planner does not label itself.
DEFAULT_SOURCES = {"other_processes": Source(SourceKind.FROM_NVML), "free": Source(SourceKind.LEFT_OVER),
                   "other": Source(SourceKind.FROM_PSUTIL)}
#: Where a part's number came from when neither the planner nor DEFAULT_SOURCES says.
UNLABELLED = Source(SourceKind.ESTIMATED)
#: A planner source as the window says it, where its words differ from the CLI's.
SOURCE_WORDS = {SourceKind.GIVEN: "your setting"}


def source_text(source: Source) -> str:
    """Where a number came from, as the window's tooltip says it."""
    words = SOURCE_WORDS.get(source.kind)
    return words if words is not None and not source.detail else str(source)


#: What each legend entry means (the legend's tooltip).
PART_TIPS = {
    "Other apps": "memory other programs held when the plan was made (the devices above show it now)",
    "Weights": "the model's tensors on this device",
    "Compute": "the engine's scratch buffer for one batch (measured by pass 1, else estimated)",
    "KV window": "the KV cache cells kept on the GPU",
    "Overhead": "the CUDA context and driver allocations every process pays on a GPU",
    "Safety": "your safety margin, left free on purpose",
    "Driver reserve": "memory the driver keeps for itself; no program can use it",
    "Mapped weights": "weights read from the file in host RAM (the layers not on a GPU)",
    "KV host tail": "the KV cache cells beyond the GPU window, in host RAM",
    "KV cache": "the KV cache: on a GPU, the cells of its layers; without a GPU, the whole cache in host RAM",
    "KV of CPU layers": "the KV cache of the layers that run on the CPU (stock llama.cpp keeps a layer's KV "
                        "with the layer)",
    "Pinned compute": "page-locked host memory the GPU copies through when it computes on host layers",
    "Output buffer": "the logits of the tokens a batch outputs (the model's, and a draft model's)",
    "LoRA": "a LoRA adapter's tensors, beside the weights they adapt (--lora)",
    "Host LoRA": "a LoRA adapter's tensors for the layers in host RAM (--lora)",
    "Draft model": "the draft model's weights for speculative decoding (-md)",
    "Draft KV": "the draft model's KV cache: the model's context, its own cache types (-ctkd/-ctvd)",
    "Draft compute": "the draft model's scratch buffer (measured by pass 1, else estimated)",
    "Host draft model": "the draft model's weights in host RAM (-md)",
    "Host draft KV": "the draft model's KV cache in host RAM",
    "Host draft compute": "the draft model's host scratch buffer",
    "Vision projector": "the vision projector's weights and compute buffer (--mmproj)",
    "Host vision projector": "the vision projector in host RAM (--no-mmproj-offload, no GPU), or the CPU's share "
                             "of its compute",
}


@dataclass(frozen=True)
class Segment:
    key: str
    label: str
    size: int
    color: str
    source: str  # where the number came from, in the window's words (source_text)

    @property
    def tooltip(self) -> str:
        return f"{self.label}: {Bytes(self.size)}\n{self.source}"


#: The KV parts' labels where the plan has no position window (stock llama.cpp: whole layers).
STOCK_KV_LABELS = {"kv_resident": "KV cache", "kv_tail": "KV of CPU layers"}


def device_segments(dp: DevicePlan, *, window: bool = True) -> list[Segment]:
    """``window``: the plan has a position window (else its GPU KV is just "KV cache")."""
    segs = []
    for key, label, color in GPU_PARTS:
        if not window:
            label = STOCK_KV_LABELS.get(key, label)
        source = source_text(dp.sources.get(key, DEFAULT_SOURCES.get(key, UNLABELLED)))
        size = dp.part(key)
        if key == "other_processes" and dp.driver_reserve > 0:
            # What no process holds is the driver's own reserve (an idle H200: 615 MiB), not "apps".
            reserve = min(int(dp.driver_reserve), size)
            segs.append(Segment("driver_reserve" if size > reserve else key, "Driver reserve", reserve,
                                DRIVER_COLOR, f"kept by the driver, not usable by the engine ({source})"))
            size -= reserve
            if size <= 0:
                continue
        segs.append(Segment(key, label, size, color, source))
    return segs


def host_segments(hp: HostPlan, *, no_gpu: bool = False, window: bool = True) -> list[Segment]:
    """``no_gpu``: the KV cache has no GPU part, so it is the whole cache, not a "tail"; ``window``:
    the host KV is a window's tail (else the KV of the layers on the CPU)."""
    segs = [Segment("other", "Other apps", max(0, int(hp.total) - int(hp.available)), HOST_PARTS[0][2],
                    source_text(hp.sources.get("other", DEFAULT_SOURCES["other"])))]
    for key, label, color in HOST_PARTS[1:]:
        if key == "kv_tail" and no_gpu:
            label = "KV cache"
        elif not window:
            label = STOCK_KV_LABELS.get(key, label)
        segs.append(Segment(key, label, hp.part(key), color,
                            source_text(hp.sources.get(key, DEFAULT_SOURCES.get(key, UNLABELLED)))))
    return segs


def legend_entries(shown: Iterable[Segment] | None = None) -> dict[str, str]:
    """Label -> colour for the parts drawn (a label on several bars, "Other apps", is listed once);
    with ``shown``, only those segments' parts — a CPU plan's legend names no GPU part."""
    if shown is None:
        return {label: color for _k, label, color in (*GPU_PARTS, ("", "Driver reserve", DRIVER_COLOR), *HOST_PARTS)}
    return {s.label: s.color for s in shown if s.size > 0}


def _legend(shown: Iterable[Segment] | None = None) -> str:
    # The swatch held to its label (a wrap between them left a swatch alone at the right edge).
    return "  ".join(f"<span style='color:{c}'>■</span>&nbsp;{label}" for label, c in legend_entries(shown).items())


def legend_tooltip(shown: Iterable[Segment] | None = None) -> str:
    """Each legend entry with what it means."""
    return "\n".join(f"{label}: {PART_TIPS[label]}" if label in PART_TIPS else label
                     for label in legend_entries(shown))
