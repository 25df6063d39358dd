"""Live re-planning: when another app takes or releases GPU memory or host RAM, plan again.

The plan starts from an inventory read once; the poll worker reads NVML and psutil about once a
second (``app.machine.devices.snapshot``). The window re-plans from the new reading when

- a real GPU's free memory moved by more than the plan's safety margin, or
- host available RAM moved by more than ``host_threshold(margin)`` = max(margin, 512 MiB) — also
  with no GPU at all (the CPU plan) and with simulated GPUs (their host RAM is this machine's).

Why a larger floor for the host: NVML's free memory only moves when a process allocates on the
card, but psutil's ``available`` drifts all the time (page cache, other apps starting and ending)
by a few hundred MiB; re-planning on every such wobble would redraw the bars every second. Host
budgets are in GiB (mapped weights, the KV host tail), so a 512 MiB move is still well under any
verdict that matters, and a larger safety margin raises the floor with it.

Re-plans are coalesced (the latest snapshot wins, at most one per ``MIN_INTERVAL_S``) and deferred
while the user drags the context slider or while the launched engine runs (its own memory, GPU or
host, would read as "other apps").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from app.planner.devices import GpuDevice, HostMemory, Inventory, Snapshot
from app.planner.units import MiB
from app.ui.qt import QObject, QTimer

#: At most one live re-plan per this many seconds.
MIN_INTERVAL_S = 1.0
#: While deferred (a drag), look again after this many milliseconds.
RETRY_MS = 250
#: Host available RAM must move by more than this (or the safety margin, if larger) to re-plan.
HOST_MIN_MOVE = 512 * MiB


def host_threshold(margin: int) -> int:
    """Bytes host available RAM must move by before a re-plan (see the module docstring)."""
    return max(margin, HOST_MIN_MOVE)


def _refreshed_gpus(inv: Inventory, snap: Snapshot, margin: int) -> tuple[tuple[GpuDevice, ...], bool]:
    """The GPUs with the snapshot's readings, and whether a real one's free memory moved by more
    than ``margin``. Simulated cards (or an unusable NVML) keep the inventory's numbers."""
    if not snap.ok or not inv.gpus or any(g.simulated for g in inv.gpus):
        return inv.gpus, False
    samples = {s.index: s for s in snap.gpus}
    moved = False
    gpus = []
    for g in inv.gpus:
        s = None if g.is_rpc else samples.get(g.index)  # a worker's device: not this machine's NVML
        if s is None or s.total != g.total:  # a different card list: leave it to "Real GPUs"
            gpus.append(g)
            continue
        moved = moved or abs(s.free - g.free) > margin
        gpus.append(replace(g, free=s.free, used=s.used, reserved=s.reserved, processes=s.processes,
                            processes_known=s.processes_known))
    return tuple(gpus), moved


def _refreshed_host(host: HostMemory, now: HostMemory | None, margin: int) -> tuple[HostMemory, bool]:
    if now is None:
        return host, False
    return now, abs(now.available - host.available) > host_threshold(margin)


def refreshed_inventory(inv: Inventory, snap: Snapshot, margin: int) -> Inventory | None:
    """``inv`` with the snapshot's memory readings (GPUs and host), if a real GPU's free memory
    moved by more than ``margin`` bytes or host available RAM by more than ``host_threshold``;
    None when nothing that matters changed."""
    gpus, gpus_moved = _refreshed_gpus(inv, snap, margin)
    host, host_moved = _refreshed_host(inv.host, snap.host, margin)
    return replace(inv, gpus=gpus, host=host) if gpus_moved or host_moved else None


class LiveReplan(QObject):
    """Feed it every snapshot (``offer``); it calls ``apply(inventory)`` when a re-plan is due.

    ``current()`` is the planning inventory now, ``margin()`` the safety margin in bytes, ``busy()``
    True while a re-plan must wait (a drag, a running engine).
    """

    def __init__(self, current: Callable[[], Inventory], margin: Callable[[], int],
                 busy: Callable[[], bool], apply: Callable[[Inventory], None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._current, self._margin, self._busy, self._apply = current, margin, busy, apply
        self._pending: Snapshot | None = None
        self._last = float("-inf")  # time.monotonic() of the last live re-plan
        self.applied = 0  # live re-plans done
        self.deferred = 0  # times a due re-plan waited for a drag or an engine
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._fire)

    def offer(self, snap: object) -> None:
        """A new live reading (GUI thread). Only the latest one pending is kept."""
        if not isinstance(snap, Snapshot) or refreshed_inventory(self._current(), snap, self._margin()) is None:
            self._pending = None  # back within the margin: nothing is due
            return
        self._pending = snap
        if not self._timer.isActive():
            wait = MIN_INTERVAL_S - (time.monotonic() - self._last)
            self._timer.start(round(min(max(wait, 0.0), MIN_INTERVAL_S) * 1000))

    def _fire(self) -> None:
        snap, self._pending = self._pending, None
        if snap is None:
            return
        if self._busy():
            self.deferred += 1
            self._pending = snap
            self._timer.start(RETRY_MS)
            return
        inv = refreshed_inventory(self._current(), snap, self._margin())  # the inventory may have changed
        if inv is None:
            return
        self._last = time.monotonic()
        self.applied += 1
        self._apply(inv)

    def stop(self) -> None:
        self._timer.stop()
        self._pending = None
