"""Pass 1 by the engine build itself, for when the llama-cpp-python probe's library cannot speak for it.

- ``fit_params_measure`` (``headroom measure --with fit-params``): what llama-fit-params measures,
  the way it measures it — common/fit.cpp loads the model with ``no_alloc`` and load mode NONE and
  creates a context in the engine build's own libllama, with that build's backend (CUDA when
  llama-cpp-python here carries a CPU library of its own) — but with llama-server's context
  parameters. The llama-fit-params binary itself cannot give the server's numbers: its context keeps
  the default ``n_outputs_max = n_batch`` and so reserves the output layer's logits for every token
  of a ubatch (n_vocab × n_ubatch × 4 bytes: 2058 MiB against the server's 113.08 MiB for a
  262k-vocabulary model at ``-ub 2048``), and it takes no ``-kvu`` (docs/domain.md §1, §6). So the
  probe's child runs on the engine build's libllama (``LLAMA_CPP_LIB_PATH``), with the server's
  ``n_outputs_max`` and ``kv_unified`` (app/probe/worker.py ``context_values``).
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
from dataclasses import replace
from pathlib import Path

from app.engine.native_build import EngineBuild
from app.engine.process import die_with_parent, forget_child, record_child
from app.llamacpp.failures import failure_hint, last_lines
from app.llamacpp.logs import LogParser, is_host_device
from app.planner.measurement import DeviceMeasurement, MeasuredBy, Measurement, MeasurementSource
from app.planner.settings import LaunchSettings
from app.probe.measure import MeasureError, measure


def fit_params_measure(build: EngineBuild, model: str | Path, settings: LaunchSettings, *,
                       timeout: float = 120.0) -> Measurement:
    """llama-fit-params' measurement of this launch with llama-server's context parameters, in the
    engine build's own library. Raises MeasureError."""
    path = Path(model)
    if not path.is_file():
        raise MeasureError(f"model file not found: {path}", hint="Check the path.")
    if not any(Path(build.bin_dir).glob("libllama.*")):
        raise MeasureError(f"the engine build in {build.bin_dir} has no libllama",
                           hint="Rebuild it: headroom engine build.")
    measured = measure(path, settings, timeout=timeout, lib_dir=build.bin_dir)
    return replace(measured, source=MeasurementSource(MeasuredBy.FIT_PARAMS, build.backend.slug))


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
    return Measurement(devices, re.sub(r"\d+$", "", gpu), "", round(time.monotonic() - started, 3),
                       MeasurementSource(MeasuredBy.OPENCOTI),
                       tuple(c.line for c in buffers.kv_caches), buffers.kv_total)
