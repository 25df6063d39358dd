"""Point llama-cpp-python at the engine build's libllama when it has none of its own.

``./dev`` installs llama-cpp-python with ``-DLLAMA_BUILD=OFF`` so llama.cpp is compiled once (by
native/); the bindings then find the library through ``LLAMA_CPP_LIB_PATH``. A llama-cpp-python
that ships its own library (e.g. a CUDA build the user installed) is left alone.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path


def bundled_lib_dir() -> Path | None:
    """The installed llama_cpp package's own ``lib`` directory, if it holds a libllama."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if any(lib.glob("libllama.*")) or any(lib.glob("llama.dll")):
        return lib
    return None


def ensure_llama_cpp_lib() -> str | None:
    """Set ``LLAMA_CPP_LIB_PATH`` when needed (before ``import llama_cpp``); return the directory
    the bindings will load from, or None when no library can be found."""
    current = os.environ.get("LLAMA_CPP_LIB_PATH")
    if current:
        return current
    own = bundled_lib_dir()
    if own is not None:
        return str(own)
    # Imported here: pass 1's child is given the path (LLAMA_CPP_LIB_PATH) and starts sooner without it.
    from app.engine.native_build import find_build

    build = find_build()
    if build is None:
        return None
    os.environ["LLAMA_CPP_LIB_PATH"] = build.bin_dir
    return build.bin_dir


#: The names a llama.cpp library has beside its engine (Linux, macOS, Windows).
LIBLLAMA_NAMES = ("libllama.so", "libllama.dylib", "llama.dll")


def lib_dir_beside(engine: str | Path | None) -> str | None:
    """The folder of an engine file the user chose, when the libllama of its build lies beside it
    (links resolved: a ``llama-server`` linked from ``~/bin`` into its build): pass 1 then measures with
    that engine's own llama.cpp. None for a llamafile (one file, no library) or an engine without one."""
    if engine is None:
        return None
    folder = Path(engine).resolve().parent
    return str(folder) if any((folder / name).is_file() for name in LIBLLAMA_NAMES) else None


def is_portable(lib_dir: str | Path | None) -> bool:
    """Whether ``lib_dir`` holds a portable build's libraries: its backends are modules loaded at run
    time (``GGML_BACKEND_DL``), the CPU one from a ``libggml-cpu-<variant>.so`` chosen by CPUID."""
    return bool(lib_dir) and any(Path(str(lib_dir)).glob("libggml-cpu-*.so"))


def load_backends(lib_dir: str | None) -> int:
    """Load a portable build's backends from ``lib_dir`` (call after the bindings loaded libllama,
    before ``llama_backend_init``): ggml looks for them beside the executable, which for pass 1 is
    Python, and in the working directory (ggml/src/ggml-backend-reg.cpp ``ggml_backend_load_best``).
    A native build links its backends: nothing to do. Returns how many backends are registered."""
    if not is_portable(lib_dir):
        return 0
    assert lib_dir is not None
    ggml = ctypes.CDLL(str(Path(lib_dir) / "libggml.so"))  # the one libllama loaded (same path)
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.restype = None
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())
    return int(ggml.ggml_backend_reg_count())


#: ggml backend libraries that put work on a GPU (the RPC backend is not one of them).
GPU_BACKEND_LIBS = ("cuda", "hip", "vulkan", "metal", "sycl", "musa", "opencl")


def gpu_backends(lib_dir: str | None) -> list[str]:
    """GPU backends the llama library in ``lib_dir`` can use, from the ggml libraries beside it.

    ``llama_supports_gpu_offload()`` is not enough: it also answers True for a CPU build with the
    RPC backend (src/llama.cpp: ``... || llama_supports_rpc()``), which our native build enables.
    """
    if not lib_dir:
        return []
    d = Path(lib_dir)
    return [name for name in GPU_BACKEND_LIBS if any(d.glob(f"libggml-{name}.*")) or any(d.glob(f"ggml-{name}.*"))]
