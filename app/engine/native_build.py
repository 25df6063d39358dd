"""Build the stock engine from the llama.cpp tree vendored in llama-cpp-python's sdist.

Standard library only: ``native/build.sh`` runs this file before any virtual environment
exists, and ``headroom engine build`` imports it.

Before the build, Headroom's patch series (``native/patches/NNNN-name.patch``, docs/engine-patches.md;
app/engine/engine_patches.py) is applied in name order to a copy of the tree,
``~/.cache/headroom/src/llama.cpp-<commit9>-p<series8>`` (the extracted sdist stays pristine). The
result lives under the user cache directory, keyed by llama.cpp commit, backend and the series'
digest, so a changed patch builds again::

    ~/.cache/headroom/engines/llama.cpp-<commit9>-<backend>-p<series8>/build/bin/{llama-server,...,libllama.so}

Two kinds of CPU code (docs/domain.md §11, docs/engines.md "Which CPUs"):

- **native** (the default, ``./dev``): ``-march=native`` for this machine's CPU, but never ggml's AMX
  code (``NO_AMX_FLAGS``): built with GCC 12 it crashes at its first matrix product (docs/domain.md
  §11). Keyed by a digest of this CPU's flags (``cpu_key``), so a cache moved to another machine is
  never used there: ``llama.cpp-<commit9>-<backend>-native-<cpu8>-p<series8>``.
- **portable** (``--portable``, what a bundle ships): ``GGML_NATIVE=OFF`` with ``GGML_BACKEND_DL`` and one
  ``libggml-cpu-<variant>.so`` per instruction set in ``PORTABLE_CPU_VARIANTS`` (patch 0004), chosen at
  run time by CPUID; none of them has AMX. ``llama.cpp-<commit9>-<backend>-portable-p<series8>``.

``--unpatched`` builds the vendored tree as it is, under the key without ``-p<series8>`` (what the
tests that show each patch's bug run against, when that build is there).

``--source DIR`` (or ``HEADROOM_LLAMA_SRC``) builds from an already-extracted llama.cpp tree
instead, e.g. the trimmed tree ``bench/h200/prepare.sh`` packs for a machine without internet; its
commit is read from the ``COMMIT_FILE`` beside ``CMakeLists.txt`` and handed to CMake, since such a
tree has no git metadata for ``--version`` to name.

The same build provides ``libllama.so`` for llama-cpp-python (installed with
``-DLLAMA_BUILD=OFF`` and pointed here through ``LLAMA_CPP_LIB_PATH``), so llama.cpp is
compiled once.

A bundle (packaging/build_bundle.py) carries a copy of a build beside its executable,
``<bundle>/engine/{build.json,build/bin/...}``, its stamp's ``bin_dir`` relative to the stamp:
``find_build`` falls back to it when the user's cache has no build.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.engine import cuda_toolchain
from app.engine.cuda_toolchain import DESKTOP_ARCHS, CudaSetup, cuda_archs, nvidia_driver_present, parse_archs
from app.engine.engine_patches import UNPATCHED, PatchSeries, engine_label, patch_series, patched_source
from app.paths import bundle_dir, cache_dir
from app.planner.devices import Backend

#: The llama-cpp-python release Headroom pins (pyproject.toml says the same).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"

#: Targets built: the server, the fit tool, the RPC server, the library llama-cpp-python loads
#: (``llama`` + ``mtmd``) and the batched bench used by the shared-sequence repro (docs/domain.md §5).
TARGETS = ("llama-server", "llama-fit-params", "ggml-rpc-server", "llama", "mtmd", "llama-batched-bench")
BINARIES = ("llama-server", "llama-fit-params", "ggml-rpc-server")
#: The file a trimmed tree carries its llama.cpp commit in (40 hex digits, one line).
COMMIT_FILE = "HEADROOM_LLAMA_COMMIT"
#: The build number the sdist's shallow git gives (``rev-list --count HEAD`` = 1), so a tree
#: built from ``--source`` prints the same ``--version`` line as one built from the sdist.
SDIST_BUILD_NUMBER = 1
#: The folder of a bundle that holds its copy of the engine (packaging/build_bundle.py).
BUNDLE_ENGINE_DIR = "engine"
#: What a native x86 build leaves out of ``-march=native``: ggml's AMX code (``ggml-cpu/amx``, the ``AMX``
#: weight buffer) compiles only with ``__AMX_INT8__``, and built with GCC 12 it loads a tile configuration
#: the compiler left partly unwritten: SIGSEGV or SIGILL at warm-up (docs/domain.md §11). GCC lets an explicit
#: ``-mno-*`` win over ``-march=native`` whatever their order.
NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
#: The CPU variants a portable build carries (ggml/src/CMakeLists.txt's x86 list, patch 0004), from the
#: baseline up; the engine loads the best one this CPU runs. Left out: sapphirerapids (AMX), and
#: sse42/sandybridge/ivybridge/piledriver/cannonlake/cascadelake/cooperlake, whose CPUs run the next one
#: down (x64, haswell, skylakex) at little cost: each variant compiles the CPU backend again.
PORTABLE_CPU_VARIANTS = ("x64", "haswell", "alderlake", "skylakex", "icelake", "zen4")
#: ``EngineBuild.cpu`` of a portable build; a native one's is ``native-<cpu8>``.
PORTABLE = "portable"


@dataclass(frozen=True)
class EngineBuild:
    """What a finished build is: where, which llama.cpp, which backend, how long it took, and which
    of Headroom's patches it carries (names, the series digest, the upstream fixes they port)."""

    commit: str
    backend: Backend  # CPU or CUDA; its slug ("cpu", "cuda") names the build's folder
    backend_reason: str
    bin_dir: str
    seconds: float
    patches: tuple[str, ...] = ()
    series: str = ""
    fixes: tuple[str, ...] = ()
    #: ``native-<cpu8>`` (built for the CPU whose flags digest to ``cpu8``) or ``portable``; ``""``: a
    #: build from before Headroom recorded it (treated as native for an unknown CPU: never found).
    cpu: str = ""
    #: A CUDA build's GPU code (CMAKE_CUDA_ARCHITECTURES, ``75-virtual;86-real;...``) and NVIDIA's
    #: libraries beside it (``cuda 13.0, nvidia-cublas==13.1.0.3 ...``); ``""`` for a CPU build.
    cuda_archs: str = ""
    cuda_libs: str = ""

    @property
    def portable(self) -> bool:
        return self.cpu == PORTABLE

    def to_json(self) -> dict[str, Any]:
        """The ``build.json`` stamp: the backend by its slug, as every stamp has carried it."""
        return asdict(self) | {"backend": self.backend.slug}

    @property
    def label(self) -> str:
        return engine_label(self.commit, self.patches)

    @property
    def server(self) -> Path:
        return Path(self.bin_dir) / "llama-server"

    @property
    def fit_params(self) -> Path:
        return Path(self.bin_dir) / "llama-fit-params"


