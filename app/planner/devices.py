"""The devices a plan is for, as records: GPUs (real, simulated or an RPC worker's), host memory, and
the live readings the window sets against a running plan. Sizes are bytes.

Nothing here reads the machine (docs/style.md, "The machine is read at the edge"): NVML, psutil and
/proc are read in ``app/machine`` (``app.machine.devices.inventory()``, ``resolve_gpus``, ``Poller``),
which fills these records; simulated cards come from ``gpu_table.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum

from app.planner.gpu_table import SIMULATED_SUFFIX, parse_spec
from app.planner.memory.repack import CpuFeatures
from app.planner.sources import SourceKind


class Backend(StrEnum):
    """A ggml backend, spelled as ggml names its devices and buffers (``CUDA0``, ``RPC0[host:port]``,
    ``CPU``): the one spelling of a backend in Headroom. ``Backend("cuda")`` is ``Backend.CUDA`` (any
    case is read); :attr:`slug` is the lowercase word an engine build's folder and ``build.json``
    have always carried (``llama.cpp-0c1e57098-cuda-…``), so builds made before are still found."""

    CPU = "CPU"
    CUDA = "CUDA"
    RPC = "RPC"

    @classmethod
    def _missing_(cls, value: object) -> Backend | None:
        if isinstance(value, str):
            return next((b for b in cls if b.value.lower() == value.lower()), None)
        return None

    @property
    def slug(self) -> str:
        return self.value.lower()


class DeviceKind(Enum):
    """What a :class:`GpuDevice` is, and so where its memory figures come from."""

    #: A GPU of this machine, read through NVML.
    NVML = "nvml"
    #: A card from the table (``--gpu "RTX 4090"``, app/planner/gpu_table.py): nothing was read.
    SIMULATED = "simulated"
    #: A device of a ggml-rpc-server worker, as the worker reported it (``--rpc``).
    RPC = "rpc"

    @property
    def source(self) -> SourceKind:
        """What a plan says its total and free memory rest on."""
        return {DeviceKind.NVML: SourceKind.FROM_NVML, DeviceKind.SIMULATED: SourceKind.SIMULATED,
                DeviceKind.RPC: SourceKind.FROM_RPC}[self]

    @property
    def backend(self) -> Backend:
        """The backend the engine reaches it through (a simulated card stands for a CUDA GPU)."""
        return Backend.RPC if self is DeviceKind.RPC else Backend.CUDA


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used: int  # bytes of GPU memory
    kind: str = "compute"  # "compute" | "graphics" | "compute+graphics"
    name: str = ""
    is_engine: bool = False  # the launched engine or one of its children (live snapshots only)


@dataclass(frozen=True)
class GpuDevice:
    """One device the engine offloads to: a local GPU (NVML) or a device of an RPC worker.

    ``name`` is the marketing name (for a worker: its endpoint's description); ``engine_name`` is
    the name llama.cpp gives its buffers, which the engine log and ``-ot`` use (``CUDA0``;
    ``RPC0[host:port]``: the device's index *on that worker* and the endpoint, ggml-rpc.cpp
    ``ggml_backend_rpc_buffer_type``); ``device_name`` is the name ``--list-devices`` prints and
    ``--vram-target RPC0=2GiB`` takes (``CUDA0``, ``RPC0``: numbered across all workers).
    """

    index: int
    name: str
    total: int
    free: int
    used: int = 0
    reserved: int = 0
    uuid: str = ""
    kind: DeviceKind = DeviceKind.NVML
    processes: tuple[GpuProcess, ...] = ()
    pcie_gen: int | None = None
    pcie_width: int | None = None
    #: Where total/free come from, in words for a tooltip ("from NVML", the simulated card's source,
    #: "from RPC worker HOST:PORT"); never parsed: ``kind`` says what the device is.
    source: str = ""
    #: "v2" (used and reserved apart), "v1" (used includes reserved) or "" (simulated).
    memory_api: str = ""
    #: False when NVML would not list the processes (then ``processes`` is empty, not "none").
    processes_known: bool = True
    #: A worker's ``host:port`` (``kind`` RPC; "" for a local GPU).
    endpoint: str = ""
    #: For an RPC device: its index on its worker (the ``RPC<n>`` of its buffer name).
    remote_index: int = 0
    #: This device's own budget (``--vram-target RPC0=2GiB``): what the engine may use on it,
    #: safety margin included. None: no budget beyond its free memory (and a global target).
    budget: int | None = None
    #: CUDA compute capability (major, minor): NVML's for a real GPU, the table's for a simulated card;
    #: None when not known (an RPC device, a card given by memory alone).
    compute: tuple[int, int] | None = None

    @property
    def simulated(self) -> bool:
        return self.kind is DeviceKind.SIMULATED

    @property
    def is_rpc(self) -> bool:
        return self.kind is DeviceKind.RPC

    @property
    def backend(self) -> Backend:
        return self.kind.backend

    @property
    def engine_name(self) -> str:
        if self.is_rpc:
            return f"RPC{self.remote_index}[{self.endpoint}]"
        return f"CUDA{self.index}"

    @property
    def device_name(self) -> str:
        return f"{self.backend}{self.index}"

    @property
    def label(self) -> str:
        """The name as shown: a simulated card says so ("NVIDIA H200 (simulated)"); a worker's
        device says where it is ("RPC0 on 127.0.0.1:50052")."""
        if self.is_rpc:
            return f"{self.device_name} on {self.endpoint}"
        return self.name + (SIMULATED_SUFFIX if self.simulated and "simulated" not in self.name else "")


@dataclass(frozen=True)
class HostMemory:
    total: int
    available: int
    swap_total: int = 0
    swap_free: int = 0


@dataclass(frozen=True)
class Inventory:
    """What the plan can use. ``gpus``: every offload device *in the engine's order*: the RPC
    workers' devices first (in ``--rpc`` order), then the local GPUs (src/llama.cpp
    ``llama_model_load``), so position ``i`` is the engine's device ``i`` and ``-ts`` share ``i``."""

    gpus: tuple[GpuDevice, ...]
    host: HostMemory
    nvml_ok: bool = False
    reason: str = ""  # why there are no real GPUs, e.g. "no NVIDIA driver found"
    driver: str | None = None
    cuda: str | None = None
    warnings: tuple[str, ...] = field(default=())
    #: RPC workers that did not answer: (endpoint, why). The plan goes on without them.
    dead_workers: tuple[tuple[str, str], ...] = ()
    #: The CPU backend's features as the engine that will run reports them (its ``system_info`` line,
    #: app/engine/discover.py ``EngineInfo.cpu_features``), else this CPU's as a native build has them
    #: (app/machine/cpu.py): which host weights it repacks. None: not known, nothing repacked.
    cpu: CpuFeatures | None = None

    @property
    def local_gpus(self) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.gpus if not g.is_rpc)

    @property
    def rpc_devices(self) -> tuple[GpuDevice, ...]:
        return tuple(g for g in self.gpus if g.is_rpc)

    @property
    def rpc_endpoints(self) -> tuple[str, ...]:
        """The workers the engine gets with ``--rpc`` (those that answered, in order)."""
        return tuple(dict.fromkeys(g.endpoint for g in self.rpc_devices))


