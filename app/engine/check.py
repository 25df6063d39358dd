"""Plan vs actual: what the engine really allocated, next to what the plan said, per device and part.

Actuals come from the engine's own log (llama-server at ``-lv 4``; parsed by the one parser,
app.llamacpp.logs, where a re-logged block replaces the earlier one), from NVML (the engine
process's real GPU memory, app.planner.devices.Snapshot) and, for the opencoti engine, from the
``opencoti`` block of ``GET /props``. Buffer rows are ok within 1 MiB (llama.cpp prints MiB with
two decimals); the NVML row also holds the CUDA context, so it gets a wider tolerance.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from app.llamacpp.logs import LogBuffers, LogParser, is_host_device
from app.planner.plan_types import PlanMode
from app.planner.units import Bytes, MiB

if TYPE_CHECKING:
    from app.planner.devices import Snapshot
    from app.planner.plan_types import DevicePlan, HostPlan, Plan

BUFFER_TOLERANCE = 1 * MiB
#: The log's resolution: llama.cpp prints buffer sizes as ``%.2f MiB``, so a logged 0.00 may be up to this.
LOG_RESOLUTION = MiB // 200
#: NVML counts the CUDA context and libraries too (~590 MiB per process on an H200, docs/domain.md §2);
#: the plan carries that as ``overhead``, which is an estimate, not a measurement.
PROCESS_TOLERANCE = 128 * MiB
HOST = "host"


class CheckPart(StrEnum):
    """What a check row compares; the value is how the table and its JSON name it."""

    WEIGHTS = "weights"
    KV = "kv"
    COMPUTE = "compute"
    #: The logits buffers (the model's and a draft model's).
    OUTPUT = "output"
    LORA = "lora"  # --lora
    DRAFT_WEIGHTS = "draft weights"  # -md
    DRAFT_KV = "draft kv"
    DRAFT_COMPUTE = "draft compute"
    #: --cache-ram: a limit (MiB), not an allocation.
    PROMPT_CACHE = "prompt cache"
    #: NVML's figure for the engine process: every buffer plus the CUDA context.
    PROCESS = "process"
    #: The opencoti engine's resident window, from GET /props (cells).
    WINDOW_CELLS = "window cells"
    #: The opencoti engine's host tail (cells in pinned host RAM), from its boot line.
    TAIL_CELLS = "host tail cells"
    #: How many layers the opencoti engine spills past their window, from GET /props.
    SPILLING_LAYERS = "layers spilling"
    #: --mmproj: the vision projector's weights and compute reserve (the CLIP lines of the log).
    PROJECTOR_WEIGHTS = "projector weights"
    PROJECTOR_COMPUTE = "projector compute"

    @property
    def plan_field(self) -> str:
        """The ``DevicePlan``/``HostPlan`` field of an extra part (``draft weights`` → ``draft_weights``)."""
        return self.value.replace(" ", "_")


PARTS = (CheckPart.WEIGHTS, CheckPart.KV, CheckPart.COMPUTE)
#: Parts a launch has only with a LoRA (``--lora``) or a draft model (``-md``), and the logits buffer.
EXTRA_PARTS = (CheckPart.OUTPUT, CheckPart.LORA, CheckPart.DRAFT_WEIGHTS, CheckPart.DRAFT_KV,
               CheckPart.DRAFT_COMPUTE)


class ActualSource(StrEnum):
    """Where an actual number came from; the value is how the check names it (its JSON too)."""

    ENGINE_LOG = "engine log"  # llama-server's buffer lines at -lv 4
    NVML = "NVML"  # the engine process's GPU memory
    PROPS = "/props opencoti"  # the opencoti engine's window, from GET /props
    BOOT_LINE = "boot line"  # the opencoti engine's "rolling-kv … window W / N cells, host tail T" line


@dataclass(frozen=True)
class CheckRow:
    device: str  # "CUDA0", ..., or "host"
    part: CheckPart
    planned: int | None
    actual: int | None
    tolerance: int = BUFFER_TOLERANCE
    source: ActualSource = ActualSource.ENGINE_LOG
    unit: str = "bytes"

    @property
    def error(self) -> int | None:
        if self.planned is None or self.actual is None:
            return None
        return self.actual - self.planned

    @property
    def ok(self) -> bool:
        """Within the tolerance, and a part planned at 0 was not allocated (nor the reverse): a buffer
        that is there or not is a different launch, however small it is."""
        err = self.error
        if err is None:
            return False
        if self.unit == "bytes" and (self.planned == 0 or self.actual == 0) and abs(err) > LOG_RESOLUTION:
            return False
        return abs(err) <= self.tolerance

    def _fmt(self, v: int | None) -> str:
        if v is None:
            return "—"
        if self.unit == "MiB limit":
            return "no limit" if v == -1 else f"{v:,} MiB"
        return f"{v / MiB:,.2f} MiB" if self.unit == "bytes" else f"{v:,}"

    def cells(self) -> tuple[str, str, str, str, str, str]:
        err = self.error
        if err is None:
            verdict, err_s = "?", "—"
        else:
            verdict = "ok" if self.ok else "OFF"
            # rounded first, then + 0.0: a sub-resolution negative error reads +0.00, not -0.00
            err_s = f"{round(err / MiB, 2) + 0.0:+,.2f} MiB" if self.unit == "bytes" else f"{err:+,}"
        return (self.device, self.part, self._fmt(self.planned), self._fmt(self.actual), err_s, verdict)


@dataclass(frozen=True)
class PlanCheck:
    rows: tuple[CheckRow, ...]
    warnings: tuple[str, ...] = ()
    opencoti: dict[str, Any] | None = None
    buffers: LogBuffers | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """Every row that has both sides is within its tolerance (and there is at least one)."""
        judged = [r for r in self.rows if r.error is not None]
        return bool(judged) and all(r.ok for r in judged)

    def row(self, device: str, part: CheckPart | str) -> CheckRow | None:
        return next((r for r in self.rows if r.device == device and r.part == part), None)

    def process_overhead(self, device: str) -> int | None:
        """What NVML counts for the engine process on ``device`` beyond every buffer its log shows
        there: the CUDA context and libraries, the plan's per-process ``overhead`` (docs/domain.md §2).
        None without NVML's process row (no NVML, an RPC worker's device)."""
        process = self.row(device, CheckPart.PROCESS)
        if process is None or process.actual is None:
            return None
        logged = sum(r.actual or 0 for r in self.rows
                     if r.device == device and r.unit == "bytes" and r.part is not CheckPart.PROCESS)
        return max(0, process.actual - logged)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "warnings": list(self.warnings), "opencoti": self.opencoti,
                "rows": [dict(asdict(r), error=r.error, ok=r.ok) for r in self.rows]}

    def table(self) -> str:
        head = ("device", "part", "planned", "actual", "error", "")
        body = [r.cells() for r in self.rows]
        widths = [max(len(c[i]) for c in [head, *body]) for i in range(6)]
        lines = ["  ".join(c[i].rjust(widths[i]) if i in (2, 3, 4) else c[i].ljust(widths[i])
                           for i in range(6)).rstrip() for c in [head, *body]]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def actuals(buffers: LogBuffers) -> dict[tuple[str, CheckPart], int]:
    """(device, part) → bytes from the engine log; host devices (``CPU_Mapped``, ``CUDA_Host``,
    ``CPU``) summed into one ``host`` device, as the plan counts host memory. The logits buffers are
    their own part, ``output`` (the model's and a draft model's); a draft model's other buffers are
    ``draft weights``/``draft kv``/``draft compute`` (its lines follow the draft marker, logparse)."""
    out: dict[tuple[str, CheckPart], int] = {}
    draft = buffers.draft
    blocks = [(CheckPart.WEIGHTS, buffers.model), (CheckPart.KV, buffers.kv), (CheckPart.COMPUTE, buffers.compute),
              (CheckPart.OUTPUT, buffers.output), (CheckPart.LORA, buffers.lora)]
    if draft is not None:
        blocks += [(CheckPart.DRAFT_WEIGHTS, draft.model), (CheckPart.DRAFT_KV, draft.kv),
                   (CheckPart.DRAFT_COMPUTE, draft.compute), (CheckPart.OUTPUT, draft.output)]
    for part, block in blocks:
        for dev, size in block.items():
            key = (HOST if is_host_device(dev) else dev, part)
            out[key] = out.get(key, 0) + size
    return out


def planned(plan: Plan) -> dict[tuple[str, CheckPart], int]:
    """(device, part) → bytes the plan expects, in the same shape as ``actuals``. Host weights are
    ``weights_mapped``, which includes the CPU backend's repacked copy: ``actuals`` sums ``CPU_Mapped``
    and ``CPU_REPACK`` for that row."""
    out: dict[tuple[str, CheckPart], int] = {}
    for gpu in plan.gpus:
        out[(gpu.name, CheckPart.WEIGHTS)] = int(gpu.weights)
        out[(gpu.name, CheckPart.KV)] = int(gpu.kv_resident)
        out[(gpu.name, CheckPart.COMPUTE)] = int(gpu.compute)
    out[(HOST, CheckPart.WEIGHTS)] = int(plan.host.weights_mapped)
    out[(HOST, CheckPart.KV)] = int(plan.host.kv_tail)
    out[(HOST, CheckPart.COMPUTE)] = int(plan.host.compute_pinned)
    devices: list[tuple[str, DevicePlan | HostPlan]] = [*((g.name, g) for g in plan.gpus), (HOST, plan.host)]
    for name, dev in devices:
        for part in EXTRA_PARTS[1:]:
            out[(name, part)] = dev.part(part.plan_field)
    out[(HOST, CheckPart.OUTPUT)] = int(plan.host.output_buffer)
    return out


def fetch_props(base_url: str, api_key: str | None = None, timeout: float = 5.0) -> dict[str, Any] | None:
    """``GET /props`` as JSON (None when it does not answer)."""
    host_port = base_url.split("://", 1)[-1].rstrip("/")
    conn = http.client.HTTPConnection(host_port, timeout=timeout)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        conn.request("GET", "/props", headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        data = json.loads(resp.read())
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    return data if isinstance(data, dict) else None


def check_plan(plan: Plan, log_lines: Iterable[str], *, snapshot: Snapshot | None = None,
               props: dict[str, Any] | None = None) -> PlanCheck:
    """Compare ``plan`` with the engine's log (and NVML, and /props when given)."""
    parser = LogParser()
    for line in log_lines:
        parser.feed(line)
    buffers = parser.result(expect_buffers=True)
    want, got = planned(plan), actuals(buffers)
    rows: list[CheckRow] = []
    devices = [g.name for g in plan.gpus] + [HOST]
    devices += sorted({d for d, _ in got if d not in devices})
    for dev in devices:
        for part in PARTS + EXTRA_PARTS:
            p, a = want.get((dev, part)), got.get((dev, part))
            if p is None and a is None:
                continue
            if (dev == HOST or part in EXTRA_PARTS) and a is None and p == 0:
                continue
            rows.append(CheckRow(dev, part, p, a))
    if buffers.prompt_cache_mib is not None:  # a limit, not an allocation: it must be the planned one exactly
        rows.append(CheckRow(HOST, CheckPart.PROMPT_CACHE, plan.cache_ram_mib, buffers.prompt_cache_mib, 0,
                             ActualSource.ENGINE_LOG, "MiB limit"))
    rows += projector_rows(plan, buffers)
    warnings = list(buffers.warnings)
    if snapshot is not None and snapshot.ok:
        for gpu_plan in plan.gpus:
            if gpu_plan.remote:  # an RPC worker's device: another machine's driver, not this NVML
                continue
            sample = next((g for g in snapshot.gpus if f"CUDA{g.index}" == gpu_plan.name), None)
            if sample is None or not sample.processes_known:
                warnings.append(f"NVML did not report the engine's processes on {gpu_plan.name}")
                continue
            rows.append(CheckRow(gpu_plan.name, CheckPart.PROCESS, int(gpu_plan.used), sample.engine_used,
                                 PROCESS_TOLERANCE, ActualSource.NVML))
    block = (props or {}).get("opencoti")
    opencoti = block if isinstance(block, dict) else None
    rows += window_rows(plan, opencoti, buffers)
    return PlanCheck(tuple(rows), tuple(warnings), opencoti, buffers)


