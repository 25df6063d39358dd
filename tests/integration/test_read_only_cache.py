"""A read-only disk under Headroom's cache and config (issue 31: a HOME mounted read-only printed EROFS
tracebacks): measure, serve and doctor still work, and nothing is written there. A real read-only tmpfs,
mounted for the test (the suite runs as root, as CI does)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, f"cannot mount a read-only tmpfs here: {done.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _headroom(args: list[str], home: Path, engine: EngineBuild) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HEADROOM_CACHE_DIR=str(home / "cache"), HEADROOM_CONFIG_DIR=str(home / "config"),
               LLAMA_CPP_LIB_PATH=engine.bin_dir, PATH=f"{engine.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_measure_serve_and_doctor_work_on_a_read_only_cache(read_only: Path, engine_build: EngineBuild,
                                                            tiny_model: Path) -> None:
    measured = _headroom(["measure", str(tiny_model), "-c", "4k"], read_only, engine_build)
    assert measured.returncode == 0 and "Traceback" not in measured.stderr, measured.stderr
    served = _headroom(["serve", str(tiny_model), "-c", "4k", "--smoke", "--engine", str(engine_build.server)],
                       read_only, engine_build)
    assert served.returncode == 0, served.stdout + served.stderr
    assert "smoke: ok" in served.stdout and "Traceback" not in served.stderr
    doctor = _headroom(["doctor"], read_only, engine_build)
    assert doctor.returncode == 0 and "serves on this CPU" in doctor.stdout, doctor.stdout + doctor.stderr
    assert list(read_only.iterdir()) == []  # nothing written, nothing half-written
