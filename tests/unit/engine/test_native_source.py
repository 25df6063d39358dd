"""Building from an extracted llama.cpp tree (``native_build --source``), as the H200 script does:
the trimmed tree bench/h200/pack_source.py packs must configure with CMake and name its commit."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from app.engine import native_build
from app.engine.native_build import EngineBuild
from app.planner.devices import Backend

ROOT = Path(__file__).resolve().parents[3]
COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def _pack_source() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pack_source", ROOT / "bench" / "h200" / "pack_source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_tree(root: Path, commit: str | None) -> Path:
    (root / "ggml").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\n")
    if commit is not None:
        (root / native_build.COMMIT_FILE).write_text(commit + "\n")
    return root


def test_source_option_names_the_tree_and_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _fake_tree(tmp_path / "llama.cpp", COMMIT)
    assert native_build.llama_source(tree) == (tree, COMMIT)
    monkeypatch.setenv("HEADROOM_LLAMA_SRC", str(tree))
    assert native_build.llama_source(None) == (tree, COMMIT)
    args = native_build.cmake_args(Backend.CPU, COMMIT)
    assert "-DLLAMA_BUILD_COMMIT=0c1e570" in args and "-DLLAMA_BUILD_NUMBER=1" in args


def test_a_tree_without_a_commit_file_builds_as_unknown(tmp_path: Path) -> None:
    tree = _fake_tree(tmp_path / "llama.cpp", None)
    assert native_build.llama_source(tree)[1] == "unknown"
    assert native_build.build_dir("unknown", Backend.CUDA).name == "llama.cpp-unknown-cuda"
    assert not any(a.startswith("-DLLAMA_BUILD_COMMIT") for a in native_build.cmake_args(Backend.CPU, "unknown"))


def test_a_folder_that_is_not_llama_cpp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"not a llama\.cpp source tree"):
        native_build.llama_source(tmp_path)


def test_cuda_build_pins_the_architectures_it_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CUDA_ARCHS", "90")
    args = native_build.cmake_args(Backend.CUDA, COMMIT)
    assert "-DGGML_CUDA=ON" in args and "-DCMAKE_CUDA_ARCHITECTURES=90" in args
    assert "-DGGML_CUDA_FA_ALL_QUANTS=OFF" in args


def test_an_existing_build_is_reused_through_a_linked_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            engine_build: EngineBuild) -> None:
    """The H200 dry run links a private cache's engines/ to the shared one: no rebuild."""
    tree = _fake_tree(tmp_path / "llama.cpp", engine_build.commit)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "engines").symlink_to(Path(engine_build.bin_dir).parents[2], target_is_directory=True)
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(cache))
    if engine_build.backend is Backend.CPU:
        monkeypatch.setenv("HEADROOM_ENGINE_BACKEND", "cpu")
    assert native_build.build(source=tree) == engine_build


@pytest.mark.slow
def test_trimmed_tarball_configures_and_names_its_commit(tmp_path: Path, engine_build: EngineBuild) -> None:
    """What prepare.sh carries to the H200: small, and CMake configures it offline with the commit."""
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed (./dev installs it)")
    pack = _pack_source()
    sdist = native_build.source_tree()
    out = tmp_path / "src.tar.gz"
    size = pack.pack(sdist / "vendor" / "llama.cpp", native_build.vendored_commit(sdist), out)
    assert size < 20 * 2**20, f"{size / 2**20:.1f} MiB: the trim lets too much through"
    with tarfile.open(out) as tf:
        names = tf.getnames()
        tf.extractall(tmp_path / "x", filter="tar")
    assert not any(n.startswith("llama.cpp/models/") or "/.git/" in n for n in names)
    assert "llama.cpp/ggml/src/ggml-cuda/fattn.cu" in names and "llama.cpp/tools/server/server.cpp" in names
    src, commit = native_build.llama_source(tmp_path / "x" / "llama.cpp")
    assert commit == engine_build.commit
    subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"), *native_build.cmake_args(Backend.CPU, commit)],
                   check=True, capture_output=True)
    info = (tmp_path / "b" / "common" / "build-info.cpp").read_text()
    assert f'LLAMA_COMMIT = "{commit[:7]}"' in info
