"""Pass 1: what the engine's own allocator would reserve for this launch, measured, not guessed.

``measure(model, settings)`` runs ``app.probe.worker`` in a child process (llama.cpp
aborts on a failed assertion; the app must survive), reads the llama.cpp log it streams back, and
returns a ``Measurement``. A child that fails, hangs or aborts raises ``MeasureError`` carrying the
line that says why, the log lines up to it and, where the cause is known, what to change. The
child dies with Headroom, as the engine does (app.engine.process: parent-death signal, PID file).

Whose numbers: the probe measures with the backend llama-cpp-python was built for. ``gpu_caveat``
says so when that is the CPU and the plan targets a GPU, and names the alternatives.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from app.engine.native_build import EngineBuild, find_build
from app.engine.process import die_with_parent, forget_child, reap_leftovers, record_child, spawn_lasting
from app.llamacpp.failures import failure_hint, last_lines, plain_error, up_to_reason
from app.llamacpp.logs import LogBuffers, is_host_device, parse_log, recurrent_parts
from app.llamafile.views import view_for, views_for
from app.planner.devices import Backend
from app.planner.errors import PlannerError
from app.planner.gguf.reader import missing_files
from app.planner.measurement import (
    DeviceMeasurement,
    MeasuredBy,
    MeasuredCache,
    MeasuredRecurrent,
    Measurement,
    MeasurementSource,
)
from app.planner.measurement import gpu_caveat as measurement_caveat
from app.planner.settings import LaunchSettings
from app.probe.cache import MeasureCache, cache_key, cached, library_identity
from app.text import printable_lines

#: The child: this interpreter running the worker module.
WORKER: tuple[str, ...] = (sys.executable, "-m", "app.probe.worker")
_APP_ROOT = str(Path(__file__).resolve().parent.parent.parent)


class MeasureError(PlannerError):
    """Pass 1 failed. ``hint`` says what to change (may be empty); ``log_tail`` is the last lines;
    ``reason`` the one line that says why (a failed assertion, llama.cpp's own error), else the message."""

    def __init__(self, message: str, *, hint: str = "", log_tail: Sequence[str] = (), reason: str = "") -> None:
        self.hint = hint
        self.log_tail = tuple(log_tail)
        self.reason = reason or message
        text = message + (f"\n{hint}" if hint else "")
        if self.log_tail:
            text += "\nlast log lines:\n  " + "\n  ".join(self.log_tail)
        super().__init__(printable_lines(text))  # llama.cpp's lines carry the file's strings: escaped


class MeasureCancelled(MeasureError):
    """Pass 1 was cancelled by its caller (the child was killed); ``str()`` is ``"cancelled"``."""

    def __init__(self) -> None:
        super().__init__("cancelled")


def _worker_env(lib_dir: str | None = None) -> dict[str, str]:
    from app.engine.libpath import ensure_llama_cpp_lib

    ensure_llama_cpp_lib()  # sets LLAMA_CPP_LIB_PATH in os.environ when the bindings need it
    env = dict(os.environ)
    if lib_dir is not None:  # this libllama, whatever llama-cpp-python carries (app/probe/fit_params.py)
        env["LLAMA_CPP_LIB_PATH"] = lib_dir
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_APP_ROOT, env.get("PYTHONPATH", "")) if p)
    # ggml/src/ggml.c, ggml_print_backtrace: on an abort it attaches gdb to print the interpreter's
    # frames (seconds, and dozens of lines after the one that says why); the probe needs the line.
    env.setdefault("GGML_NO_BACKTRACE", "1")
    return env


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


#: How often a running probe checks its cancel event (seconds).
CANCEL_POLL_S = 0.05


@dataclass
class _Child:
    """A started pass-1 child, its request not sent yet (``request_fd``: its stdin's write end)."""

    proc: subprocess.Popen[str]
    request_fd: int
    record: Path | None
    key: tuple[object, ...]


def _key(worker: Sequence[str], env: dict[str, str]) -> tuple[object, ...]:
    """What a child is started with: a child started ahead serves a request made with the same."""
    return tuple(worker), tuple(sorted(env.items()))


