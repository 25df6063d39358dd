"""The speed model's figures for this machine (app/planner/solve/speed.py), measured once and cached.

- Host memory bandwidth: the best of a few copies of a 64 MiB buffer (numpy; read + write counted),
  well under a second. Host compute: the best of a few float32 matmuls (numpy's BLAS, every core).
- A local GPU: its memory bandwidth from NVML's maximum memory clock and bus width (× the speed
  model's decode efficiency), its link from NVML's PCIe generation and width; its compute stays the
  card table's default (NVML does not give tensor throughput), and no copy is timed (Headroom has no
  CUDA binding in Python: the after-launch check measures the real thing instead).
- A CPU's flash attention (seconds per KV cell and head, by KV type, decode and prefill) and, for an RPC
  worker's device, its matmul rate: measured by a short run of the engine that the caller passes in
  (``engine_run``: app/engine/cpu_attention.py ``measure``; app/machine does not start engines), once
  per device: the host by the host's identity, a worker's device by its name and description. The
  host's run also times what a token costs the server whatever the model (``SERVER_RUN``: the speed
  model's ``token_overhead``).
- After a launch, ``serve`` stores measured ÷ predicted tokens/s (``learn``): later predictions on the
  same machine and devices are scaled by it.
- ``headroom doctor --recalibrate`` forgets all of it (``forget``) and measures again.

Kept in ``<cache>/speed-calibration.json`` with the host's identity (CPU model, RAM): a different
identity is measured again. A GPU's figure is kept by its UUID beside them, read once when a plan first
names that GPU (planning for a simulated card, or for no card, measures nothing again). A cache that
cannot be written (read-only, full) keeps the figures for this process only: nothing is measured twice.
Every figure says whether it was calibrated.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.files import atomic_text, read_json_dict
from app.paths import cache_dir
from app.planner.devices import GpuDevice, Inventory
from app.planner.solve import speed
from app.planner.solve.speed import CpuAttention, DeviceSpeed, Figure, SpeedFigures
from app.planner.sources import Source, SourceKind

CALIBRATION_VERSION = 1
#: The host copy's buffer: larger than any desktop CPU's last-level cache.
COPY_BYTES = 64 * 1024 * 1024
MATMUL_N = 512
REPEATS = 3


#: A timed engine run on one device (None: the host CPU; else an RPC worker's device) with heads of
#: a size: per KV type ``{"decode": s, "prefill": s, "compute": flop/s}`` (app/engine/cpu_attention.py);
#: empty when it could not run.
EngineRun = Callable[[GpuDevice | None, int], dict[str, dict[str, Any]]]
#: A CPU-attention engine run is kept for good, so it is not made while the machine is busy: a
#: 1-minute load average over this many per core (two busy loops on the 2-core CI machine measured
#: this CPU's attention ×4–8 slower than when idle, and one KV type not at all).
BUSY_LOAD_PER_CORE = 0.75
#: Nor while more than this share of the CPU is in use now (sampled over BUSY_SAMPLE_S seconds): the
#: engine runs a thread a core, and one core taken stalls them all at each barrier.
BUSY_CPU_PERCENT = 20.0
BUSY_SAMPLE_S = 0.5
#: Set (to anything): measure even on a busy machine (the tests about the run; they run under load).
MEASURE_WHEN_BUSY_ENV = "HEADROOM_MEASURE_WHEN_BUSY"


def busy() -> str | None:
    """Why the machine is too busy to time it now ("load 4.2 on 2 cores", "45% of the CPU in use"), or
    None: the 1-minute load average, and the CPU in use over the last ``BUSY_SAMPLE_S`` (the average
    lags: one core taken on two read 0.74 a core, and the engine's threads, one a core, waited on it:
    f16 attention measured ×5 slow and all five runs agreed). ``HEADROOM_MEASURE_WHEN_BUSY`` set: None
    (what is timed is timed anyway); ``load_now`` says how busy it is all the same."""
    if os.environ.get(MEASURE_WHEN_BUSY_ENV):
        return None
    return load_now()


def load_now() -> str | None:
    """How busy the machine is now, in ``busy``'s words, whatever ``HEADROOM_MEASURE_WHEN_BUSY`` says:
    what explains a measurement already made (a launch's speed far below its prediction)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # (no load average on this system: the CPU in use alone)
        load = 0.0
    if load > BUSY_LOAD_PER_CORE * cores:
        return f"load {load:.1f} on {cores} cores"
    import psutil

    used = psutil.cpu_percent(interval=BUSY_SAMPLE_S)
    return f"{used:.0f}% of the CPU in use" if used > BUSY_CPU_PERCENT else None


#: The key of the host's engine run in the cache's ``engine_runs``.
HOST_RUN = "host"
#: What a kept engine run carries: runs of an older version are made again, once (2: the GQA run,
#: which prices a GQA model's CPU attention; 3: the deep run, its decode over KV read from memory; 4:
#: the host's server run, a token's fixed cost; 5: deep runs at three footprints, the decode's cost by
#: the KV a token reads, ``decode_curve``).
ENGINE_RUN_VERSION = 5
RUN_VERSION_KEY = "run_version"
#: The host's server run in its engine run, beside the KV types' figures: ``{"token": seconds}``
#: (app/engine/cpu_attention.py ``server_token``).
SERVER_RUN = "server"


def run_stored(by_head: Any, head: int) -> dict[str, Any] | None:
    """A device's engine run for ``head`` as stored, of any version (None: none)."""
    run = by_head.get(str(head)) if isinstance(by_head, dict) else None
    return run if isinstance(run, dict) else None


def run_kept(by_head: Any, head: int) -> bool:
    """A device's engine run for ``head`` is stored, and of this version."""
    run = run_stored(by_head, head)
    return run is not None and run.get(RUN_VERSION_KEY) == ENGINE_RUN_VERSION


def engine_run_key(gpu: GpuDevice | None) -> str:
    """Which device an engine run belongs to: the host, or a worker's device by its engine name
    (index and endpoint) and the description the worker gave."""
    return HOST_RUN if gpu is None else f"{gpu.engine_name} {gpu.name}"


def calibration_path() -> Path:
    return cache_dir() / "speed-calibration.json"


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def identity(inventory: Inventory) -> dict[str, Any]:
    """What the host's figures belong to: the CPU model and host RAM (each GPU's figure is kept by
    its UUID beside them)."""
    return {"cpu": _cpu_model(), "ram": inventory.host.total}


def measure_host_bandwidth() -> float:
    """Bytes per second a copy moves through host memory (read and write), the best of a few."""
    import numpy as np

    src = np.ones(COPY_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * COPY_BYTES / max(best, 1e-9)


def measure_host_flops() -> float:
    """Float32 matmul flop/s numpy's BLAS reaches here, the best of a few."""
    import numpy as np

    a = np.ones((MATMUL_N, MATMUL_N), dtype=np.float32)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * MATMUL_N ** 3 / max(best, 1e-9)


def nvml_bandwidth(nvml: Any, index: int) -> float | None:
    """A GPU's nominal memory bandwidth from NVML: maximum memory clock × 2 (double data rate) × bus
    width; None when NVML cannot say."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
        bits = nvml.nvmlDeviceGetMemoryBusWidth(handle)
    except Exception:
        return None
    return float(mhz) * 1e6 * 2 * int(bits) / 8 if mhz and bits else None


def _real_gpus(inventory: Inventory) -> list[GpuDevice]:
    return [g for g in inventory.local_gpus if not g.simulated]


def _gpu_bandwidths(gpus: list[GpuDevice]) -> dict[str, float]:
    """NVML's bandwidth per GPU UUID; 0 where NVML cannot say (not calibrated: the default is used,
    and NVML is not asked again)."""
    if not gpus:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return dict.fromkeys((g.uuid or g.name for g in gpus), 0.0)
    try:
        return {g.uuid or g.name: nvml_bandwidth(pynvml, g.index) or 0.0 for g in gpus}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _save(path: Path, data: dict[str, Any]) -> bool:
    """Write ``data`` whole or not at all; False when the cache cannot be written (read-only, full)."""
    try:
        atomic_text(path, json.dumps(data, indent=1))
        return True
    except OSError:
        return False


#: Calibrations this process measured but could not store (a read-only or full cache), by store and
#: identity: kept so that nothing is measured twice (the window plans on every slider move).
_UNSTORED: dict[tuple[str, str], dict[str, Any]] = {}


def calibration(inventory: Inventory, *, path: Path | None = None,
                engine_run: EngineRun | None = None, head_dims: tuple[int, ...] = (),
                retime: bool = True) -> dict[str, Any]:
    """The stored calibration for this host's identity, measured (and stored) when there is none or
    the identity changed; a real GPU not seen before gets its NVML figure added; with ``engine_run``,
    the host and each RPC worker's device get theirs for each of ``head_dims`` not run before.
    ``retime``: host figures timed on a busy machine are timed again if it is quiet now (False: the
    window's GUI thread, which must not sample the CPU for half a second; its start-up task does it)."""
    store = path or calibration_path()
    ident = identity(inventory)
    memo_key = (str(store), json.dumps(ident, sort_keys=True))
    data = read_json_dict(store)
    changed = False
    if not (data.get("version") == CALIBRATION_VERSION and data.get("identity") == ident):
        data = _UNSTORED.get(memo_key) or {
            "version": CALIBRATION_VERSION, "identity": ident, "measured_at": time.time(),
            "host_bandwidth": measure_host_bandwidth(), "host_flops": measure_host_flops(),
            "gpu_bandwidth": {}, "learned": {}, "measured_busy": busy()}
        changed = memo_key not in _UNSTORED
    elif retime and data.get("measured_busy") and busy() is None:
        # the host's figures were timed while the machine was busy (a figure of that moment, not of the
        # machine): timed again now that it is not, the rest kept
        data |= {"measured_at": time.time(), "host_bandwidth": measure_host_bandwidth(),
                 "host_flops": measure_host_flops(), "measured_busy": None}
        changed = True
    known = data.setdefault("gpu_bandwidth", {})
    if new := [g for g in _real_gpus(inventory) if (g.uuid or g.name) not in known]:
        known.update(_gpu_bandwidths(new))
        changed = True
    runs = data.setdefault("engine_runs", {})
    if engine_run is not None:
        for dev in (None, *inventory.rpc_devices):
            by_head = runs.setdefault(engine_run_key(dev), {})
            for head in head_dims:
                if not run_kept(by_head, head) and (got := engine_run(dev, head)):
                    # (none: the run failed or was too noisy; not kept, so a later plan runs it again)
                    by_head[str(head)] = {**got, RUN_VERSION_KEY: ENGINE_RUN_VERSION}
                    changed = True
    if changed:
        data.pop("saved", None)
        data["saved"] = _save(store, data)
        if not data["saved"]:
            _UNSTORED[memo_key] = data
    return data


def forget(path: Path | None = None) -> bool:
    """Drop every figure stored for this machine (the host's timings, each GPU's NVML figure, the engine
    runs, what launches taught): the next plan, or ``headroom doctor``, measures them again
    (``doctor --recalibrate``: figures timed on a bad day, a machine upgraded in place). False when the
    stored file could not be removed (a read-only cache): it is left as it was."""
    store = path or calibration_path()
    for key in [k for k in _UNSTORED if k[0] == str(store)]:
        del _UNSTORED[key]
    try:
        store.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def missing_engine_runs(inventory: Inventory, head_dims: tuple[int, ...], *,
                        path: Path | None = None) -> list[tuple[GpuDevice | None, int]]:
    """The (device, head size) pairs of ``inventory`` (the host: None; each RPC worker's device) with no
    engine run stored yet, or one of an older ``ENGINE_RUN_VERSION`` (a run that failed or was too noisy
    is not kept: a later plan makes it). Reads the cache only: nothing is measured."""
    runs = calibration_runs(inventory, path=path)
    out: list[tuple[GpuDevice | None, int]] = []
    for dev in (None, *inventory.rpc_devices):
        by_head = runs.get(engine_run_key(dev))
        out += [(dev, head) for head in head_dims if not run_kept(by_head, head)]
    return out


def calibration_runs(inventory: Inventory, *, path: Path | None = None) -> dict[str, Any]:
    """The stored ``engine_runs`` for this host's identity (empty: none); reads the cache only."""
    store = path or calibration_path()
    ident = identity(inventory)
    data = read_json_dict(store)
    if not (data.get("version") == CALIBRATION_VERSION and data.get("identity") == ident):
        data = _UNSTORED.get((str(store), json.dumps(ident, sort_keys=True))) or {}
    runs = data.get("engine_runs")
    return runs if isinstance(runs, dict) else {}


def learned_key(inventory: Inventory, model: str = "") -> str:
    """Which launches a learned ratio belongs to: the CPU alone, or these devices, and the model (a
    walkthrough's 2-layer toy model had rescaled every later plan of an 8B on the CPU)."""
    devices = ",".join(g.name for g in inventory.gpus) or "cpu"
    return f"{devices} · {model}" if model else devices


def _calibrated(value: float, detail: str) -> Figure:
    return Figure(value, Source(SourceKind.CALIBRATED, detail))


def _runs(by_head: Any) -> list[tuple[int, str, dict[str, float]]]:
    """A device's engine runs as (head size, KV type, figures), the well-formed ones."""
    if not isinstance(by_head, dict):
        return []
    return [(int(head), kv, r) for head, run in sorted(by_head.items()) if head.isdigit() and isinstance(run, dict)
            for kv, r in sorted(run.items())
            if isinstance(r, dict) and all(isinstance(r.get(k), (int, float)) and r[k] > 0
                                           for k in ("decode", "prefill"))]


#: What an engine run's figures say they are.
ENGINE_RUN_DETAIL = "llama-batched-bench on the self-test model, flash attention on"


def attention_figures(by_head: Any, detail: str = ENGINE_RUN_DETAIL) -> tuple[CpuAttention, ...]:
    """A device's well-formed engine runs (``by_head``: head size → run) as the speed model takes them."""

    def shared(r: dict[str, float], head: int) -> tuple[Figure | None, float]:
        c, g = r.get("decode_gqa"), r.get("gqa")
        if isinstance(c, (int, float)) and c > 0 and isinstance(g, (int, float)) and g > 1:
            return _calibrated(float(c), f"{detail}, {head}-wide heads, {g:g} query heads a KV head"), float(g)
        return None, 1.0

    def deep(r: dict[str, float], head: int) -> Figure | None:
        d = r.get("decode_deep")
        if isinstance(d, (int, float)) and d > 0:
            return _calibrated(float(d), f"{detail}, {head}-wide heads, over more KV than the caches hold")
        return None

    def curve(r: dict[str, Any]) -> tuple[tuple[float, float], ...]:
        pts = r.get("decode_curve")
        if not isinstance(pts, list):
            return ()
        ok = [(float(p[0]), float(p[1])) for p in pts if isinstance(p, list) and len(p) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < float("inf") for x in p)]
        return tuple(sorted(ok)) if len(ok) == len(pts) and len(ok) > 1 else ()

    return tuple(CpuAttention(kv, head, _calibrated(float(r["decode"]), f"{detail}, {head}-wide heads"),
                              _calibrated(float(r["prefill"]), f"{detail}, {head}-wide heads"), *shared(r, head),
                              deep(r, head), curve(r))
                 for head, kv, r in _runs(by_head))


def _run_compute(by_head: Any) -> float | None:
    """The device's matmul flop/s from its engine runs (the f16 KV runs' best)."""
    found = [float(c) for _, kv, r in _runs(by_head) if kv == "f16" and isinstance(c := r.get("compute"), (int, float))
             and c > 0]
    return max(found) if found else None


def _run_split(by_head: Any, host: Any) -> float | None:
    """A worker's seconds per graph split from its engine runs against the host's (the same self-test
    model and head size: ``-ngl 99 --rpc`` against ``-ngl 0``): the decode's seconds at no cells over
    the host's, shared by the ``BASE_SPLITS`` crossings its graph has; None when no pair gives a
    positive difference (app/engine/cpu_attention.py). The host's is its KV types' median (tens of µs:
    the KV type does not matter there)."""
    bases: dict[int, list[float]] = {}
    for head, _kv, r in _runs(host):
        if isinstance(b := r.get("decode_base"), (int, float)):
            bases.setdefault(head, []).append(float(b))
    host_base = {head: statistics.median(b) for head, b in bases.items()}
    found = [(float(r["decode_base"]) - host_base[head]) / speed.BASE_SPLITS for head, _kv, r in _runs(by_head)
             if head in host_base and isinstance(r.get("decode_base"), (int, float))
             and r["decode_base"] > host_base[head]]
    return statistics.median(found) if found else None


def _run_token(host: Any) -> float | None:
    """A token's fixed cost from the host's engine runs (the server run's, app/engine/cpu_attention.py
    ``server_token``): their median over head sizes; None when none measured it."""
    if not isinstance(host, dict):
        return None
    found = [float(t) for run in host.values() if isinstance(run, dict)
             and isinstance(srv := run.get(SERVER_RUN), dict) and isinstance(t := srv.get("token"), (int, float))
             and t >= 0]
    return statistics.median(found) if found else None


def machine_speed(inventory: Inventory, *, path: Path | None = None, host_attention: bool = False,
                  engine_run: EngineRun | None = None, head_dims: tuple[int, ...] = (),
                  model: str = "", retime: bool = True) -> SpeedFigures:
    """The speed figures for ``inventory``: the host's calibrated, each real GPU's bandwidth from
    NVML, the engine runs' CPU attention and a worker's matmul rate where they were made
    (``engine_run`` makes the missing ones for ``head_dims``), every other figure the planner's
    default; scaled by what launches here measured."""
    data = calibration(inventory, path=path, engine_run=engine_run, head_dims=head_dims, retime=retime)
    base = speed.default_figures(inventory, host_attention=host_attention)
    devices = []
    bws = data.get("gpu_bandwidth") or {}
    runs = data.get("engine_runs") or {}
    for g, d in zip(inventory.gpus, base.devices, strict=True):
        bw = bws.get(g.uuid or g.name) if not g.simulated and not g.is_rpc else None
        if isinstance(bw, (int, float)) and bw > 0:
            d = DeviceSpeed(d.name, Figure(bw * speed.DECODE_BANDWIDTH_EFFICIENCY, Source(
                SourceKind.FROM_NVML, f"memory clock × bus width, {bw / 1e9:.0f} GB/s × "
                f"{speed.DECODE_BANDWIDTH_EFFICIENCY}")), d.flops, d.link, d.split_s)
        run = runs.get(engine_run_key(g)) if g.is_rpc else None
        if (compute := _run_compute(run)) is not None:
            d = replace(d, flops=_calibrated(compute, f"{ENGINE_RUN_DETAIL}: its Q4_0 matmuls"),
                        attention=attention_figures(run))
        if g.is_rpc and (split := _run_split(run, runs.get(HOST_RUN))) is not None:
            d = replace(d, split_s=_calibrated(split, f"{ENGINE_RUN_DETAIL}: its decode at no cells over the "
                                                      f"host's, per split"))
        devices.append(d)
    # the host's matmul rate: its engine run's (the engine's own quantized matmuls, at the threads it
    # runs with) where there is one, else a numpy float32 matmul's
    host_run = runs.get(HOST_RUN)
    host_compute = _run_compute(host_run)
    host_flops = (_calibrated(host_compute, f"{ENGINE_RUN_DETAIL}: its Q4_0 matmuls") if host_compute is not None
                  else _calibrated(float(data["host_flops"]), f"a {MATMUL_N}² float32 matmul"))
    fig = SpeedFigures(_calibrated(float(data["host_bandwidth"]), "a 64 MiB copy"), host_flops,
                       tuple(devices), host_attention=host_attention,
                       host_cpu_attention=attention_figures(host_run))
    if (token := _run_token(host_run)) is not None:
        fig = replace(fig, token_overhead=_calibrated(token, "llama-server's own timings of the self-test "
                                                             "model's tokens, their attention taken out"))
    learned = (data.get("learned") or {}).get(learned_key(inventory, model))
    if isinstance(learned, dict):
        # (a ratio outside PLAUSIBLE_RATIO, kept by an earlier version, is not applied)
        scale = {name: _calibrated(float(learned[name]), "measured ÷ predicted after a launch here")
                 for name in ("decode_scale", "prefill_scale") if speed.plausible_ratio(learned.get(name))}
        fig = replace(fig, decode_scale=scale.get("decode_scale", fig.decode_scale),
                      prefill_scale=scale.get("prefill_scale", fig.prefill_scale))
    return fig


def learn(inventory: Inventory, decode_ratio: float | None, prefill_ratio: float | None, *,
          path: Path | None = None, model: str = "") -> bool:
    """Store measured ÷ predicted (unscaled) tokens/s of a launch on ``inventory``'s devices; False
    when the cache cannot be written."""
    store = path or calibration_path()
    data = calibration(inventory, path=store)
    entry = dict((data.get("learned") or {}).get(learned_key(inventory, model)) or {})
    if speed.plausible_ratio(decode_ratio):
        entry["decode_scale"] = decode_ratio
    if speed.plausible_ratio(prefill_ratio):
        entry["prefill_scale"] = prefill_ratio
    data.setdefault("learned", {})[learned_key(inventory, model)] = entry
    data.pop("saved", None)
    data["saved"] = _save(store, data)
    return bool(data["saved"])
