"""The CUDA toolchain for building the engine on a machine without a GPU: NVIDIA's wheels from PyPI.

Standard library only (app/engine/native_build.py imports it before any virtual environment exists).

A desktop with an RTX card usually has the NVIDIA driver and nothing else; the machine that builds the
engine usually has no GPU and no CUDA toolkit. NVIDIA publishes the redistributable parts of CUDA as
wheels (docs/domain.md §16): ``nvidia-cublas`` (cuBLAS and cuBLASLt, headers and
``.so.13``), ``nvidia-cuda-runtime`` (cudart, ``cuda.h``), and the compiler itself, ``nvidia-cuda-nvcc`` with
``nvidia-cuda-crt``, ``nvidia-nvvm`` and ``nvidia-cuda-cccl``. ``ensure`` installs them once into
``~/.cache/headroom/cuda/cu13-<pins8>/site`` (never into the system or a venv) and lays them out as CMake's
FindCUDAToolkit and nvcc's ``nvcc.profile`` expect:

- the compiler: this machine's ``nvcc`` when it is release 13 (the project's machines have nvcc 13.0),
  else the wheel's, whose profile looks for ``targets/x86_64-linux/{include,lib}`` (links here);
- the libraries only as ``.so.13`` in the wheels: ``find_library`` needs unversioned names (links here);
- cuBLAS's headers sit apart from the compiler's toolkit: an ``-I`` in ``CMAKE_CUDA_FLAGS``;
- ggml-cuda links ``CUDA::cuda_driver`` (libcuda, the driver's, absent without one): ``driver_stub``
  compiles a link-only ``libcuda.so`` whose SONAME is ``libcuda.so.1`` and which defines the driver
  functions ggml-cuda calls (``driver_symbols``). It lives in the build folder, never beside the engine,
  and is named ``libcuda.so`` only, so a run-time search for ``libcuda.so.1`` can never find it.

The architectures (``DESKTOP_ARCHS``) and what they cost are in docs/engines.md, "The CUDA engine".
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from app.engine.elf import set_runpath
from app.paths import cache_dir

#: The CUDA major version the engine is built with; its runtime needs an NVIDIA driver of 580.65.06 or
#: newer on Linux (CUDA 13.0 release notes, "CUDA Toolkit and Corresponding Driver Versions").
CUDA_MAJOR = 13
MIN_DRIVER = "580.65.06"
#: NVML's ``nvmlSystemGetCudaDriverVersion`` of a driver that runs CUDA 13.0 (1000 × major + 10 × minor).
MIN_DRIVER_CUDA = 13000
#: The run-time half (it ships with the engine): cuBLAS of CUDA 13.0 and the runtime.
RUNTIME_WHEELS = ("nvidia-cublas==13.1.0.3", "nvidia-cuda-runtime==13.0.96")
#: The compiler half, for a machine without nvcc 13: nvcc, its front end (nvvm), its headers (crt, cccl).
COMPILER_WHEELS = ("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88", "nvidia-nvvm==13.0.88",
                   "nvidia-cuda-cccl==13.0.85")
#: What the CUDA module loads at run time besides the driver, copied beside it (RUNPATH ``$ORIGIN``).
RUNTIME_LIBS = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")
#: The notice that goes with them (NVIDIA's licence: these files are in its list of redistributables).
LICENCE_NAME = "NVIDIA-CUDA-LICENSE.txt"
#: The GPU code a desktop engine carries (CMake's CMAKE_CUDA_ARCHITECTURES): machine code for Ampere
#: (RTX 30, sm_86), Ada (RTX 40, sm_89) and consumer Blackwell (RTX 50, sm_120a), and Turing's PTX
#: (sm_75), which the driver compiles once for a Turing card and for any card newer than the list
#: (A100, H100/H200, the next generation). Why not more: docs/engines.md, "The CUDA engine".
DESKTOP_ARCHS = ("75-virtual", "86-real", "89-real", "120a-real")
#: One architecture, for the compile check of the patched CUDA sources (tests/engine/test_cuda_compile.py).
CHECK_ARCH = "89"

_RELEASE = re.compile(r"release (\d+)\.(\d+)")
_ARCH = re.compile(r"^(\d+)([af]?)(?:-(real|virtual))?$")
#: A driver function as cuda.h declares it: ``CUresult CUDAAPI cuMemCreate(...)``.
_DECLARED = re.compile(r"\bCUDAAPI\s+(cu[A-Z]\w*)\s*\(")
#: cuda.h's versioned names: ``#define cuMemGetInfo cuMemGetInfo_v2``.
_VERSIONED = re.compile(r"^\s*#\s*define\s+(cu[A-Z]\w*)\s+(cu[A-Z]\w*_v\d+)\s*$", re.MULTILINE)
_CALLED = re.compile(r"\b(cu[A-Z]\w*)\s*\(")

Log = Callable[[str], None]


@dataclass(frozen=True)
class Arch:
    """One entry of CMAKE_CUDA_ARCHITECTURES: ``86-real`` (machine code for sm_86 only), ``75-virtual``
    (PTX the driver compiles for sm_75 and any newer card), ``120a-real`` (sm_120's own features)."""

    cc: int  # 75, 86, 120
    suffix: str  # "", "a", "f"
    kind: str  # "real", "virtual", "" (both)

    @property
    def sm(self) -> str:
        return f"sm_{self.cc}{self.suffix}"

    @property
    def machine_code(self) -> bool:
        return self.kind in ("real", "")

    @property
    def ptx(self) -> bool:
        return self.kind in ("virtual", "")


def parse_archs(text: str | Sequence[str]) -> tuple[Arch, ...]:
    """``"75-virtual;86-real"`` (or its entries) → the entries; a malformed one is a ValueError."""
    items = text.split(";") if isinstance(text, str) else list(text)
    out = []
    for item in (i.strip() for i in items):
        m = _ARCH.match(item)
        if not m:
            raise ValueError(f"not a CUDA architecture: {item!r} (e.g. 86-real, 75-virtual, 120a-real)")
        out.append(Arch(int(m.group(1)), m.group(2), m.group(3) or ""))
    return tuple(out)


def arch_span(archs: str) -> str:
    """``sm_75–sm_120``: the compute capabilities ``archs`` runs on, lowest to highest named."""
    parsed = parse_archs(archs)
    low, high = min(a.cc for a in parsed), max(a.cc for a in parsed)
    return f"sm_{low}" if low == high else f"sm_{low}–sm_{high}"


def runs_on(archs: str, major: int, minor: int) -> str:
    """How an engine built for ``archs`` runs on a card of compute capability ``major.minor``:
    ``"native"`` (machine code for it), ``"ptx"`` (the driver compiles PTX for it at first start) or
    ``""`` (it cannot: the card is older than every entry, or only an ``a``/``f`` build of its
    family exists, which runs on that exact card only)."""
    cc = 10 * major + minor
    parsed = parse_archs(archs)
    if any(a.machine_code and a.cc == cc for a in parsed):
        return "native"
    # Machine code of the same major runs on a later minor (sm_86 code on sm_87), but not "a" code.
    if any(a.machine_code and not a.suffix and a.cc // 10 == major and a.cc < cc for a in parsed):
        return "native"
    if any(a.ptx and a.cc <= cc for a in parsed):
        return "ptx"
    return ""


@dataclass(frozen=True)
class Toolchain:
    """Where the compiler and NVIDIA's libraries are for one build."""

    nvcc: Path
    compiler: str  # in words: "this machine's nvcc 13.0 (/usr/local/cuda/bin/nvcc)"
    root: Path  # the wheels' ``nvidia/cu13``: include/, lib/
    wheels: tuple[str, ...]

    @property
    def include(self) -> Path:
        return self.root / "include"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def licence(self) -> Path:
        """NVIDIA's licence as the cuBLAS wheel carries it."""
        site = self.root.parent.parent
        found = sorted(site.glob("nvidia_cublas-*.dist-info/licenses/License.txt"))
        return found[0] if found else site / "missing-License.txt"

    def cmake_args(self, archs: str, stub: Path) -> list[str]:
        """CMake's options for ggml-cuda with this toolchain (module notes)."""
        return [
            "-DGGML_CUDA=ON",
            f"-DCMAKE_CUDA_COMPILER={self.nvcc}",
            f"-DCUDAToolkit_ROOT={self.nvcc.parent.parent}",
            f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
            f"-DCMAKE_CUDA_FLAGS=-I{self.include}",
            f"-DCUDA_cudart_LIBRARY={self.lib / 'libcudart.so'}",
            f"-DCUDA_cublas_LIBRARY={self.lib / 'libcublas.so'}",
            f"-DCUDA_cublasLt_LIBRARY={self.lib / 'libcublasLt.so'}",
            f"-DCUDA_cuda_driver_LIBRARY={stub}",
        ]


def nvidia_driver_present() -> bool:
    """The NVIDIA driver's ``libcuda.so.1`` loads here (what a CUDA build's GPU code needs to run)."""
    return _driver_loads()


@lru_cache(maxsize=1)
def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class CudaSetup:
    """How a CUDA build gets its compiler and libraries: NVIDIA's wheels (``toolchain``, with the link-only
    driver stub ``stub``) or, when None, the CUDA toolkit installed on this machine."""

    archs: str
    toolchain: Toolchain | None = None
    stub: Path | None = None


def cuda_archs(asked: str | None = None) -> str:
    """The architectures a CUDA build carries: ``asked``, else ``$HEADROOM_CUDA_ARCHS``, else the desktop
    list (``DESKTOP_ARCHS``); checked (a ValueError names a malformed entry)."""
    archs = asked or os.environ.get("HEADROOM_CUDA_ARCHS") or ";".join(DESKTOP_ARCHS)
    parse_archs(archs)
    return archs


def place_runtime(bin_dir: Path, toolchain: Toolchain) -> None:
    """NVIDIA's run-time libraries and their licence beside the CUDA module, whose RUNPATH becomes
    ``$ORIGIN``: the engine needs the driver's libcuda.so.1 and nothing else from the machine. Hard links
    where the cache and the build share a disk (cuBLASLt alone is 517 MiB), else copies."""
    for name in RUNTIME_LIBS:
        src = (toolchain.lib / name).resolve()
        dest = bin_dir / name
        dest.unlink(missing_ok=True)
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)
    shutil.copy2(toolchain.licence, bin_dir / LICENCE_NAME)
    module = bin_dir / "libggml-cuda.so"
    if not module.is_file():
        raise RuntimeError(f"the CUDA build finished but {module.name} is missing in {bin_dir}")
    set_runpath(module)


def nvcc_release(nvcc: str | Path) -> tuple[int, int] | None:
    """``(13, 0)`` from ``nvcc --version``; None when it does not run or says no release."""
    try:
        done = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _RELEASE.search(done.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


def machine_nvcc() -> Path | None:
    """This machine's nvcc of release ``CUDA_MAJOR`` that sits in its toolkit (``bin/nvcc`` beside
    ``include/cuda_runtime.h``: CMake takes the toolkit from the compiler's folder): PATH's, else CUDA's
    default folder (a PATH entry may be a wrapper script elsewhere)."""
    for found in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if not found or not os.access(found, os.X_OK):
            continue
        path = Path(found).resolve()
        if not (path.parent.parent / "include" / "cuda_runtime.h").is_file():
            continue
        release = nvcc_release(path)
        if release is not None and release[0] == CUDA_MAJOR:
            return path
    return None


def digest(items: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:8]


def toolchain_dir(wheels: Sequence[str]) -> Path:
    return cache_dir() / "cuda" / f"cu{CUDA_MAJOR}-{digest(wheels)}"


def ensure(python: str = sys.executable, log: Log = print, *, with_compiler: bool | None = None) -> Toolchain:
    """The toolchain, installed once (``pip install --target``, about 0.5 GB from PyPI, most of it
    cuBLASLt). ``with_compiler``: take nvcc from the wheels too (default: only when this machine has
    no nvcc 13). Raises RuntimeError with what to do when it cannot."""
    local = None if with_compiler else machine_nvcc()
    if with_compiler is False and local is None:
        raise RuntimeError(f"no nvcc {CUDA_MAJOR}.x on this machine (PATH or /usr/local/cuda)")
    wheels = RUNTIME_WHEELS + (() if local is not None else COMPILER_WHEELS)
    folder = toolchain_dir(wheels)
    site = folder / "site"
    if not (folder / ".complete").is_file():
        _install(python, wheels, folder, log)
    root = site / "nvidia" / f"cu{CUDA_MAJOR}"
    if local is not None:
        release = nvcc_release(local)
        compiler = f"this machine's nvcc {release[0]}.{release[1]} ({local})" if release else f"nvcc at {local}"
        return Toolchain(local, compiler, root, wheels)
    nvcc = root / "bin" / "nvcc"
    return Toolchain(nvcc, f"nvcc from NVIDIA's wheel {COMPILER_WHEELS[0]}", root, wheels)


def _install(python: str, wheels: Sequence[str], folder: Path, log: Log) -> None:
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"installing NVIDIA's CUDA wheels into {folder} (once; about 0.5 GB): {' '.join(wheels)}")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                           "--target", str(partial / "site"), *wheels], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"pip could not install NVIDIA's CUDA wheels ({' '.join(wheels)}):\n{tail}")
    root = partial / "site" / "nvidia" / f"cu{CUDA_MAJOR}"
    lay_out(root)
    (partial / ".complete").write_text("\n".join(wheels) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def lay_out(root: Path) -> None:
    """Links that make the wheels' ``nvidia/cu13`` a toolkit CMake and nvcc accept: unversioned library
    names, ``lib64``, and ``targets/x86_64-linux/{include,lib}`` for the wheel's ``nvcc.profile``."""
    lib = root / "lib"
    for versioned in lib.glob("lib*.so.*"):
        plain = lib / (versioned.name.split(".so.", 1)[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
    if not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
    target = root / "targets" / "x86_64-linux"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("include", "lib"):
        if not (target / name).exists():
            (target / name).symlink_to(Path("..", "..", name))


def driver_symbols(cuda_sources: Path, cuda_h: Path) -> tuple[str, ...]:
    """The driver functions ggml-cuda's sources (``cuda_sources``, ggml/src/ggml-cuda) call, under the
    names the objects will reference (cuda.h's ``_v2`` renames applied), sorted."""
    header = cuda_h.read_text(errors="replace")
    declared = set(_DECLARED.findall(header))
    renamed = dict(_VERSIONED.findall(header))
    called: set[str] = set()
    for path in sorted(cuda_sources.rglob("*")):
        if path.suffix in (".cu", ".cuh", ".h", ".cpp") and path.is_file():
            called.update(_CALLED.findall(path.read_text(errors="replace")))
    names = {renamed.get(n, n) for n in called if n in declared or n in renamed}
    return tuple(sorted(names))


def driver_stub(dest: Path, symbols: Sequence[str], cc: str = "cc") -> Path:
    """Compile the link-only ``dest/libcuda.so`` (SONAME ``libcuda.so.1``) that defines ``symbols``; the
    objects record ``libcuda.so.1`` and find the driver's at run time. Returns its path."""
    if not symbols:
        raise RuntimeError("found no driver function in ggml-cuda's sources: the stub would link nothing")
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "libcuda-stub.c"
    body = "".join(f"int {name}(void) {{ return 999; }}\n" for name in symbols)  # CUDA_ERROR_UNKNOWN
    src.write_text("/* Link-only stand-in for the NVIDIA driver's libcuda.so.1 (app/engine/cuda_toolchain.py):\n"
                   "   never loaded; every function fails. */\n" + body)
    out = dest / "libcuda.so"
    compiler = shutil.which(cc) or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc) to build the link-only libcuda stub: apt-get install gcc")
    subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)], check=True)
    return out
