"""``native/build.py`` a second time is a cache hit: it says so, leaves build.json as it was and
runs no cmake (a ``cmake`` first on PATH records any call and fails, so a rebuild could not hide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def test_a_second_build_is_a_cache_hit(engine_build: EngineBuild, tmp_path: Path) -> None:
    stamp = Path(engine_build.bin_dir).parent.parent / "build.json"
    before = (stamp.read_bytes(), stamp.stat().st_mtime_ns)
    calls = tmp_path / "cmake-calls"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "cmake").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    (shim / "cmake").chmod(0o755)
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, str(ROOT / "native" / "build.py"), "--print-bin-dir"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "cache hit" in out and "nothing to do" in out
    assert proc.stdout.strip().splitlines()[-1] == engine_build.bin_dir
    assert not calls.exists(), f"cmake was run: {calls.read_text()}"
    assert (stamp.read_bytes(), stamp.stat().st_mtime_ns) == before
    assert json.loads(before[0])["commit"] == engine_build.commit


def test_the_native_build_has_no_amx_code_and_says_which_cpu_it_is_for(engine_build: EngineBuild,
                                                                        tmp_path: Path) -> None:
    """``-march=native`` without AMX (native_build.NO_AMX_FLAGS): no tile instruction in any library of
    the build, seen with objdump on any CPU. A tiny object compiled with ``-mamx-tile`` shows the check
    finds them where they are."""
    from app.engine.native_build import cpu_key
    from tests.fixtures.cpu import tile_instructions

    probe = tmp_path / "tile.c"
    probe.write_text("#include <immintrin.h>\nvoid zero(void) { _tile_zero(0); }\n")
    subprocess.run(["gcc", "-c", "-O2", "-mamx-tile", str(probe), "-o", str(tmp_path / "tile.o")], check=True)
    assert tile_instructions(tmp_path / "tile.o") == ["tilezero"]
    libs = sorted(Path(engine_build.bin_dir).glob("libggml-cpu*.so*"))
    assert libs, engine_build.bin_dir
    for lib in libs:
        if not lib.is_symlink():
            assert not tile_instructions(lib), lib.name
    assert engine_build.cpu == cpu_key()  # found again only on this CPU (a copied cache is not used)
