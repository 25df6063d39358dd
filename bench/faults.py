"""The fault run of issue 18: each fault against the real engine and the real CLI, one table.

    python bench/faults.py [--out bench/results/faults-cpu-DATE.md]

Every fault runs ``python -m app …`` (``headroom``) as a user would, on the generated GGUFs of
tests/fixtures, in a private cache and config directory (mode 0755, as ``~/.cache`` usually is;
the engine build and the generated models are linked in from the real cache). Per fault it prints

- outcome: what Headroom said (its exit status and the line that matters);
- processes left: Headroom's children (engine, pass-1 probe) still running once it is done, or
  killed: must be 0;
- secrets: places other users can read that hold the API key: every process's command line (what
  ``ps`` shows) and every file with the others-read bit under the cache and config directories;
  must be 0 ("—" where no key is in play). The downloads fault looks there for its HF_TOKEN, in the
  run's own Hugging Face cache too.

Exits 1 when a row has a process left, a secret found, or an outcome that is not the expected one.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from app.paths import cache_dir  # noqa: E402
from tests.fixtures import gguf_factory, shapes  # noqa: E402

#: How long a process may take to go once its reason to live is gone (a loaded 2-core machine).
SETTLE_S = 20.0
#: How long a serve may take to say "serving at" (plan, engine start, plan check).
SERVE_S = 240.0


@dataclass
class Row:
    fault: str
    outcome: str
    ok: bool | None  # the outcome is the one the issue asks for; None: not run
    left: int | None  # processes left; None: not run
    secrets: int | None  # None: no key in play


@dataclass
class Env:
    """The private directories one fault runs in."""

    root: Path
    cache: Path
    config: Path

    def vars(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, HEADROOM_CACHE_DIR=str(self.cache), HEADROOM_CONFIG_DIR=str(self.config),
                   PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        env.pop("LLAMA_CPP_LIB_PATH", None)
        env.update(extra)
        return env


@contextlib.contextmanager
def private_env() -> Iterator[Env]:
    real = cache_dir()
    root = Path(tempfile.mkdtemp(prefix="headroom-faults-"))
    try:
        cache, config = root / "cache", root / "config"
        for d in (root, cache, config):
            d.mkdir(exist_ok=True)
            d.chmod(0o755)  # as ~/.cache and ~/.config usually are: the files' own modes must protect them
        for shared in ("engines", "test-models"):
            (cache / shared).symlink_to(real / shared)
        yield Env(root, cache, config)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def headroom(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "app", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=ROOT, start_new_session=True)


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def descendants(pid: int) -> set[int]:
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def left_after(pids: set[int], settle: float = SETTLE_S) -> int:
    """How many of ``pids`` still run once they have had ``settle`` seconds to go; those are then
    killed, so one row's leftovers do not reach the next."""
    deadline = time.monotonic() + settle
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    still = {p for p in pids if alive(p)}
    for p in still:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return len(still)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def world_readable_secrets(key: str, *folders: Path) -> list[str]:
    """Where others can read ``key``: process command lines (``ps``) and others-readable files."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if key in " ".join(proc.info["cmdline"] or ()):
                found.append(f"/proc/{proc.info['pid']}/cmdline")
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):  # symlinks (engines, models) not followed
            for name in files:
                path = Path(dirpath) / name
                with contextlib.suppress(OSError):
                    if path.lstat().st_mode & stat.S_IROTH and key in path.read_text(errors="replace"):
                        found.append(str(path))
    return found


class Serving:
    """``headroom serve`` read line by line in the background."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.serving = threading.Event()
        self.family: set[int] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self.family |= descendants(self.proc.pid)
            if line.startswith("serving at "):
                self.serving.set()
        self.serving.set()

    @property
    def engine_pid(self) -> int | None:
        for line in self.lines:
            if line.startswith("engine: starting — pid "):
                return int(line.rsplit(" ", 1)[1])
        return None

    def url(self) -> str | None:
        return next((ln.split()[2] for ln in self.lines if ln.startswith("serving at ")), None)

    def wait(self, timeout: float = SERVE_S) -> int | None:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(10)
        return rc

    def said(self, *starts: str) -> str:
        """The first line that starts with one of ``starts`` (else the last line)."""
        for line in self.lines:
            if line.startswith(starts):
                return line
        return self.lines[-1] if self.lines else "(nothing)"

    def pids(self) -> set[int]:
        engine = self.engine_pid
        return {self.proc.pid, *self.family, *([engine] if engine else [])}


def short(text: str, n: int = 150) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# -- the faults ---------------------------------------------------------------------------------

#: Holds the real pass-1 worker at start-up (Python imports sitecustomize from PYTHONPATH).
HOLD_THE_WORKER = """import os, sys, threading
if "app.probe.worker" in sys.orig_argv:
    with open({marker!r}, "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait()
"""


