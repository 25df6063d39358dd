"""Find the engines on this machine and say what each one is.

Where: the engine the user chose (a path: ``--engine``, else the chosen engine the window keeps,
app/engine/chosen.py), ``llamafile`` and ``llama-server`` on PATH, llamafiles
in ``~/.llamafile`` and the app data directory, the engine Headroom built
(``app.engine.native_build.find_build()``) and, in a bundle, the engine beside it
(``native_build.bundled_build()``). What: stock llama-server, Mozilla llamafile (its
server needs ``--server`` first) or the opencoti llamafile (it accepts ``--kv-residency-mode``,
found by probing); version and llama.cpp commit from ``--version``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from app.engine import native_build
from app.engine.capabilities import Capabilities, capabilities, engine_env
from app.engine.chosen import chosen_engine
from app.engine.engine_patches import engine_label
from app.paths import data_dir
from app.planner.memory.repack import CpuFeatures
from app.planner.plan_types import PlanMode


class EngineKind(StrEnum):
    """What an engine binary is; the value is how the CLI, the window and the JSON name it."""

    LLAMA_SERVER = "llama-server"  # stock llama.cpp
    LLAMAFILE = "llamafile"  # Mozilla llamafile (its server needs --server first)
    OPENCOTI = "opencoti"  # the opencoti llamafile: accepts --kv-residency-mode (the KV window)


class EngineOrigin(StrEnum):
    """Where an engine was found; the value is the label the CLI and the window show."""

    SETTINGS = "settings"  # the one the user chose (--engine, the window's engine field)
    PATH = "PATH"
    LLAMAFILE_DIR = "~/.llamafile"
    DATA_DIR = "data dir"
    HEADROOM_BUILD = "headroom build"  # app.engine.native_build
    BUNDLE = "bundle"  # the engine a bundle carries beside its executable (packaging/)


#: Where an engine was found, in words a person reads ("✓ llama-server … — the one you chose: /path").
ORIGIN_WORDS: dict[EngineOrigin, str] = {
    EngineOrigin.SETTINGS: "the one you chose",
    EngineOrigin.PATH: "found on PATH",
    EngineOrigin.LLAMAFILE_DIR: "found in ~/.llamafile",
    EngineOrigin.DATA_DIR: "found in Headroom's data folder",
    EngineOrigin.HEADROOM_BUILD: "built by Headroom",
    EngineOrigin.BUNDLE: "the one Headroom came with",
}

KINDS = tuple(EngineKind)
VERSION_TIMEOUT_S = 15.0

# common/build-info.cpp.in, llama_print_build_info:
# version: 0.5.0-dev (build 1, commit 0c1e570)
_STOCK_VERSION = re.compile(r"version: (?P<version>\S+) \(build (?P<build>\d+), commit (?P<commit>\w+)\)")
# llamafile's own --version (llamafile/version.h):
# llamafile v0.10.5
_LLAMAFILE_VERSION = re.compile(r"llamafile v?(?P<version>\d+\.\d+\.\d+\S*)")
#: How an Actually Portable Executable (a llamafile) starts: a shell script header
#: (cosmopolitan ape/ape.S: ``MZqFpD='`` and the newer ``jartsr='``). Only such a file is worth
#: running through ``sh``: any other file would be run as a shell script.
APE_MAGIC = (b"MZqFpD", b"jartsr")




@dataclass(frozen=True)
class EngineInfo:
    """One engine binary. ``via_sh``: an APE llamafile the kernel would not exec directly.
    ``patches``/``fixes``: Headroom's patches the engine Headroom built carries, and the upstream
    fixes they port (app/engine/native_build.py; empty for every other engine)."""

    kind: EngineKind
    path: str
    version: str
    commit: str
    source: EngineOrigin
    via_sh: bool = False
    capabilities: Capabilities | None = None
    patches: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    #: A Headroom build's CPU code (``native-<cpu8>`` or ``portable``, native_build.EngineBuild.cpu).
    build_cpu: str = ""
    #: A Headroom build's backend (``cpu``, ``cuda``; ``""``: not a Headroom build) and a CUDA build's
    #: GPU code (CMAKE_CUDA_ARCHITECTURES): what app/engine/gpu_reach.py decides from without running it.
    build_backend: str = ""
    cuda_archs: str = ""
    #: The devices another llama-server lists (``--list-devices``, asked at discovery: app/engine/gpu_reach.py);
    #: None: not asked (a Headroom build's stamp says what it carries, a llamafile says when it runs).
    listed: tuple[str, ...] | None = None

    @property
    def llama_cpp(self) -> str:
        """``llama.cpp 0c1e57098 + 3 Headroom patches``: which llama.cpp the engine is."""
        return engine_label(self.commit, self.patches)

    @property
    def system_info(self) -> str:
        """The engine's own ``system_info`` line (from probing it), or ``""``."""
        return self.capabilities.system_info if self.capabilities is not None else ""

    @property
    def uses_amx(self) -> bool:
        """The engine's CPU code has ggml's AMX kernels (``AMX_INT8 = 1``): Headroom launches it with
        ``-nr`` (app/engine/argv.py), since ggml's AMX code crashes at warm-up where the compiler left its
        tile configuration partly unwritten (docs/domain.md §11). Headroom's own builds never have them."""
        return re.search(r"\bAMX_INT8 = 1\b", self.system_info) is not None

    @property
    def cpu_features(self) -> CpuFeatures | None:
        """The CPU backend's features as this engine reports them and as Headroom launches it (no
        repack buffer for an AMX engine, which runs with ``-nr``); None when it printed no system_info."""
        return _launched_features(self.system_info) if self.system_info else None

    @property
    def cpu_code(self) -> str:
        """What CPU code the engine runs, in words (doctor, the window's engine line)."""
        if self.build_cpu == native_build.PORTABLE:
            return "portable: the CPU code is chosen at run time, without AMX"
        if self.build_cpu:
            return "native for this CPU, without AMX"
        if self.uses_amx:
            return "uses AMX: launched with -nr (no AMX buffer)"
        return ""

    @property
    def is_llamafile(self) -> bool:
        return self.kind in (EngineKind.LLAMAFILE, EngineKind.OPENCOTI)

    @property
    def launcher(self) -> list[str]:
        """How to execute the binary (before any engine argument)."""
        return ["sh", self.path] if self.via_sh else [self.path]

    @property
    def server_prefix(self) -> list[str]:
        """launcher + ``--server`` for a llamafile: what every llama-server flag follows."""
        return [*self.launcher, "--server"] if self.is_llamafile else self.launcher

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind), "version": self.version, "commit": self.commit, "path": self.path,
            "source": str(self.source), "via_sh": self.via_sh, "llama_cpp": self.llama_cpp,
            "patches": list(self.patches), "fixes": list(self.fixes),
            "capabilities": None if self.capabilities is None else self.capabilities.to_json(),
        }


