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
from tests.fixtures.tmpfs import tmpfs

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "ro", "size=1m,ro") as mount:
        yield mount


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


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs filled to its last byte: every write under it fails with ENOSPC."""
    with tmpfs(tmp_path / "full", "size=1m") as mount:
        for d in ("cache", "config"):  # the folders exist, as on a disk that filled up after first use
            (mount / d).mkdir()
        with (mount / "filler").open("wb") as f, pytest.raises(OSError):  # ENOSPC once the tmpfs is full
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        yield mount


def test_plan_and_measure_work_on_a_full_disk_and_write_nothing_half(full_disk: Path, engine_build: EngineBuild,
                                                                     tiny_model: Path) -> None:
    """Issue 31: a full cache disk printed ENOSPC tracebacks from the PID-file and capability-cache
    writes, and left empty files. Plan, plan --measure and measure still answer, and nothing is left
    half-written beside the filler."""
    def files() -> list[Path]:  # (an empty folder takes no space: a cache folder may still appear)
        return sorted(p.relative_to(full_disk) for p in full_disk.rglob("*") if not p.is_dir())

    before = files()
    for args in (["plan", str(tiny_model), "-c", "4k"], ["plan", str(tiny_model), "-c", "4k", "--measure"],
                 ["measure", str(tiny_model), "-c", "4k"]):
        done = _headroom(args, full_disk, engine_build)
        assert done.returncode == 0, (args, done.stdout + done.stderr)
        assert "Traceback" not in done.stderr and "No space left" not in done.stderr, (args, done.stderr)
    assert files() == before == [Path("filler")]


def test_plan_chat_and_the_demo_window_say_the_cache_is_read_only_once_and_go_on(
        read_only: Path, engine_build: EngineBuild, tiny_chat_model: Path, tmp_path: Path) -> None:
    """Issue 46: ``gui --demo`` with a read-only HOME ended in a traceback and an abort while it created
    the demo's folder; every command now says one sentence and goes on."""
    said = (f"headroom: the cache folder {read_only / 'cache'} is on a read-only disk: Headroom goes on without it "
            "(nothing it measures, downloads or chooses is kept until it can be written)")
    plan = _headroom(["plan", str(tiny_chat_model), "-c", "4k"], read_only, engine_build)
    assert plan.returncode == 0 and plan.stderr.count(said) == 1, plan.stderr
    demo = _headroom(["gui", "--demo", "--screenshot", str(tmp_path / "demo.png")], read_only, engine_build)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "screenshot:" in demo.stdout and "feasible=True" in demo.stdout
    assert "Traceback" not in demo.stderr and "QThread: Destroyed" not in demo.stderr
    env = dict(os.environ, HEADROOM_CACHE_DIR=str(read_only / "cache"), HEADROOM_CONFIG_DIR=str(read_only / "config"))
    chat = subprocess.run([sys.executable, "-m", "app", "chat", str(tiny_chat_model), "-c", "2048", "--max-tokens", "4",
                           "--engine", str(engine_build.server)], cwd=ROOT, env=env, input="Hello\n/exit\n",
                          capture_output=True, text=True, timeout=300)
    assert chat.returncode == 0, chat.stdout + chat.stderr
    assert chat.stderr.count(said) == 1 and "engine stopped" in chat.stdout and "Traceback" not in chat.stderr
    assert list(read_only.iterdir()) == []
