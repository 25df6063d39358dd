"""Live re-planning from the polled NVML readings, replayed from the recorded H200
(tests/fixtures/fake_nvml.py: this machine has no NVIDIA driver)."""

from __future__ import annotations

from dataclasses import replace

from app.machine.devices import resolve_gpus, snapshot
from app.machine.nvml_session import NvmlSession
from app.planner.devices import DeviceKind
from app.planner.units import Bytes, MiB
from app.ui.live_replan import refreshed_inventory
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml, load_readings
from tests.ui.windows import gpus_read

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


def _window(qtbot, tmp_path, nvml: FakeNvml) -> MainWindow:
    # No live host reading: other processes on this box move host RAM by GiBs, which re-plans too
    # (tests/ui/test_live_replan_host.py); these tests count the re-plans GPU memory causes.
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml,
                   read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    return w


def test_another_app_taking_gpu_memory_replans_the_bars(qtbot, tmp_path, shape_model):
    nvml = FakeNvml(state="idle")
    w = _window(qtbot, tmp_path, nvml)
    rec = load_readings()
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    before = w.plan
    assert before is not None and before.gpus[0].other_processes == rec.total - rec.free
    # Idle: nothing runs there; what is not free is the driver's reserve, and the bar says so.
    caption = w.budget.rows[0].caption.text()
    assert f"driver reserve {Bytes(rec.total - rec.free)}" in caption and "other apps" not in caption
    nvml.state = "torch_ctx"  # a CUDA context elsewhere: 527 MiB less free, more than the 256 MiB margin
    with qtbot.waitSignal(w.planned, timeout=5_000) as sig:
        pass
    after = sig.args[0]
    assert after.gpus[0].other_processes == rec.total - rec.ctx_free
    assert after.gpus[0].free == before.gpus[0].free - (rec.free - rec.ctx_free)
    (_, held), = rec.processes
    caption = w.budget.rows[0].caption.text()
    assert f"driver reserve {Bytes(rec.total - rec.ctx_free - held)}" in caption
    assert f"other apps {Bytes(held)}" in caption
    seg = next(s for s in w.budget.rows[0].bar.segments if s.key == "other_processes")
    assert "1 process holds" in seg.tooltip
    assert w.live.applied == 1
    w.close()


def test_live_replan_waits_for_the_drag_to_end(qtbot, tmp_path, shape_model):
    nvml = FakeNvml(state="idle")
    w = _window(qtbot, tmp_path, nvml)
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    plans: list[object] = []
    w.planned.connect(plans.append)
    w.settings.context.slider.setSliderDown(True)  # the user holds the slider
    nvml.state = "torch_ctx"
    qtbot.waitUntil(lambda: w.live.deferred > 0, timeout=5_000)
    assert plans == []  # nothing re-planned under the user's hand
    with qtbot.waitSignal(w.planned, timeout=5_000):
        w.settings.context.slider.setSliderDown(False)
    assert w.live.applied == 1
    w.close()


def test_changes_within_the_safety_margin_and_simulated_cards_do_not_replan():
    nvml = FakeNvml(state="idle")
    inv = resolve_gpus(["auto"], nvml)
    session = NvmlSession(nvml)
    nvml.state = "torch_ctx"
    snap = snapshot(session, None, lambda: inv.host)  # host RAM held still: only the GPU moved
    session.close()
    moved = load_readings().free - load_readings().ctx_free  # 527 MiB
    assert refreshed_inventory(inv, snap, margin=moved + 1) is None
    new = refreshed_inventory(inv, snap, margin=256 * MiB)
    assert new is not None and new.gpus[0].free == load_readings().ctx_free
    assert [p.pid for p in new.gpus[0].processes] == [419]
    sim = replace(inv, gpus=tuple(replace(g, kind=DeviceKind.SIMULATED) for g in inv.gpus))
    assert refreshed_inventory(sim, snap, margin=0) is None