def _log(msg: str) -> None:
    print(f"[engine-build] {msg}", flush=True)


def sdist_path(python: str = sys.executable) -> Path:
    """The pinned sdist, downloaded once into the cache."""
    dest = cache_dir() / "sdist"
    tarball = dest / f"{SDIST_NAME}.tar.gz"
    if tarball.is_file():
        return tarball
    dest.mkdir(parents=True, exist_ok=True)
    _log(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist (76 MB, once)")
    subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(dest)],
        check=True,
    )
    if not tarball.is_file():
        raise RuntimeError(f"pip download did not produce {tarball}")
    return tarball


def source_tree(python: str = sys.executable) -> Path:
    """The extracted sdist (with its git metadata, so ``--version`` names the commit)."""
    root = cache_dir() / "src" / SDIST_NAME
    if (root / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        return root
    tarball = sdist_path(python)
    tmp = root.parent / f".{SDIST_NAME}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _log(f"extracting {tarball.name}")
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp, filter="tar")
    shutil.rmtree(root, ignore_errors=True)
    (tmp / SDIST_NAME).rename(root)
    shutil.rmtree(tmp, ignore_errors=True)
    return root


def vendored_commit(tree: Path) -> str:
    """The llama.cpp commit the sdist vendors, read from its submodule git metadata."""
    head = tree / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    try:
        text = head.read_text().strip()
    except OSError:
        return "unknown"
    return text[:40] if len(text) >= 9 and not text.startswith("ref:") else "unknown"


def source_commit(src: Path) -> str:
    """The commit a trimmed llama.cpp tree names in its ``COMMIT_FILE``, else ``"unknown"``."""
    try:
        text = (src / COMMIT_FILE).read_text().strip()
    except OSError:
        return "unknown"
    ok = 9 <= len(text) <= 40 and all(c in "0123456789abcdef" for c in text)
    return text if ok else "unknown"


