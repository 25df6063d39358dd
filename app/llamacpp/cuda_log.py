"""What a llama-server log says of its CUDA backend: which devices it opened, and why none when none.

A release build loads its CUDA module silently (ggml/src/ggml-backend-reg.cpp ``ggml_backend_load_best``
with ``silent``): without the driver's libcuda.so.1 the module does not load and the log names no GPU at
all. With a driver, ``ggml_cuda_init`` says why CUDA did not start. Headroom decides before a launch
what the engine will run on (app/engine/gpu_reach.py); this reads, after it, what it did. Every pattern
has the line it matches above it and the source that prints it; tests/fixtures/cuda_logs/ replays them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.text import printable

# common/common.cpp, common_params_print_info (-lv 4; tests/fixtures/h200/*.engine.log):
#   - CUDA0   : NVIDIA H200 (143155 MiB, 142629 MiB free)
_DEVICE = re.compile(r"common_param:\s+- (?P<name>(?!CPU\b)[A-Za-z]+\d+)\s*: (?P<what>.+?) \(")
# ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_init (cudaGetDeviceCount failed):
# ggml_cuda_init: failed to initialize CUDA: CUDA driver version is insufficient for CUDA runtime version
_INIT_FAILED = re.compile(r"ggml_cuda_init: failed to initialize CUDA: (?P<why>.+)$")
# ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_error (CUDA_CHECK) at the first kernel:
# CUDA error: no kernel image is available for execution on the device
_NO_KERNELS = re.compile(r"CUDA error: no kernel image is available for execution on the device")
# common/common.cpp, system_info (the CUDA backend's features when it loaded):
# system_info: n_threads = 16 (n_threads_batch = 16) / 16 | CUDA : ARCHS = 900 | USE_GRAPHS = 1 | ...
_ARCHS = re.compile(r"\| CUDA : ARCHS = (?P<archs>[\d,]+)")

_WHY: dict[str, str] = {
    "CUDA driver version is insufficient for CUDA runtime version":
        "the NVIDIA driver is older than the CUDA the engine was built with: update the driver",
    "no CUDA-capable device is detected": "CUDA found no GPU (is the card visible to this process? nvidia-smi)",
}


@dataclass(frozen=True)
class CudaStart:
    """``devices``: the GPUs the engine opened (``CUDA0: NVIDIA H200``); ``archs``: the GPU code its CUDA
    backend reported (``900``), ``""`` when none loaded; ``cause``: why it used no GPU, in words, or ``""``."""

    devices: tuple[str, ...]
    archs: str
    cause: str
    line: str = ""


def cuda_start(lines: Iterable[str]) -> CudaStart:
    """What ``lines`` (an engine log) say of CUDA."""
    devices: list[str] = []
    archs, cause, line = "", "", ""
    for raw in lines:
        text = raw.rstrip("\n")
        if m := _DEVICE.search(text):
            devices.append(f"{m.group('name')}: {printable(m.group('what'))}")
        elif m := _ARCHS.search(text):
            archs = m.group("archs")
        elif m := _INIT_FAILED.search(text):
            why = m.group("why").strip()
            cause, line = f"CUDA did not start: {_WHY.get(why, printable(why))}", printable(text)
        elif _NO_KERNELS.search(text):
            cause = ("the engine has no GPU code for this card: its CUDA kernels were built for other compute "
                     "capabilities")
            line = printable(text)
    return CudaStart(tuple(devices), archs, cause, line)
