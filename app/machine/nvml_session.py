"""One NVML session: initialise once, cache the device handles and what never changes, read the rest.

``pynvml`` comes from nvidia-ml-py (a ctypes binding; the PyPI package called ``pynvml`` is a
deprecated shim). Tests pass a module that replays recorded readings instead. Every NVML call that
can fail here is listed in one place, with what failing means:

- ``nvmlInit`` fails → no GPUs, with the reason (no driver: ``NVMLError_LibraryNotFound``);
- a device's name/handle/memory fails (``GPU is lost``) → that GPU is skipped with a warning;
- UUID, PCIe link, compute capability, driver or CUDA version fails → that fact is unknown, nothing
  else changes;
- process lists fail with Not Supported / No Permission → the GPU stays, its processes are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psutil

#: The reason users see when the NVML library cannot be loaded (``NVML_ERROR_LIBRARY_NOT_FOUND``).
NO_DRIVER = "no NVIDIA driver found"


def describe_error(nvml: ModuleType, err: BaseException) -> str:
    """Why NVML cannot be used, in words; keeps NVML's own text for anything not mapped."""
    value = getattr(err, "value", None)
    if value == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return NO_DRIVER
    if value == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
        return f"NVIDIA driver not loaded (NVML: {err})"
    return f"NVML: {err}"


@dataclass(frozen=True)
class StaticInfo:
    """What does not change while the session is open."""

    index: int
    name: str
    uuid: str
    pcie_gen: int | None
    pcie_width: int | None
    compute: tuple[int, int] | None = None  # CUDA compute capability (major, minor)


@dataclass(frozen=True)
class MemoryReading:
    """One memory reading. With v2, ``used`` excludes the driver's ``reserved`` part; v1 folds it in."""

    total: int
    free: int
    used: int
    reserved: int
    api: str  # "v2" | "v1"


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    used: int
    kind: str  # "compute" | "graphics" | "compute+graphics"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSession:
    """``open()`` once (idempotent; a failure is remembered, not retried), read many times, ``close()``."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._nvml = nvml
        self.error: type[BaseException] = Exception
        self.opened = False
        self.failed = False
        self.reason = ""
        self.driver: str | None = None
        self.cuda: str | None = None
        self.device_count = 0
        self.devices: list[tuple[StaticInfo, Any]] = []
        self.warnings: list[str] = []
        self._v2 = True
        self._names: dict[int, str] = {}
        self._engine: dict[tuple[int, int], bool] = {}

    @property
    def nvml(self) -> ModuleType:
        assert self._nvml is not None, "open() first"
        return self._nvml

    def open(self) -> bool:
        """Initialise NVML and read the static facts. False, with ``reason``, when NVML is unusable."""
        if self.opened or self.failed:
            return self.opened
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                return self._fail(f"nvidia-ml-py is not installed (import pynvml: {exc})")
            self._nvml = pynvml
        nvml = self._nvml
        self.error = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except self.error as err:
            return self._fail(describe_error(nvml, err))
        self.opened = True
        self.driver = self._optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        cuda = self._optional(nvml.nvmlSystemGetCudaDriverVersion)
        self.cuda = None if cuda is None else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}"
        try:
            self.device_count = int(nvml.nvmlDeviceGetCount())
        except self.error as err:
            self.close()
            return self._fail(describe_error(nvml, err))
        for index in range(self.device_count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                self.devices.append((self._static(index, handle), handle))
            except self.error as err:
                self.warnings.append(f"GPU {index} skipped: {describe_error(nvml, err)}")
        return True

    def close(self) -> None:
        """Shut NVML down if this session initialised it. Safe to call twice."""
        if self.opened:
            self.opened = False
            self.devices = []
            try:
                self.nvml.nvmlShutdown()
            except self.error:
                pass

    def _fail(self, reason: str) -> bool:
        self.failed = True
        self.reason = reason
        return False

    def _optional(self, read: Any) -> Any:
        try:
            return read()
        except self.error:
            return None

    def _static(self, index: int, handle: Any) -> StaticInfo:
        nvml = self.nvml
        name = _text(nvml.nvmlDeviceGetName(handle))
        uuid = self._optional(lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
        # The maximum link of this device in this system, not the current one: an idle GPU drops
        # its link to gen 1 to save power, which says nothing about how fast the host tail streams.
        gen = self._optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        width = self._optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
        cc = self._optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
        return StaticInfo(index, name, uuid or "", None if gen is None else int(gen),
                          None if width is None else int(width), None if cc is None else (int(cc[0]), int(cc[1])))

    def read_memory(self, handle: Any) -> MemoryReading:
        """v2 when the driver has it (``used`` and ``reserved`` apart), else v1. Raises on a lost GPU."""
        nvml = self.nvml
        if self._v2:
            try:
                m = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
                return MemoryReading(int(m.total), int(m.free), int(m.used), int(m.reserved), "v2")
            except (AttributeError, TypeError):  # a binding older than memory v2
                self._v2 = False
            except self.error as err:
                unsupported = {getattr(nvml, n, -1) for n in (
                    "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_SUPPORTED",
                    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")}
                if getattr(err, "value", None) not in unsupported:
                    raise
                self._v2 = False
        m = nvml.nvmlDeviceGetMemoryInfo(handle)
        return MemoryReading(int(m.total), int(m.free), int(m.used), 0, "v1")

    def read_processes(self, handle: Any) -> list[ProcessReading] | None:
        """Compute and graphics processes, one entry per PID; None when NVML will not say."""
        nvml = self.nvml
        quiet = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3), getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4)}
        by_pid: dict[int, ProcessReading] = {}
        answered = False
        for kind, read in (("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
                           ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses)):
            try:
                procs = read(handle)
            except self.error as err:
                if getattr(err, "value", None) not in quiet:
                    raise
                continue
            answered = True
            for p in procs:
                pid, used = int(p.pid), int(p.usedGpuMemory or 0)  # None: not available (WDDM)
                seen = by_pid.get(pid)
                if seen is None:
                    by_pid[pid] = ProcessReading(pid, used, kind)
                else:  # a process using CUDA and graphics is listed twice, with the same memory
                    by_pid[pid] = ProcessReading(pid, max(used, seen.used), f"{seen.kind}+{kind}")
        return list(by_pid.values()) if answered else None

    def process_name(self, pid: int) -> str:
        """The process's name from psutil, cached per PID; "" when it is not visible from here."""
        name = self._names.get(pid)
        if name is None:
            try:
                name = psutil.Process(pid).name()
            except (psutil.Error, OSError):
                name = ""
            self._names[pid] = name
        return name

    def is_engine(self, pid: int, engine_pid: int | None) -> bool:
        """True for the engine's PID and its descendants (walks parents once per PID, then cached)."""
        if engine_pid is None:
            return False
        if pid == engine_pid:
            return True
        key = (engine_pid, pid)
        known = self._engine.get(key)
        if known is None:
            known = _descends_from(pid, engine_pid)
            self._engine[key] = known
        return known


def _descends_from(pid: int, ancestor: int) -> bool:
    try:
        current = psutil.Process(pid).ppid()
        for _ in range(64):  # a parent chain longer than this is not a process tree
            if current == ancestor:
                return True
            if current <= 1:
                return False
            current = psutil.Process(current).ppid()
    except (psutil.Error, OSError):
        return False
    return False
