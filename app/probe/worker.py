"""The pass-1 probe's child process: ``python -m app.probe.worker`` (request JSON on stdin).

llama.cpp aborts the whole process on a failed assertion, so the probe never runs in the app's own
process. This worker loads the model with ``no_alloc = true`` and ``load_mode = NONE`` (nothing is
read or allocated; the same pair llama.cpp's own common/fit.cpp uses), creates a context with
exactly the launch's parameters, and lets llama.cpp log what it *would* allocate.

Protocol: every llama.cpp log line goes to stderr as it arrives (so a crash still leaves the last
lines behind); one JSON object on stdout at the end: ``{"ok", "error", "gpu_offload",
"lib_dir", "bindings", "seconds"}``. The parent (app.probe.measure) parses the log.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import re
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.planner.settings import GGML_TYPE_IDS, LaunchSettings, buffer_overrides

#: llama.h ``enum llama_load_mode``: LLAMA_LOAD_MODE_NONE. With no_alloc, anything else aborts
#: (``GGML_ASSERT(!ml.no_alloc)`` in src/llama-model.cpp).
LOAD_MODE_NONE = 0
#: ggml/include/ggml.h ``enum ggml_log_level`` (NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5).
LOG_DEBUG, LOG_CONT = 1, 5
#: The one DEBUG line kept: which device holds each KV layer (splits the KV size per device).
_KV_LAYER_LINE = re.compile(r"llama_kv_cache: layer\s+\d+: dev = ")


def load_bindings() -> Any:
    """llama-cpp-python's low-level ctypes module, without its package ``__init__`` (which imports
    the high-level ``Llama`` class and its dependencies: numpy, diskcache, jinja2). Call
    ``ensure_llama_cpp_lib()`` first."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")
    if "llama_cpp" not in sys.modules:
        pkg = types.ModuleType("llama_cpp")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as lib

    return lib


def context_values(settings: LaunchSettings) -> dict[str, Any]:
    """``llama_context_params`` fields exactly as llama-server sets them for this launch.

    common/common.cpp ``common_context_params_to_llama``: n_seq_max = -np; swa_full from the
    server's default (false; the C API's is true). tools/server/server-context.cpp
    ``server_output_limits``: n_outputs_max = min(n_batch, n_parallel × (1 + drafted tokens)), one
    output per sequence and one per drafted token (it sizes the logits rows of the reserved graph, so
    it changes the compute buffer). A draft model's own context: ``settings.draft_settings()``.
    """
    return {
        "n_ctx": settings.n_ctx,
        "n_batch": settings.n_batch,
        "n_ubatch": settings.n_ubatch,
        "n_seq_max": settings.n_parallel,
        "n_rs_seq": 0,
        "n_outputs_max": settings.n_outputs_max,
        "n_outputs_max_per_seq": settings.n_outputs_max_per_seq,
        "flash_attn_type": settings.flash_attn.llama_type,
        "type_k": GGML_TYPE_IDS[settings.type_k],
        "type_v": GGML_TYPE_IDS[settings.type_v],
        "offload_kqv": settings.offload_kqv,
        "swa_full": settings.swa_full,
        "kv_unified": settings.kv_unified,
        "op_offload": True,
        "embeddings": False,
    }


def model_values(settings: LaunchSettings) -> dict[str, Any]:
    """``llama_model_params`` fields: the planned offload, nothing read, nothing allocated."""
    return {"n_gpu_layers": settings.n_gpu_layers, "no_alloc": True, "load_mode": LOAD_MODE_NONE}


def model_params(lib: Any, settings: LaunchSettings) -> Any:
    """A ``llama_model_params`` with ``model_values(settings)`` set over the library's defaults."""
    mparams = lib.llama_model_default_params()
    for name, value in model_values(settings).items():
        setattr(mparams, name, value)
    return mparams


def context_params(lib: Any, settings: LaunchSettings) -> Any:
    """A ``llama_context_params`` with ``context_values(settings)`` set over the library's defaults."""
    cparams = lib.llama_context_default_params()
    for name, value in context_values(settings).items():
        setattr(cparams, name, value)
    return cparams


def _ggml(lib_dir: str | None) -> Any:
    """The ggml library beside the libllama the probe loaded (the same handle: it is loaded already),
    with the device-listing calls typed."""
    name = "libggml.so" if sys.platform.startswith("linux") else ("libggml.dylib" if sys.platform == "darwin"
                                                                   else "ggml.dll")
    ggml = ctypes.CDLL(str(Path(lib_dir) / name) if lib_dir else name)
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_buft_name.restype = ctypes.c_char_p
    ggml.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    return ggml


