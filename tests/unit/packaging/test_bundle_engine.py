"""The engine a bundle carries (packaging/build_bundle.py ``place_engine``): a copy that runs from
wherever the bundle is unpacked, and that a bundle with an empty user cache finds, probes and hands
to pass 1."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from app import paths
from app.engine import native_build
from app.engine.discover import EngineOrigin, candidates, discover_engines
from app.engine.libpath import ensure_llama_cpp_lib

ROOT = Path(__file__).resolve().parents[3]


def _build_bundle_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_bundle", ROOT / "packaging" / "build_bundle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bb = _build_bundle_module()


def _runpath(binary: Path) -> str:
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if "RUNPATH" in ln or "RPATH" in ln)
    return line.split("[", 1)[1].rstrip("]")


@pytest.fixture(scope="module")
def bundle(engine_build: native_build.EngineBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out like a bundle: its executable's name and the engine beside it."""
    root = tmp_path_factory.mktemp("bundle") / "headroom"
    root.mkdir()
    (root / "headroom").write_text("")  # sys.executable of a bundle; never run here
    bb.place_engine(engine_build, root / native_build.BUNDLE_ENGINE_DIR)
    return root


def test_the_copy_loads_its_libraries_from_beside_itself(bundle: Path, engine_build: native_build.EngineBuild) -> None:
    assert _runpath(Path(engine_build.server)).startswith(str(Path.home()))  # CMake's: the build folder
    bin_dir = bundle / "engine" / "build" / "bin"
    for name in ("llama-server", "llama-fit-params", "ggml-rpc-server", "llama-batched-bench", "libllama.so.0.5.0",
                 "libllama-server-impl.so"):
        assert _runpath(bin_dir / name) == "$ORIGIN"
    ldd = subprocess.run(["ldd", str(bin_dir / "llama-server")], capture_output=True, text=True, check=True).stdout
    assert f"libllama-server-impl.so => {bin_dir}/libllama-server-impl.so" in ldd
    assert (bin_dir / "libllama.so").is_symlink()
    bench = subprocess.run(["ldd", str(bin_dir / "llama-batched-bench")], capture_output=True, text=True,
                           check=True).stdout  # the doctor's CPU-attention timer: its library from the bundle
    assert "not found" not in bench and str(Path.home()) not in bench
    version = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True, timeout=60)
    assert "commit 0c1e570" in version.stdout + version.stderr


def test_a_bundle_with_an_empty_user_cache_uses_its_own_engine(bundle: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))  # a user who never built one
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(bundle / "headroom"))
    assert paths.bundle_dir() == bundle and not paths.cache_dir().is_relative_to(bundle)
    build = native_build.find_build()
    assert build is not None and build.server == bundle / "engine" / "build" / "bin" / "llama-server"
    assert native_build.find_build(bundled=False) is None
    assert candidates()[-1] == (build.server, EngineOrigin.BUNDLE)
    engines = discover_engines(probe=False)
    shipped = next(e for e in engines if e.source == EngineOrigin.BUNDLE)
    assert shipped.llama_cpp == "llama.cpp 0c1e57098 + 5 Headroom patches"  # its stamp: the patches
    assert ensure_llama_cpp_lib() == build.bin_dir  # pass 1's libllama: the same copy


def test_runpath_rewrite_refuses_what_it_cannot_do(tmp_path: Path, engine_build: native_build.EngineBuild) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file")
    assert bb.set_runpath(text) is None
    copy = tmp_path / "llama-server"
    copy.write_bytes(Path(engine_build.server).read_bytes())
    with pytest.raises(ValueError, match="shorter than"):
        bb.set_runpath(copy, "/" + "x" * 400)
    assert _runpath(copy) == _runpath(Path(engine_build.server))  # left as it was
