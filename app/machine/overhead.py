"""Per-process GPU overhead: what an engine process uses beyond every llama.cpp buffer.

CUDA context, cuBLAS and friends: ~590 MiB per process on an H200 (docs/domain.md §2), the same at
18 GB and at 114 GB of use, so it is a per-GPU, per-driver constant. Issue 9's run confirmed it on
our own CUDA build: 588–595 MiB on all 32 launches, four models, 14–114 GB (607 MiB once the engine
had generated tokens; bench/results/h200-2026-11-30.md). Measured once per GPU model and driver,
when ``headroom serve`` first launches on it (its plan-vs-actual check has the engine process's
``usedGpuMemory`` from NVML and the buffers llama.cpp logged for it: ``record_overhead``), and kept in
``<cache>/overhead.json``; without a measurement the planner uses the H200 figure. The plan request
for this machine (app/machine/request.py) carries the stored figure for its first GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.files import atomic_text, read_json_dict
from app.paths import cache_dir
from app.planner.devices import Inventory
from app.planner.memory.weights import DEFAULT_GPU_OVERHEAD, DEFAULT_GPU_OVERHEAD_SOURCE
from app.planner.sources import Source, Sourced, SourceKind

#: Measured on an H200, driver 580.159.04, CUDA 13.0 (docs/domain.md §2).
DEFAULT_OVERHEAD = DEFAULT_GPU_OVERHEAD  # one number, owned by the weights/overhead rules
DEFAULT_SOURCE = str(DEFAULT_GPU_OVERHEAD_SOURCE)


@dataclass(frozen=True)
class Overhead:
    bytes: int
    source: str  # how it was measured, in words (kept in overhead.json), or the default's source
    measured: bool = False

    def sourced(self) -> Sourced:
        """The byte count for the planner, carrying its source: measured on this GPU and driver, or
        the default."""
        if self.measured:
            return Sourced(self.bytes, Source(SourceKind.MEASURED_HERE, self.source))
        return Sourced(self.bytes, DEFAULT_GPU_OVERHEAD_SOURCE)


def overhead_path() -> Path:
    return cache_dir() / "overhead.json"


def _key(gpu_name: str, driver: str | None) -> str:
    return f"{gpu_name} | driver {driver or 'unknown'}"


def known_overhead(gpu_name: str, driver: str | None, *, path: Path | None = None) -> Overhead:
    """The stored measurement for this GPU and driver, else the default."""
    entry = read_json_dict(path or overhead_path()).get(_key(gpu_name, driver))
    if isinstance(entry, dict) and isinstance(entry.get("bytes"), int):
        return Overhead(entry["bytes"], str(entry.get("source", "measured")), True)
    return Overhead(DEFAULT_OVERHEAD, DEFAULT_SOURCE)


def record_overhead(gpu_name: str, driver: str | None, beyond_buffers: int, *,
                    path: Path | None = None) -> Overhead | None:
    """Keep what an engine process used on a ``gpu_name`` GPU under ``driver`` beyond every buffer
    llama.cpp logged for it there (NVML's ``usedGpuMemory`` less those buffers:
    ``PlanCheck.process_overhead``), once per GPU model and driver. Returns what was stored, or None
    when nothing new was: a figure was already kept, or the cache cannot be written (a full
    or read-only cache keeps the default and leaves nothing half-written)."""
    store = path or overhead_path()
    if known_overhead(gpu_name, driver, path=store).measured:
        return None
    result = Overhead(max(0, beyond_buffers), f"measured on {gpu_name} (driver {driver or 'unknown'}) with NVML",
                      True)
    data = read_json_dict(store)
    data[_key(gpu_name, driver)] = {"bytes": result.bytes, "source": result.source}
    try:
        atomic_text(store, json.dumps(data, indent=1))
    except OSError:
        return None
    return result


def machine_overhead(inventory: Inventory, given: int | None = None, *,
                     path: Path | None = None) -> int | None:
    """The per-process overhead to plan with: ``given``, else the one measured on this GPU and
    driver (real GPUs only: a simulated card has no driver to measure), else None (the planner's
    default). ``path``: the overhead store (tests)."""
    if given is not None:
        return given
    if not inventory.gpus or inventory.gpus[0].simulated:
        return None
    known = known_overhead(inventory.gpus[0].name, inventory.driver, path=path)
    return known.sourced() if known.measured else None
