"""The speed calibration (app/machine/calibrate.py): measured once per machine identity and cached;
a different identity is measured again; a read-only cache still gives calibrated figures, writes
nothing half, and says the learned ratio could not be kept; every figure says where it came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

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


def test_a_launch_teaches_the_scale_for_its_model_only(tmp_path: Path) -> None:
    """A 2-layer toy model's reply (decode ×0.56, prefill ×0.25) had rescaled every later plan of an 8B
    on the same CPU: a ratio belongs to the devices and the model it was measured with."""
    store = tmp_path / "c.json"
    assert calibrate.learn(desktop(), 0.56, 0.25, path=store, model="tiny-llama-chat")
    toy = calibrate.machine_speed(desktop(), path=store, model="tiny-llama-chat")
    assert (toy.decode_scale.value, toy.prefill_scale.value) == (0.56, 0.25)
    other = calibrate.machine_speed(desktop(), path=store, model="Meta-Llama-3.1-8B-Instruct")
    assert (other.decode_scale.value, other.prefill_scale.value) == (1.0, 1.0) and not other.decode_scale.calibrated


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


def test_an_engine_run_is_made_once_per_device_and_head_size_and_kept(tmp_path: Path) -> None:
    store = tmp_path / "c.json"
    worker = GpuDevice(0, "RPC worker 10.0.0.2:50052", 8 * GiB, 8 * GiB, kind=DeviceKind.RPC,
                       endpoint="10.0.0.2:50052")
    inv = Inventory((worker,), desktop().host)
    calls: list[tuple[str, int]] = []

    def run(device: GpuDevice | None, head_dim: int) -> dict[str, dict[str, float]]:
        calls.append((calibrate.engine_run_key(device), head_dim))
        slow = 1.0 if device is None else 2.0  # the one-thread worker is the slower
        return {"f16": {"decode": slow * 80e-9, "prefill": slow * 8e-9, "compute": 40e9 / slow},
                "q8_0": {"decode": slow * 40e-9, "prefill": slow * 30e-9}}

    fig = calibrate.machine_speed(inv, path=store, engine_run=run, head_dims=(32,))
    assert calls == [("host", 32), ("RPC0[10.0.0.2:50052] RPC worker 10.0.0.2:50052", 32)]
    dev = fig.devices[0]
    assert [(a.kv_type, a.head_dim, a.decode.value) for a in dev.attention] == [("f16", 32, 160e-9),
                                                                                ("q8_0", 32, 80e-9)]
    assert dev.flops.value == 20e9 and dev.flops.calibrated and dev.attention[0].decode.calibrated
    assert str(dev.flops.source) == ("calibrated on this machine (llama-batched-bench on the self-test model, "
                                     "flash attention on: its Q4_0 matmuls)")
    assert [a.decode.value for a in fig.host_cpu_attention] == [80e-9, 40e-9]
    # the host's matmul rate is its engine run's too (the engine's quantized matmuls at its threads),
    # not the numpy float32 matmul's
    assert fig.host_flops.value == 40e9 and "Q4_0 matmuls" in str(fig.host_flops.source)
    assert not dev.bandwidth.calibrated  # what the run does not measure stays a named default
    # kept: a second plan runs nothing; another model's head size runs again, for it only
    calibrate.machine_speed(inv, path=store, engine_run=run, head_dims=(32,))
    calibrate.machine_speed(inv, path=store, engine_run=run, head_dims=(32, 128))
    assert calls[2:] == [("host", 128), ("RPC0[10.0.0.2:50052] RPC worker 10.0.0.2:50052", 128)]
    assert sorted(json.loads(store.read_text())["engine_runs"]["host"]) == ["128", "32"]


def test_the_gqa_runs_decode_is_kept_beside_the_whole(tmp_path: Path) -> None:
    run = {"f16": {"decode": 190e-9, "prefill": 19e-9, "decode_gqa": 90e-9, "gqa": 4.0},
           "q8_0": {"decode": 90e-9, "prefill": 80e-9}}
    fig = calibrate.machine_speed(desktop(), path=tmp_path / "c.json", engine_run=lambda d, h: run, head_dims=(128,))
    f16, q8 = fig.host_cpu_attention
    assert f16.decode_gqa is not None and f16.decode_gqa.value == 90e-9 and f16.decode_gqa.calibrated and f16.gqa == 4
    assert "128-wide heads, 4 query heads a KV head" in str(f16.decode_gqa.source)
    assert q8.decode_gqa is None and q8.gqa == 1  # (no GQA run for a quantized KV: the whole cost for any model)


def test_the_decode_curve_is_kept_as_measured_and_a_malformed_one_is_none(tmp_path: Path) -> None:
    """The deep runs' points (bytes a token reads, seconds a cell and head) price a decode by its KV
    (speed.CpuAttention.decode_over); a stored curve of any other shape (a hand-edited or damaged
    cache) is none, and the decode is priced as a run without one (``decode_deep``)."""
    curve = [[1.2e6, 80e-9], [4.3e6, 85e-9], [17e6, 104e-9], [67e6, 170e-9]]
    run = {"f16": {"decode": 80e-9, "prefill": 19e-9, "decode_deep": 170e-9, "decode_curve": curve}}
    fig = calibrate.machine_speed(desktop(), path=tmp_path / "c.json", engine_run=lambda d, h: run, head_dims=(32,))
    assert fig.host_cpu_attention[0].decode_curve == tuple(tuple(p) for p in curve)
    for bad in ([[1.2e6, 80e-9]], [[1.2e6, 80e-9], [4e6, "x"]], [[1.2e6, 80e-9], [-4e6, 90e-9]],
                [[1.2e6, 80e-9], [4e6, float("nan")]], [[1.2e6, 80e-9, 3], [4e6, 90e-9]], "curve", [[True, 1.0], [2, 3]]):
        got = calibrate.attention_figures({"32": {"f16": run["f16"] | {"decode_curve": bad}}})
        assert got[0].decode_curve == () and got[0].decode_deep is not None


def test_a_workers_split_cost_is_its_decode_at_no_cells_over_the_hosts(tmp_path: Path) -> None:
    """The same self-test model decodes in 0.5 ms a token at no cells on the host and 1.7 ms through the
    worker: its two graph splits (the embeddings in, the logits out) cost 0.6 ms each."""
    worker = GpuDevice(0, "RPC worker 10.0.0.2:50052", 8 * GiB, 8 * GiB, kind=DeviceKind.RPC,
                       endpoint="10.0.0.2:50052")
    inv = Inventory((worker,), desktop().host)

    def run(device: GpuDevice | None, head_dim: int) -> dict[str, dict[str, float]]:
        base = 0.5e-3 if device is None else 1.7e-3
        return {"f16": {"decode": 80e-9, "prefill": 8e-9, "compute": 40e9, "decode_base": base}}

    fig = calibrate.machine_speed(inv, path=tmp_path / "c.json", engine_run=run, head_dims=(32,))
    split = fig.devices[0].split_s
    assert split.value == pytest.approx(0.6e-3) and split.calibrated and "per split" in str(split.source)
    # a run without the figure (an older cache) keeps the named default
    old = calibrate.machine_speed(inv, path=tmp_path / "d.json", head_dims=(32,),
                                  engine_run=lambda d, h: {"f16": {"decode": 80e-9, "prefill": 8e-9}})
    assert not old.devices[0].split_s.calibrated


def test_a_tokens_fixed_cost_is_the_host_server_runs_and_prices_every_token(tmp_path: Path) -> None:
    """The host's engine run timed llama-server's tokens on the self-test model at 0.2 and 0.3 ms (two
    head sizes): a token costs their median, said as calibrated, where the default was 1 ms; a worker's
    run has none, and a run without it (an older cache) keeps the default."""
    from app.planner.solve import speed

    def run(device: GpuDevice | None, head_dim: int) -> dict[str, dict[str, float]]:
        out = {"f16": {"decode": 80e-9, "prefill": 8e-9, "compute": 40e9, "decode_base": 0.1e-3}}
        return out | ({calibrate.SERVER_RUN: {"token": {64: 0.2e-3, 128: 0.3e-3}[head_dim]}} if device is None else {})

    fig = calibrate.machine_speed(desktop(), path=tmp_path / "c.json", engine_run=run, head_dims=(64, 128))
    assert fig.token_overhead.value == pytest.approx(0.25e-3) and fig.token_overhead.calibrated
    assert "llama-server's own timings" in str(fig.token_overhead.source)
    assert fig.to_json()["token_overhead"]["calibrated"] is True
    old = calibrate.machine_speed(desktop(), path=tmp_path / "d.json", head_dims=(64,),
                                  engine_run=lambda d, h: {"f16": {"decode": 80e-9, "prefill": 8e-9}})
    assert old.token_overhead.value == speed.TOKEN_OVERHEAD_S and not old.token_overhead.calibrated
    # its figures still read as the KV types' (the server run is not a KV type)
    assert [a.kv_type for a in fig.host_cpu_attention] == ["f16", "f16"]


def test_without_an_engine_run_a_worker_keeps_the_defaults(tmp_path: Path) -> None:
    worker = GpuDevice(0, "RPC worker 10.0.0.2:50052", 8 * GiB, 8 * GiB, kind=DeviceKind.RPC,
                       endpoint="10.0.0.2:50052")
    fig = calibrate.machine_speed(Inventory((worker,), desktop().host), path=tmp_path / "c.json")
    assert fig.devices[0].attention == () and fig.host_cpu_attention == ()
    assert not fig.devices[0].flops.calibrated
    assert "float32 matmul" in str(fig.host_flops.source)  # the host: its numpy figure, still calibrated
    assert fig.host_flops.calibrated


def test_host_figures_timed_on_a_busy_machine_are_timed_again_when_it_is_quiet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's bandwidth timed under load read half its idle figure; it is kept (a plan needs one)
    but marked, and timed again by the first plan on a quiet machine; what was learned stays."""
    store = tmp_path / "c.json"
    monkeypatch.delenv(calibrate.MEASURE_WHEN_BUSY_ENV)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(calibrate, "measure_host_bandwidth", lambda: 9e9)
    busy = calibrate.machine_speed(desktop(), path=store)
    assert busy.host_bandwidth.value == 9e9 and json.loads(store.read_text())["measured_busy"].startswith("load 64")
    assert calibrate.learn(desktop(), 0.5, None, path=store)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 3.0)
    monkeypatch.setattr(calibrate, "measure_host_bandwidth", lambda: 20e9)
    quiet = calibrate.machine_speed(desktop(), path=store)
    assert quiet.host_bandwidth.value == 20e9 and quiet.decode_scale.value == 0.5
    assert json.loads(store.read_text())["measured_busy"] is None



