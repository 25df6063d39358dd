"""This CPU's features as ggml names them, read from /proc/cpuinfo: what a native engine build has
(``-march=native``, app/engine/native_build.py). The engine's own ``system_info`` line is the better
source and wins where Headroom has it (app/engine/discover.py ``EngineInfo.cpu_features``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from app.planner.memory.repack import CpuFeatures, parse_cpuinfo


@lru_cache(maxsize=1)
def host_cpu_features() -> CpuFeatures:
    """This machine's features (a native build's); none where /proc/cpuinfo cannot be read."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return CpuFeatures(frozenset())
