"""Pass 1 by the engine's own binaries, for when the llama-cpp-python probe cannot speak for it.

- ``fit_params_measure``: the stock engine's ``llama-fit-params -fitp on`` prints what it would
  allocate per device (model, context, compute MiB) with that build's backend, e.g. CUDA when
  llama-cpp-python here is a CPU build. It does not accept ``-kvu`` (docs/domain.md §1).
- ``engine_pass1``: the opencoti llamafile measures itself: its window mode boots with a minimal
  window and logs ``two-pass — measured GPU compute buffer = N MiB`` (docs/domain.md §4). Start it, read
  that number, stop it.

Both children die with Headroom (app.engine.process ``die_with_parent``), as the probe's does.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from app.engine.native_build import EngineBuild
from app.engine.process import die_with_parent, forget_child, record_child
from app.planner.logparse import LogParser, is_host_device, parse_fit_print
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.measure import MeasureError, failure_hint, last_lines

KVU_WARNING = ("llama-fit-params cannot express -kvu: it measured a per-slot (non-unified) cache, "
               "so the compute and context figures are for that layout, not the planned unified one")
TRUNCATED = "llama-fit-params prints whole MiB (rounded down): each figure may be up to 1 MiB low"


def fit_params_argv(build: EngineBuild, model: Path, settings: LaunchSettings) -> list[str]:
    """The same launch as llama-server's, minus ``-kvu`` (not accepted by llama-fit-params)."""
    argv = [str(build.fit_params), "-m", str(model), "-fitp", "on",
            "-c", str(settings.n_ctx), "-np", str(settings.n_parallel),
            "-b", str(settings.n_batch), "-ub", str(settings.n_ubatch), "-fa", settings.flash_attn,
            "-ctk", settings.type_k, "-ctv", settings.type_v, "-ngl", str(settings.n_gpu_layers)]
    if settings.swa_full:
        argv.append("--swa-full")
    if not settings.offload_kqv:
        argv.append("-nkvo")
    return argv


def fit_params_measure(build: EngineBuild, model: str | Path, settings: LaunchSettings, *,
                       timeout: float = 120.0) -> Measurement:
    """Run ``llama-fit-params -fitp on`` for this launch. Raises MeasureError."""
    path = Path(model)
    if not path.is_file():
        raise MeasureError(f"model file not found: {path}", hint="Check the path.")
    started = time.monotonic()
    try:
        proc = subprocess.run(fit_params_argv(build, path, settings), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
                              preexec_fn=die_with_parent())
    except subprocess.TimeoutExpired:
        raise MeasureError(f"llama-fit-params did not finish within {timeout:g} s") from None
    lines = proc.stderr.splitlines()
    rows = parse_fit_print(proc.stdout)
    if proc.returncode != 0 or not rows:
        raise MeasureError(f"llama-fit-params failed (exit status {proc.returncode})",
                           hint=failure_hint(lines), log_tail=last_lines(lines))
    devices = tuple(DeviceMeasurement(r.name, r.compute * MiB, r.context * MiB, is_host_device(r.name))
                    for r in rows)
    gpus = sorted({re.sub(r"\d+$", "", r.name) for r in rows if not is_host_device(r.name)})
    warnings = [TRUNCATED]
    if settings.kv_unified and settings.n_parallel > 1:
        warnings.insert(0, KVU_WARNING)
    return Measurement(devices, "+".join(gpus) or "CPU", build.commit, round(time.monotonic() - started, 3),
                       f"{build.fit_params.name} -fitp on ({build.backend} build)",
                       kv_total=sum(r.context for r in rows) * MiB, warnings=tuple(warnings), launch=settings)


def _reader(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)
    lines.put(None)


def stop_process(proc: subprocess.Popen[str], grace: float = 5.0) -> None:
    """SIGTERM to the engine's own process group, then SIGKILL (docs/style.md: politely, then firmly)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def engine_pass1(argv: Sequence[str], *, timeout: float = 180.0, env: dict[str, str] | None = None,
                 gpu: str = "CUDA0") -> Measurement:
    """Start an engine that measures itself (opencoti window mode), read its measured GPU compute
    buffer, stop it. ``argv`` is the engine's full launch (app.engine.argv.build_argv, mode "window").
    Raises MeasureError when it exits, or stays silent past ``timeout``, before saying the number."""
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", env=env,
                            start_new_session=True, preexec_fn=die_with_parent())
    record = record_child(proc.pid, list(argv), "probe")
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    parser = LogParser()
    seen: list[str] = []
    measured: int | None = None
    try:
        deadline = started + timeout
        while measured is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MeasureError(f"the engine did not report its measured compute buffer within {timeout:g} s",
                                   hint="Is this the opencoti engine in window mode (--kv-residency-mode window)?",
                                   log_tail=last_lines(seen))
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                proc.wait()
                raise MeasureError(f"the engine exited (status {proc.returncode}) before reporting its "
                                   "measured compute buffer", hint=failure_hint(seen), log_tail=last_lines(seen))
            seen.append(line)
            parser.feed(line)
            measured = parser.result().opencoti.measured_compute
    finally:
        stop_process(proc)
        forget_child(record)
    buffers = parser.result()
    host = {d: b for d, b in buffers.compute.items() if is_host_device(d)}
    devices = (DeviceMeasurement(gpu, measured, 0, False),
               *(DeviceMeasurement(d, b, 0, True) for d, b in host.items()))
    return Measurement(devices, re.sub(r"\d+$", "", gpu), "opencoti", round(time.monotonic() - started, 3),
                       "the engine's own two-pass measurement (opencoti window mode)",
                       tuple(c.line for c in buffers.kv_caches), buffers.kv_total)
