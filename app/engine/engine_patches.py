"""Headroom's patch series for the vendored llama.cpp (``native/patches/NNNN-name.patch``,
docs/engine-patches.md): which patches, the digest that keys the build, the upstream fixes they port,
and the patched copy of the source tree the build compiles. Standard library only, like native_build.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.paths import cache_dir

#: Headroom's patch series for the pinned llama.cpp, applied in name order (docs/engine-patches.md).
PATCH_DIR = Path(__file__).resolve().parent.parent.parent / "native" / "patches"
#: Each patch names the upstream fix it ports (app/engine/advisories.py ``Fix.name``):
#: Headroom-Fix: b11412
_FIX_LINE = re.compile(r"^Headroom-Fix:\s*(\S+)\s*$", re.MULTILINE)
#: Written into a patched source copy once every patch applied.
PATCHED_STAMP = "HEADROOM_PATCHES"


@dataclass(frozen=True)
class PatchSeries:
    """The patches applied before the build, in order. ``digest`` keys the build: any change to a
    patch's name or text gives another build directory, so a changed series builds again."""

    patches: tuple[Path, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)

    @property
    def digest(self) -> str:
        """8 hex digits over every patch's name and bytes; ``""`` for no patches."""
        if not self.patches:
            return ""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        return h.hexdigest()[:8]

    @property
    def fixes(self) -> tuple[str, ...]:
        """The upstream fixes the series ports, from each patch's ``Headroom-Fix:`` lines."""
        return tuple(m for p in self.patches for m in _FIX_LINE.findall(p.read_text(errors="replace")))


#: The vendored tree as it is.
UNPATCHED = PatchSeries(())


def patch_series(folder: Path = PATCH_DIR) -> PatchSeries:
    """The series in ``folder`` (``NNNN-name.patch``, in name order); none when it is missing."""
    if not folder.is_dir():
        return UNPATCHED
    return PatchSeries(tuple(sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.patch"))))


def engine_label(commit: str, patches: tuple[str, ...] | list[str]) -> str:
    """``llama.cpp 0c1e57098 + 3 Headroom patches`` (or just ``llama.cpp 0c1e57098``)."""
    label = "llama.cpp (commit unknown)" if not commit or commit == "unknown" else f"llama.cpp {commit[:9]}"
    if patches:
        label += f" + {len(patches)} Headroom patch{'es' if len(patches) != 1 else ''}"
    return label


def _apply_argv(patch: Path) -> list[str]:
    """``git apply`` (``./dev`` installs git), else POSIX ``patch`` (a bare GPU machine may lack git)."""
    if shutil.which("git"):
        return ["git", "apply", "--whitespace=nowarn", str(patch)]
    if shutil.which("patch"):
        return ["patch", "-p1", "--forward", "--batch", "--quiet", "-i", str(patch)]
    raise RuntimeError("neither git nor patch found: install git (apt-get install git) to apply Headroom's "
                       "engine patches")


def _print(msg: str) -> None:
    print(f"[engine-build] {msg}", flush=True)


def patched_source(src: Path, commit: str, series: PatchSeries, log: Callable[[str], None] = _print) -> Path:
    """A copy of ``src`` with ``series`` applied (in order), made once per commit and series; ``src``
    itself is never modified. Raises RuntimeError naming the patch that does not apply."""
    dest = cache_dir() / "src" / f"llama.cpp-{commit[:9]}-p{series.digest}"
    if (dest / PATCHED_STAMP).is_file():
        return dest
    tmp = dest.parent / f".{dest.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    log(f"copying {src} to {dest.name} for {len(series.patches)} Headroom patches")
    # the sdist's .git is a pointer into the sdist's own metadata: the copy names its commit to CMake instead
    shutil.copytree(src, tmp, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    # a repository above the cache (a dotfiles $HOME) must not make git apply paths relative to it
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp.parent))
    for patch in series.patches:
        log(f"applying {patch.name}")
        try:
            argv = _apply_argv(patch)
        except RuntimeError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"{patch.name} does not apply to llama.cpp {commit[:9]}: "
                               f"{(proc.stderr or proc.stdout).strip()}")
    (tmp / PATCHED_STAMP).write_text("\n".join(series.names) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