def llama_source(source: Path | None, python: str = sys.executable) -> tuple[Path, str]:
    """The llama.cpp tree to build and its commit: ``source`` (or ``$HEADROOM_LLAMA_SRC``) when
    given, else the tree vendored in the pinned sdist (downloaded and extracted once)."""
    chosen = source or (Path(os.environ["HEADROOM_LLAMA_SRC"]) if os.environ.get("HEADROOM_LLAMA_SRC") else None)
    if chosen is None:
        tree = source_tree(python)
        return tree / "vendor" / "llama.cpp", vendored_commit(tree)
    if not (chosen / "CMakeLists.txt").is_file() or not (chosen / "ggml").is_dir():
        raise RuntimeError(f"{chosen} is not a llama.cpp source tree (no CMakeLists.txt and ggml/)")
    return chosen, source_commit(chosen)


def find_nvcc() -> str | None:
    """nvcc on PATH, else CUDA's default install location."""
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )


def detect_backend() -> tuple[Backend, str]:
    """``(Backend.CUDA, why)`` when nvcc and cuBLAS are both present, else ``(Backend.CPU, why)``."""
    if os.environ.get("HEADROOM_ENGINE_BACKEND") == "cpu":
        return Backend.CPU, "CPU forced by HEADROOM_ENGINE_BACKEND=cpu"
    nvcc = find_nvcc()
    if nvcc is None:
        return Backend.CPU, "CUDA off: nvcc not found"
    cuda_root = Path(nvcc).resolve().parent.parent
    patterns = [
        str(cuda_root / "lib64" / "libcublas.so*"),
        str(cuda_root / "targets" / "*" / "lib" / "libcublas.so*"),
        "/usr/lib/x86_64-linux-gnu/libcublas.so*",
        "/usr/lib/aarch64-linux-gnu/libcublas.so*",
    ]
    if not any(glob.glob(p) for p in patterns):
        return Backend.CPU, f"CUDA off: nvcc found at {nvcc} but no cuBLAS (libcublas.so) next to it"
    return Backend.CUDA, f"CUDA on: nvcc at {nvcc} and cuBLAS found"


def cpu_key(cpuinfo: str | None = None) -> str:
    """``native-<8 hex>``: a digest of this CPU's vendor, model and feature flags (the first CPU in
    /proc/cpuinfo, or ``cpuinfo``), what a native build is built for and found by."""
    if cpuinfo is None:
        return _this_cpu_key()
    first = cpuinfo.split("\n\n", 1)[0]
    fields = {}
    for line in first.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    flags = " ".join(sorted((fields.get("flags") or fields.get("Features") or "").split()))
    ident = "\n".join((fields.get("vendor_id", ""), fields.get("cpu family", ""), fields.get("model", ""),
                       platform.machine(), flags))
    return "native-" + hashlib.sha256(ident.encode()).hexdigest()[:8]


