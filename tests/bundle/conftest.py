"""The bundle under test: ``$HEADROOM_BUNDLE`` (what ``./dev bundle`` just built), else built once per
session into build/test-bundle with packaging/build_bundle.py (PyInstaller, about a minute or two on
2 cores; the time is printed), with the engine native/ built beside it and the tarball."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "test-bundle"
#: PyInstaller on 2 busy cores: about 1-2 minutes; generous.
BUILD_TIMEOUT_S = 1200
#: The portable engine the bundle carries (native/build.py --portable: the engine again, with six CPU
#: variants of its CPU backend), built once and cached: about 15 minutes on 2 busy cores; generous.
PORTABLE_BUILD_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Bundle:
    folder: Path  # <dist>/headroom, holding the executable
    tarball: Path | None

    @property
    def exe(self) -> Path:
        return self.folder / "headroom"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/bundle/" in item.nodeid:
            item.add_marker(pytest.mark.bundle)


@pytest.fixture(scope="session")
def bundle(engine_build: EngineBuild) -> Bundle:
    given = os.environ.get("HEADROOM_BUNDLE")
    if given:
        folder = Path(given).resolve()
        assert (folder / "headroom").is_file(), f"HEADROOM_BUNDLE={given} holds no headroom executable"
    else:
        started = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "native" / "build.py"), "--portable"], cwd=ROOT, check=True,
                       timeout=PORTABLE_BUILD_TIMEOUT_S)
        print(f"\n[bundle] portable engine ready in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        subprocess.run([sys.executable, str(ROOT / "packaging" / "build_bundle.py"), "--dist", str(OUT / "dist"),
                        "--work", str(OUT / "work"), "--compresslevel", "1"], cwd=ROOT, check=True,
                       timeout=BUILD_TIMEOUT_S)
        print(f"\n[bundle] built in {time.monotonic() - started:.0f} s", flush=True)
        folder = OUT / "dist" / "headroom"
    report = json.loads((folder.parent / "bundle-report.json").read_text())
    tarball = Path(report["tarball"]) if report.get("tarball") else None
    return Bundle(folder, tarball)


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A desktop user who never ran Headroom: their own home and XDG directories, the system PATH, no
    Python or llama.cpp variables from this test run."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_DATA_HOME": str(home / ".local" / "share")}
    return env | extra
