"""Build Headroom's one-folder bundle and its tarball: ``./dev bundle`` (docs/packaging.md).

Steps, each timed:

1. PyInstaller runs packaging/headroom.spec: ``dist/headroom/headroom`` and ``dist/headroom/_internal``.
2. The portable engine (``native/build.py --portable``: no ``-march=native``, one
   ``libggml-cpu-<variant>.so`` per instruction set, chosen at run time by CPUID, none with AMX; built
   here first when the cache has none) is copied beside the executable:
   ``dist/headroom/engine/build/bin/{llama-server,llama-fit-params,ggml-rpc-server,llama-batched-bench,lib*.so*}`` and
   ``engine/build.json`` with a relative ``bin_dir``. CMake linked the binaries with the build folder as
   RUNPATH; each copy's RUNPATH becomes ``$ORIGIN``, so the engine runs wherever the bundle is unpacked.
   A native build is never shipped: it carries the build machine's instruction set (docs/engines.md, "Which CPUs").
3. The desktop files (resources/: entry, icons, GGUF MIME type) and the two install scripts go in:
   ``install.sh`` (packaging/install-bundle.sh) and ``install-desktop.sh``.
4. ``dist/headroom-<version>-linux-<machine>.tar.gz`` is packed, and ``dist/bundle-report.json``
   says the sizes and the times (bench/bench_bundle.py reads it).

Run with the checkout's venv (``./dev bundle`` installs PyInstaller into it first):
``.venv/bin/python packaging/build_bundle.py [--dist DIR] [--no-engine] [--no-tarball]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from app.engine import cuda_toolchain, native_build  # noqa: E402
from app.engine.elf import set_runpath  # noqa: E402

SPEC = ROOT / "packaging" / "headroom.spec"
NAME = "headroom"
#: What the bundle's engine folder keeps of a build's bin/: the binaries Headroom runs and the
#: libraries they (and llama-cpp-python) load. The batched bench (60 KB with its library) times this
#: CPU's attention for the speed model (app/engine/attention_runs.py): without it a bundle's speeds
#: for a CPU-held KV are priced at memory bandwidth, never calibrated.
ENGINE_BINARIES = (*native_build.BINARIES, "llama-batched-bench")
SKIP_LIBS: tuple[str, ...] = ()


def _log(msg: str) -> None:
    print(f"[bundle] {msg}", flush=True)


def _engine_files(bin_dir: Path) -> Iterator[Path]:
    for name in ENGINE_BINARIES:
        yield bin_dir / name
    for lib in sorted(bin_dir.glob("lib*.so*")):
        if lib.name not in SKIP_LIBS:
            yield lib
    licence = bin_dir / cuda_toolchain.LICENCE_NAME  # a CUDA build: NVIDIA's notice for its libraries
    if licence.is_file():
        yield licence


def place_engine(build: native_build.EngineBuild, dest: Path) -> native_build.EngineBuild:
    """Copy ``build`` into ``dest`` (a bundle's ``engine`` folder) with ``$ORIGIN`` RUNPATHs and a
    stamp whose ``bin_dir`` is relative; returns the copy as ``native_build`` reads it."""
    shutil.rmtree(dest, ignore_errors=True)
    bin_dir = dest / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for src in _engine_files(Path(build.bin_dir)):
        target = bin_dir / src.name
        if src.is_symlink():  # libllama.so -> libllama.so.0 -> libllama.so.0.5.0: kept as links
            target.symlink_to(os.readlink(src))
            continue
        shutil.copy2(src, target)
        if src.name not in cuda_toolchain.RUNTIME_LIBS:  # (NVIDIA's carry RUNPATH $ORIGIN already)
            set_runpath(target)
    stamp = replace(build, bin_dir=str(bin_dir.relative_to(dest)))
    (dest / "build.json").write_text(json.dumps(stamp.to_json(), indent=2))
    copy = native_build._read_stamp(dest / "build.json")
    assert copy is not None
    return copy


def add_desktop_files(bundle: Path) -> None:
    res = bundle / "resources"
    res.mkdir(exist_ok=True)
    for name in ("headroom.desktop", "headroom.svg", "gguf-mime.xml"):
        shutil.copy2(ROOT / "resources" / name, res / name)
    shutil.copytree(ROOT / "resources" / "icons", res / "icons", dirs_exist_ok=True)
    shutil.copy2(ROOT / "packaging" / "install-bundle.sh", bundle / "install.sh")
    shutil.copy2(ROOT / "packaging" / "install-desktop.sh", bundle / "install-desktop.sh")


def folder_size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def pack(bundle: Path, tarball: Path, level: int = 6) -> None:
    tmp = tarball.with_name(tarball.name + ".partial")
    with tarfile.open(tmp, "w:gz", compresslevel=level) as tf:
        tf.add(bundle, arcname=bundle.name)
    tmp.replace(tarball)


def run_pyinstaller(dist: Path, work: Path) -> None:
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        raise SystemExit("[bundle] PyInstaller is not installed in this venv: run ./dev bundle "
                         "(it installs .[bundle]), or pip install -e '.[bundle]'") from None
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work), str(SPEC)], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the bundle and tarball go")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's work folder")
    parser.add_argument("--no-engine", action="store_true",
                        help="leave the engine out (else the portable engine goes in, built first when missing)")
    parser.add_argument("--cuda", action="store_true",
                        help="the CUDA engine instead (native/build.py --backend cuda --portable, built first when "
                             "missing: hours on 2 cores): headroom-<version>-linux-<machine>-cuda13.tar.gz, with "
                             "NVIDIA's run-time libraries and their licence inside")
    parser.add_argument("--no-tarball", action="store_true", help="only the folder")
    parser.add_argument("--compresslevel", type=int, default=6, choices=range(1, 10), metavar="1-9",
                        help="gzip level of the tarball (6: 97 MiB; tests/bundle uses 1: 106 MiB, 3x faster)")
    args = parser.parse_args(argv)
    dist: Path = args.dist.resolve()
    times: dict[str, float] = {}
    t0 = time.monotonic()
    _log(f"PyInstaller: {SPEC.relative_to(ROOT)} -> {dist / NAME}")
    run_pyinstaller(dist, args.work.resolve())
    times["pyinstaller_s"] = round(time.monotonic() - t0, 1)
    bundle = dist / NAME
    t = time.monotonic()
    build = None
    if not args.no_engine:
        backend = native_build.Backend.CUDA if args.cuda else native_build.Backend.CPU
        build = native_build.find_build(backend, bundled=False, portable=True)
        if build is None or (args.cuda and build.cuda_archs != native_build.cuda_archs()):
            _log(f"engine: building the portable {backend.slug} engine first (native/build.py --portable"
                 f"{' --backend cuda' if args.cuda else ''})")
            build = native_build.build(portable=True, backend=backend)
        times["engine_build_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    if build is not None:
        copy = place_engine(build, bundle / native_build.BUNDLE_ENGINE_DIR)
        _log(f"engine: {build.label} ({build.backend.slug}, {build.cpu}) from {build.bin_dir}, RUNPATH $ORIGIN")
        engine = {"label": copy.label, "backend": copy.backend.slug, "cpu": copy.cpu, "from": build.bin_dir,
                  "cuda_archs": copy.cuda_archs, "cuda_libs": copy.cuda_libs}
    else:
        _log("engine: left out (--no-engine); the bundle will look for one, or build one, at first run")
        engine = None
    add_desktop_files(bundle)
    times["engine_and_files_s"] = round(time.monotonic() - t, 1)
    report: dict[str, object] = {
        "version": __version__, "bundle": str(bundle), "bundle_bytes": folder_size(bundle),
        "engine": engine, "python": platform.python_version(), "machine": platform.machine(),
    }
    if not args.no_tarball:
        t = time.monotonic()
        flavour = f"-cuda{cuda_toolchain.CUDA_MAJOR}" if args.cuda else ""
        tarball = dist / f"{NAME}-{__version__}-linux-{platform.machine()}{flavour}.tar.gz"
        pack(bundle, tarball, args.compresslevel)
        times["tarball_s"] = round(time.monotonic() - t, 1)
        report |= {"tarball": str(tarball), "tarball_bytes": tarball.stat().st_size}
    times["total_s"] = round(time.monotonic() - t0, 1)
    report["times"] = times
    (dist / "bundle-report.json").write_text(json.dumps(report, indent=2))
    mib = 1024 * 1024
    packed = f", {tarball} ({tarball.stat().st_size // mib} MiB)" if not args.no_tarball else ""
    _log(f"done in {times['total_s']:.0f} s: {bundle} ({folder_size(bundle) // mib} MiB){packed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