def window_rows(plan: Plan, opencoti: dict[str, Any] | None, buffers: LogBuffers) -> list[CheckRow]:
    """The opencoti engine's own account of its window beside the plan's: the cells resident (its
    ``/props`` block), the host tail (its boot line: the last re-sizing's), the layers spilling past their
    window (``/props``: every layer when the plan has a tail, none when it is fully resident)."""
    rows = []
    if opencoti is not None and _count(opencoti.get("n_cells_resident")) is not None:
        rows.append(CheckRow("all", CheckPart.WINDOW_CELLS, plan.window_cells, _count(opencoti["n_cells_resident"]),
                             0, ActualSource.PROPS, "cells"))
    boot = buffers.opencoti
    if boot.host_tail_cells is not None and plan.mode == PlanMode.WINDOW:
        rows.append(CheckRow("all", CheckPart.TAIL_CELLS, plan.tail_cells, boot.host_tail_cells, 0,
                             ActualSource.BOOT_LINE, "cells"))
    spilling = _count((opencoti or {}).get("n_layers_spilling"))
    if spilling is not None and plan.mode == PlanMode.WINDOW:
        layers = sum(int(c.get("layers", 0)) for c in plan.kv.caches if not c.get("recurrent")) \
            if plan.kv is not None else spilling
        rows.append(CheckRow("all", CheckPart.SPILLING_LAYERS, layers if plan.tail_cells else 0, spilling, 0,
                             ActualSource.PROPS, "layers"))
    return rows


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def projector_rows(plan: Plan, buffers: LogBuffers) -> list[CheckRow]:
    """The vision projector's weights and compute on its device (and the CPU's share of a GPU
    projector's compute), against the CLIP lines of the engine's log (app/llamacpp/logs.py).
    The weights' actual is the engine's ``model size`` (unaligned tensor bytes), the plan's the aligned buffer."""
    proj = plan.projector
    if proj is None and not buffers.projector_backend:
        return []
    backend = buffers.projector_backend
    dev = (HOST if is_host_device(backend) else backend) if backend else (proj.device if proj else HOST)
    on_dev = sum(b for d, b in buffers.projector_compute.items() if (HOST if is_host_device(d) else d) == dev)
    on_host = sum(b for d, b in buffers.projector_compute.items() if is_host_device(d)) if dev != HOST else 0
    planned_dev = proj.device if proj else dev
    rows = [CheckRow(dev, CheckPart.PROJECTOR_WEIGHTS, proj.weights if proj and planned_dev == dev else None,
                     buffers.projector_weights),
            CheckRow(dev, CheckPart.PROJECTOR_COMPUTE, proj.compute if proj and planned_dev == dev else None,
                     on_dev if backend else None)]
    if dev != HOST and (on_host or (proj and proj.compute_host)):
        rows.append(CheckRow(HOST, CheckPart.PROJECTOR_COMPUTE, proj.compute_host if proj else None, on_host))
    if proj is not None and planned_dev != dev:  # the engine put it elsewhere: say where the plan had it
        rows.append(CheckRow(planned_dev, CheckPart.PROJECTOR_WEIGHTS, proj.weights, None))
    return rows


def describe(check: PlanCheck) -> str:
    """One sentence for a status line."""
    bad = [r for r in check.rows if r.error is not None and not r.ok]
    if check.ok:
        return "The engine allocated what the plan said (every buffer within 1 MiB)."
    if not bad:
        return "Nothing to compare: " + ("; ".join(check.warnings) or "the engine logged no buffers")
    worst = max(bad, key=lambda r: abs(r.error or 0))
    parts = "1 part differs" if len(bad) == 1 else f"{len(bad)} parts differ"
    return (f"{parts} from the plan; the largest: {worst.device} {worst.part} "
            f"{Bytes(abs(worst.error or 0))} {'over' if (worst.error or 0) > 0 else 'under'}.")