def _spawn(worker: Sequence[str], env: dict[str, str]) -> _Child:
    """Start a child. Tied to the calling thread: the kernel kills it if Headroom dies (even by
    SIGKILL), or that thread ends; its PID file lets the next Headroom reap it where that signal was
    lost. Its request goes down a pipe of its own, written and closed in one go (``_send``), so the
    child measures while the caller's ``meanwhile`` runs (``communicate`` would send it only when
    waiting)."""
    request_read, request_write = os.pipe()
    try:
        proc = subprocess.Popen(list(worker), stdin=request_read, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                                start_new_session=True, preexec_fn=die_with_parent())
    except BaseException:
        os.close(request_write)
        raise
    finally:
        os.close(request_read)
    return _Child(proc, request_write, record_child(proc.pid, list(worker), "probe"), _key(worker, env))


#: The child started ahead of its request (``start_ahead``), if any; held while one is being started.
_AHEAD: _Child | None = None
_AHEAD_LOCK = threading.Lock()
_STARTING = threading.Lock()


def _discard(child: _Child) -> None:
    """End a child whose request never came (its stdin closed; killed, as it may be mid-start)."""
    with contextlib.suppress(OSError):
        os.close(child.request_fd)
    if child.proc.poll() is None:
        _kill_group(child.proc)
    child.proc.communicate()
    forget_child(child.record)


def start_ahead(lib_dir: str | None = None, worker: Sequence[str] = WORKER) -> None:
    """Start the next pass-1 child now, for ``lib_dir``'s libllama: the window's (app/ui/measure_bar.py),
    so that its next pass 1 (``measure(..., ahead=True)``) finds Python's start-up, its imports and the
    bindings done (about 0.1-0.15 s of the 0.4-0.6 s a fresh child takes on the 2-core VM; bench/
    bench_fit_params.py). It waits for its request doing nothing, and measures once, as every child
    does: a crash, or whatever a file left behind, ends with it. Started from the engine spawner's
    thread, which lasts as long as Headroom, so it dies with Headroom and not with the caller's thread.
    Nothing when another is being started (the window asks on every re-plan with none waiting)."""
    global _AHEAD
    if not _STARTING.acquire(blocking=False):
        return
    try:
        env = _worker_env(lib_dir)
        key = _key(worker, env)
        with _AHEAD_LOCK:
            if _AHEAD is not None and _AHEAD.key == key and _AHEAD.proc.poll() is None:
                return
            stale, _AHEAD = _AHEAD, None
        if stale is not None:
            _discard(stale)
        child = spawn_lasting(lambda: _spawn(worker, env))
        with _AHEAD_LOCK:
            _AHEAD = child
    finally:
        _STARTING.release()


def start_ahead_soon(lib_dir: str | None = None, worker: Sequence[str] = WORKER) -> None:
    """``start_ahead`` on a thread of its own, for a caller that must not wait (the GUI thread, a pass 1
    with its result); nothing when one is being started already."""
    if not _STARTING.locked():
        threading.Thread(target=start_ahead, args=(lib_dir, worker), name="pass-1-ahead", daemon=True).start()


def waiting_ahead() -> int | None:
    """The PID of the child started ahead, while it waits (None: none)."""
    child = _AHEAD
    return child.proc.pid if child is not None and child.proc.poll() is None else None


def stop_ahead() -> None:
    """End the child started ahead (none: nothing to do)."""
    global _AHEAD
    with _AHEAD_LOCK:
        child, _AHEAD = _AHEAD, None
    if child is not None:
        _discard(child)


def _take_ahead(key: tuple[object, ...]) -> _Child | None:
    """The child started ahead for ``key`` (still waiting), taken; None when there is none for it."""
    global _AHEAD
    with _AHEAD_LOCK:
        child = _AHEAD
        if child is None or child.key != key:
            return None
        _AHEAD = None
    if child.proc.poll() is None:
        return child
    _discard(child)  # (it died waiting: a fresh one measures)
    return None


