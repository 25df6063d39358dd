"""Shared test harness: offscreen Qt, the real engine built once per session, generated GGUFs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.engine import native_build  # noqa: E402
from app.engine.libpath import ensure_llama_cpp_lib  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: Recorded output from machines we do not have (a CUDA engine log, NVML readings).
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def engine_build() -> native_build.EngineBuild:
    """The stock engine from native/: found in the cache, or built once (minutes, first time only)."""
    build = native_build.find_build()
    if build is None:
        build = native_build.build()
    ensure_llama_cpp_lib()
    return build


@pytest.fixture(scope="session")
def llama_server(engine_build: native_build.EngineBuild) -> Path:
    return engine_build.server


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"recorded fixtures missing: {SHARED_FIXTURES} (the repo's ../shared/ checkout)")
    return SHARED_FIXTURES
