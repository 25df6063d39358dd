"""Pass 1 for a vision projector: ``clip_init`` with ``no_alloc``, in the probe's child process.

llama-server measures a projector itself only when it fits (``--fit on``: tools/server/server-context.cpp
calls ``mtmd_get_memory_usage``, which builds the CLIP context with ``no_alloc`` and warms it up).
That function returns a C++ ``std::map``, out of ctypes' reach, so the probe makes the same call
underneath it: ``clip_init(path, clip_context_params)`` (tools/mtmd/clip.h; C++ linkage, but plain
structs in and out, so ctypes calls it by its mangled name) with the launch's offload and flash
attention, ``warmup`` and ``no_alloc`` true. No weight is read; the warm-up reserve logs
``reserve_compute_meta: <buffer> compute buffer size = … MiB`` per backend, which the parent parses
(app/llamacpp/logs.py). Like the server's own measurement, this creates the weights buffer and
reserves the compute buffer on the CLIP backend (docs/domain.md §10): on a GPU that memory is taken
for the moment of the probe.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any

from app.planner.settings import LaunchSettings

#: The mangled names in libmtmd (Itanium C++ ABI) of clip.h's ``clip_init`` and ``clip_free``.
CLIP_INIT = "_Z9clip_initPKc19clip_context_params"
CLIP_FREE = "_Z9clip_freeP8clip_ctx"


class ClipContextParams(ctypes.Structure):
    """tools/mtmd/clip.h ``struct clip_context_params`` (0c1e57098)."""

    _fields_ = [("use_gpu", ctypes.c_bool), ("device", ctypes.c_void_p), ("flash_attn_type", ctypes.c_int),
                ("image_min_tokens", ctypes.c_int), ("image_max_tokens", ctypes.c_int), ("warmup", ctypes.c_bool),
                ("cb_eval", ctypes.c_void_p), ("cb_eval_user_data", ctypes.c_void_p), ("no_alloc", ctypes.c_bool),
                ("progress_callback", ctypes.c_void_p), ("progress_callback_user_data", ctypes.c_void_p)]


class ClipInitResult(ctypes.Structure):
    """tools/mtmd/clip.h ``struct clip_init_result``: the vision, audio and audio-generation contexts."""

    _fields_ = [("ctx_v", ctypes.c_void_p), ("ctx_a", ctypes.c_void_p), ("ctx_gen_a", ctypes.c_void_p)]


def mtmd_library(lib_dir: str | None) -> Path | None:
    """libmtmd beside the libllama the probe loaded (the engine build has it), or None."""
    names = ("libmtmd.so",) if sys.platform.startswith("linux") else ("libmtmd.dylib", "mtmd.dll")
    for name in names:
        p = Path(lib_dir) / name if lib_dir else None
        if p is not None and p.is_file():
            return p
    return None


def measure_projector(lib_dir: str | None, settings: LaunchSettings, log: Any) -> str:
    """Load ``settings.mmproj`` without reading weights and let it log its warm-up reserve; ``log`` is
    the probe's ggml log callback (a ctypes callback object), so its lines join the probe's log.
    Returns '' or why it could not measure (no libmtmd: the plan estimates); RuntimeError when llama.cpp
    could not load the projector (the engine would not either)."""
    path = mtmd_library(lib_dir)
    if path is None:
        return f"no libmtmd beside {lib_dir or 'the bindings'}: the vision projector's compute is estimated"
    lib = ctypes.CDLL(str(path))
    lib.mtmd_log_set.restype = None
    lib.mtmd_log_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.mtmd_log_set(ctypes.cast(log, ctypes.c_void_p), None)
    init = lib[CLIP_INIT]
    init.restype, init.argtypes = ClipInitResult, [ctypes.c_char_p, ClipContextParams]
    free = lib[CLIP_FREE]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    params = ClipContextParams(use_gpu=settings.mmproj_offload, flash_attn_type=settings.flash_attn.llama_type,
                               warmup=True, no_alloc=True)
    res = init(settings.mmproj.encode(), params)
    if not res.ctx_v and not res.ctx_a:
        raise RuntimeError(f"llama.cpp could not load the vision projector {settings.mmproj} (see its log)")
    for ctx in (res.ctx_v, res.ctx_a, res.ctx_gen_a):
        if ctx:
            free(ctx)
    return ""