def run_worker(model_path: Path, settings: LaunchSettings, *, timeout: float,
               worker: Sequence[str] = WORKER, cancel: threading.Event | None = None,
               lib_dir: str | None = None, meanwhile: Callable[[], object] | None = None,
               ahead: bool = False) -> tuple[dict[str, object], list[str]]:
    """Run the child (on ``lib_dir``'s libllama when given); return its result object and its log
    lines. Raises MeasureError, or MeasureCancelled (the child's process group killed) as soon as
    ``cancel`` is set. ``meanwhile`` runs once the child has its request, while it measures (the
    caller's own checks of the file: what it raises is raised, the child killed). ``ahead``: the
    child ``start_ahead`` started where it has one for these, and the next started ahead after it."""
    request = json.dumps({"model": str(model_path), "settings": settings.to_json()})
    reap_leftovers()  # probes (and engines) a killed Headroom left behind
    env = _worker_env(lib_dir)
    child = (_take_ahead(_key(worker, env)) if ahead else None) or _spawn(worker, env)
    proc = child.proc
    try:
        deadline = time.monotonic() + timeout
        _send(child.request_fd, request)
        if meanwhile is not None:
            meanwhile()
        return _wait_worker(proc, deadline, timeout=timeout, cancel=cancel)
    except BaseException:  # Ctrl-C (or any failure here): the child has its own session, so kill it
        if proc.poll() is None:
            _kill_group(proc)
            proc.communicate()
        raise
    finally:
        forget_child(child.record)
        if ahead:  # (the next one: the caller has its result without waiting for it)
            start_ahead_soon(lib_dir, worker)


def _send(fd: int, request: str) -> None:
    """The whole request down the child's stdin, which is then closed (the child reads to its end). A
    child that died before reading it is reported from its output, as any failed child is."""
    try:
        with open(fd, "w", encoding="utf-8", closefd=True) as pipe:
            pipe.write(request)
    except BrokenPipeError:
        pass


def _wait_worker(proc: subprocess.Popen[str], deadline: float, *, timeout: float,
                 cancel: threading.Event | None) -> tuple[dict[str, object], list[str]]:
    while True:
        left = deadline - time.monotonic()
        try:
            out, err = proc.communicate(timeout=max(0.0, min(left, CANCEL_POLL_S)))
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                _kill_group(proc)
                proc.communicate()
                raise MeasureCancelled() from None
            if time.monotonic() < deadline:
                continue
            _kill_group(proc)
            out, err = proc.communicate()
            raise MeasureError(f"pass 1 did not finish within {timeout:g} s and was stopped",
                               hint="The probe reads no weights and normally takes under 2 s: "
                                    "the model or the llama.cpp build may be stuck; try again or check the log.",
                               log_tail=last_lines(err.splitlines())) from None
    lines = err.splitlines()
    result: dict[str, object] = {}
    for text in reversed(out.splitlines()):
        try:
            result = json.loads(text)
            break
        except ValueError:
            continue
    reason, tail = up_to_reason(lines)
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        what = "aborted (a failed assertion)" if sig == "SIGABRT" else f"was killed by {sig}"
        said = f": {reason}" if reason else ""
        raise MeasureError(f"pass 1: the llama.cpp probe {what}{said}; the app is unaffected",
                           hint=failure_hint(lines), log_tail=tail, reason=reason)
    if not result.get("ok"):
        said = str(result.get("error") or f"the probe exited with status {proc.returncode}")
        error = plain_error(said)
        raise MeasureError(f"pass 1 failed: {error}", hint=failure_hint([*lines, said]), log_tail=tail,
                           reason=plain_error(reason) if reason else error)
    return result, lines


def backend_of(buffers: LogBuffers) -> str:
    """What measured: the device family of the non-host compute buffers (``CUDA0`` → ``CUDA``), else CPU."""
    families = sorted({re.sub(r"\d+(\[.*\])?$", "", d) for d in buffers.compute if not is_host_device(d)})
    return "+".join(families) if families else Backend.CPU


def engine_commit(lib_dir: str, build: EngineBuild | None = None) -> str:
    """The llama.cpp commit behind the library the probe loaded: the engine build's, when it is that one
    (found, or any Headroom build whose stamp lies above ``lib_dir``: a chosen engine's folder), else
    ``"unknown"``."""
    from app.engine.native_build import build_of

    build = build if build is not None else find_build()
    if build is not None and lib_dir and Path(lib_dir).resolve() == Path(build.bin_dir).resolve():
        return build.commit
    stamped = build_of(Path(lib_dir) / "llama-server") if lib_dir else None
    return stamped.commit if stamped is not None else "unknown"


