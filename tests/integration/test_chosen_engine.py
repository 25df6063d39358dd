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


def _headroom(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_engine_chosen_in_the_window_is_the_clis_engine_too(engine_build: EngineBuild, tiny_model: Path,
                                                                tmp_path: Path) -> None:
    """Walkthrough finding 3: File ▸ Choose engine… (kept by a window from before 2026-12-02 only in its
    state file) and nothing else: doctor, engine where and plan find it, and plan launches with it."""
    import json

    mine = tmp_path / "my-llama.cpp" / "bin"
    shutil.copytree(engine_build.bin_dir, mine, symlinks=True)
    config = tmp_path / "config"
    config.mkdir()
    (config / "gui-state.json").write_text(json.dumps({"engine_path": str(mine / "llama-server")}))
    env = _user_env(tmp_path) | {"HEADROOM_CONFIG_DIR": str(config)}

    rc, out = _headroom(["engine", "where"], env)
    assert (rc, out.strip()) == (0, str(mine.resolve()))
    rc, out = _headroom(["doctor", "--no-selftest"], env)
    assert f"at {mine / 'llama-server'} (settings)" in out and "none found" not in out, out
    rc, out = _headroom(["plan", str(tiny_model), "-c", "4096"], env)
    assert rc == 0 and f"{mine / 'llama-server'}" in out, out
    assert "no engine can launch this plan" not in out


def test_plan_finds_the_pass_1_that_measure_cached_with_the_chosen_engine(engine_build: EngineBuild,
                                                                         tiny_model: Path, tmp_path: Path) -> None:
    """Walkthrough finding 5: ``measure --engine E`` then ``plan`` with E chosen (the chosen-engine file the
    window writes) reuses that pass 1, as ``plan --engine E`` does; ``plan --engine`` with no engine says so."""
    from app.engine.chosen import remember_chosen_engine

    mine = tmp_path / "my-llama.cpp" / "bin"
    shutil.copytree(engine_build.bin_dir, mine, symlinks=True)
    engine = mine / "llama-server"
    env = _user_env(tmp_path) | {"HEADROOM_CONFIG_DIR": str(tmp_path / "config")}
    launch = ["-c", "4096", "-np", "3", "-kvu"]
    rc, out = _headroom(["measure", str(tiny_model), *launch, "--engine", str(engine)], env)
    assert rc == 0, out

    rc, out = _headroom(["plan", str(tiny_model), *launch, "--engine", str(engine)], env)
    assert rc == 0 and "no_alloc probe, CPU backend" in out and "cached in" in out, out
    remember_chosen_engine(engine, tmp_path / "config")
    rc, out = _headroom(["plan", str(tiny_model), *launch], env)
    assert rc == 0 and "cached in" in out and "none cached" not in out, out

    rc, out = _headroom(["plan", str(tiny_model), *launch, "--engine", str(tmp_path / "nothing")], env)
    assert (rc, out.strip()) == (2, f"headroom plan: engine not found: {tmp_path / 'nothing'}")
