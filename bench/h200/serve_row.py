"""One row of the H200 matrix: ``headroom plan``, ``headroom measure``, ``headroom serve`` as a user
types them, the serve output's plan-vs-actual table parsed, and NVML read independently of Headroom
while the engine is up. Used by bench/h200/matrix.py; standard library + pynvml only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1 << 20

# "CUDA0  process  15,890.12 MiB  16,012.00 MiB  +121.88 MiB  ok"   (app/engine/check.py CheckRow.cells)
_CHECK_ROW = re.compile(
    r"^(?P<device>\S+)\s+(?P<part>weights|kv|compute|process)\s+"
    r"(?P<planned>—|[\d,]+\.\d+ MiB)\s+(?P<actual>—|[\d,]+\.\d+ MiB)\s+(?P<error>—|[+-][\d,]+\.\d+ MiB)"
    r"\s*(?P<verdict>ok|OFF|\?)?$"
)


def _mib(text: str) -> float | None:
    return None if text == "—" else float(text.split()[0].replace(",", "").replace("+", ""))


@dataclass
class Row:
    """One launch of the matrix: a shape model and the settings of issue 9."""

    model: str  # tests/fixtures/shapes.py name
    ctx: str  # "128k", "512k", "4096"
    kv: str  # "f16" | "q8_0"
    n_parallel: int = 1
    kv_unified: bool = False
    smoke: bool = False
    #: more settings for plan, measure and serve (``--mmproj FILE``, ``-md FILE``)
    extra: tuple[str, ...] = ()
    #: flags for serve alone (``--vram-target 24GiB``, ``--alternative …``, ``--rpc HOST:PORT``)
    serve_extra: tuple[str, ...] = ()
    #: what tells this row from another with the same settings (an alternative's label)
    tag: str = ""

    @property
    def key(self) -> str:
        slots = f"np{self.n_parallel}{'-kvu' if self.kv_unified else ''}"
        tag = "-" + "".join(c if c.isalnum() or c in ".=" else "_" for c in self.tag) if self.tag else ""
        return f"{self.model}-c{self.ctx}-{self.kv}-{slots}{'-smoke' if self.smoke else ''}{tag}"

    def plan_argv(self, path: Path) -> list[str]:
        argv = ["headroom", "plan", str(path), "-c", self.ctx, "--ctk", self.kv, "--ctv", self.kv,
                "--np", str(self.n_parallel), "--fa", "on", "--gpu", "auto", "--json"]
        return argv + (["--kvu"] if self.kv_unified else []) + list(self.extra)

    def measure_argv(self, path: Path) -> list[str]:
        argv = ["headroom", "measure", str(path), "-c", self.ctx, "--ctk", self.kv, "--ctv", self.kv,
                "--np", str(self.n_parallel), "--fa", "on", "--json"]
        return argv + (["--kvu"] if self.kv_unified else []) + list(self.extra)

    def serve_argv(self, path: Path, load_timeout: float) -> list[str]:
        argv = ["headroom", "serve", str(path), "-c", self.ctx, "-ctk", self.kv, "-ctv", self.kv,
                "-np", str(self.n_parallel), "-fa", "on", "--timeout", f"{load_timeout:.0f}"]
        # --then-serve: the row reads NVML while the engine serves, after the smoke test
        return (argv + (["-kvu"] if self.kv_unified else []) + (["--smoke", "--then-serve"] if self.smoke else [])
                + list(self.extra) + list(self.serve_extra))


@dataclass
class Result:
    """What one row showed; ``to_json`` goes to rows.jsonl, matrix.py renders the table."""

    key: str
    status: str = "not run"  # "ok" | "off" | "no fit" | "failed" | "timeout" | "not run"
    note: str = ""
    plan_estimated: dict[str, Any] | None = None  # headroom plan --json (no pass 1)
    measurement: dict[str, Any] | None = None  # headroom measure --json
    check: list[dict[str, Any]] = field(default_factory=list)  # serve's plan-vs-actual rows
    nvml: dict[str, Any] = field(default_factory=dict)  # read here while the engine was up
    engine_command: str = ""
    smoke: str = ""
    load_s: float | None = None
    seconds: float = 0.0
    commands: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)  # serve's own output
    engine_log: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def step_parser(description: str, *, unit: str, row_cap: float, dry_run: str) -> argparse.ArgumentParser:
    """What a step of run.sh that launches engines takes: where its results go, the deadline, the time
    box of one ``unit`` (row, way), where to start, and the dry run without a GPU."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--deadline", type=float, required=True, help="epoch seconds by which to stop")
    p.add_argument("--min-row", type=float, default=45.0, help=f"seconds a {unit} needs to start")
    p.add_argument("--row-cap", type=float, default=row_cap, help=f"most seconds one {unit} may take")
    p.add_argument("--cpu", action="store_true", help=f"dry run without a GPU: {dry_run}")
    p.add_argument("--first", type=int, default=1, help="start here (a later session resuming)")
    return p


