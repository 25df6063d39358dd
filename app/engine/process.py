"""Supervise one engine process: start, wait until healthy, stop; never leave one behind.

Modelled on ollama's ``llm/llama_server.go`` (docs/style.md "Supervising a server"): the engine runs in
its own session (process group); output goes to a log file and a bounded deque of last lines;
``GET /health`` is polled every 250 ms (503 while loading, 200 when ready) against a deadline that
stretches while the log keeps growing and ends at once if the process exits; stop is SIGTERM, a
grace period, then SIGKILL to the whole group. The engine must not outlive Headroom:

- the child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``). Linux ties
  that to the parent *thread*, so every engine is spawned from one long-lived spawner thread,
  never from a short-lived worker (a QThread that finished would kill its engine);
- a PID file per engine under the cache directory names its owner; at the next start, engines
  whose owner is gone and whose command line still matches are killed (``reap_leftovers``).

The pass-1 probe's child (app.probe) is tied to Headroom the same way: ``die_with_parent`` for its
``preexec_fn``, ``record_child``/``forget_child`` for its PID file. The runtime folder (PID files,
engine logs) is private: 0700, each file 0600.

Ready means *this* engine answers: ``/health`` 200 counts only once the socket listening on the port
belongs to the engine's own process (or its children), so another server already on the port is a
port in use, never "serving".

No Qt here: listeners are plain callables (the UI wraps them in signals).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import enum
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, NamedTuple, NoReturn, TypeVar

import psutil

from app.llamacpp.failures import Failure, FailureKind, classify, foreign_server, is_cpu_line
from app.paths import cache_dir

POLL_S = 0.25
KEEP_LOGS = 30
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ServerStatus(enum.Enum):
    STARTING = "starting"  # process running, HTTP not answering yet
    LOADING = "loading"  # /health answers 503
    READY = "ready"  # /health answers 200
    FAILED = "failed"
    STOPPED = "stopped"


class EngineFailed(RuntimeError):
    """The engine did not become ready; ``failure`` says why in words a user can act on."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(str(failure))


Listener = Callable[[ServerStatus, str], None]

#: The user's Stop arrived before the engine was ready (not a failure to investigate).
STOPPED_EARLY = Failure(FailureKind.STOPPED, "The engine was stopped before it was ready.")

#: The kinds of child a PID file may name (``<kind>-<pid>.json``): engines and pass-1 probes.
CHILD_KINDS = ("engine", "probe")

T = TypeVar("T")

# One thread spawns every engine, and lives as long as Headroom (see the module docstring).
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-spawner")
_LIVE: set[ServerProcess] = set()
#: PIDs of the children this process recorded and still runs (engines and probes).
_OWN: set[int] = set()


def spawn_lasting(spawn: Callable[[], T]) -> T:
    """``spawn()`` on the thread that spawns every engine, which lasts as long as Headroom: a child it
    starts with ``die_with_parent`` dies with Headroom, not with the thread that asked for it (a
    pass-1 child started ahead of its request, app/probe/measure.py ``start_ahead``)."""
    return _SPAWNER.submit(spawn).result()


def runtime_dir() -> Path:
    return cache_dir() / "running"


def private_dir(folder: Path) -> Path:
    """``folder``, created 0700 (and made 0700 if an older Headroom left it 0755)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if folder.stat().st_mode & 0o077:
        folder.chmod(0o700)
    return folder


def _private_file(path: Path) -> int:
    """A file descriptor on ``path`` (created or truncated) that only its owner may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
    return fd


def _load_prctl() -> Callable[..., int] | None:
    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return fn


#: Looked up once here: the child between fork and exec must not load libraries or take locks.
_PRCTL = _load_prctl()


