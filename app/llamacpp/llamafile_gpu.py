"""What a llamafile's log says of its GPU code: loaded, or why not — the complaint llamafile users file
most is "GPU silently falls back to CPU" (llamafile issue #273).

A llamafile loads its GPU code at run time: 0.8.x and 0.9.x extract the prebuilt ``ggml-cuda.so`` it
carries (or build one with ``nvcc``) and ``dlopen`` it through cosmopolitan (llamafile/cuda.c,
``ImportCudaImpl``, ``ExtractCudaDso``, ``LinkCudaDso``); 0.10.x only loads a prebuilt library from
``/zip/``, ``~/.llamafile/v/<version>/`` or ``$HOME`` (llamafile/cuda.c, ``llamafile_try_load_prebuilt_dso``).
When that fails under ``--gpu auto`` it runs every layer on the CPU; under ``--gpu nvidia`` (what Headroom
passes for a GPU plan) it exits. Every pattern has the line it matches above it and the source file that
prints it; the lines are matched wherever they lie in a log line (0.10's ``llamafile_info`` adds a prefix
of its own). tests/fixtures/llamafile_logs/ replays them (its README says which are constructed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from app.text import printable

_WAY_OUT_LIBRARY = ("launch its weights with Headroom's own engine (--engine, or the window's engine list: Headroom "
                    "copies the GGUF out once), or use a llamafile release that carries its GPU library")


@dataclass(frozen=True)
class GpuStory:
    """What the log says: ``loaded`` True (its GPU code loaded), False (it did not: ``cause`` and
    ``way_out`` say why and what to do), None (the log says nothing of it)."""

    loaded: bool | None
    cause: str = ""
    way_out: str = ""
    line: str = ""
    fatal: bool = False  # it stopped (``--gpu nvidia`` asked for a GPU it could not load)

    def sentence(self) -> str:
        """One sentence with the cause and the way out ('' unless it did not load)."""
        if self.loaded is not False:
            return ""
        what = ("The llamafile could not load its GPU code and stopped (Headroom asks it for --gpu nvidia)"
                if self.fatal else "The llamafile ran every layer on the CPU, not the GPU")
        return f"{what}: {self.cause}. To use the GPU: {self.way_out}."


@dataclass(frozen=True)
class _Cause:
    pattern: re.Pattern[str]
    cause: str  # str.format with the pattern's groups
    way_out: str


#: Why its GPU code did not load, most specific first.
CAUSES: tuple[_Cause, ...] = (
    # llamafile 0.8.x/0.9.x llamafile/cuda.c, LinkCudaDso (after a failed cosmo_dlopen), on Linux without cc:
    # you need to install cc for gpu support
    _Cause(re.compile(r"you need to install cc for gpu support|dlopen\(\) isn't supported on this platform"),
           "cosmopolitan builds a small helper with the system's C compiler before it can load a GPU library on "
           "Linux, and this machine has no cc", "install a C compiler (sudo apt install gcc) and launch again"),
    # llamafile 0.8.x/0.9.x llamafile/cuda.c, LinkCudaDso: tinylog(Dlerror(), ": failed to load library")
    # libcuda.so.1: cannot open shared object file: No such file or directory: failed to load library
    # llamafile 0.10.x llamafile/cuda.c, LinkCuda: "failed to load library %s: %s"
    # failed to load library /root/.llamafile/v/0.10.6/ggml-cuda.so: libcuda.so.1: cannot open shared object file
    _Cause(re.compile(r"libcuda\.so(?:\.1)?: cannot open shared object file"),
           "the NVIDIA driver's libcuda.so.1 was not found (no driver is installed, or it is not where the loader "
           "looks)", "install the NVIDIA driver (nvidia-smi must work), then launch again"),
    _Cause(re.compile(r"(?P<why>[^:]+\.so[^:]*: cannot open shared object file[^:]*)"),
           "a library its GPU code needs is missing ({why})", _WAY_OUT_LIBRARY),
    _Cause(re.compile(r"failed to load library (?P<lib>\S+?):? (?P<why>.+)$|(?P<why2>.+): failed to load library"),
           "its GPU library did not load", _WAY_OUT_LIBRARY),
    # llamafile 0.8.x/0.9.x llamafile/cuda.c, ExtractCudaDso:
    # prebuilt binary /zip/ggml-cuda.so not found
    _Cause(re.compile(r"prebuilt binary /zip/ggml-cuda\.\w+ not found"),
           "this llamafile carries no GPU library (/zip/ggml-cuda.so), and none could be built here (no nvcc)",
           _WAY_OUT_LIBRARY),
    # llamafile 0.10.x llamafile/cuda.c, ImportCudaImpl:
    # no pre-built GPU library found
    _Cause(re.compile(r"no pre-built GPU library found"),
           "it found no GPU library: none inside the llamafile (a llamafile-thin build), in ~/.llamafile/v/<version>/ "
           "or in the home folder",
           "put a ggml-cuda.so built for this llamafile version in ~/.llamafile/v/<version>/ (llamafile's cuda.sh "
           "builds one), or " + _WAY_OUT_LIBRARY),
    # ggml/src/ggml-cuda/ggml-cuda.cu, CUDA_CHECK (the kernels were built for other compute capabilities):
    # CUDA error: no kernel image is available for execution on the device
    _Cause(re.compile(r"no kernel image is available for execution on the device"),
           "its GPU code was built for other cards: there are no kernels for this card's compute capability (0.10's "
           "cuda.sh builds sm_75 to sm_90 only)", "launch its weights with Headroom's own engine"),
    # ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_init (cudaGetDeviceCount):
    # ggml_cuda_init: failed to initialize CUDA: CUDA driver version is insufficient for CUDA runtime version
    _Cause(re.compile(r"CUDA driver version is insufficient for CUDA runtime version"),
           "the NVIDIA driver is older than the CUDA its GPU library was built with",
           "update the NVIDIA driver, or launch its weights with Headroom's own engine"),
    _Cause(re.compile(r"failed to initialize CUDA: (?P<why>.+)$|no CUDA-capable device is detected"),
           "CUDA found no usable GPU", "check that nvidia-smi lists the card, then launch again"),
)

# llamafile 0.8.x/0.9.x llamafile/cuda.c, ImportCuda:
# GPU support successfully linked and loaded
# llamafile 0.10.x llamafile/cuda.c, ImportCuda:
# NVIDIA CUDA GPU support successfully loaded
_LOADED = re.compile(r"GPU support successfully (?:linked and )?loaded")
# llamafile 0.8.x/0.9.x llamafile/cuda.c, ImportCuda; 0.10.x the same words:
# fatal error: support for --gpu nvidia was explicitly requested, but it wasn't available
_FATAL = re.compile(r"fatal error: support for --gpu (?P<gpu>\S+).* was explicitly requested, but it wasn't available")
# llamafile 0.8.x/0.9.x llamafile/gpu.c, llamafile_gpu_layers:
# warning: --n-gpu-layers 999 was passed but no GPUs were found; falling back to CPU inference
_FALLBACK = re.compile(r"--n-gpu-layers (?P<n>-?\d+) was passed but no GPUs were found; falling back to CPU inference")


def gpu_story(lines: Iterable[str]) -> GpuStory:
    """What ``lines`` (a llamafile's log) say of its GPU code."""
    seen = [line.rstrip("\n") for line in lines]
    if any(_LOADED.search(line) for line in seen):
        stuck = _cause(seen, CAUSES[-3:])  # loaded, then CUDA itself failed on this card or driver
        return stuck if stuck.loaded is False else GpuStory(True)
    fatal = next((line for line in seen if _FATAL.search(line)), "")
    fell = next((line for line in seen if _FALLBACK.search(line)), "")
    found = _cause(seen, CAUSES)
    if found.loaded is False:
        return GpuStory(False, found.cause, found.way_out, found.line, fatal=bool(fatal))
    if fatal or fell:
        return GpuStory(False, "it found no GPU it could use (its log names no cause)", _WAY_OUT_LIBRARY,
                        fatal or fell, fatal=bool(fatal))
    return GpuStory(None)


def _cause(lines: list[str], causes: Iterable[_Cause]) -> GpuStory:
    for c in causes:
        for line in lines:
            m = c.pattern.search(line)
            if m:
                groups = {k: printable(v or "") for k, v in m.groupdict().items()}
                return GpuStory(False, c.cause.format(**groups), c.way_out, printable(line))
    return GpuStory(None)
