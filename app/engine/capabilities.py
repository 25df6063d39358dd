"""Which of the flags Headroom uses an engine binary accepts — probed, never looked up by version.

The probe (docs/domain.md §4): ``<binary> [--server] <flag> [<value>] -m /nonexistent.gguf``. llama.cpp
parses every argument before it touches the model, so an unknown flag or value stops it at parse
time and a known one gets as far as "model not found". Probes run concurrently, each with a
timeout, and the answers are cached per binary (path, size, mtime) under the cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.files import atomic_text
from app.llamacpp.failures import CAPABILITY_ACCEPTED, CAPABILITY_BAD_VALUE, CAPABILITY_REJECTED
from app.llamacpp.logs import system_info_line
from app.paths import cache_dir
from app.planner.plan_types import PlanMode
from app.planner.settings import KV_TYPES, LaunchSettings

#: Flags probed, by capability name → the arguments that exercise it.
PROBES: dict[str, tuple[str, ...]] = {
    "-kvu": ("-kvu",),
    "--fit": ("--fit", "off"),
    **{f"-fa {v}": ("-fa", v) for v in ("on", "off", "auto")},  # the argv always passes a value
    "-nkvo": ("-nkvo",),
    "--swa-full": ("--swa-full",),
    "--kv-residency-mode": ("--kv-residency-mode", "window"),
    "--vram-target": ("--vram-target", "0"),
    "--metrics": ("--metrics",),
    "--alias": ("--alias", "headroom-probe"),
    "--rpc": ("--rpc", "127.0.0.1:1"),
    "-ts": ("-ts", "1,1"),
    "--cache-ram": ("--cache-ram", "0"),
    "-ot": ("-ot", "blk\\.0\\.=CPU"),
    "--n-cpu-moe": ("--n-cpu-moe", "1"),
    # at -lv 4 the engine also logs its system_info line before the model (Capabilities.system_info)
    "-lv": ("-lv", "4"),
    # --no-repack: no extra weight buffer types (no AMX, no CPU_REPACK); what an AMX engine is launched with
    "-nr": ("-nr",),
    # The handler opens the file while parsing (common/arg.cpp): /dev/null is an empty key list.
    "--api-key-file": ("--api-key-file", os.devnull),
    **{f"-ctk {t}": ("-ctk", t) for t in KV_TYPES},
}

MISSING_MODEL = "/nonexistent-headroom-probe.gguf"
PROBE_TIMEOUT_S = 15.0
CACHE_FILE = "engine-capabilities.json"
#: Bump when the verdict rules change, so old cache entries are re-probed (a change to PROBES
#: re-probes by itself: the stamp carries their digest).
CACHE_VERSION = 3



@dataclass(frozen=True)
class ProbeResult:
    verdict: str  # "accepted" | "rejected" | "unknown"
    detail: str = ""


@dataclass(frozen=True)
class Capabilities:
    """Probe verdicts per capability name (keys of PROBES)."""

    results: dict[str, ProbeResult] = field(default_factory=dict)
    #: The engine's own ``system_info`` line (its CPU code: ``AVX2 = 1 | AVX512 = 1 | REPACK = 1``…),
    #: from the ``-lv 4`` probe; ``""`` when it printed none.
    system_info: str = ""

    def accepts(self, name: str) -> bool:
        r = self.results.get(name)
        return r is not None and r.verdict == "accepted"

    @property
    def kv_types(self) -> tuple[str, ...]:
        return tuple(t for t in KV_TYPES if self.accepts(f"-ctk {t}"))

    def to_json(self) -> dict[str, Any]:
        return {k: {"verdict": v.verdict, "detail": v.detail} for k, v in self.results.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any], system_info: str = "") -> Capabilities:
        return cls({k: ProbeResult(v["verdict"], v.get("detail", "")) for k, v in data.items()}, system_info)


def verdict(output: str, timed_out: bool = False) -> ProbeResult:
    """Read one probe's output (stdout + stderr)."""
    m = CAPABILITY_REJECTED.search(output) or CAPABILITY_BAD_VALUE.search(output)
    if m:
        return ProbeResult("rejected", m.group(0))
    m2 = CAPABILITY_ACCEPTED.search(output)
    if m2:
        return ProbeResult("accepted", m2.group(0))
    if timed_out:
        return ProbeResult("unknown", f"no answer within {PROBE_TIMEOUT_S:.0f} s")
    last = next((ln for ln in reversed(output.splitlines()) if ln.strip()), "no output")
    return ProbeResult("unknown", last.strip()[:200])


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bind to port 0, read it back, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