@lru_cache(maxsize=1)
def _this_cpu_key() -> str:
    """``cpu_key`` of this machine, read once (``find_build`` asks on every lookup)."""
    try:
        return cpu_key(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return cpu_key("")


def gpu_key(archs: str) -> str:
    """``sm75v.86.89.120a``: a CUDA build's architectures in its folder's name (``v``: PTX only)."""
    return "sm" + ".".join(f"{a.cc}{a.suffix}{'v' if a.kind == 'virtual' else ''}" for a in parse_archs(archs))


def build_dir(commit: str, backend: Backend, series: PatchSeries = UNPATCHED, cpu: str = "",
              cuda_archs: str = "") -> Path:
    """``llama.cpp-<commit9>-<backend slug>[-<sm…>][-<cpu>][-p<series8>]`` under the cache."""
    middle = (f"-{gpu_key(cuda_archs)}" if cuda_archs else "") + (f"-{cpu}" if cpu else "")
    suffix = f"-p{series.digest}" if series.patches else ""
    return cache_dir() / "engines" / f"llama.cpp-{commit[:9]}-{backend.slug}{middle}{suffix}"


def _read_stamp(stamp: Path) -> EngineBuild | None:
    """The build a ``build.json`` describes; a relative ``bin_dir`` (a bundle's copy) is taken from
    the stamp's folder."""
    try:
        data = json.loads(stamp.read_text())
        for key in ("patches", "fixes"):
            data[key] = tuple(data.get(key, ()))
        data["bin_dir"] = str(stamp.parent / data["bin_dir"])  # an absolute bin_dir stays as it is
        data["backend"] = Backend(data["backend"])  # "cuda" in the stamp
        return EngineBuild(**data)
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def build_of(server: Path) -> EngineBuild | None:
    """The Headroom build this ``llama-server`` (or a link to it) belongs to (its ``build.json``, any
    series), or None: a copy elsewhere is just a llama-server."""
    server = server.resolve()
    stamp = server.parent.parent.parent / "build.json"  # <out>/build/bin/llama-server -> <out>/build.json
    build = _read_stamp(stamp)
    if build is None or not build.server.is_file() or build.server.resolve() != server:
        return None
    return build


def bundled_build() -> EngineBuild | None:
    """The engine the bundle Headroom runs from carries (``<bundle>/engine``), or None (a checkout,
    or a bundle made without an engine)."""
    root = bundle_dir()
    if root is None:
        return None
    build = _read_stamp(root / BUNDLE_ENGINE_DIR / "build.json")
    return build if build is not None and build.server.is_file() else None


def find_build(backend: Backend | None = None, series: PatchSeries | None = None, *,
               bundled: bool = True, portable: bool = False) -> EngineBuild | None:
    """A finished build of ``series`` (default: Headroom's current patch series) in the cache that runs
    on this CPU: a native one built for it (a cache copied from another machine is skipped) or a
    portable one; the CUDA one preferred where the NVIDIA driver is installed (else last), then native. ``portable``: only a portable build. Else
    (``bundled``) the bundle's own engine of that series, or None. Never builds.
    ``series=UNPATCHED``: the vendored tree as it is."""
    want = (series if series is not None else patch_series()).digest
    here = cpu_key()
    root = cache_dir() / "engines"
    candidates = sorted(root.glob("llama.cpp-*/build.json"))
    builds: list[EngineBuild] = []
    for stamp in candidates:
        build = _read_stamp(stamp)
        if build is None or build.series != want or build.cpu not in ((PORTABLE,) if portable else (here, PORTABLE)):
            continue
        if build.server.is_file() and (backend is None or build.backend == backend):
            builds.append(build)
    gpu = nvidia_driver_present()  # without a driver a CUDA build runs on its CPU code: the CPU build first
    builds.sort(key=lambda b: ((b.backend is not Backend.CUDA) == gpu, b.portable, b.commit))
    if builds:
        return builds[0]
    shipped = bundled_build() if bundled else None
    if shipped is not None and shipped.series == want and backend in (None, shipped.backend):
        return shipped
    return None


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def cpu_args(portable: bool, x86: bool | None = None) -> list[str]:
    """The CMake options that choose the CPU code (module notes): native without AMX, or portable."""
    x86 = is_x86() if x86 is None else x86
    if portable:
        args = ["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
        return args + ([f"-DGGML_CPU_VARIANTS={';'.join(PORTABLE_CPU_VARIANTS)}"] if x86 else [])
    args = ["-DGGML_NATIVE=ON"]
    if x86:
        flags = " ".join(NO_AMX_FLAGS)
        args += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    return args


def cmake_args(backend: Backend, commit: str | None = None, portable: bool = False,
               cuda: CudaSetup | None = None) -> list[str]:
    """CMake's options. A known ``commit`` is passed as the build info, so ``llama-server --version``
    names it also for a tree without git metadata (llama.cpp CMakeLists.txt: LLAMA_BUILD_COMMIT/NUMBER).
    A CUDA build loads its backends at run time (``GGML_BACKEND_DL``): without a driver, or on a card it
    has no code for, the same engine runs on its CPU code."""
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # offline: no web UI download
        "-DLLAMA_OPENSSL=OFF",  # loopback serving needs no TLS
        "-DGGML_RPC=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
        *cpu_args(portable),
    ]
    if commit and commit != "unknown":
        args += [f"-DLLAMA_BUILD_COMMIT={commit[:7]}", f"-DLLAMA_BUILD_NUMBER={SDIST_BUILD_NUMBER}"]
    if backend is Backend.CUDA:
        setup = cuda if cuda is not None else CudaSetup(cuda_archs())
        if not portable:
            args.append("-DGGML_BACKEND_DL=ON")
        if setup.toolchain is not None and setup.stub is not None:
            args += setup.toolchain.cmake_args(setup.archs, setup.stub)
        else:
            args.append("-DGGML_CUDA=ON")
            nvcc = find_nvcc()
            if nvcc and not shutil.which("nvcc"):  # CMake finds nvcc on PATH only
                args.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={setup.archs}")
        args.append("-DGGML_CUDA_FA_ALL_QUANTS=OFF")
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    return args


def _choose_backend(asked: Backend | None, python: str, archs: str) -> tuple[Backend, str, CudaSetup | None]:
    """The backend to build, why, and for CUDA where its toolchain comes from: ``asked`` CUDA takes this
    machine's toolkit when it has cuBLAS, else NVIDIA's wheels (installed once); None: detect."""
    found, reason = detect_backend()
    if asked is None:
        return found, reason, CudaSetup(archs) if found is Backend.CUDA else None
    if asked is Backend.CPU:
        return Backend.CPU, "CPU: asked for (--backend cpu)", None
    if found is Backend.CUDA:
        return Backend.CUDA, reason, CudaSetup(archs)
    toolchain = cuda_toolchain.ensure(python, _log)
    return (Backend.CUDA, f"CUDA on: {toolchain.compiler}; cuBLAS and the CUDA runtime from NVIDIA's wheels "
            f"({', '.join(cuda_toolchain.RUNTIME_WHEELS)})", CudaSetup(archs, toolchain))


def build(python: str = sys.executable, jobs: int | None = None, source: Path | None = None,
          series: PatchSeries | None = None, portable: bool = False, backend: Backend | None = None,
          archs: str | None = None) -> EngineBuild:
    """Build (or find in the cache) the engine: the vendored llama.cpp with ``series`` applied
    (default: Headroom's patch series), native for this CPU or ``portable``; ``backend`` CUDA or CPU
    (default: CUDA when this machine has nvcc and cuBLAS), a CUDA one for ``archs`` (``cuda_archs``).
    Returns where it is."""
    started = time.monotonic()
    series = series if series is not None else patch_series()
    src, commit = llama_source(source, python)
    want_archs = cuda_archs(archs)
    cpu = PORTABLE if portable else cpu_key()
    cached = None  # an asked-for backend's build, known before any wheel is installed
    if backend is not None:
        cached = _read_stamp(build_dir(commit, backend, series, cpu, want_archs if backend is Backend.CUDA else "")
                             / "build.json")
    if cached is not None and cached.server.is_file() and cached.series == series.digest and cached.cpu == cpu:
        _log(f"cache hit: {cached.bin_dir} ({cached.label}, {cached.backend.slug}), nothing to do")
        return cached
    chosen, reason, cuda = _choose_backend(backend, python, want_archs)
    _log(reason)
    _log(f"CPU code: {'portable, chosen at run time from ' + ', '.join(PORTABLE_CPU_VARIANTS) if portable else 'native for this CPU (' + cpu + '), without AMX'}")
    out = build_dir(commit, chosen, series, cpu, cuda.archs if cuda else "")
    stamp = out / "build.json"
    cached = _read_stamp(stamp)
    if cached is not None and cached.server.is_file() and cached.series == series.digest and cached.cpu == cpu:
        _log(f"cache hit: {out} ({cached.label}, {chosen.slug}), nothing to do")
        return cached
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake not found: install it (apt-get install cmake) to build the engine")
    if series.patches:
        src = patched_source(src, commit, series, _log)
    if cuda is not None:
        _log(f"GPU code: {cuda.archs} ({cuda_toolchain.arch_span(cuda.archs)}; docs/engines.md, \"The CUDA engine\": "
             "about 30 CPU-minutes per architecture)")
        if cuda.toolchain is not None:
            symbols = cuda_toolchain.driver_symbols(src / "ggml" / "src" / "ggml-cuda", cuda.toolchain.include / "cuda.h")
            cuda = replace(cuda, stub=cuda_toolchain.driver_stub(out / "cuda-stub", symbols))
            _log(f"link-only driver stub: {len(symbols)} functions ({', '.join(symbols)})")
    bdir = out / "build"
    bdir.mkdir(parents=True, exist_ok=True)
    _log(f"configuring {engine_label(commit, series.names)} ({chosen.slug}) from {src} in {bdir}")
    subprocess.run(["cmake", "-S", str(src), "-B", str(bdir), *cmake_args(chosen, commit, portable, cuda)], check=True)
    n = jobs or os.cpu_count() or 2
    _log(f"building {', '.join(TARGETS)} with {n} jobs")
    subprocess.run(
        ["cmake", "--build", str(bdir), "--config", "Release", "-j", str(n), "--target", *TARGETS],
        check=True,
    )
    for name in BINARIES:
        if not (bdir / "bin" / name).is_file():
            raise RuntimeError(f"build finished but {name} is missing in {bdir / 'bin'}")
    libs = ""
    if cuda is not None and cuda.toolchain is not None:
        cuda_toolchain.place_runtime(bdir / "bin", cuda.toolchain)
        libs = f"CUDA {cuda_toolchain.CUDA_MAJOR} from NVIDIA's wheels: {', '.join(cuda.toolchain.wheels[:2])}"
    elif cuda is not None:
        libs = "this machine's CUDA toolkit"
    result = EngineBuild(commit, chosen, reason, str(bdir / "bin"), round(time.monotonic() - started, 1),
                         series.names, series.digest, series.fixes, cpu, cuda.archs if cuda else "", libs)
    stamp.write_text(json.dumps(result.to_json(), indent=2))
    _log(f"done in {result.seconds:.0f} s: {result.bin_dir}")
    return result


def install_bindings(python: str, build_info: EngineBuild) -> None:
    """Install llama-cpp-python's Python code from the same sdist without compiling llama.cpp again.

    ``-DLLAMA_BUILD=OFF`` skips the library build; at run time Headroom sets
    ``LLAMA_CPP_LIB_PATH`` to the engine build's ``bin`` directory (app/engine/libpath.py).
    """
    tarball = sdist_path(python)
    env = dict(os.environ, CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF")
    _log("installing llama-cpp-python bindings (no compile; libraries from the engine build)")
    subprocess.run([python, "-m", "pip", "install", "-q", str(tarball)], check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter whose pip downloads/installs")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--bindings", action="store_true", help="also install llama-cpp-python into --python")
    parser.add_argument("--print-bin-dir", action="store_true")
    parser.add_argument("--source", type=Path, default=None,
                        help="an extracted llama.cpp tree to build instead of the sdist's (or $HEADROOM_LLAMA_SRC)")
    parser.add_argument("--portable", action="store_true",
                        help="CPU code for any x86-64 CPU, chosen at run time (what a bundle ships), not -march=native")
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto",
                        help="cuda: GPU code for NVIDIA cards, on a machine without a GPU too (the compiler from "
                             "this machine or NVIDIA's wheels, cuBLAS and the runtime from NVIDIA's wheels); "
                             "auto: CUDA when this machine has nvcc and cuBLAS")
    parser.add_argument("--cuda-archs", default=None,
                        help=f"CMAKE_CUDA_ARCHITECTURES of a CUDA build (default {';'.join(DESKTOP_ARCHS)}, "
                             "or $HEADROOM_CUDA_ARCHS)")
    parser.add_argument("--cuda-check", action="store_true",
                        help="only compile the CUDA files Headroom's patches touch, for one architecture (what CI "
                             "runs: app/engine/cuda_check.py); no engine is built")
    parser.add_argument("--unpatched", action="store_true",
                        help="build the vendored tree without Headroom's patches (to show what they fix)")
    args = parser.parse_args(argv)
    if args.cuda_check:
        return _cuda_check(args.python, args.source)
    try:
        backend = {"auto": None, "cpu": Backend.CPU, "cuda": Backend.CUDA}[args.backend]
        info = build(args.python, args.jobs, args.source, UNPATCHED if args.unpatched else None,
                     args.portable or bool(os.environ.get("HEADROOM_PORTABLE")), backend, args.cuda_archs)
        if args.bindings:
            install_bindings(args.python, info)
    except (RuntimeError, OSError, ValueError, subprocess.CalledProcessError) as exc:
        print(f"[engine-build] failed: {exc}", file=sys.stderr)
        return 1
    if args.print_bin_dir:
        print(info.bin_dir)
    return 0


def _cuda_check(python: str, source: Path | None) -> int:
    from app.engine import cuda_check  # (it builds on this module)

    try:
        src, commit = llama_source(source, python)
        result = cuda_check.check(src, commit, python=python, log=_log)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"[engine-build] CUDA compile check could not run: {exc}", file=sys.stderr)
        return 1
    how = "cached: this series compiled before" if result.cached else f"{result.seconds:.0f} s"
    if result.ok:
        _log(f"CUDA compile check passed: {', '.join(result.units) or 'no CUDA file patched'} for "
             f"sm_{result.arch} ({how}; {result.compiler})")
        return 0
    print(f"[engine-build] CUDA compile check FAILED: {', '.join(result.units)} for sm_{result.arch}:\n"
          f"{result.errors}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
