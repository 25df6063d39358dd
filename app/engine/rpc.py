"""RPC workers: asking them for their devices, and starting one (``headroom rpc-worker``).

llama.cpp's RPC backend spreads layers over machines: ``ggml-rpc-server`` on each worker,
``--rpc host:port,…`` on the server (docs/domain.md §7). Headroom asks each worker for its devices
the way the engine itself would: ``llama-server --rpc ENDPOINT --list-devices`` (common/arg.cpp
``add_rpc_devices`` + the ``--list-devices`` printout, whose free/total come from
``ggml_backend_rpc_get_device_memory``), one child per worker, concurrently, each with a timeout —
a worker that does not answer makes ggml abort that child ("Failed to connect to HOST:PORT") and
is reported with why, while the others go on.

The RPC protocol has no authentication: whoever reaches a worker's port can run code on its
device. ``start_worker`` binds 127.0.0.1 unless told otherwise, and the command warns first.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.engine.capabilities import engine_env
from app.planner.devices import Inventory, RemoteDevice, with_workers
from app.planner.units import MiB

#: How long one worker may take to answer the device query (seconds).
QUERY_TIMEOUT_S = 10.0

# common/arg.cpp, --list-devices: "  %s: %s (%zu MiB, %zu MiB free)\n" (name, description, total, free)
#   RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB free)
_DEVICE_RE = re.compile(r"^\s*(?P<name>RPC\d+): (?P<desc>.*) \((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$")
# ggml/src/ggml-rpc/ggml-rpc.cpp: "Failed to connect to %s" / "RPC server version mismatch" / handshake
_RPC_ERROR_RE = re.compile(r"(Failed to connect to \S+|RPC server version mismatch[^\n]*|RPC handshake failed[^\n]*"
                           r"|failed to find RPC backend)")

#: Where the RPC warning is printed and shown: the same words everywhere.
UNAUTHENTICATED = ("the RPC protocol has no authentication: anyone who can reach this port can run code "
                   "on this machine's device and read what it holds. Bind it to a private network only.")


class WorkerError(Exception):
    """A worker cannot be used or started; the message says which and why."""


@dataclass(frozen=True)
class WorkerReading:
    """What one worker answered: its devices, or why it did not."""

    endpoint: str
    devices: tuple[RemoteDevice, ...] = ()
    error: str = ""


def parse_list_devices(text: str, endpoint: str) -> tuple[RemoteDevice, ...]:
    """The RPC devices in a ``--list-devices`` printout, numbered on their worker in order."""
    found: list[RemoteDevice] = []
    for line in text.splitlines():
        m = _DEVICE_RE.match(line)
        if m and m.group("desc").strip() == endpoint:
            found.append(RemoteDevice(endpoint, len(found), m.group("desc").strip(),
                                      int(m.group("total")) * MiB, int(m.group("free")) * MiB))
    return tuple(found)


def _quiet_env() -> dict[str, str]:
    """The engine's environment without ggml's gdb backtrace on abort (GGML_NO_BACKTRACE, ggml.c):
    a dead worker's abort then takes milliseconds and leaves one line, not a debugger session."""
    return {**engine_env(), "GGML_NO_BACKTRACE": "1"}


def query_worker(server: Path, endpoint: str, timeout: float = QUERY_TIMEOUT_S) -> WorkerReading:
    """Ask one worker for its devices through the engine (``server`` = a llama-server with RPC)."""
    argv = [str(server), "--rpc", endpoint, "--list-devices"]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=_quiet_env(), check=False)
    except subprocess.TimeoutExpired:
        return WorkerReading(endpoint, error=f"no answer within {timeout:g} s")
    except OSError as exc:
        return WorkerReading(endpoint, error=f"cannot run {server}: {exc.strerror or exc}")
    out = proc.stdout + proc.stderr
    devices = parse_list_devices(proc.stdout, endpoint)
    if devices:
        return WorkerReading(endpoint, devices)
    m = _RPC_ERROR_RE.search(out)
    if m:
        why = m.group(1)
        if why.startswith("Failed to connect"):
            why = "connection refused or unreachable (is ggml-rpc-server running there?)"
        return WorkerReading(endpoint, error=why)
    last = next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip()), "")
    return WorkerReading(endpoint, error=f"it reported no devices{f' ({last[:160]})' if last else ''}")


