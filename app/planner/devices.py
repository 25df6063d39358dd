"""GPU and host inventory (NVML through ``pynvml`` from nvidia-ml-py; host RAM through psutil).

Data types first; the readers follow. Sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used: int  # bytes of GPU memory
    kind: str = "compute"  # "compute" | "graphics"
    name: str = ""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU. ``name`` is the marketing name; ``engine_name`` is llama.cpp's (``CUDA0``)."""

    index: int
    name: str
    total: int
    free: int
    used: int = 0
    reserved: int = 0
    uuid: str = ""
    simulated: bool = False
    processes: tuple[GpuProcess, ...] = ()
    pcie_gen: int | None = None
    pcie_width: int | None = None

    @property
    def engine_name(self) -> str:
        return f"CUDA{self.index}"


@dataclass(frozen=True)
class HostMemory:
    total: int
    available: int
    swap_total: int = 0
    swap_free: int = 0


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuDevice, ...]
    host: HostMemory
    nvml_ok: bool = False
    reason: str = ""  # why there are no real GPUs, e.g. "no NVIDIA driver found"
    driver: str | None = None
    cuda: str | None = None
    warnings: tuple[str, ...] = field(default=())