def pipeline_copies_counted(buffers: LogBuffers, n_ubatch: int) -> dict[str, int]:
    """What pass 1 (``no_alloc``) counts that the engine's allocation does not, per compute buffer: with
    pipeline parallelism over several devices (``sched copies = N``), the reserve made without allocating
    (src/llama-context.cpp ``graph_reserve`` with ``backend_buf_exp_size``) counts, on each device after
    the first, N copies of the hidden state it receives from the device before (n_embd × n_ubatch f32);
    the real allocation shares them. Seen on two and three loopback RPC workers: +N × 128 × 512 × 4 B =
    1.00 MiB on the second of two (-ub 512), +0.50 MiB on the second and third of three (-ub 256)."""
    if buffers.sched_copies <= 1 or not buffers.n_embd:
        return {}
    devices = [d for d in buffers.compute if not is_host_device(d)]
    extra = buffers.sched_copies * buffers.n_embd * n_ubatch * 4
    return {d: extra for d in devices[1:] if buffers.compute[d] > extra}


def measurement_from_log(buffers: LogBuffers, *, backend: str, commit: str, seconds: float,
                         source: MeasurementSource, n_ubatch: int = 0) -> Measurement:
    """Per-device compute and KV from a parsed log.

    KV per device: the ``KV buffer size`` lines when they carry sizes (a real engine); with
    ``no_alloc`` they print 0.00, so each cache's size is split by the devices of its layers
    (the probe keeps llama.cpp's per-layer ``dev =`` lines), or goes to the one KV device.
    """
    kv = {d: size for d, size in buffers.kv.items() if size > 0}
    if not kv and all(c.layer_devices for c in buffers.kv_caches) and buffers.kv_caches:
        for cache in buffers.kv_caches:
            for dev, _ in cache.layer_devices:  # device names (RPC1): to the buffers' (RPC0[host:port])
                name = buffers.buffer_name(dev)
                kv[name] = kv.get(name, 0) + cache.on_device(dev)
    elif not kv and len(buffers.kv) == 1:
        kv = {next(iter(buffers.kv)): buffers.kv_total}
    names = list(dict.fromkeys([*buffers.compute, *kv]))
    counted = pipeline_copies_counted(buffers, n_ubatch) if n_ubatch else {}
    devices = tuple(DeviceMeasurement(name, buffers.compute.get(name, 0) - counted.get(name, 0), kv.get(name, 0),
                                      is_host_device(name)) for name in names)
    parts = [p for p in map(recurrent_parts, buffers.recurrent_lines) if p is not None]
    return Measurement(devices, backend, commit, round(seconds, 3), source,
                       (*(c.line for c in buffers.kv_caches), *buffers.recurrent_lines), buffers.kv_total,
                       sum(buffers.output.values()), buffers.recurrent_total, buffers.warnings,
                       projector_compute=tuple(buffers.projector_compute.items()),
                       caches=tuple(MeasuredCache(c.cells, c.n_stream, c.layer_ids, c.type_k, c.k, c.type_v, c.v)
                                    for c in buffers.kv_caches),
                       recurrent_state=MeasuredRecurrent(*parts[0], layer_ids=buffers.recurrent_layer_ids)
                       if parts else None)


def _model_file(model_path: str | Path) -> Path:
    """The model's path; MeasureError when there is no such file (nor such member of an archive)."""
    path = Path(model_path)
    if missing_files((path,)):
        raise MeasureError(f"model file not found: {path}", hint="Check the path.")
    return path