@lru_cache(maxsize=16)
def _launched_features(system_info: str) -> CpuFeatures:
    """``EngineInfo.cpu_features`` for one system_info line, parsed once (the window asks on every re-plan)."""
    found = CpuFeatures.from_system_info(system_info)
    amx = re.search(r"\bAMX_INT8 = 1\b", system_info) is not None
    return CpuFeatures(found.names, repack=False) if amx else found


def _run_version(launcher: list[str]) -> str | None:
    try:
        proc = subprocess.run([*launcher, "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=VERSION_TIMEOUT_S, env=engine_env(), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout + proc.stderr).decode("utf-8", "replace")


class VersionInfo(NamedTuple):
    """What ``--version`` says: the kind (before probing: no opencoti yet), version and commit."""

    kind: EngineKind
    version: str
    commit: str


def parse_version(text: str, name: str) -> VersionInfo:
    """The kind, version and commit from ``--version`` output (kind before probing: no opencoti yet)."""
    m = _STOCK_VERSION.search(text)
    lf = _LLAMAFILE_VERSION.search(text)
    if lf is not None:
        commit = m.group("commit") if m else "unknown"
        return VersionInfo(EngineKind.LLAMAFILE, lf.group("version"), commit)
    if m is not None:
        return VersionInfo(EngineKind.LLAMA_SERVER, m.group("version"), m.group("commit"))
    kind = EngineKind.LLAMAFILE if "llamafile" in name.lower() else EngineKind.LLAMA_SERVER
    return VersionInfo(kind, "unknown", "unknown")


def is_ape(path: Path) -> bool:
    """Whether ``path`` starts like an APE llamafile (see APE_MAGIC)."""
    try:
        with path.open("rb") as f:
            return f.read(6) in APE_MAGIC
    except OSError:
        return False


def identify(path: Path, source: EngineOrigin, *, probe: bool = True) -> EngineInfo | None:
    """What the binary at ``path`` is, or None when it is not an engine we can run."""
    if not path.is_file():
        return None
    via_sh = False
    text = _run_version([str(path)])
    if text is None and is_ape(path):  # an APE llamafile on a kernel without binfmt support
        text = _run_version(["sh", str(path)])
        via_sh = True
    if text is None:
        return None
    kind, version, commit = parse_version(text, path.name)
    if via_sh and version == "unknown":  # an APE that answered no llamafile version: it does not run here
        return None
    info = EngineInfo(kind, str(path), version, commit, source, via_sh)
    if not probe:
        return info
    caps = capabilities(path, [*info.server_prefix, *(["--gpu", "disable"] if info.is_llamafile else [])])
    if caps.accepts("--kv-residency-mode"):
        kind = EngineKind.OPENCOTI
    return replace(info, kind=kind, capabilities=caps)


def _llamafiles_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and ("llamafile" in p.name.lower() or p.suffix == ".llamafile")
                  and os.access(p, os.X_OK))


class Candidate(NamedTuple):
    """A place an engine may be, and which kind of place it is."""

    path: Path
    origin: EngineOrigin


def candidates(chosen: Path | None = None) -> list[Candidate]:
    """Every place an engine may be, in order of preference, without duplicates: ``chosen`` first,
    else the engine chosen in the window (app/engine/chosen.py)."""
    found: list[Candidate] = []
    chosen = chosen if chosen is not None else chosen_engine()
    if chosen is not None:
        found.append(Candidate(chosen, EngineOrigin.SETTINGS))
    for name in ("llamafile", "llama-server"):
        on_path = shutil.which(name)
        if on_path:
            found.append(Candidate(Path(on_path), EngineOrigin.PATH))
    for folder, origin in ((Path.home() / ".llamafile", EngineOrigin.LLAMAFILE_DIR),
                           (data_dir() / "engines", EngineOrigin.DATA_DIR), (data_dir(), EngineOrigin.DATA_DIR)):
        found += [Candidate(p, origin) for p in _llamafiles_in(folder)]
    build = native_build.find_build(bundled=False)
    if build is not None:
        found.append(Candidate(build.server, EngineOrigin.HEADROOM_BUILD))
    shipped = native_build.bundled_build()
    if shipped is not None:
        found.append(Candidate(shipped.server, EngineOrigin.BUNDLE))
    seen: set[Path] = set()
    unique: list[Candidate] = []
    for c in found:
        key = c.path.resolve() if c.path.exists() else c.path
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def discover_engines(chosen: Path | None = None, *, probe: bool = True) -> list[EngineInfo]:
    """Every engine found, identified (and probed unless ``probe`` is False)."""
    engines: list[EngineInfo] = []
    for path, label in candidates(chosen):
        info = identify(path, label, probe=probe)
        if info is None:
            continue
        build = native_build.build_of(path) if path.is_file() else None
        if build is not None:  # one Headroom built, however it was found: its stamp says what it carries
            # its --version names 7 digits (or none): the stamp has the commit and the patches
            known = info.commit != "unknown" and not build.commit.startswith(info.commit)
            info = replace(info, commit=info.commit if known else build.commit[:9],
                           patches=build.patches, fixes=build.fixes, build_cpu=build.cpu,
                           build_backend=build.backend.slug, cuda_archs=build.cuda_archs)
        elif probe and not info.is_llamafile:
            from app.engine.gpu_reach import listed_devices

            info = replace(info, listed=listed_devices(info))
        engines.append(info)
    return engines


def engine_cpu_features(chosen: Path | None = None) -> CpuFeatures | None:
    """The CPU features of the engine a CPU plan launches (``chosen``, else the first found), as it
    reports them; None when there is none or it printed no system_info."""
    engine = choose(discover_engines(chosen), PlanMode.CPU)
    return engine.cpu_features if engine is not None else None


def choose(engines: list[EngineInfo], mode: PlanMode) -> EngineInfo | None:
    """The engine for a plan's mode: the window needs opencoti; otherwise the first found."""
    if mode == PlanMode.WINDOW:
        return next((e for e in engines if e.kind == EngineKind.OPENCOTI), None)
    return engines[0] if engines else None
