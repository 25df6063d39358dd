"""Live while serving (issue 20, build item 5), with the real engine built by native/ (CPU here) on
the tiny generated model: the live view over plan vs actual, from the window's own device poll.

NVML is the replayed H200 (tests/fixtures/fake_nvml.py): this machine has no GPU, so the engine runs
on the CPU whatever the plan, and the test says on cue what a GPU run would have NVML list — the
real engine's pid holding its plan's bytes, and another app taking the card. Host RAM is psutil's
reading held still (as tests/ui/test_live_replan_host.py does, for the same reason), less what the
test says another app took; the engine's RSS is the real process's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.gpu_reach import GpuReach
from app.machine.devices import host_memory
from app.planner.devices import HostMemory, Inventory, Snapshot
from app.planner.live import CPU_RUN_NOTE, HOST, LiveReport, RowState
from app.planner.plan_types import PlanMode
from app.planner.units import Bytes, MiB
from app.ui import launch_panel
from app.ui.live_view import LOW_COLOUR, STOPPED_TITLE, TITLE
from app.ui.main_window import MainWindow
from app.ui.qt import Qt
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml
from tests.ui.windows import gpus_read

LEFT = Qt.MouseButton.LeftButton
OTHER_APP = 4_000_001  # a pid no process here has: "another app" on the replayed GPU


class HostFeed:
    """psutil's host reading, held still, less what "another app" took."""

    def __init__(self) -> None:
        self.base = host_memory()
        self.taken = 0

    def __call__(self) -> HostMemory | None:
        return replace(self.base, available=self.base.available - self.taken)


def _window(qtbot, tmp_path: Path, nvml: FakeNvml | None, feed: HostFeed) -> MainWindow:
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml, read_host=feed)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def h200() -> FakeNvml:
    return FakeNvml()


def _on_the_card(engine: EngineInfo | None, inventory: Inventory) -> GpuReach:
    """The replayed card taken as reached: the CPU build here would (rightly) be launched on the CPU
    (app/engine/gpu_reach.py), and these tests are about a GPU run's live rows."""
    return GpuReach(tuple(g.index for g in inventory.local_gpus))


@pytest.fixture
def gpu_window(qtbot, tmp_path: Path, h200: FakeNvml,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[MainWindow, HostFeed]]:
    monkeypatch.setattr(launch_panel, "reach", _on_the_card)
    feed = HostFeed()
    w = _window(qtbot, tmp_path, h200, feed)
    yield w, feed
    w.close()


def _launch(w: MainWindow, qtbot, model: Path, server: Path) -> int:
    with qtbot.waitSignal(w.launch.enginesFound, timeout=120_000) as found:
        w.launch.discover()
    w.settings.engine.setCurrentIndex([e.path for e in found.args[0]].index(str(server)))
    assert w.open_model(model)
    w.settings.context.set_value(4096, emit=True)
    assert w.live_view.isHidden()  # nothing runs yet
    with qtbot.waitSignal(w.launch.checked, timeout=120_000):
        qtbot.mouseClick(w.launch.launch_button, LEFT)
    engine = w.current.running_engine
    assert engine is not None and engine.pid is not None
    return engine.pid


def _next_report(w: MainWindow, qtbot, until) -> LiveReport:  # type: ignore[no-untyped-def]
    """The first live report (from the next polls, about a second apart) for which ``until`` holds."""
    seen: list[LiveReport] = []
    w.live_view.updated.connect(seen.append)
    qtbot.waitUntil(lambda: any(until(r) for r in seen), timeout=20_000)
    return next(r for r in seen if until(r))


def _rss(pid: int) -> int:
    proc = psutil.Process(pid)
    return int(proc.memory_info().rss) + sum(int(c.memory_info().rss) for c in proc.children(recursive=True))