def measure(model_path: str | Path, settings: LaunchSettings, *, timeout: float = 60.0,
            worker: Sequence[str] = WORKER, cancel: threading.Event | None = None,
            lib_dir: str | None = None, meanwhile: Callable[[], object] | None = None,
            ahead: bool = False) -> Measurement:
    """Pass 1 for this exact launch (in ``lib_dir``'s libllama when given). Raises MeasureError (a
    PlannerError) when it cannot, and MeasureCancelled promptly (the child killed) once ``cancel`` is set.
    ``meanwhile``, ``ahead``: as for ``run_worker``."""
    path = _model_file(model_path)
    started = time.monotonic()
    try:  # a GGUF inside a llamafile: its header-only view (app/llamafile/views.py), never a copy
        target, probe_settings = view_for(path), views_for(settings)
    except PlannerError as exc:
        raise MeasureError(str(exc)) from None
    result, lines = run_worker(target, probe_settings, timeout=timeout, worker=worker, cancel=cancel,
                               lib_dir=lib_dir, meanwhile=meanwhile, ahead=ahead)
    buffers = parse_log("\n".join(lines))
    if not buffers.compute:
        raise MeasureError("pass 1 ran but llama.cpp printed no compute buffer size",
                           hint=" ".join(buffers.warnings), log_tail=last_lines(lines))
    measured = measurement_from_log(buffers, backend=backend_of(buffers),
                                    commit=engine_commit(str(result.get("lib_dir") or "")),
                                    seconds=time.monotonic() - started,
                                    source=MeasurementSource(MeasuredBy.PROBE,
                                                             str(result.get("bindings", "llama-cpp-python"))),
                                    n_ubatch=settings.effective_n_ubatch)
    draft = None
    if settings.draft_model and buffers.draft is not None:  # the draft's lines, after the marker
        draft = replace(measurement_from_log(buffers.draft, backend=measured.backend, commit=measured.llama_commit,
                                             seconds=0.0, source=measured.source), launch=settings.draft_settings())
    return replace(measured, launch=settings, draft=draft)


def gpu_caveat(measurement: Measurement, *, targets_gpu: bool, engine: EngineBuild | None = None) -> str | None:
    """``app.planner.measurement.gpu_caveat``, naming the engine's own llama-fit-params when it is there."""
    tool = engine.fit_params.name if engine is not None and engine.fit_params.is_file() else None
    return measurement_caveat(measurement, targets_gpu=targets_gpu, fit_params_tool=tool)


def _probe_library(lib_dir: str | None = None) -> dict[str, object]:
    """The identity of the llama.cpp the probe loads (part of every cache key): ``lib_dir``'s (a chosen
    engine's), else the one the bindings find."""
    from app.engine.libpath import ensure_llama_cpp_lib

    lib_dir = lib_dir or ensure_llama_cpp_lib()
    return library_identity(lib_dir, engine_commit(lib_dir or ""))


def measure_cached(model_path: str | Path, settings: LaunchSettings, *, timeout: float = 60.0,
                   refresh: bool = False, cache: MeasureCache | None = None,
                   cancel: threading.Event | None = None, lib_dir: str | None = None,
                   meanwhile: Callable[[], object] | None = None, ahead: bool = False) -> tuple[Measurement, bool]:
    """``measure`` through the on-disk cache: ``(measurement, from_cache)``. The key includes the
    library the probe loads, so a rebuilt engine or another llama-cpp-python measures again.
    ``lib_dir``: the libllama of the engine that will launch (app/engine/libpath.py ``lib_dir_beside``).
    ``meanwhile`` runs while the child measures (``run_worker``), or after a cache hit: either way
    before a measurement is returned. ``ahead``: as for ``run_worker``."""
    path = _model_file(model_path)
    m, hit = cached(path, settings, _probe_library(lib_dir),
                    lambda: measure(path, settings, timeout=timeout, cancel=cancel, lib_dir=lib_dir,
                                    meanwhile=meanwhile, ahead=ahead), cache=cache, refresh=refresh)
    if hit and meanwhile is not None:
        meanwhile()
    return m, hit


def cached_measurement(model_path: str | Path, settings: LaunchSettings, *,
                       cache: MeasureCache | None = None, lib_dir: str | None = None) -> Measurement | None:
    """The stored pass 1 for exactly this model file, launch and probe library (``lib_dir``'s, as
    ``measure_cached`` keys it), or None. Runs nothing."""
    path = Path(model_path)
    if missing_files((path,)):
        return None
    store = cache if cache is not None else MeasureCache()
    return store.get(cache_key(path, settings, _probe_library(lib_dir)))