def test_a_core_in_use_makes_the_machine_busy_before_the_load_average_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1-minute load average lags: one core taken on two read 0.74 a core, and the engine run, a
    thread a core, measured f16 attention ×5 slow with its five runs agreeing. The CPU in use now counts."""
    monkeypatch.delenv(calibrate.MEASURE_WHEN_BUSY_ENV)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 50.0)
    assert calibrate.busy() == "50% of the CPU in use"
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 5.0)
    assert calibrate.busy() is None
    monkeypatch.setenv(calibrate.MEASURE_WHEN_BUSY_ENV, "1")  # the tests about the run: measured anyway
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 99.0)
    assert calibrate.busy() is None
    # ... but a launch's speed far below its prediction is still explained by the machine's load
    assert calibrate.load_now() == "99% of the CPU in use"


def test_a_run_kept_before_the_decode_in_cache_was_measured_is_made_again_once(tmp_path: Path) -> None:
    """Runs of version 1 have no GQA run (a GQA model's CPU attention is priced ×2–4 slow without
    it): the next plan makes the run again, and keeps it."""
    store = tmp_path / "c.json"
    calls: list[int] = []

    def run(_device: GpuDevice | None, head: int) -> dict[str, dict[str, float]]:
        calls.append(head)
        return {"f16": {"decode": 190e-9, "prefill": 19e-9, "decode_gqa": 90e-9, "gqa": 4.0}}

    calibrate.machine_speed(desktop(), path=store, engine_run=run, head_dims=(128,))
    old = json.loads(store.read_text())
    old["engine_runs"]["host"]["128"] = {"f16": {"decode": 190e-9, "prefill": 19e-9}}  # as version 1 kept it
    store.write_text(json.dumps(old))
    assert calibrate.missing_engine_runs(desktop(), (128,), path=store) == [(None, 128)]
    fig = calibrate.machine_speed(desktop(), path=store, engine_run=run, head_dims=(128,))
    assert calls == [128, 128] and fig.host_cpu_attention[0].decode_gqa is not None
    calibrate.machine_speed(desktop(), path=store, engine_run=run, head_dims=(128,))
    assert calls == [128, 128] and calibrate.missing_engine_runs(desktop(), (128,), path=store) == []


def test_a_learned_ratio_too_far_off_is_not_applied_nor_kept(tmp_path: Path) -> None:
    """An earlier version learned prefill ×0.0037 from a chat turn's 89 new tokens; it scaled every later
    plan of the model. A ratio outside PLAUSIBLE_RATIO is a measurement's fault: not applied if stored,
    not stored if taught."""
    store = tmp_path / "c.json"
    calibrate.learn(desktop(), 1.5, None, path=store, model="toy")
    data = json.loads(store.read_text())
    data["learned"][calibrate.learned_key(desktop(), "toy")]["prefill_scale"] = 0.0037  # as the earlier version kept it
    store.write_text(json.dumps(data))
    fig = calibrate.machine_speed(desktop(), path=store, model="toy")
    assert fig.decode_scale.value == 1.5 and fig.prefill_scale.value == 1.0 and not fig.prefill_scale.calibrated
    calibrate.learn(desktop(), 40.0, 0.01, path=store, model="other")
    assert json.loads(store.read_text())["learned"][calibrate.learned_key(desktop(), "other")] == {}