def fault_measure_killed(sig: signal.Signals) -> Row:
    """Item 1: ``headroom measure`` killed while pass 1 runs; its probe must die with it."""
    name = f"headroom measure killed by {sig.name} during pass 1"
    with private_env() as env:
        hold = env.root / "hold"
        hold.mkdir()
        marker = env.root / "worker-pid"
        (hold / "sitecustomize.py").write_text(HOLD_THE_WORKER.format(marker=str(marker)))
        model = gguf_factory.ensure(shapes.TINY)
        proc = headroom("measure", str(model), "-c", "512", "--refresh",
                        env=env.vars(PYTHONPATH=os.pathsep.join([str(hold), str(ROOT)])))
        deadline = time.monotonic() + SERVE_S
        while not (marker.exists() and marker.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not (marker.exists() and marker.read_text()):
            proc.kill()
            out = proc.communicate()[0]
            return Row(name, f"the probe never started: {out.strip()[-200:]}", False, None, None)
        worker = int(marker.read_text())
        family = {worker, *descendants(proc.pid)}
        proc.send_signal(sig)
        rc = proc.wait(SETTLE_S)
        left = left_after(family)
        outcome = f"exit {rc}; the probe (pid {worker}) " + ("died with it" if not left else "was left running")
        return Row(name, outcome, not left, left, None)


FOREIGN_SERVER = """import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def fault_foreign_server() -> Row:
    """Item 2: another HTTP server answering /health 200 already holds the port."""
    name = "another server answers /health 200 on --port"
    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert foreign.stdout is not None
        port = foreign.stdout.readline().strip()
        with private_env() as env:
            run = Serving(headroom("serve", str(gguf_factory.ensure(shapes.TINY)), "--no-measure", "-c", "4096",
                                   "--port", port, env=env.vars()))
            run.serving.wait(SERVE_S)
            if run.url():
                run.proc.send_signal(signal.SIGTERM)
            rc = run.wait()
            left = left_after(run.pids())
            said = run.said("headroom serve:", "serving at")
            ok = rc == 1 and run.url() is None and "port is in use" in said.lower()
            return Row(name, f"exit {rc}: {said}", ok, left, None)
    finally:
        foreign.kill()
        foreign.wait()


def fault_engine_killed_while_serving() -> Row:
    """Item 3: the engine killed with SIGKILL while it serves."""
    name = "the engine SIGKILLed while serving"
    with private_env() as env:
        run = Serving(headroom("serve", str(gguf_factory.ensure(shapes.TINY)), "--no-measure", "-c", "4096",
                               env=env.vars()))
        run.serving.wait(SERVE_S)
        engine = run.engine_pid
        if not run.url() or engine is None:
            run.proc.kill()
            run.wait()
            return Row(name, f"did not serve: {run.said('headroom serve:')}", False, left_after(run.pids()), None)
        family = run.pids()
        os.kill(engine, signal.SIGKILL)
        rc = run.wait()
        left = left_after(family)
        said = run.said("headroom serve:")
        has_tail = any(line.startswith("Last engine log lines") for line in run.lines)
        ok = rc == 1 and "killed by SIGKILL while serving" in said and has_tail
        return Row(name, f"exit {rc}: {said}" + (" [+ the log tail]" if has_tail else ""), ok, left, None)


def _post(url: str, key: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    req = urllib.request.Request(url + "/completion", b'{"prompt": "Hi", "n_predict": 2}', headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def fault_api_key() -> Row:
    """Item 4: ``--host 0.0.0.0`` makes a key: it must reach the engine without showing anywhere."""
    name = "serve --host 0.0.0.0 (the API key)"
    with private_env() as env:
        run = Serving(headroom("serve", str(gguf_factory.ensure(shapes.TINY)), "--no-measure", "-c", "4096",
                               "--host", "0.0.0.0", env=env.vars()))
        run.serving.wait(SERVE_S)
        url = run.url()
        key_file = env.config / "api_key"
        if not url or not key_file.is_file():
            run.proc.kill()
            run.wait()
            return Row(name, f"did not serve: {run.said('headroom serve:')}", False, left_after(run.pids()), None)
        key = key_file.read_text().strip()
        codes = (_post(url, None), _post(url, key))
        found = world_readable_secrets(key, env.cache, env.config)
        family = run.pids()
        run.proc.send_signal(signal.SIGTERM)
        rc = run.wait()
        left = left_after(family)
        by_file = "--api-key-file" in run.said("command:")
        mode = oct(key_file.stat().st_mode & 0o777) if key_file.exists() else "gone"
        outcome = (f"exit {rc}; without the key {codes[0]}, with it {codes[1]}; the key passed "
                   f"{'by --api-key-file' if by_file else 'NOT by file'}, stored {mode}")
        if found:
            outcome += "; found in " + ", ".join(found)
        ok = rc == 0 and codes == (401, 200) and by_file
        return Row(name, outcome, ok, left, len(found))


def fault_user_key_readable() -> Row:
    """Item 4: a key file the user left readable by others (0644) is refused in words. The secrets
    column counts what Headroom exposed: the planted file itself is the user's and is left out."""
    name = "a user's key file with mode 0644"
    with private_env() as env:
        key = "key-the-user-wrote-" + os.urandom(8).hex()
        planted = env.config / "api_key"
        planted.write_text(key + "\n")
        planted.chmod(0o644)
        run = Serving(headroom("serve", str(gguf_factory.ensure(shapes.TINY)), "--no-measure", "-c", "4096",
                               "--host", "0.0.0.0", env=env.vars()))
        rc = run.wait()
        left = left_after(run.pids())
        planted.chmod(0o600)  # the user's own file: not one Headroom wrote
        found = world_readable_secrets(key, env.cache, env.config)
        said = run.said("headroom serve:", "Traceback")
        ok = rc == 2 and "readable by other users" in said and not any("Traceback" in ln for ln in run.lines)
        return Row(name, f"exit {rc}: {said}", ok, left, len(found))


#: The listed file of the downloads fault: the loadable tiny MoE, 13.3 MiB, more than one of
#: huggingface_hub's 10 MiB download chunks, so the bound shows as bytes kept, not only as none.
DOWNLOAD_REPO, DOWNLOAD_FILE = "acme/Tiny-MoE-GGUF", "Tiny-MoE-F32.gguf"
#: What the flooding mirror streams for it: 1 GiB, some 77 times the listed size.
FLOOD_BYTES = 1 << 30


class DiskWatch:
    """The biggest file under ``folder`` (the Hugging Face cache: ``blobs/*.incomplete``, ``blobs/*``,
    ``snapshots/*``) seen while a run goes on, sampled every 20 ms and once more at the end, and whether
    the key ``secret`` ever showed in a process's command line (``ps``) meanwhile."""

    def __init__(self, folder: Path, secret: str) -> None:
        self.folder, self.secret = folder, secret
        self.peak, self.peak_file = 0, ""
        self.in_cmdline: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for dirpath, _dirs, files in os.walk(self.folder):
            for name in files:
                with contextlib.suppress(OSError):
                    size = (Path(dirpath) / name).stat().st_size
                    if size > self.peak:
                        self.peak, self.peak_file = size, name

    def _watch(self) -> None:
        last_ps = 0.0
        while not self._stop.wait(0.02):
            self._sample()
            if time.monotonic() - last_ps >= 0.5:
                last_ps = time.monotonic()
                self.in_cmdline |= set(world_readable_secrets(self.secret))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample()


def fault_download(announced: int | None) -> Row:
    """Item 5: ``headroom serve hf:…`` against a Hub mirror whose GET sends 1 GiB for a file listed at
    13.3 MiB, its length unannounced (``announced`` None: the body ends when the connection closes) or
    announced in Content-Length (10^15). Refused with the hub's message; never more on disk than listed.
    The Hub is tests/fixtures/fake_hub.py in this process, the Hugging Face cache private to the run
    (HF_HOME, HF_HUB_CACHE), and an HF_TOKEN is set: the secrets column looks for it."""
    from app.planner.units import Bytes
    from tests.fixtures.fake_hub import FakeHub

    how = "no length" if announced is None else f"Content-Length {announced}"
    model = gguf_factory.ensure(shapes.TINY_MOE)
    listed = model.stat().st_size
    name = f"a Hub GET sends {Bytes(FLOOD_BYTES)} for {Bytes(listed)} listed ({how})"
    with private_env() as env, FakeHub() as hub:
        hub.add_repo(DOWNLOAD_REPO, {DOWNLOAD_FILE: model})
        hub.flood(DOWNLOAD_REPO, DOWNLOAD_FILE, total=FLOOD_BYTES, length=announced)
        hf_home = env.root / "huggingface"
        hf_cache = hf_home / "hub"
        token = "hf_" + os.urandom(16).hex()
        variables = env.vars(HF_ENDPOINT=hub.url, HF_HOME=str(hf_home), HF_HUB_CACHE=str(hf_cache),
                             HF_TOKEN=token)
        variables.pop("HF_HUB_OFFLINE", None)
        watch = DiskWatch(hf_home, token)
        run = Serving(headroom("serve", f"hf:{DOWNLOAD_REPO}:F32", "--no-measure", "-c", "4096", env=variables))
        run.serving.wait(SERVE_S)
        if run.url():
            run.proc.send_signal(signal.SIGTERM)
        rc = run.wait()
        watch.stop()
        left = left_after(run.pids())
        found = sorted(watch.in_cmdline | set(world_readable_secrets(token, env.cache, env.config, hf_home)))
        said = run.said("headroom serve:", "Traceback")
        snapshots = list(hf_cache.rglob("snapshots/*/*")) if hf_cache.exists() else []
        launched = run.engine_pid is not None
        words = (f"sent more than the listed {Bytes(listed)}" if announced is None
                 else f"announced {Bytes(announced)}")
        ok = (rc == 2 and words in said and watch.peak <= listed and not snapshots and not launched
              and not any("Traceback" in ln for ln in run.lines))
        peak = (f"at most {watch.peak} bytes ({watch.peak_file})" if watch.peak else "not one byte")
        outcome = (f"exit {rc}: {said}; on disk {peak} of the listed {listed}; the Hub wrote "
                   f"{Bytes(hub.served(DOWNLOAD_REPO, DOWNLOAD_FILE))} into the connection"
                   + ("; a snapshot was linked" if snapshots else "")
                   + ("; the engine was launched" if launched else "; nothing launched"))
        if found:
            outcome += "; the token found in " + ", ".join(found)
        return Row(name, outcome, ok, left, len(found))


def fault_pass1_failed() -> Row:
    """Item 6: ``serve`` on a file whose pass 1 aborts: refused with the failing assertion."""
    name = "serve a model whose pass 1 aborts"
    with private_env() as env:
        run = Serving(headroom("serve", str(gguf_factory.ensure(shapes.TINY_BAD_ROPE_SCALING)), "-c", "4096",
                               env=env.vars()))
        run.serving.wait(SERVE_S)
        if run.url():
            run.proc.send_signal(signal.SIGTERM)
        rc = run.wait()
        left = left_after(run.pids())
        said = run.said("headroom serve:")
        launched = run.engine_pid is not None
        ok = rc == 1 and "refused: pass 1 failed" in said and "GGML_ASSERT(" in said and not launched
        extra = "; the engine was launched" if launched else "; nothing launched"
        return Row(name, f"exit {rc}: {said}{extra}", ok, left, None)


FAULTS: tuple[Callable[[], Row], ...] = (
    lambda: fault_measure_killed(signal.SIGTERM),
    lambda: fault_measure_killed(signal.SIGKILL),
    fault_foreign_server,
    fault_engine_killed_while_serving,
    fault_api_key,
    fault_user_key_readable,
    lambda: fault_download(None),
    lambda: fault_download(10**15),
    fault_pass1_failed,
)


def _cell(value: int | None) -> str:
    return "—" if value is None else str(value)


def _asked(ok: bool | None) -> str:
    return "—" if ok is None else "yes" if ok else "NO"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    rows = []
    for fault in FAULTS:
        t0 = time.monotonic()
        row = fault()
        rows.append((row, time.monotonic() - t0))
        print(f"  {row.fault}: {_asked(row.ok)} ({time.monotonic() - t0:.1f} s)", flush=True)
    headers = ("fault", "processes left", "secrets", "as asked", "outcome")
    cells = [(r.fault, _cell(r.left), _cell(r.secrets), _asked(r.ok), short(r.outcome, 120)) for r, _ in rows]
    widths = [max(len(c[i]) for c in (headers, *cells)) for i in range(len(headers))]
    printed = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in (headers, *cells)]
    bad = [r for r, _ in rows if r.ok is False or (r.left or 0) > 0 or (r.secrets or 0) > 0]
    not_run = [r.fault for r, _ in rows if r.ok is None]
    verdict = ("all faults handled" if not bad else "NOT handled: " + ", ".join(r.fault for r in bad)) + (
        f"; not run: {', '.join(not_run)}" if not_run else "")
    printed.append(verdict)
    print("\n".join(printed))
    if args.out is not None:
        write_markdown(args.out, started, rows, printed)
    return 1 if bad else 0


def write_markdown(path: Path, started: datetime.datetime, rows: list[tuple[Row, float]], printed: list[str]) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                            check=False).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "app", "bench"], capture_output=True, text=True,
                           cwd=ROOT, check=False).stdout.strip()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"# Fault run on the CPU machine, {started:%Y-%m-%d}",
        "",
        f"`python bench/faults.py --out {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`, "
        f"{started:%H:%M} UTC, load average {load} at the end; {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; code {commit}"
        + (" plus its working tree" if dirty else "") + ". The real llama-server (llama.cpp 0c1e57098, CPU "
        "build) on the generated tiny GGUFs; each fault in its own cache and config directory.",
        "",
        "| fault | outcome | processes left | secrets readable by others | as asked | seconds |",
        "|---|---|---|---|---|---|",
        *(f"| {r.fault} | {r.outcome.replace('|', '/')} | {_cell(r.left)} | {_cell(r.secrets)} | "
          f"{_asked(r.ok)} | {s:.1f} |" for r, s in rows),
        "",
        "What it printed:",
        "",
        "```",
        *printed,
        "```",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