@dataclass(frozen=True)
class RemoteDevice:
    """One device an RPC worker reported (``llama-server --rpc EP --list-devices``: ``RPC0: EP
    (24105 MiB, 24105 MiB free)``). ``index``: the device's index on its worker."""

    endpoint: str
    index: int
    description: str
    total: int
    free: int


def with_workers(inv: Inventory, devices: Sequence[RemoteDevice],
                 dead: Sequence[tuple[str, str]] = ()) -> Inventory:
    """``inv`` with the workers' devices in front (the engine's order), numbered ``RPC0``, ``RPC1``…
    across the workers as ggml-rpc numbers them (``ggml_backend_rpc_add_server``: one counter over
    every device of every worker that answered)."""
    rpc = tuple(GpuDevice(index=i, name=d.description, total=d.total, free=d.free, used=d.total - d.free,
                          source=f"from RPC worker {d.endpoint}", kind=DeviceKind.RPC, endpoint=d.endpoint,
                          remote_index=d.index, processes_known=False)
                for i, d in enumerate(devices))
    return replace(inv, gpus=rpc + inv.local_gpus, dead_workers=inv.dead_workers + tuple(dead))


def with_budgets(inv: Inventory, budgets: Mapping[str, int]) -> Inventory:
    """Per-device budgets by ``device_name`` (``{"RPC0": 2 GiB, "cuda0": 20 GiB}``, any case) or, for
    a worker's devices, by its endpoint (``{"10.0.0.2:50052": 8 GiB}``: numbering shifts when a
    worker before it does not answer, its address does not). ValueError naming the devices there
    are when a name matches none."""
    def keys(g: GpuDevice) -> set[str]:
        return {g.device_name.upper()} | ({g.endpoint.upper()} if g.is_rpc else set())

    wanted = {n.strip().upper(): b for n, b in budgets.items()}
    unknown = [n for n in budgets if not any(n.strip().upper() in keys(g) for g in inv.gpus)]
    if unknown:
        have = ", ".join(g.device_name + (f" ({g.endpoint})" if g.is_rpc else "") for g in inv.gpus) or "none"
        raise ValueError(f"no device {', '.join(unknown)} to give a budget to (devices: {have})")

    def budget(g: GpuDevice) -> int | None:
        found = [wanted[k] for k in keys(g) if k in wanted]
        return min(found) if found else g.budget

    return replace(inv, gpus=tuple(replace(g, budget=budget(g)) for g in inv.gpus))


def simulated_gpu(spec: str, index: int) -> GpuDevice:
    """A card from the table (``"RTX 4090"``, ``"h200"``) or ``"MyCard:20GiB"``. ValueError if unknown."""
    card = parse_spec(spec)
    return GpuDevice(index=index, name=card.name + SIMULATED_SUFFIX, total=card.total, free=card.free,
                     used=0, reserved=card.reserved, kind=DeviceKind.SIMULATED, source=card.source,
                     compute=card.compute)


# ---- live updates -------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuSample:
    """One GPU in a live snapshot."""

    index: int
    name: str
    total: int
    free: int
    used: int
    reserved: int
    processes: tuple[GpuProcess, ...] = ()
    processes_known: bool = True

    @property
    def engine_used(self) -> int:
        return sum(p.used for p in self.processes if p.is_engine)

    @property
    def other_used(self) -> int:
        return sum(p.used for p in self.processes if not p.is_engine)


@dataclass(frozen=True)
class Snapshot:
    gpus: tuple[GpuSample, ...]
    ok: bool
    reason: str = ""
    warnings: tuple[str, ...] = ()
    engine_pid: int | None = None
    taken_at: float = 0.0  # time.monotonic()
    host: HostMemory | None = None  # psutil at the same moment (also without NVML); None: not read
    #: The engine's resident set (``engine_pid`` and its children, psutil); None: no engine, or gone.
    engine_rss: int | None = None
