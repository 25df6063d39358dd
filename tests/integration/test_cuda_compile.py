"""CI's compile check of Headroom's patches on the CUDA backend (app/engine/cuda_check.py): the CUDA files
the patch series touches compile for one architecture against NVIDIA's wheels' headers, with this machine's
nvcc 13 (or the wheel's), on a machine without a GPU; a patch that breaks one fails the check with the
compiler's error. The first run installs the wheels (about 0.5 GB, once) and compiles (about 30 s of
CPU); an unchanged series is then a cache hit."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from app import paths
from app.engine import cuda_check, cuda_toolchain, native_build
from app.engine.engine_patches import patch_series, patched_source

pytestmark = pytest.mark.slow

CUDA_FILE = "ggml/src/ggml-cuda/ggml-cuda.cu"


def test_the_cuda_files_headroom_patches_compile_for_one_architecture(engine_build: native_build.EngineBuild) -> None:
    src, commit = native_build.llama_source(None)
    result = cuda_check.check(src, commit, log=lambda _msg: None)
    assert result.units == (CUDA_FILE,)  # the k-pool patch's MoE guard (0001)
    assert result.ok, result.errors
    assert result.arch == "89" and "nvcc" in result.compiler


def test_a_patch_that_breaks_a_cuda_file_fails_the_check_with_the_compilers_error(
        engine_build: native_build.EngineBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, commit = native_build.llama_source(None)
    series = patch_series()
    cuda_toolchain.ensure(log=lambda _msg: None)  # NVIDIA's wheels, in the real cache (installed once)
    patched = patched_source(src, commit, series) / CUDA_FILE
    before = patched.read_text().splitlines(keepends=True)
    after = [before[0], "static_assert(false, \"headroom: a broken patch\");\n", *before[1:]]
    broken = tmp_path / "patches"
    broken.mkdir()
    for p in series.patches:
        shutil.copy2(p, broken / p.name)
    (broken / "0099-broken.patch").write_text("".join(difflib.unified_diff(
        before[:4], after[:5], fromfile=f"a/{CUDA_FILE}", tofile=f"b/{CUDA_FILE}")))
    # a cache of its own for the broken copy; NVIDIA's wheels from the real one
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "cuda").symlink_to(paths.cache_dir() / "cuda", target_is_directory=True)
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(cache))
    result = cuda_check.check(src, commit, patch_series(broken), log=lambda _msg: None)
    assert not result.ok and result.units == (CUDA_FILE,)
    assert "headroom: a broken patch" in result.errors and "error" in result.errors
