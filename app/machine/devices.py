"""Reads this machine's devices into the planner's records (app/planner/devices.py): NVML through
``pynvml`` (nvidia-ml-py) and host RAM through psutil. The NVML calls themselves, and what each failure
means, live in ``nvml_session.py``.

- ``inventory()``: everything, once (the plan starts from it). Never raises for a missing driver or a
  failing GPU: ``reason`` and ``warnings`` say what happened. It carries this CPU's features
  (``app.machine.cpu``), which a native engine build has.
- ``resolve_gpus(["H200", "MyCard:20GiB"])``: simulated cards instead; ``[]``/``["auto"]`` = real.
- ``Poller`` / ``snapshot()``: the cheap reading the UI takes about once a second, telling the
  launched engine's memory (by PID, children included) from other processes', with host RAM and the
  engine's RSS too (app/planner/live.py sets them against the running plan).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

from app.machine.cpu import host_cpu_features
from app.machine.nvml_session import NvmlSession, ProcessReading, StaticInfo
from app.planner.devices import (
    GpuDevice,
    GpuProcess,
    GpuSample,
    HostMemory,
    Inventory,
    Snapshot,
    simulated_gpu,
)
from app.planner.gpu_table import parse_spec


def host_memory() -> HostMemory:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return HostMemory(total=int(vm.total), available=int(vm.available),
                      swap_total=int(swap.total), swap_free=int(swap.free))


def _processes(session: NvmlSession, readings: list[ProcessReading],
               engine_pid: int | None) -> tuple[GpuProcess, ...]:
    return tuple(GpuProcess(pid=p.pid, used=p.used, kind=p.kind, name=session.process_name(p.pid),
                            is_engine=session.is_engine(p.pid, engine_pid)) for p in readings)


def _read_gpu(session: NvmlSession, info: StaticInfo, handle: Any, warnings: list[str]) -> GpuDevice:
    mem = session.read_memory(handle)
    procs = session.read_processes(handle)
    if procs is None:
        warnings.append(f"GPU {info.index} ({info.name}): NVML does not list its processes here")
    return GpuDevice(index=info.index, name=info.name, total=mem.total, free=mem.free, used=mem.used,
                     reserved=mem.reserved, uuid=info.uuid,
                     processes=_processes(session, procs or [], None),
                     pcie_gen=info.pcie_gen, pcie_width=info.pcie_width, source="from NVML",
                     memory_api=mem.api, processes_known=procs is not None, compute=info.compute)


def _no_gpu_reason(session: NvmlSession, warnings: list[str]) -> str:
    if session.device_count == 0:
        return "no NVIDIA GPU found"
    return "no usable NVIDIA GPU (" + "; ".join(warnings) + ")"


def inventory(nvml: ModuleType | None = None) -> Inventory:
    """What this machine has now. ``nvml`` is for tests (a module replaying recorded readings)."""
    session = NvmlSession(nvml)
    try:
        return read_inventory(session)
    finally:
        session.close()


def read_inventory(session: NvmlSession) -> Inventory:
    """What this machine has now, through ``session`` (opened here on first use, left open)."""
    if not session.open():
        return Inventory(gpus=(), host=host_memory(), nvml_ok=False, reason=session.reason, cpu=host_cpu_features())
    warnings = list(session.warnings)
    gpus: list[GpuDevice] = []
    for info, handle in session.devices:
        try:
            gpus.append(_read_gpu(session, info, handle, warnings))
        except session.error as err:
            warnings.append(f"GPU {info.index} ({info.name}) skipped: {err}")
    reason = "" if gpus else _no_gpu_reason(session, warnings)
    return Inventory(gpus=tuple(gpus), host=host_memory(), nvml_ok=True, reason=reason,
                     driver=session.driver, cuda=session.cuda, warnings=tuple(warnings), cpu=host_cpu_features())


def resolve_gpus(specs: list[str], nvml: ModuleType | None = None) -> Inventory:
    """``--gpu`` values → an Inventory. ``[]`` or ``["auto"]``: the real GPUs; otherwise simulated
    cards, one per spec (or per comma-separated name), numbered after any real ones ("auto" too)."""
    names = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    wants_real = not names or any(n.lower() == "auto" for n in names)
    wanted = [n for n in names if n.lower() != "auto"]
    if not wants_real:
        return Inventory(gpus=tuple(simulated_gpu(n, i) for i, n in enumerate(wanted)), host=host_memory(),
                         cpu=host_cpu_features())
    for name in wanted:
        parse_spec(name)  # an unknown card fails before NVML is touched
    real = inventory(nvml)
    if not wanted:
        return real
    extra = tuple(simulated_gpu(n, len(real.gpus) + i) for i, n in enumerate(wanted))
    return Inventory(gpus=real.gpus + extra, host=real.host, nvml_ok=real.nvml_ok, reason="",
                     driver=real.driver, cuda=real.cuda, warnings=real.warnings, cpu=real.cpu)


def nvml_status(nvml: ModuleType | None = None) -> dict[str, Any]:
    """For ``headroom doctor``: ok, reason, driver, cuda, gpus (a count), plus devices and warnings."""
    inv = inventory(nvml)
    return {
        "ok": inv.nvml_ok,
        "reason": inv.reason,
        "driver": inv.driver,
        "cuda": inv.cuda,
        "gpus": len(inv.gpus),
        "devices": [{"index": g.index, "name": g.name, "uuid": g.uuid, "total": g.total, "free": g.free,
                     "used": g.used, "reserved": g.reserved, "memory_api": g.memory_api,
                     "pcie_gen": g.pcie_gen, "pcie_width": g.pcie_width,
                     "compute": None if g.compute is None else f"{g.compute[0]}.{g.compute[1]}",
                     "processes": [{"pid": p.pid, "used": p.used, "kind": p.kind, "name": p.name}
                                   for p in g.processes]} for g in inv.gpus],
        "warnings": list(inv.warnings),
    }


def process_rss(pid: int) -> int | None:
    """Bytes resident in RAM for ``pid`` and its descendants (psutil ``memory_info().rss``; pages a
    child shares with its parent count twice). None when the process is gone or not visible."""
    try:
        proc = psutil.Process(pid)
        total = int(proc.memory_info().rss)
        children = proc.children(recursive=True)
    except (psutil.Error, OSError):
        return None
    for child in children:
        try:
            total += int(child.memory_info().rss)
        except (psutil.Error, OSError):
            continue  # a child that ended between the listing and the reading
    return total


def snapshot(session: NvmlSession, engine_pid: int | None,
             read_host: Callable[[], HostMemory | None] = host_memory) -> Snapshot:
    """Memory and processes per GPU now (one memory call and two process calls per GPU), host RAM
    (psutil, read even when NVML is unusable: CPU-only machines plan against it) and, with an
    ``engine_pid``, the engine's RSS. The session
    (``NvmlSession``, the handle cache) is opened on first use and keeps handles and names.
    ``read_host`` is for tests (host RAM that moves on cue; others' processes move the real one);
    when it returns None the snapshot has no host reading."""
    now = time.monotonic()
    host = read_host()
    rss = process_rss(engine_pid) if engine_pid is not None else None
    if not session.open():
        return Snapshot(gpus=(), ok=False, reason=session.reason, engine_pid=engine_pid, taken_at=now,
                        host=host, engine_rss=rss)
    samples: list[GpuSample] = []
    warnings = list(session.warnings)
    for info, handle in session.devices:
        try:
            mem = session.read_memory(handle)
            procs = session.read_processes(handle)
        except session.error as err:
            warnings.append(f"GPU {info.index} ({info.name}) skipped: {err}")
            continue
        samples.append(GpuSample(index=info.index, name=info.name, total=mem.total, free=mem.free,
                                 used=mem.used, reserved=mem.reserved,
                                 processes=_processes(session, procs or [], engine_pid),
                                 processes_known=procs is not None))
    reason = "" if samples else _no_gpu_reason(session, warnings)
    return Snapshot(gpus=tuple(samples), ok=True, reason=reason, warnings=tuple(warnings),
                    engine_pid=engine_pid, taken_at=now, host=host, engine_rss=rss)


class Poller:
    """Holds one NVML session for the UI's ~1/s worker. Thread-safe; ``close()`` shuts NVML down."""

    def __init__(self, nvml: ModuleType | None = None,
                 read_host: Callable[[], HostMemory | None] = host_memory) -> None:
        self._session = NvmlSession(nvml)
        self._read_host = read_host
        self._lock = threading.Lock()
        self._closed = False

    def poll(self, engine_pid: int | None = None) -> Snapshot:
        with self._lock:
            if self._closed:
                return Snapshot(gpus=(), ok=False, reason="poller closed", engine_pid=engine_pid,
                                taken_at=time.monotonic())
            return snapshot(self._session, engine_pid, self._read_host)

    def inventory(self) -> Inventory:
        """Everything, as ``inventory()`` reads it, through this poller's one session (NVML is not
        opened again for it). Read off the GUI thread: the window's pool runs it."""
        with self._lock:
            if self._closed:
                return Inventory(gpus=(), host=host_memory(), reason="poller closed", cpu=host_cpu_features())
            return read_inventory(self._session)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._session.close()

    def __enter__(self) -> Poller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
