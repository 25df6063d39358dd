"""Live re-planning from host RAM. This machine has no NVIDIA driver, so the window plans for the CPU.

The window tests feed host RAM through the poller's ``read_host`` seam: a real 1.5 GiB allocation
was tried first and proved flaky on this shared box, where other processes move MemAvailable by
over 2 GiB between two polls. The feed starts at the real psutil reading the window planned from
and moves only when a test says "another app took N bytes". The pure-function tests below read
psutil for real.
"""

from __future__ import annotations

from dataclasses import replace

from app.machine.devices import resolve_gpus, snapshot
from app.machine.nvml_session import NvmlSession
from app.planner.devices import HostMemory, Inventory
from app.planner.plan_types import Plan, PlanMode
from app.planner.units import Bytes, GiB, MiB
from app.ui.live_replan import HOST_MIN_MOVE, host_threshold, refreshed_inventory
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.ui.windows import gpus_read

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"
TAKEN = 3 * GiB // 2
DEADLINE_MS = 10_000


class HostFeed:
    """Host RAM as psutil read it when the window planned, less what "another app" took; no
    reading (None) until the test hands it that base."""

    def __init__(self) -> None:
        self.base: HostMemory | None = None
        self.taken = 0

    def __call__(self) -> HostMemory | None:
        base = self.base
        return None if base is None else replace(base, available=base.available - self.taken)


def _cpu_window(qtbot, tmp_path, shape_model) -> tuple[MainWindow, HostFeed]:
    feed = HostFeed()
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", read_host=feed)
    gpus_read(qtbot, w)
    feed.base = w.current.inventory.host  # the real reading the first plan uses
    qtbot.addWidget(w)
    w.show()
    assert not w.current.inventory.gpus  # real NVML: no driver here
    with qtbot.waitSignal(w.planned):
        assert w.open_model(shape_model(LLAMA8B))
    return w, feed


def _plan(w: MainWindow) -> Plan:
    assert w.plan is not None
    return w.plan


def test_another_app_taking_host_ram_replans_the_cpu_plan_and_freeing_it_replans_back(
        qtbot, tmp_path, shape_model):
    w, feed = _cpu_window(qtbot, tmp_path, shape_model)
    before = _plan(w)
    assert before.mode == PlanMode.CPU and before.feasible
    caption = w.budget.host_row.caption.text()
    feed.taken = TAKEN
    qtbot.waitUntil(lambda: _plan(w).host.available == before.host.available - TAKEN, timeout=DEADLINE_MS)
    assert _plan(w).host.free == before.host.free - TAKEN  # what is left for the model shrank with it
    assert w.budget.host_row.caption.text() != caption  # the host bar says so
    assert f"free {Bytes(before.host.available - TAKEN)}" in w.devices.host_card.caption.text()
    assert w.live.applied == 1
    feed.taken = 0  # the other app quits
    qtbot.waitUntil(lambda: _plan(w).host.available == before.host.available, timeout=DEADLINE_MS)
    assert w.budget.host_row.caption.text() == caption
    assert w.live.applied == 2
    w.close()


def test_another_app_taking_most_of_the_ram_turns_the_cpu_verdict(qtbot, tmp_path, shape_model):
    w, feed = _cpu_window(qtbot, tmp_path, shape_model)
    before = _plan(w)
    assert before.feasible and "Fits" in w.budget.verdict.text()
    # a GiB short of what the model needs in host RAM (the prompt cache, auto-sized, would shrink to 0 first)
    feed.taken = before.host.available - before.host.allocated + GiB
    qtbot.waitUntil(lambda: not _plan(w).feasible, timeout=DEADLINE_MS)
    assert _plan(w).host.free < 0 and "short" in w.budget.host_row.caption.text()
    assert "Fits" not in w.budget.verdict.text()
    feed.taken = 0
    qtbot.waitUntil(lambda: _plan(w).feasible, timeout=DEADLINE_MS)
    assert "Fits" in w.budget.verdict.text()
    w.close()