def _pdeathsig_preexec(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec: keep it tiny
        if _PRCTL is None:
            return
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for a child that must not outlive this process: the kernel SIGKILLs it when
    the spawning *thread* ends (Linux), so spawn from a thread that waits for the child."""
    return _pdeathsig_preexec(os.getpid())


def record_child(pid: int, argv: Sequence[str], kind: str = "engine", **extra: str) -> Path | None:
    """Write the PID file that lets ``reap_leftovers`` kill ``pid`` once this process is gone. None when
    the cache cannot be written (a full or read-only disk): nothing half-written is left, and
    the child still dies with Headroom (its parent-death signal); only the reaping after a crash is lost."""
    if kind not in CHILD_KINDS:
        raise ValueError(f"kind must be one of {CHILD_KINDS}, not {kind!r}")
    _OWN.add(pid)
    try:
        path = private_dir(runtime_dir()) / f"{kind}-{pid}.json"
    except OSError:
        return None
    try:
        with os.fdopen(_private_file(path), "w") as f:
            f.write(json.dumps({"pid": pid, "owner": os.getpid(), "argv": list(argv), **extra}))
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return path


def forget_child(record: Path | None) -> None:
    """The child named by ``record`` has ended: remove its PID file."""
    if record is None:
        return
    with contextlib.suppress(ValueError):
        _OWN.discard(int(record.stem.rsplit("-", 1)[1]))
    record.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """True for a running process (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def reap_leftovers(directory: Path | None = None) -> list[int]:
    """Kill engines and probes a dead Headroom left behind (PID file, owner gone, cmdline still matches)."""
    killed: list[int] = []
    folder = directory or runtime_dir()
    for pid_file in sorted(p for kind in CHILD_KINDS for p in folder.glob(f"{kind}-*.json")):
        try:
            data = json.loads(pid_file.read_text())
            pid, owner, argv = int(data["pid"]), int(data["owner"]), list(data["argv"])
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            continue
        if owner == os.getpid():
            if pid in _OWN:
                continue  # ours, running
        elif pid_alive(owner):
            continue  # another Headroom is still running it
        if pid_alive(pid) and _cmdline(pid)[: len(argv)] == argv:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
        pid_file.unlink(missing_ok=True)
    return killed


class PortHolders(NamedTuple):
    """Who listens on a TCP port: the engine (``ours``: it or a child of it) and anyone else whose
    address overlaps (``others``, in words: ``"pid 123 (python3)"``)."""

    ours: bool
    others: tuple[str, ...]


_WILDCARD = ("0.0.0.0", "::", "")


def port_holders(port: int, pid: int) -> PortHolders | None:
    """The listening sockets on ``port``, sorted into the engine's (``pid`` and its children) and the
    rest; None when this system does not let us see them (then ``/health`` is all there is)."""
    try:
        conns = psutil.net_connections(kind="tcp")
        family = {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    except (psutil.Error, OSError):
        return None
    listening = [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    mine = {c.laddr.ip for c in listening if c.pid in family}
    others: list[str] = []
    for c in listening:
        if c.pid in family:
            continue
        if mine and c.laddr.ip not in mine and c.laddr.ip not in _WILDCARD and not mine & set(_WILDCARD):
            continue  # another address on the same port (127.0.0.2:P beside our 127.0.0.1:P)
        others.append(_who(c.pid))
    return PortHolders(bool(mine), tuple(dict.fromkeys(others)))


class BindProblem(NamedTuple):
    """Why an engine could not listen where asked, ``text`` in words; ``kind``: ``in_use`` (the port is
    held: the text names it and who holds it), ``denied`` (a port below 1024 without the right to it)
    or ``address`` (the host is not an address of this machine)."""

    kind: str
    text: str


def bind_problem(host: str, port: int) -> BindProblem | None:
    """Why an engine could not listen on ``host:port`` now (port 0: on any port of ``host``); None
    when it could. Asked before launching, so a port in use is said without starting the engine; the
    ownership check in ``wait_ready`` still catches a port taken between this check and the engine's
    bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EACCES:
                return BindProblem("denied", f"port {port} on {host} needs privileges Headroom does not have")
            if exc.errno != errno.EADDRINUSE:
                return BindProblem("address", f"cannot listen on {host} ({exc.strerror or exc})")
        else:
            return None
    try:
        holders = tuple(dict.fromkeys(
            _who(c.pid) for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port))
    except (psutil.Error, OSError):
        holders = ()
    return BindProblem("in_use", f"port {port} on {host} is in use"
                       + (f" (held by {', '.join(holders)})" if holders else ""))


def _who(pid: int | None) -> str:
    if pid is None:
        return "a process Headroom may not inspect"
    try:
        return f"pid {pid} ({psutil.Process(pid).name()})"
    except psutil.Error:
        return f"pid {pid}"


def _prune_logs(folder: Path, keep: int = KEEP_LOGS) -> None:
    """Delete all but the newest ``keep`` engine logs."""
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:  # pruned meanwhile by another Headroom
            return 0.0

    logs = sorted(folder.glob("engine-*.log"), key=mtime, reverse=True)
    for old in logs[keep:]:
        old.unlink(missing_ok=True)


#: llama-server finishes what it is doing on SIGTERM (a streamed reply to a client still reading can
#: hold it), and exits at once on a second one (tools/server/server.cpp ``signal_handler``: "Received
#: second interrupt, terminating immediately"): sent after this many seconds, before a SIGKILL.
SECOND_SIGNAL_AFTER_S = 3.0


class ServerProcess:
    """One engine run. ``argv`` already carries ``--host``/``--port`` (app.engine.argv)."""

    def __init__(self, argv: Sequence[str], host: str, port: int, *, log_path: Path | None = None,
                 tail_lines: int = 400, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.listen_host = host or "0.0.0.0"  # where it listens; ``host`` is where to reach it here
        self.host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        self.port = port
        self.log_path = log_path or runtime_dir() / f"engine-{os.getpid()}-{port}.log"
        if env is None:  # imported here: pass 1 imports this module for its child bookkeeping alone
            from app.engine.capabilities import engine_env

            env = engine_env()
        self.env = env
        self.status = ServerStatus.STOPPED
        self.failure: Failure | None = None
        self.exit_code: int | None = None
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._cpu_lines: list[str] = []
        self._listeners: list[Listener] = []
        self._line_listeners: list[Callable[[str], None]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._last_output = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pid_file: Path | None = None
        self._ready_at: float | None = None
        #: Who else answered /health on our port while we waited (words; empty: nobody).
        self._foreign: tuple[str, ...] = ()

    # -- observers -----------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """``listener(status, detail)`` on every status change (from whichever thread saw it)."""
        self._listeners.append(listener)

    def add_line_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(line)`` for each engine log line (the UI console)."""
        self._line_listeners.append(listener)

    def _set(self, status: ServerStatus, detail: str = "") -> None:
        if status == self.status:
            return
        self.status = status
        for cb in list(self._listeners):
            cb(status, detail)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def base_url(self) -> str:
        """Where this machine reaches it (loopback when it listens on every address)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def serving_at(self) -> str:
        """The address it is bound to, as a user should be told: every address of the machine is said
        so (``http://0.0.0.0:8080``, every address of this machine), not as loopback."""
        if self.listen_host in ("0.0.0.0", "::"):
            host = "[::]" if self.listen_host == "::" else self.listen_host
            return f"http://{host}:{self.port} (every address of this machine; here: {self.base_url})"
        return self.base_url

    def tail(self, n: int | None = None) -> list[str]:
        with self._lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def log_lines(self) -> list[str]:
        """The whole log so far (the tail deque is bounded; the plan check needs the start-up lines)."""
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            return self.tail()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the engine (from the spawner thread); raises EngineFailed if it cannot be run."""
        exe = Path(shutil.which(self.argv[0]) or self.argv[0]) if "/" not in self.argv[0] else Path(self.argv[0])
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            what = "does not exist" if not exe.exists() else "is not an executable file"
            self._fail(Failure(FailureKind.MISSING_BINARY, f"The engine {exe} {what}. Choose another engine or "
                               "run `headroom engine build`."))
        reap_leftovers()
        try:
            if self.log_path.parent == runtime_dir():
                private_dir(self.log_path.parent)
            else:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
            _prune_logs(self.log_path.parent)
            log = os.fdopen(_private_file(self.log_path), "wb")  # closed by the reader thread
        except OSError:  # a full or read-only cache: the log goes to a private temp folder
            self.log_path = Path(tempfile.mkdtemp(prefix="headroom-engine-")) / self.log_path.name
            log = os.fdopen(_private_file(self.log_path), "wb")
        try:
            self._proc = _SPAWNER.submit(self._spawn).result()
        except OSError as exc:
            log.close()
            self._fail(Failure(FailureKind.MISSING_BINARY, f"The engine {exe} could not be started: {exc}."))
        self._last_output = time.monotonic()
        self._write_pid_file()
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read, args=(self._proc, log), daemon=True,
                                        name=f"engine-log-{self._proc.pid}")
        self._reader.start()
        if self._stopping.is_set():  # stop() ran while we spawned: it could not see the process
            self.stop(grace=0.0)
            self._fail(STOPPED_EARLY)
        self._set(ServerStatus.STARTING, f"pid {self._proc.pid}")

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
                                preexec_fn=_pdeathsig_preexec(os.getpid()))

    def _write_pid_file(self) -> None:
        assert self._proc is not None
        self._pid_file = record_child(self._proc.pid, self.argv, "engine", log=str(self.log_path))

    def _read(self, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        """Copy the engine's output to the log file and the tail. Reads chunks, not lines, so a
        progress line still being written (llama.cpp's dots while loading) counts as activity."""
        assert proc.stdout is not None
        pending = b""
        with log:
            fd = proc.stdout.fileno()
            while chunk := os.read(fd, 65536):
                log.write(chunk)
                log.flush()
                *lines, pending = (pending + chunk).split(b"\n")
                with self._lock:
                    self._last_output = time.monotonic()
                self._add_lines(lines)
            self._add_lines([pending] if pending else [])
        proc.stdout.close()

    def _add_lines(self, raw_lines: list[bytes]) -> None:
        lines = [raw.decode("utf-8", "replace").rstrip("\r") for raw in raw_lines]
        with self._lock:
            self._tail.extend(lines)
            # what CPU code runs, kept past the bounded tail for the words of a crash (failures.engine_cpu)
            self._cpu_lines += [ln for ln in lines if is_cpu_line(ln)]
        for line in lines:
            for cb in list(self._line_listeners):
                # A failing listener (a console piped into `head`) must not stop this thread: the
                # engine would block on a full pipe and never answer. The log file has every line.
                with contextlib.suppress(Exception):
                    cb(line)

    def _fail(self, failure: Failure) -> NoReturn:
        self.failure = failure
        self._set(ServerStatus.FAILED, failure.message)
        raise EngineFailed(failure)

    # -- wait ----------------------------------------------------------------------------------
    def health(self) -> int | None:
        """The HTTP status of ``GET /health``, or None when nothing answers."""
        import http.client  # here: pass 1 imports this module for its child bookkeeping alone

        conn = http.client.HTTPConnection(self.host, self.port, timeout=2.0)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 120.0, stall: float = 60.0) -> None:
        """Poll until /health says 200. Fails at once when the engine exits; gives up when the
        log has been silent for ``stall`` seconds and ``timeout`` has passed since the start."""
        if self._proc is None:
            raise RuntimeError("start() first")
        started = time.monotonic()
        while True:
            if self._stopping.is_set():  # checked first: an engine we stopped has exited too
                self._fail(STOPPED_EARLY)
            if self._proc.poll() is not None:
                self._exited()
            code = self.health()
            if code == 200:
                holders = port_holders(self.port, self._proc.pid)
                if holders is None or (holders.ours and not holders.others):
                    self._ready_at = time.monotonic()
                    self._set(ServerStatus.READY, self.base_url)
                    return
                if holders.ours:  # both listen (SO_REUSEPORT): a request may reach either
                    self.stop()
                    self._fail(foreign_server(self.host, self.port, holders.others, shared=True,
                                              tail=tuple(self.tail(12))))
                # Someone else answered; the engine has not bound the port yet (or cannot): wait for
                # it to listen, or to exit saying it could not bind.
                self._foreign = holders.others
            elif code == 503:
                self._set(ServerStatus.LOADING, "loading the model")
            now = time.monotonic()
            with self._lock:
                silent = now - self._last_output
            if now - started > timeout and silent > stall:
                self.stop()
                tail = tuple(self.tail(12))
                if self._foreign:
                    self._fail(foreign_server(self.host, self.port, self._foreign, shared=False, tail=tail))
                self._fail(Failure(FailureKind.TIMEOUT, f"The engine was not ready after {now - started:.0f} s and "
                                   f"its log was silent for {silent:.0f} s; it was stopped.", "", tail))
            self._stopping.wait(POLL_S)

    def _exited(self) -> None:
        assert self._proc is not None
        self.exit_code = self._proc.wait()
        # What it left in its group goes with it: an aborting engine forks a backtrace helper (ggml's
        # ggml_print_backtrace), which outlives it holding the log pipe, reparented to init.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        self._cleanup()
        serving = self.status == ServerStatus.READY and self._ready_at is not None
        served_for = time.monotonic() - self._ready_at if serving and self._ready_at is not None else None
        with self._lock:
            cpu_lines = tuple(self._cpu_lines)
        failure = classify(self.tail(), self.exit_code, serving_at=self.base_url if serving else None,
                           served_for=served_for, cpu_lines=cpu_lines)
        if self._foreign and failure.kind == FailureKind.PORT_IN_USE:  # say who holds it: it answered us
            failure = foreign_server(self.host, self.port, self._foreign, shared=False, tail=failure.tail)
        self._fail(failure)

    def check_alive(self) -> None:
        """Raise EngineFailed (classified) if a ready engine has died since."""
        if self._proc is not None and self._proc.poll() is not None and not self._stopping.is_set():
            self._exited()

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM; after SECOND_SIGNAL_AFTER_S (or half of ``grace``) a second SIGTERM, on which
        llama-server exits at once; then SIGKILL the group once ``grace`` seconds have passed.
        Returns the exit code."""
        self._stopping.set()
        proc = self._proc
        if proc is None:
            return None
        first = min(SECOND_SIGNAL_AFTER_S, grace / 2)
        for wait in (first, grace - first):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        # The group may hold children even when the leader is gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        self.exit_code = proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        self._cleanup()
        if self.status != ServerStatus.FAILED:
            self._set(ServerStatus.STOPPED, f"exit code {self.exit_code}")
        return self.exit_code

    def _cleanup(self) -> None:
        forget_child(self._pid_file)
        _LIVE.discard(self)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(grace=3.0)
