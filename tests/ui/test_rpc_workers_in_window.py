"""RPC workers in the window: typed addresses become devices beside the GPUs, planned and launched.

Real loopback ``headroom rpc-worker`` processes (tests/fixtures/rpc.py); the window asks them in the
background, shows their devices as cards and their layers as bars, remembers the list, names a
worker that does not answer, and launches the real engine with ``--rpc``."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.ui.main_window import MainWindow
from app.ui.qt import Qt
from app.ui.state import UiState
from tests.fixtures.rpc import rpc_worker
from tests.fixtures.server_proc import free_port
from tests.ui.windows import gpus_read

pytestmark = pytest.mark.engine
LEFT = Qt.MouseButton.LeftButton


def test_workers_typed_in_the_window_are_planned_launched_and_remembered(
        window: MainWindow, qtbot, tiny_deep_model: Path, engine_build: EngineBuild, tmp_path: Path) -> None:
    gone = f"127.0.0.1:{free_port()}"
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    paths = [e.path for e in found.args[0]]
    window.settings.engine.setCurrentIndex(paths.index(str(engine_build.server)))
    with rpc_worker() as (a, _), rpc_worker() as (b, _):
        with qtbot.waitSignal(window.planned, timeout=30_000):
            assert window.open_model(tiny_deep_model)
        row = window.devices.workers
        row.edit.setText(f"{a}, {gone}, {b}")
        with qtbot.waitSignal(row.readingsChanged, timeout=60_000), qtbot.waitSignal(window.planned, timeout=60_000):
            qtbot.mouseClick(row.button, LEFT)
        status = row.status.text()
        assert f"RPC0 on {a}" in status and f"RPC1 on {b}" in status, status
        assert f"{gone} did not answer" in status, status
        plan = window.plan
        assert plan is not None and [g.name for g in plan.gpus] == [f"RPC0[{a}]", f"RPC0[{b}]"]
        assert plan.launch.rpc == (a, b) and len(plan.launch.tensor_split) == 2
        assert any(gone in w for w in plan.warnings)
        assert len(window.devices.cards) == 2  # a card per worker device beside host RAM
        assert window.state.rpc_workers == [a, gone, b]  # remembered as typed
        assert window.launch.launch_button.isEnabled(), window.launch.status.text()
        with qtbot.waitSignal(window.launch.engineReady, timeout=180_000) as ready:
            qtbot.mouseClick(window.launch.launch_button, LEFT)
        assert f"--rpc {a},{b}" in window.launch.command.text()
        with urllib.request.urlopen(ready.args[0] + "/health", timeout=10) as resp:
            assert resp.status == 200
        with qtbot.waitSignal(window.launch.checked, timeout=60_000) as chk:
            pass
        check = chk.args[0]
        for dev in (f"RPC0[{a}]", f"RPC0[{b}]"):
            assert check.row(dev, "weights") is not None and check.row(dev, "weights").ok, check.table()
        with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
            qtbot.mouseClick(window.launch.stop_button, LEFT)


def test_the_remembered_workers_are_asked_again_at_start(qtbot, tmp_path: Path, engine_build: EngineBuild) -> None:
    with rpc_worker() as (a, _):
        w = MainWindow(state=UiState(rpc_workers=[a]), persist=False, state_file=tmp_path / "s.json",
                       read_host=lambda: None)
        gpus_read(qtbot, w)
        qtbot.addWidget(w)
        qtbot.waitUntil(lambda: f"RPC0 on {a}" in w.devices.workers.status.text(), timeout=60_000)
        assert w.current.inventory.rpc_endpoints == (a,)
        assert w.devices.workers.edit.text() == a
        w.close()


def test_an_address_that_is_not_one_is_said_and_changes_nothing(window: MainWindow, qtbot) -> None:
    before = window.current.inventory
    row = window.devices.workers
    row.edit.setText("not-an-address")
    qtbot.mouseClick(row.button, LEFT)
    assert "not an RPC worker address" in row.status.text()
    assert window.current.inventory is before
