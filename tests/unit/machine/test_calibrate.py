"""The speed calibration (app/machine/calibrate.py): measured once per machine identity and cached;
a different identity is measured again; a read-only cache still gives calibrated figures, writes
nothing half, and says the learned ratio could not be kept; every figure says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

from app.machine import calibrate
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.units import GiB


def desktop(ram_gib: int = 32) -> Inventory:
    return Inventory((GpuDevice(0, "NVIDIA GeForce RTX 4090", 24 * GiB, 24 * GiB, kind=DeviceKind.SIMULATED),),
                     HostMemory(ram_gib * GiB, ram_gib * GiB - GiB))


def test_measured_once_per_identity_and_again_when_it_changes(tmp_path: Path) -> None:
    store = tmp_path / "speed-calibration.json"
    first = calibrate.calibration(desktop(), path=store)
    assert first["saved"] and first["host_bandwidth"] > 0 and first["host_flops"] > 0
    assert calibrate.calibration(desktop(), path=store)["measured_at"] == first["measured_at"]  # cached
    other = calibrate.calibration(desktop(64), path=store)  # more RAM: another machine
    assert other["identity"]["ram"] == 64 * GiB and other["measured_at"] != first["measured_at"]
    assert json.loads(store.read_text())["identity"]["ram"] == 64 * GiB
    # a plan for no card, or for a simulated one, is the same host: nothing measured again
    cpu_only = Inventory((), desktop(64).host)
    assert calibrate.calibration(cpu_only, path=store)["measured_at"] == other["measured_at"]


def test_figures_say_which_are_calibrated_and_a_simulated_card_stays_default(tmp_path: Path) -> None:
    fig = calibrate.machine_speed(desktop(), path=tmp_path / "c.json")
    assert fig.host_bandwidth.calibrated and fig.host_flops.calibrated
    assert str(fig.host_bandwidth.source) == "calibrated on this machine (a 64 MiB copy)"
    dev = fig.devices[0]
    assert not dev.bandwidth.calibrated and str(dev.bandwidth.source).startswith("default: the card's specification")
    assert not fig.calibrated and fig.to_json()["devices"][0]["bandwidth"]["calibrated"] is False


def test_a_launch_teaches_the_scale_for_these_devices_only(tmp_path: Path) -> None:
    store = tmp_path / "c.json"
    assert calibrate.learn(desktop(), 0.5, 2.0, path=store)
    fig = calibrate.machine_speed(desktop(), path=store)
    assert (fig.decode_scale.value, fig.prefill_scale.value) == (0.5, 2.0) and fig.decode_scale.calibrated
    cpu = Inventory((), desktop().host)
    assert calibrate.machine_speed(cpu, path=store).decode_scale.value == 1.0  # learned on the card, not the CPU


def test_a_cache_that_cannot_be_written_gives_figures_and_writes_nothing(tmp_path: Path) -> None:
    # (a cache "directory" that is a file: every write fails with an OSError, as on a read-only or
    # full file system; the tests run as root, for whom a read-only mode bit would not stop a write)
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    data = calibrate.calibration(desktop(), path=blocker / "c.json")
    assert data["saved"] is False and data["host_bandwidth"] > 0
    assert calibrate.machine_speed(desktop(), path=blocker / "c.json").host_bandwidth.calibrated
    assert calibrate.calibration(desktop(), path=blocker / "c.json")["measured_at"] == data["measured_at"]  # once
    assert not calibrate.learn(desktop(), 0.5, None, path=blocker / "c.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"] and blocker.read_text() == "not a directory"