def add_rpc_servers(lib_dir: str | None, endpoints: tuple[str, ...]) -> None:
    """Register the launch's RPC workers, as llama-server's ``--rpc`` does (common/arg.cpp
    ``add_rpc_devices``: ``ggml_backend_rpc_add_server`` from the RPC backend's proc table, then
    ``ggml_backend_register``), so the probe sees the devices the engine will: their alignment,
    their buffer names and the compute buffer each one gets. A worker that does not answer aborts
    the probe inside ggml ("Failed to connect to HOST:PORT"), which the parent reports."""
    if not endpoints:
        return
    ggml = _ggml(lib_dir)
    ggml.ggml_backend_load_all.restype = None
    ggml.ggml_backend_load_all()
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RuntimeError("this llama.cpp build has no RPC backend (it needs -DGGML_RPC=ON)")
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    fn = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not fn:
        raise RuntimeError("this llama.cpp build's RPC backend has no ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(fn)
    ggml.ggml_backend_register.restype = None
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    for endpoint in endpoints:
        server = add_server(endpoint.encode())
        if not server:
            raise RuntimeError(f"RPC worker {endpoint} reported no devices")
        ggml.ggml_backend_register(server)


class BuftOverride(ctypes.Structure):
    """llama.h ``struct llama_model_tensor_buft_override { const char * pattern; ggml_backend_buffer_type_t buft; }``."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def buffer_overrides_array(lib_dir: str | None, overrides: tuple[tuple[str, str], ...]) -> Any:
    """``llama_model_params.tensor_buft_overrides`` for these (pattern, buffer name) pairs, NULL-
    terminated, each buffer type found by name among every registered device's default buffer type,
    as common/arg.cpp ``parse_tensor_buffer_overrides`` does (so the RPC workers must be added first).
    ValueError names an unknown buffer type and the ones there are."""
    ggml = _ggml(lib_dir)
    bufts: dict[str, int] = {}
    for i in range(int(ggml.ggml_backend_dev_count())):
        buft = ggml.ggml_backend_dev_buffer_type(ggml.ggml_backend_dev_get(i))
        if buft:
            bufts[ggml.ggml_backend_buft_name(buft).decode()] = buft
    array = (BuftOverride * (len(overrides) + 1))()
    keep = []
    for k, (pattern, name) in enumerate(overrides):
        if name not in bufts:
            raise ValueError(f"unknown buffer type {name} for -ot (there are: {', '.join(bufts)})")
        keep.append(pattern.encode())
        array[k].pattern, array[k].buft = keep[-1], bufts[name]
    return array, keep


def tensor_split_array(lib: Any, shares: tuple[int, ...]) -> Any:
    """``llama_model_params.tensor_split``: ``llama_max_devices()`` floats, the shares first."""
    n = int(lib.llama_max_devices())
    if len(shares) > n:
        raise ValueError(f"{len(shares)} tensor-split shares for at most {n} devices")
    return (ctypes.c_float * n)(*[float(x) for x in shares])


def _emit(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


@dataclass
class Prepared:
    """What every probe needs before its request: the bindings on their libllama, the log routed to
    stderr (``on_log``, kept alive here), the bindings' version."""

    lib: Any
    lib_dir: str | None
    on_log: Any
    bindings: str


def prepare() -> Prepared:
    """Load the bindings and route llama.cpp's log: Python's part of a probe's start, done before the
    request is read, so a child started ahead of its request (app/probe/measure.py ``start_ahead``) has
    it done by the time one comes. Nothing of llama.cpp's own runs yet (no backend, no device)."""
    from app.engine.libpath import ensure_llama_cpp_lib

    lib_dir = ensure_llama_cpp_lib()
    lib = load_bindings()
    last_level = [0]

    @lib.llama_log_callback  # type: ignore[untyped-decorator]
    def on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        # ggml_log_level: DEBUG (per-tensor, per-node chatter) is dropped; CONT follows its line.
        effective = last_level[0] if level == LOG_CONT else level
        last_level[0] = effective
        line = text.decode("utf-8", "replace")
        if effective != LOG_DEBUG or _KV_LAYER_LINE.match(line):
            _emit(line)

    lib.llama_log_set(on_log, ctypes.c_void_p(0))
    return Prepared(lib, lib_dir, on_log, _bindings_version())


def probe(model_path: str, settings: LaunchSettings, prepared: Prepared | None = None, *,
          free: bool = True) -> dict[str, Any]:
    """Run the probe in this process (the worker's body; ``prepared``: ``prepare()``'s, else done now).
    Logs to stderr; returns the result. ``free=False``: the model and its context are left to the
    process's end (the worker's, which ends right after: 30-40 ms of a 0.25 s pass 1 on the 2-core VM),
    unless a projector is measured after them."""
    from app.engine.libpath import load_backends

    started = time.monotonic()
    prepared = prepared or prepare()
    lib, lib_dir, on_log = prepared.lib, prepared.lib_dir, prepared.on_log
    load_backends(lib_dir)  # a portable build's (the bundle's): ggml would look beside Python
    lib.llama_backend_init()
    add_rpc_servers(lib_dir, settings.rpc)
    result: dict[str, Any] = {"ok": False, "error": "", "lib_dir": lib_dir or "",
                              "gpu_offload": bool(lib.llama_supports_gpu_offload()),
                              "bindings": prepared.bindings}
    mparams = model_params(lib, settings)
    split = tensor_split_array(lib, settings.tensor_split) if settings.tensor_split else None
    if split is not None:
        mparams.tensor_split = split  # kept alive by ``split`` until the model is freed
    overrides = buffer_overrides(settings)
    kept = buffer_overrides_array(lib_dir, overrides) if overrides else None
    if kept is not None:  # (-ot, then --n-cpu-moe's, as the engine orders them); kept alive by ``kept``
        mparams.tensor_buft_overrides = ctypes.cast(kept[0], ctypes.c_void_p)
    model = lib.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        result["error"] = f"llama.cpp could not load {model_path} (see its log)"
        return result
    cparams = context_params(lib, settings)
    ctx = lib.llama_init_from_model(model, cparams)
    if not ctx:
        lib.llama_model_free(model)
        result["error"] = "llama.cpp could not create a context with these settings (see its log)"
        return result
    draft_error = _probe_draft(lib, settings, split) if settings.draft_model else ""
    if free or settings.mmproj:
        lib.llama_free(ctx)
        lib.llama_model_free(model)
    if draft_error:
        result["error"] = draft_error
        return result
    if settings.mmproj:  # the vision projector, as the engine loads it after the model (app/probe/projector.py)
        from app.probe.projector import measure_projector

        if why := measure_projector(lib_dir, settings, on_log):
            _emit(f"headroom probe: {why}\n")
    result["ok"] = True
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


#: The line llama-server logs before it loads a draft model (common/speculative.cpp
#: ``common_speculative_init_result``); the probe logs the same, so one parser splits both logs.
DRAFT_MARKER = "common_speculative_init_result: loading draft model '{}'\n"


def _probe_draft(lib: Any, settings: LaunchSettings, split: Any) -> str:
    """The draft model, as llama-server loads it after the model's context (its own ``-ngld``, the
    model's split, its own context parameters): '' when it loaded, else why not."""
    _emit(DRAFT_MARKER.format(settings.draft_model))
    draft = settings.draft_settings()
    mparams = model_params(lib, draft)
    if split is not None:
        mparams.tensor_split = split
    model = lib.llama_model_load_from_file(settings.draft_model.encode(), mparams)
    if not model:
        return f"llama.cpp could not load the draft model {settings.draft_model} (see its log)"
    cparams = context_params(lib, draft)
    ctx = lib.llama_init_from_model(model, cparams)
    if ctx:
        lib.llama_free(ctx)
    lib.llama_model_free(model)
    return "" if ctx else "llama.cpp could not create the draft model's context with these settings (see its log)"


def _bindings_version() -> str:
    try:
        from importlib.metadata import version

        return f"llama-cpp-python {version('llama_cpp_python')}"
    except Exception:
        return "llama-cpp-python (version unknown)"


def main() -> int:
    # Python's part first, then the request: a child started ahead waits here with it done
    try:
        prepared: Prepared | Exception = prepare()
    except Exception as exc:  # (said as the request's result: the parent reads only that)
        prepared = exc
    request = json.loads(sys.stdin.read())
    settings = LaunchSettings.from_json(request["settings"])
    try:
        if isinstance(prepared, Exception):
            raise prepared
        result = probe(str(request["model"]), settings, prepared, free=False)
    except Exception as exc:  # the parent turns this into a MeasureError with the log tail
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # (the interpreter's teardown, and llama.cpp's of what ``free=False`` left, are the kernel's work:
    # the parent has the result once this process has gone, 20 ms sooner)
    os._exit(code)