def run_cli(argv: list[str], timeout: float) -> tuple[int, str]:
    """A headroom command with a time box; (exit code, stdout+stderr). 124 on timeout."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        return 124, out
    return proc.returncode, proc.stdout + proc.stderr


def _json_tail(text: str) -> dict[str, Any] | None:
    """The JSON object a ``--json`` command printed (warnings may precede it)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(text[start:])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def nvml_reading() -> dict[str, Any]:
    """Per-GPU used/total and every compute process's used memory, straight from pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver (the CPU dry run): say so in the row
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            procs = [{"pid": p.pid, "used": p.usedGpuMemory}
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            gpus.append({"index": i, "used": mem.used, "total": mem.total, "processes": procs})
        return {"gpus": gpus}
    finally:
        pynvml.nvmlShutdown()


def wait_gpu_idle(timeout: float = 30.0) -> bool:
    """Until no process holds GPU memory (the last row's engine has exited), so the next plan's
    inventory is not short by it. True when idle; also True without a driver."""
    deadline = time.monotonic() + timeout
    while True:
        reading = nvml_reading()
        if not any(g["processes"] for g in reading.get("gpus", [])):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def parse_check(lines: list[str]) -> list[dict[str, Any]]:
    """The rows of serve's ``plan vs actual:`` table, in MiB."""
    rows = []
    for line in lines:
        m = _CHECK_ROW.match(line.strip())
        if m:
            rows.append({"device": m["device"], "part": m["part"], "planned_mib": _mib(m["planned"]),
                         "actual_mib": _mib(m["actual"]), "error_mib": _mib(m["error"]),
                         "verdict": m["verdict"] or ""})
    return rows


def serve(row: Row, path: Path, result: Result, *, deadline: float, running_dir: Path,
          while_serving: Callable[[str], None] | None = None) -> None:
    """Run ``headroom serve`` until it says it is serving (or fails, or the row's time is up), read
    NVML, call ``while_serving`` with the engine's address (the placement bench's requests), stop it
    with SIGTERM (Ctrl-C's path) and keep its output."""
    load_timeout = max(30.0, deadline - time.monotonic() - 20)
    argv = row.serve_argv(path, load_timeout)
    result.commands.append(shlex.join(argv))
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    serving, engine_pid, address = False, None, ""
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.25)
        except queue.Empty:
            continue
        if line is None:
            break
        result.output.append(line)
        print(f"    | {line}", flush=True)
        if line.startswith("engine: starting — pid "):
            engine_pid = int(line.rsplit(" ", 1)[-1])
        elif line.startswith("command: "):
            result.engine_command = line.removeprefix("command: ")
        elif line.startswith("plan vs actual:"):
            result.load_s = round(time.monotonic() - started, 1)
        elif line.startswith("smoke: "):
            result.smoke = line.removeprefix("smoke: ")
        elif line.startswith("serving at "):
            serving = True
            address = line.removeprefix("serving at ").split()[0]
            break
    if serving:
        result.nvml = nvml_reading() | {"engine_pid": engine_pid}
        if while_serving is not None:
            try:
                while_serving(address)
            except Exception as exc:  # (said in the row; the engine is stopped all the same)
                result.note += f"while serving: {type(exc).__name__}: {exc}"[:400] + "; "
    else:
        result.status = "timeout" if proc.poll() is None else "failed"
    _stop(proc)
    if not serving:  # serve's own last words name the failure (app/llamacpp/failures.py)
        said = [x for x in result.output if x.startswith(("headroom serve:", "engine: failed"))]
        result.note += (said[-1] if said else (result.output or ["no output"])[-1])[:400]
    while True:  # what it printed while stopping
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            break
        if line is None:
            break
        result.output.append(line)
    result.check = parse_check(result.output)
    # app/engine/process.py ServerProcess: runtime_dir() / f"engine-{owner pid}-{port}.log"
    logs = sorted(running_dir.glob(f"engine-{proc.pid}-*.log"))
    result.engine_log = str(logs[-1]) if logs else ""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to serve (it stops its engine like Ctrl-C), then its process group if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def run_row(row: Row, path: Path, *, deadline: float, running_dir: Path) -> Result:
    """plan → measure → serve for one row, each time-boxed inside ``deadline`` (monotonic)."""
    result = Result(row.key)
    started = time.monotonic()
    try:
        argv = row.plan_argv(path)
        result.commands.append(shlex.join(argv))
        code, out = run_cli(argv, timeout=max(5.0, min(60.0, deadline - time.monotonic())))
        result.plan_estimated = _json_tail(out)
        if code == 1:
            result.status, result.note = "no fit", (result.plan_estimated or {}).get("reason", out[-300:])
            return result
        if code != 0 or result.plan_estimated is None:
            result.status, result.note = "failed", f"headroom plan exit {code}: {out[-500:]}"
            return result
        argv = row.measure_argv(path)
        result.commands.append(shlex.join(argv))
        code, out = run_cli(argv, timeout=max(5.0, min(90.0, deadline - time.monotonic())))
        result.measurement = _json_tail(out)
        if code != 0:  # the fallback: the engine's own llama-fit-params
            last = (out.strip().splitlines() or [""])[-1]
            result.note = f"pass 1 (probe) failed, exit {code}: {last[:200]}; "
            argv = [*row.measure_argv(path), "--with", "fit-params"]
            result.commands.append(shlex.join(argv))
            code, out = run_cli(argv, timeout=max(5.0, min(90.0, deadline - time.monotonic())))
            result.measurement = _json_tail(out)
            result.note += f"fit-params exit {code}; "
        serve(row, path, result, deadline=deadline, running_dir=running_dir)
    finally:
        result.seconds = round(time.monotonic() - started, 1)
    return result