#: The variable llama-server reads ``--api-key`` from (common/arg.cpp ``set_env("LLAMA_API_KEY")``).
API_KEY_ENV = "LLAMA_API_KEY"


def port_is_free(host: str, port: int) -> bool:
    """Whether an engine could bind ``host:port`` now (llama-server's "couldn't bind HTTP server
    socket", said before launch instead)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def engine_env() -> dict[str, str]:
    """The environment an engine runs with: ours minus ``LLAMA_ARG_*`` and ``LLAMA_API_KEY``, so the
    argv is the only source of settings (llama.cpp reads every option from ``LLAMA_ARG_<NAME>`` too)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_") and k != API_KEY_ENV}


def _probe(command: Sequence[str], args: Sequence[str], timeout: float) -> tuple[ProbeResult, str]:
    """One probe's verdict and its output."""
    # --port 0: the engine binds a free port itself (tools/server/server-http.cpp ``bind_to_any_port``), so
    # two probes never race for one port that a free_port() had released ("unknown" verdicts)
    argv = [*command, *args, "--host", "127.0.0.1", "--port", "0", "-m", MISSING_MODEL]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              env=engine_env(), check=False)
    except subprocess.TimeoutExpired as exc:
        out = ((exc.stdout or b"") + (exc.stderr or b"")).decode("utf-8", "replace")
        return verdict(out, timed_out=True), out
    except OSError as exc:
        return ProbeResult("unknown", f"cannot run {command[0]}: {exc}"), ""
    out = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    return verdict(out), out


def probe_one(command: Sequence[str], args: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    return _probe(command, args, timeout)[0]


def probe_all(command: Sequence[str], names: Sequence[str] | None = None, workers: int = 4) -> Capabilities:
    """Run the probes for ``names`` (default: all of PROBES) concurrently; the engine's ``system_info``
    line is kept from whichever printed it (the ``-lv 4`` one)."""
    todo = list(names or PROBES)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        answers = list(pool.map(lambda n: _probe(command, PROBES[n], PROBE_TIMEOUT_S), todo))
    info = next((line for _, out in answers if (line := system_info_line(out))), "")
    return Capabilities(dict(zip(todo, (r for r, _ in answers), strict=True)), info)


def _probes_digest() -> str:
    return hashlib.sha256(json.dumps(PROBES, sort_keys=True).encode()).hexdigest()[:12]


def _stamp(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "v": CACHE_VERSION, "probes": _probes_digest()}


def _read_cache(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def capabilities(binary: Path, command: Sequence[str], *, refresh: bool = False) -> Capabilities:
    """The binary's capabilities: from the cache when its size and mtime are unchanged, else probed."""
    binary = binary.resolve()
    file = cache_dir() / CACHE_FILE
    stamp = _stamp(binary)
    entries = _read_cache(file)
    entry = entries.get(str(binary))
    if not refresh and isinstance(entry, dict) and entry.get("stamp") == stamp:
        return Capabilities.from_json(entry["results"], str(entry.get("system_info") or ""))
    caps = probe_all(command)
    entries = _read_cache(file)  # re-read: another process may have written meanwhile
    entries[str(binary)] = {"stamp": stamp, "results": caps.to_json(), "system_info": caps.system_info}
    with contextlib.suppress(OSError):  # a full or read-only cache: probed again next time
        atomic_text(file, json.dumps(entries, indent=1, sort_keys=True))
    return caps


def required(settings: LaunchSettings, mode: PlanMode) -> list[str]:
    """The capabilities a launch with these settings cannot do without."""
    need = [f"-ctk {settings.type_k}", f"-ctk {settings.type_v}"]
    if settings.kv_unified and mode != PlanMode.WINDOW:
        need.append("-kvu")
    need.append(f"-fa {settings.flash_attn}")
    if not settings.offload_kqv:
        need.append("-nkvo")
    if settings.swa_full:
        need.append("--swa-full")
    if mode == PlanMode.WINDOW:
        need += ["--kv-residency-mode", "--vram-target"]
    if settings.rpc:
        need.append("--rpc")
    if settings.tensor_split:
        need.append("-ts")
    if settings.tensor_overrides:
        need.append("-ot")
    if settings.n_cpu_moe:
        need.append("--n-cpu-moe")
    return list(dict.fromkeys(need))


def refusal(caps: Capabilities, settings: LaunchSettings, mode: PlanMode) -> str | None:
    """Why this engine cannot run the plan (None when it can)."""
    missing = [n for n in required(settings, mode) if not caps.accepts(n)]
    if not missing:
        return None
    why = "; ".join(f"{n}: {caps.results[n].detail}" if n in caps.results else n for n in missing)
    return f"this engine does not accept {', '.join(missing)} which the plan needs ({why})"