def test_host_ram_moving_less_than_the_threshold_does_not_replan(qtbot, tmp_path, shape_model):
    w, feed = _cpu_window(qtbot, tmp_path, shape_model)
    plans: list[Plan] = []
    w.planned.connect(plans.append)
    polls: list[object] = []
    w.poll.polled.connect(polls.append)
    feed.taken = HOST_MIN_MOVE - 64 * MiB
    qtbot.waitUntil(lambda: len(polls) >= 3, timeout=DEADLINE_MS)  # the window saw it three times
    assert plans == [] and w.live.applied == 0
    w.close()


def test_a_simulated_gpu_plan_follows_the_real_host_ram(qtbot, tmp_path, shape_model):
    w, feed = _cpu_window(qtbot, tmp_path, shape_model)
    with qtbot.waitSignal(w.planned):
        w.devices.choose_simulated("RTX 4090")
    feed.base = w.current.inventory.host  # choosing the card read psutil again
    before = _plan(w)
    assert before.gpus and before.gpus[0].simulated
    feed.taken = TAKEN
    qtbot.waitUntil(lambda: _plan(w).host.available == before.host.available - TAKEN, timeout=DEADLINE_MS)
    after = _plan(w)
    assert after.gpus[0].simulated and after.gpus[0].total == before.gpus[0].total  # the card stays
    assert not w.real_inventory.gpus  # a live host reading does not make the simulated card "real"
    w.close()


def test_a_host_replan_waits_for_the_drag_to_end(qtbot, tmp_path, shape_model):
    w, feed = _cpu_window(qtbot, tmp_path, shape_model)
    before = _plan(w)
    plans: list[Plan] = []
    w.planned.connect(plans.append)
    w.settings.context.slider.setSliderDown(True)  # the user holds the slider
    feed.taken = TAKEN
    qtbot.waitUntil(lambda: w.live.deferred > 0, timeout=DEADLINE_MS)
    assert plans == []  # nothing re-planned under the user's hand
    with qtbot.waitSignal(w.planned, timeout=DEADLINE_MS):
        w.settings.context.slider.setSliderDown(False)
    assert plans[-1].host.available == before.host.available - TAKEN
    assert w.live.applied == 1
    w.close()


def _host(available: int) -> HostMemory:
    return HostMemory(total=24 * GiB, available=available)


def test_host_moves_beyond_the_threshold_refresh_the_inventory_and_smaller_ones_do_not():
    session = NvmlSession()  # no driver here: the snapshot is not ok, but host RAM is read
    snap = snapshot(session, None)
    session.close()
    assert not snap.ok and snap.host is not None and snap.host.total > 0
    inv = Inventory(gpus=(), host=_host(snap.host.available - 2 * GiB))
    new = refreshed_inventory(inv, snap, margin=256 * MiB)
    assert new is not None and new.host == snap.host and new.gpus == ()  # the CPU plan re-plans
    assert refreshed_inventory(replace(inv, host=snap.host), snap, margin=256 * MiB) is None
    # The floor: a default 256 MiB margin still needs a 512 MiB move; a larger margin raises it.
    assert host_threshold(256 * MiB) == HOST_MIN_MOVE == 512 * MiB
    assert host_threshold(2 * GiB) == 2 * GiB
    near = replace(snap, host=_host(inv.host.available + 400 * MiB))
    assert refreshed_inventory(inv, near, margin=256 * MiB) is None
    far = replace(snap, host=_host(inv.host.available - 1 * GiB))
    assert refreshed_inventory(inv, far, margin=256 * MiB) is not None
    assert refreshed_inventory(inv, far, margin=2 * GiB) is None
    assert refreshed_inventory(inv, replace(snap, host=None), margin=0) is None  # nothing read


def test_simulated_cards_keep_their_numbers_while_host_ram_moves():
    sim = resolve_gpus(["RTX 4090"])
    session = NvmlSession()
    snap = snapshot(session, None)
    session.close()
    assert snap.host is not None
    moved = replace(snap, host=replace(snap.host, available=sim.host.available - 3 * GiB))
    new = refreshed_inventory(sim, moved, margin=256 * MiB)
    assert new is not None and new.gpus == sim.gpus and new.host.available == sim.host.available - 3 * GiB
