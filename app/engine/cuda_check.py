"""The compile check of Headroom's patches on the CUDA backend: a whole CUDA build takes longer than CI
has (docs/engines.md, "The CUDA engine"), so CI compiles only the CUDA files the patch series touches,
for one architecture (``cuda_toolchain.CHECK_ARCH``), against NVIDIA's wheels' headers.

Standard library only (``native/build.py --cuda-check`` runs it). The result is cached by the patch
series and the toolchain (``~/.cache/headroom/cuda-check/<series8>-<wheels8>.json``): an unchanged series
is not compiled again; a changed one is, and a patch that breaks a CUDA file fails with the compiler's
first errors (tests/integration/test_cuda_compile.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from app.engine import cuda_toolchain, native_build
from app.engine.engine_patches import PatchSeries, patch_series, patched_source
from app.paths import cache_dir
from app.planner.devices import Backend

#: A file a patch writes: ``+++ b/ggml/src/ggml-cuda/ggml-cuda.cu``.
_TOUCHED = re.compile(r"^\+\+\+ b/(\S+)", re.MULTILINE)
CUDA_DIR = "ggml/src/ggml-cuda/"
#: The translation unit a touched CUDA header is checked through (every kernel file includes common.cuh).
HEADER_UNIT = "ggml/src/ggml-cuda/ggml-cuda.cu"
#: The first lines of a failed compile kept in the result (the compiler's first errors).
ERROR_LINES = 30

Log = Callable[[str], None]


@dataclass(frozen=True)
class CompileCheck:
    """What was compiled and how it went: ``ok``, the units, the seconds, the compiler's errors."""

    ok: bool
    series: str
    units: tuple[str, ...]
    arch: str
    compiler: str
    seconds: float
    cached: bool = False
    errors: str = ""


def cuda_units(series: PatchSeries) -> tuple[str, ...]:
    """The CUDA translation units (``.cu`` under ggml-cuda) the series changes, a touched header
    through ``HEADER_UNIT``; sorted."""
    units: set[str] = set()
    for patch in series.patches:
        for path in _TOUCHED.findall(patch.read_text(errors="replace")):
            if not path.startswith(CUDA_DIR):
                continue
            units.add(path if path.endswith(".cu") else HEADER_UNIT)
    return tuple(sorted(units))


def _object(unit: str) -> str:
    """The Ninja target of ``unit``'s object (CMake: ``<dir>/CMakeFiles/<target>.dir/<file>.o``)."""
    rel = unit.removeprefix(CUDA_DIR)
    return f"{CUDA_DIR}CMakeFiles/ggml-cuda.dir/{rel}.o"


def check(source: Path, commit: str, series: PatchSeries | None = None, python: str = sys.executable,
          log: Log = print, *, use_cache: bool = True) -> CompileCheck:
    """Configure a CUDA build of ``source`` (the vendored llama.cpp) with ``series`` applied for one
    architecture and compile the units it touches. Needs no GPU; installs NVIDIA's wheels once."""
    series = series if series is not None else patch_series()
    units = cuda_units(series)
    toolchain = cuda_toolchain.ensure(python, log)
    key = f"{series.digest or 'none'}-{cuda_toolchain.digest(toolchain.wheels)}"
    stamp = cache_dir() / "cuda-check" / f"{key}.json"
    if use_cache and stamp.is_file():
        try:
            data = json.loads(stamp.read_text())
            data["units"] = tuple(data["units"])
            found = CompileCheck(**{**data, "cached": True})
            if found.ok:
                return found
        except (OSError, ValueError, TypeError):
            pass
    started = time.monotonic()
    if not units:
        result = CompileCheck(True, series.digest, (), cuda_toolchain.CHECK_ARCH, toolchain.compiler, 0.0)
        return _store(stamp, result)
    src = patched_source(source, commit, series, log) if series.patches else source
    work = cache_dir() / "cuda-check" / key
    symbols = cuda_toolchain.driver_symbols(src / "ggml" / "src" / "ggml-cuda", toolchain.include / "cuda.h")
    setup = cuda_toolchain.CudaSetup(f"{cuda_toolchain.CHECK_ARCH}-real", toolchain,
                                   cuda_toolchain.driver_stub(work / "stub", symbols))
    bdir = work / "build"
    args = native_build.cmake_args(Backend.CUDA, commit, True, setup)
    if "-G" not in args:
        args += ["-G", "Ninja"]
    log(f"CUDA compile check: configuring ({', '.join(units)} for sm_{cuda_toolchain.CHECK_ARCH})")
    conf = subprocess.run(["cmake", "-S", str(src), "-B", str(bdir), *args], capture_output=True, text=True,
                          check=False)
    if conf.returncode != 0:
        return _store(stamp, CompileCheck(False, series.digest, units, cuda_toolchain.CHECK_ARCH, toolchain.compiler,
                                          round(time.monotonic() - started, 1),
                                          errors=_first_errors(conf.stdout + conf.stderr)))
    log(f"CUDA compile check: compiling {len(units)} file(s) with {toolchain.compiler}")
    done = subprocess.run(["cmake", "--build", str(bdir), "--target", *(_object(u) for u in units)],
                          capture_output=True, text=True, check=False)
    result = CompileCheck(done.returncode == 0, series.digest, units, cuda_toolchain.CHECK_ARCH, toolchain.compiler,
                          round(time.monotonic() - started, 1),
                          errors="" if done.returncode == 0 else _first_errors(done.stdout + done.stderr))
    return _store(stamp, result)


def _first_errors(text: str) -> str:
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if " error" in line or "error:" in line), 0)
    return "\n".join(lines[first:first + ERROR_LINES])


def _store(stamp: Path, result: CompileCheck) -> CompileCheck:
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(asdict(result), indent=2))
    except OSError:
        pass  # a read-only cache: the check ran, it is only not remembered
    return result