@pytest.mark.engine
def test_free_vram_under_the_margin_while_the_engine_serves_warns_then_stop_freezes_the_view(
        gpu_window, h200, tiny_model, engine_build, qtbot):
    w, _feed = gpu_window
    pid = _launch(w, qtbot, tiny_model, engine_build.server)
    view = w.live_view
    plan = w.current.running
    assert plan is not None and plan.mode == PlanMode.STOCK and [g.name for g in plan.gpus] == ["CUDA0"]
    # The CPU build ran the GPU plan on the CPU (the check says so) and NVML lists nothing of it.
    report = _next_report(w, qtbot, lambda r: r.note == CPU_RUN_NOTE)
    assert view.isVisible() and view.title() == TITLE
    assert report.rows[0].state is RowState.UNREAD and view.note.text() == CPU_RUN_NOTE
    assert view.rows[0][2].startswith("cannot be read: the engine runs on the CPU")
    assert report.rows[1].engine is not None and view.rows[1][0] == "host RAM"  # the host row still is

    # What NVML shows on a GPU machine: the engine holding its plan, then another app taking the card.
    planned = plan.gpus[0].used
    h200.compute = [(pid, planned), (OTHER_APP, h200.recorded.free - planned - 100 * MiB)]
    h200.taken = h200.recorded.free - 100 * MiB
    report = _next_report(w, qtbot, lambda r: r.rows[0].state is RowState.LOW)
    gpu = report.rows[0]
    assert (gpu.engine, gpu.planned, gpu.free, gpu.margin) == (planned, planned, 100 * MiB, 256 * MiB)
    assert view.rows[0][0] == "CUDA0" and view.rows[0][2] == str(Bytes(planned)) and view.rows[0][4] == "100 MiB"
    assert view.warnings.isVisible() and LOW_COLOUR in view.warnings.styleSheet()
    text = view.warnings.text()
    assert text.startswith("⚠ CUDA0 (NVIDIA H200): free VRAM 100 MiB is under the 256 MiB safety margin")
    assert "stop the engine and plan again" in text
    assert report.note == ""  # NVML reads the engine on the GPU: the rows are live

    h200.compute, h200.taken = None, 0  # the card as recorded again, before the engine goes
    with qtbot.waitSignal(w.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(w.launch.stop_button, LEFT)
    assert view.isVisible() and view.title() == STOPPED_TITLE and not view.running
    assert view.status.text().startswith("Engine stopped: the last reading (")
    frozen = list(view.rows)
    with qtbot.waitSignal(w.poll.polled, timeout=10_000) as polled:  # a poll after the stop
        pass
    assert isinstance(polled.args[0], Snapshot) and polled.args[0].engine_pid is None
    assert view.rows == frozen and view.title() == STOPPED_TITLE  # frozen on the last reading
    assert w.open_model(tiny_model)  # a model opened again: the last run's view goes
    assert view.isHidden()


@pytest.mark.engine
def test_a_cpu_plan_shows_the_engines_real_rss_and_warns_when_host_ram_runs_low(
        qtbot, tmp_path, tiny_model, engine_build):
    feed = HostFeed()
    w = _window(qtbot, tmp_path, None, feed)  # the real pynvml: no driver here, a CPU plan
    try:
        pid = _launch(w, qtbot, tiny_model, engine_build.server)
        plan = w.current.running
        assert plan is not None and plan.mode == PlanMode.CPU
        report = _next_report(w, qtbot, lambda r: r.rows[-1].engine is not None)
        (host,) = report.rows
        assert host.device == HOST and host.state is RowState.OK and host.free == feed.base.available
        assert host.engine is not None
        now = _rss(pid)  # the real process, read again: an idle server's RSS holds still
        assert abs(host.engine - now) <= max(now // 4, 8 * MiB), (host.engine, now)
        assert w.live_view.rows[0][0] == "host RAM" and w.live_view.warnings.isHidden()

        feed.taken = feed.base.available - 128 * MiB  # another program takes the rest of the RAM
        report = _next_report(w, qtbot, lambda r: r.rows[-1].state is RowState.LOW)
        text = w.live_view.warnings.text()
        assert text.startswith("⚠ host RAM: available 128 MiB is under the 256 MiB safety margin (the engine holds ")
        assert "close other programs" in text and w.live_view.warnings.isVisible()
        feed.taken = 0
        with qtbot.waitSignal(w.launch.engineStopped, timeout=30_000):
            qtbot.mouseClick(w.launch.stop_button, LEFT)
        assert w.live_view.title() == STOPPED_TITLE
    finally:
        w.close()


def test_a_launch_that_fails_before_any_reading_leaves_no_live_view(window, tiny_model, qtbot, tmp_path):
    gone = tmp_path / "gone" / "llama-server"
    window.launch.set_engines([EngineInfo(EngineKind.LLAMA_SERVER, str(gone), "unknown", "unknown",
                                          EngineOrigin.SETTINGS)])
    assert window.open_model(tiny_model)
    running: list[object] = []
    window.current.runningChanged.connect(running.append)
    with qtbot.waitSignal(window.launch.launchFailed, timeout=30_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert running == [window.plan, None]  # it was launched (the view waited for a reading), then gone
    assert window.live_view.isHidden() and not window.live_view.running
