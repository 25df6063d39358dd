"""An engine the user chose (a file, not one Headroom found) measures with its own llama.cpp: pass 1
loads the libllama beside it (issue 29: "A chosen engine cannot measure"). A user's own llama.cpp build
is made here by copying Headroom's build folder elsewhere, with no Headroom build in the cache and no
library in the environment; an engine file without a library beside it is refused in one sentence."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from tests.fixtures.server_proc import headroom_serve

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def _user_env(tmp_path: Path) -> dict[str, str]:
    """No Headroom build (an empty cache) and no libllama named in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    return env | {"HEADROOM_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}


def test_serve_with_an_engine_file_measures_with_the_library_beside_it(engine_build: EngineBuild, tiny_model: Path,
                                                                        tmp_path: Path) -> None:
    mine = tmp_path / "my-llama.cpp" / "bin"
    shutil.copytree(engine_build.bin_dir, mine, symlinks=True)
    rc, out = headroom_serve([str(tiny_model), "--ctx", "4096", "--engine", str(mine / "llama-server")],
                             env=_user_env(tmp_path))
    assert rc == 0 and "serving at" in out, out
    assert "The engine allocated what the plan said" in out, out  # measured, not estimated
    assert list((tmp_path / "cache" / "measurements").glob("*.json")), "pass 1 ran and was cached"


def test_an_engine_file_without_a_library_is_refused_in_one_sentence(engine_build: EngineBuild, tiny_model: Path,
                                                                      tmp_path: Path) -> None:
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy2(engine_build.server, lonely / "llama-server")  # runs (its RUNPATH), no libllama beside it
    rc, out = headroom_serve([str(tiny_model), "--ctx", "4096", "--engine", str(lonely / "llama-server")],
                             env=_user_env(tmp_path))
    assert rc == 1 and "serving at" not in out, out
    assert "headroom serve: refused: pass 1 failed, so the engine is not launched" in out
    assert "give an engine whose folder holds libllama.so beside llama-server (--engine FILE" in out
    assert "./dev" not in out and "CMAKE_ARGS" not in out  # no developer-only advice


def test_measure_with_an_engine_file_names_its_llama_cpp(engine_build: EngineBuild, tiny_model: Path,
                                                         tmp_path: Path) -> None:
    """``headroom measure --engine FILE``: the same library as serve's launch, its commit read from the
    build's stamp (not a path cut after nine characters)."""
    import subprocess
    import sys

    # a Headroom build this user's cache does not know (another user's, a shared folder): its stamp names it
    proc = subprocess.run([sys.executable, "-m", "app", "measure", str(tiny_model), "-c", "4k", "--engine",
                           str(engine_build.server)], cwd=ROOT, env=_user_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(CPU, llama.cpp {engine_build.commit[:9]})" in proc.stdout
