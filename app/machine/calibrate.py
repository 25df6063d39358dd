"""The speed model's figures for this machine (app/planner/solve/speed.py), measured once and cached.

- Host memory bandwidth: the best of a few copies of a 64 MiB buffer (numpy; read + write counted),
  well under a second. Host compute: the best of a few float32 matmuls (numpy's BLAS, every core).
- A local GPU: its memory bandwidth from NVML's maximum memory clock and bus width (× the speed
  model's decode efficiency), its link from NVML's PCIe generation and width; its compute stays the
  card table's default (NVML does not give tensor throughput), and no copy is timed (Headroom has no
  CUDA binding in Python: the after-launch check measures the real thing instead).
- After a launch, ``serve`` stores measured ÷ predicted tokens/s (``learn``): later predictions on the
  same machine and devices are scaled by it.

Kept in ``<cache>/speed-calibration.json`` with the machine's identity (CPU model, RAM, the GPUs' names
and UUIDs): a different identity is measured again. A cache that cannot be written (read-only, full)
leaves the figures measured for this process only. Every figure says whether it was calibrated.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.machine.overhead import load_json_dict
from app.paths import cache_dir
from app.planner.devices import Inventory
from app.planner.solve import speed
from app.planner.solve.speed import DeviceSpeed, Figure, SpeedFigures
from app.planner.sources import Source, SourceKind

CALIBRATION_VERSION = 1
#: The host copy's buffer: larger than any desktop CPU's last-level cache.
COPY_BYTES = 64 * 1024 * 1024
MATMUL_N = 512
REPEATS = 3


def calibration_path() -> Path:
    return cache_dir() / "speed-calibration.json"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def identity(inventory: Inventory) -> dict[str, Any]:
    """What the figures belong to: the CPU model, host RAM and the real GPUs (names and UUIDs)."""
    gpus = [{"name": g.name, "uuid": g.uuid} for g in inventory.local_gpus if not g.simulated]
    return {"cpu": _cpu_model(), "ram": inventory.host.total, "gpus": gpus}


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


def _gpu_bandwidths(inventory: Inventory) -> dict[str, float]:
    """NVML's bandwidth per real GPU UUID ({} without NVML: not calibrated, defaults used)."""
    real = [g for g in inventory.local_gpus if not g.simulated]
    if not real:
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        out = {}
        for g in real:
            bw = nvml_bandwidth(pynvml, g.index)
            if bw:
                out[g.uuid or g.name] = bw
        return out
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _save(path: Path, data: dict[str, Any]) -> bool:
    """Write ``data`` whole or not at all; False when the cache cannot be written (read-only, full)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def calibration(inventory: Inventory, *, path: Path | None = None) -> dict[str, Any]:
    """The stored calibration for this machine's identity, measured (and stored) when there is none
    or the identity changed."""
    store = path or calibration_path()
    ident = identity(inventory)
    data = load_json_dict(store)
    if data.get("version") == CALIBRATION_VERSION and data.get("identity") == ident:
        return data
    data = {"version": CALIBRATION_VERSION, "identity": ident, "measured_at": time.time(),
            "host_bandwidth": measure_host_bandwidth(), "host_flops": measure_host_flops(),
            "gpu_bandwidth": _gpu_bandwidths(inventory), "learned": {}}
    data["saved"] = _save(store, data)
    return data


def learned_key(inventory: Inventory) -> str:
    """Which launches a learned ratio belongs to: the CPU alone, or these devices."""
    return ",".join(g.name for g in inventory.gpus) or "cpu"


def _calibrated(value: float, detail: str) -> Figure:
    return Figure(value, Source(SourceKind.CALIBRATED, detail))


def machine_speed(inventory: Inventory, *, path: Path | None = None, host_attention: bool = False) -> SpeedFigures:
    """The speed figures for ``inventory``: the host's calibrated, each real GPU's bandwidth from
    NVML, every other figure the planner's default; scaled by what launches here measured."""
    data = calibration(inventory, path=path)
    base = speed.default_figures(inventory, host_attention=host_attention)
    devices = []
    bws = data.get("gpu_bandwidth") or {}
    for g, d in zip(inventory.gpus, base.devices, strict=True):
        bw = bws.get(g.uuid or g.name) if not g.simulated and not g.is_rpc else None
        if isinstance(bw, (int, float)) and bw > 0:
            d = DeviceSpeed(d.name, Figure(bw * speed.DECODE_BANDWIDTH_EFFICIENCY, Source(
                SourceKind.FROM_NVML, f"memory clock × bus width, {bw / 1e9:.0f} GB/s × "
                f"{speed.DECODE_BANDWIDTH_EFFICIENCY}")), d.flops, d.link, d.split_s)
        devices.append(d)
    fig = SpeedFigures(_calibrated(float(data["host_bandwidth"]), "a 64 MiB copy"),
                       _calibrated(float(data["host_flops"]), f"a {MATMUL_N}² float32 matmul"),
                       tuple(devices), host_attention=host_attention)
    learned = (data.get("learned") or {}).get(learned_key(inventory))
    if isinstance(learned, dict):
        scale = {name: _calibrated(float(v), "measured ÷ predicted after a launch here")
                 for name in ("decode_scale", "prefill_scale")
                 if isinstance(v := learned.get(name), (int, float)) and v > 0}
        fig = replace(fig, decode_scale=scale.get("decode_scale", fig.decode_scale),
                      prefill_scale=scale.get("prefill_scale", fig.prefill_scale))
    return fig


def learn(inventory: Inventory, decode_ratio: float | None, prefill_ratio: float | None, *,
          path: Path | None = None) -> bool:
    """Store measured ÷ predicted (unscaled) tokens/s of a launch on ``inventory``'s devices; False
    when the cache cannot be written."""
    store = path or calibration_path()
    data = calibration(inventory, path=store)
    entry = dict((data.get("learned") or {}).get(learned_key(inventory)) or {})
    if decode_ratio:
        entry["decode_scale"] = decode_ratio
    if prefill_ratio:
        entry["prefill_scale"] = prefill_ratio
    data.setdefault("learned", {})[learned_key(inventory)] = entry
    data.pop("saved", None)
    return _save(store, data)