def query_workers(server: Path, endpoints: Sequence[str],
                  timeout: float = QUERY_TIMEOUT_S) -> tuple[WorkerReading, ...]:
    """Every worker at once (each in its own child), in the order given."""
    if not endpoints:
        return ()
    with ThreadPoolExecutor(max_workers=min(8, len(endpoints))) as pool:
        return tuple(pool.map(lambda ep: query_worker(server, ep, timeout), endpoints))


def add_workers(inv: Inventory, readings: Sequence[WorkerReading]) -> Inventory:
    """The inventory with the answering workers' devices in front (the engine's order) and the
    silent ones named in ``dead_workers``."""
    devices = [d for r in readings for d in r.devices]
    dead = [(r.endpoint, r.error) for r in readings if not r.devices]
    return with_workers(inv, devices, dead)


def parse_endpoints(text: str) -> tuple[str, ...]:
    """``--rpc A,B`` → ("A", "B"); a bare port means this machine (``50052`` → 127.0.0.1:50052).
    ValueError for one that is not HOST:PORT."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.isdigit():
            part = f"127.0.0.1:{part}"
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not an RPC worker address (HOST:PORT): {part!r}")
        out.append(part)
    if not out:
        raise ValueError("no RPC worker given")
    return tuple(dict.fromkeys(out))


def worker_argv(binary: Path, host: str, port: int, *, threads: int | None = None,
                devices: str | None = None, cache: bool = False) -> list[str]:
    """``ggml-rpc-server`` with exactly these settings (its own flags: -H -p -t -d -c)."""
    argv = [str(binary), "-H", host, "-p", str(port)]
    if threads is not None:
        argv += ["-t", str(threads)]
    if devices:
        argv += ["-d", devices]
    if cache:
        argv.append("-c")
    return argv


def wait_listening(host: str, port: int, proc: subprocess.Popen[bytes] | subprocess.Popen[str],
                   deadline_s: float = 30.0) -> None:
    """Return once the worker accepts connections; WorkerError if it exits or never listens."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise WorkerError(f"ggml-rpc-server exited with status {proc.returncode} before it listened")
        try:
            with socket.create_connection((host if host != "0.0.0.0" else "127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise WorkerError(f"ggml-rpc-server did not listen on {host}:{port} within {deadline_s:g} s")


def rpc_server_binary(bin_dir: str | os.PathLike[str]) -> Path:
    """The ``ggml-rpc-server`` beside an engine build's llama-server; WorkerError if missing."""
    path = Path(bin_dir) / "ggml-rpc-server"
    if not path.is_file():
        raise WorkerError(f"no ggml-rpc-server in {bin_dir}: build the engine with `headroom engine build` "
                          "(it is built with -DGGML_RPC=ON)")
    return path


def rpc_query_server() -> Path:
    """A llama-server that can talk to RPC workers: the engine Headroom built, else the first one
    found. ValueError when there is none."""
    from app.engine.discover import EngineKind, discover_engines
    from app.engine.native_build import find_build

    build = find_build()
    if build is not None and build.server.is_file():
        return build.server
    for engine in discover_engines(probe=False):
        if engine.kind == EngineKind.LLAMA_SERVER:
            return Path(engine.path)
    raise ValueError("RPC workers need an engine to ask them with: run `headroom engine build`")


def describe_workers(readings: Sequence[WorkerReading]) -> str:
    """One line per worker for the window: its devices and free memory, or why it did not answer."""
    lines = []
    n = 0
    for r in readings:
        if not r.devices:
            lines.append(f"{r.endpoint} did not answer: {r.error}; planned without it")
            continue
        for d in r.devices:
            lines.append(f"RPC{n} on {r.endpoint}: {d.free // MiB:,} MiB free of {d.total // MiB:,} MiB")
            n += 1
    return "\n".join(lines)
