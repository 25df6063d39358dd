"""Shared test harness: offscreen Qt, the real engine built once per session, generated GGUFs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

#: Qt's offscreen screen is 800×800 by default; the window's first size follows the screen it opens on
#: (app/ui/main_window.py first_size), and the window tests are written for a desktop's 1280×860: a
#: 1920×1080 offscreen screen, as a desktop has (tests/fixtures/offscreen-screen.json).
_OFFSCREEN = f"offscreen:configfile={Path(__file__).resolve().parent / 'fixtures' / 'offscreen-screen.json'}"
if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen":
    os.environ["QT_QPA_PLATFORM"] = _OFFSCREEN

from app.engine import native_build  # noqa: E402 (after the Qt platform is chosen)
from app.engine.libpath import ensure_llama_cpp_lib  # noqa: E402
from tests.fixtures import gguf_factory, shapes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: The CPU-attention engine run (app/engine/attention_runs.py) that plan, serve, doctor and the window make
#: for a head size this machine has none for takes a real llama-batched-bench up to a minute here, and
#: would be stored in whichever cache a test uses (the user's, for many): tests that are not about it
#: never make it (subprocesses inherit this); those that are use ``replay_bench`` (a recorded table, in
#: a cache of their own) or unset it (the real run).
os.environ["HEADROOM_BATCHED_BENCH"] = "off"
#: The tests that make the run make it on a loaded machine too (CI runs beside other work); the rule that
#: a busy machine does not measure has its own test.
os.environ["HEADROOM_MEASURE_WHEN_BUSY"] = "1"
REPLAY_BENCH = ROOT / "tests" / "fixtures" / "engine_logs" / "replay-batched-bench"
#: Every process this test session starts carries this mark in its environment (children inherit it), so
#: one still running when the session ends — an engine a test left behind — is found and fails the suite.
SESSION_MARK = "HEADROOM_TEST_SESSION"
os.environ.setdefault(SESSION_MARK, f"{os.getpid()}-{os.urandom(4).hex()}")
#: How long a process the last test stopped may take to be gone.
OUTLIVE_GRACE_S = 10.0


def left_running() -> list[str]:
    """The processes of this session still running besides pytest itself ("pid 123 llama-server"), its own
    children among them: none should be left when the last test ends."""
    import psutil

    mark, me = os.environ[SESSION_MARK], os.getpid()
    found = []
    for p in psutil.process_iter(["pid", "name", "status"]):
        if p.info["pid"] == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if p.environ().get(SESSION_MARK) == mark:
                found.append(f"pid {p.pid} {p.info['name']}")
        except (psutil.Error, OSError):
            continue
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The suite fails when something it started outlives it (issue 46: two llama-servers a test had
    stopped were still running 13 minutes after a green run); what is left is killed and named."""
    import time

    import psutil

    deadline = time.monotonic() + OUTLIVE_GRACE_S
    left = left_running()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = left_running()
    if not left:
        return
    for item in left:
        with contextlib.suppress(psutil.Error, ValueError):
            psutil.Process(int(item.split()[1])).kill()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    line = f"processes the tests started outlived them (killed now): {', '.join(left)}"
    if reporter is not None:
        reporter.write_line(f"ERROR: {line}", red=True)
    else:
        print(f"ERROR: {line}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
#: Recorded output from machines we do not have (a CUDA engine log, NVML readings): tests/fixtures/,
#: so ``shared_fixtures / "h200" / NAME`` is tests/fixtures/h200/NAME.
SHARED_FIXTURES = ROOT / "tests" / "fixtures"


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


@pytest.fixture
def replay_bench(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CPU-attention runs of this test replay a recorded llama-batched-bench table (in a second):
    for a test about the run, with a cache of its own (tests/fixtures/engine_logs/README.md)."""
    monkeypatch.setenv("HEADROOM_BATCHED_BENCH", str(REPLAY_BENCH))
    return REPLAY_BENCH


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"recorded fixtures missing: {SHARED_FIXTURES}")
    return SHARED_FIXTURES


# --- generated GGUF models (tests/fixtures/gguf_factory.py; cached under <cache>/test-models) ---

@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """A 2-layer llama with seeded random f32 weights and a byte vocab; llama-server generates from it."""
    return gguf_factory.ensure(shapes.TINY)


@pytest.fixture(scope="session")
def tiny_chat_model() -> Path:
    """The same tiny model with a ChatML ``tokenizer.chat_template``."""
    return gguf_factory.ensure(shapes.TINY_CHAT)


@pytest.fixture(scope="session")
def tiny_projector() -> Path:
    """A vision projector (mmproj) whose output fits the tiny models."""
    return gguf_factory.ensure(shapes.TINY_MMPROJ)


@pytest.fixture(scope="session")
def tiny_deep_model() -> Path:
    """An 8-layer llama (random f32 weights, ChatML) for splits over several devices."""
    return gguf_factory.ensure(shapes.TINY_DEEP)


@pytest.fixture(scope="session")
def tiny_moe_model() -> Path:
    """A 4-layer qwen3moe (8 experts, 2 used; random f32 weights, ChatML) for experts on the CPU."""
    return gguf_factory.ensure(shapes.TINY_MOE)


@pytest.fixture(scope="session")
def shape_model() -> Callable[[str], Path]:
    """``shape_model("qwen2.5-14b-instruct-1m-q8_0") -> Path``: a sparse shape-only GGUF
    (names: ``shapes.BY_NAME``; the specs: ``shapes.SHAPES``)."""

    def get(name: str) -> Path:
        return gguf_factory.ensure(shapes.BY_NAME[name])

    return get


@pytest.fixture(scope="session")
def tiny_glm5_next_model() -> Path:
    """A 2-layer k-pool glm5-next (MLA + k-pool indexer, KDA) with seeded random f32 weights."""
    return gguf_factory.ensure(shapes.TINY_GLM5_NEXT)
