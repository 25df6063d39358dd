"""GPU and host inventory: NVML replayed from the recorded H200 readings, error cases, simulated
cards, live snapshots that tell the engine's memory apart, and the real pynvml on this machine."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pynvml
import pytest

from app.commands.doctor import _nvml_lines
from app.machine.devices import Poller, inventory, nvml_status, process_rss, resolve_gpus
from app.planner.devices import simulated_gpu
from app.planner.units import GiB
from tests.fixtures.fake_nvml import FakeNvml, load_readings

TOTAL = 150_754_820_096  # tests/fixtures/h200/nvml-readings.txt
FREE_IDLE = 150_109_880_320
FREE_WITH_CTX = 149_557_477_376
RESERVED = 644_939_776


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# ---- replayed H200 --------------------------------------------------------------------------------

def test_recording_is_what_the_fake_replays() -> None:
    rec = load_readings()
    assert (rec.total, rec.free, rec.reserved, rec.v2_used) == (TOTAL, FREE_IDLE, RESERVED, 0)
    assert rec.processes == ((419, 543_162_368),)


def test_idle_h200_reads_v2_memory_exactly_as_recorded() -> None:
    fake = FakeNvml(pcie=(5, 16), uuid="GPU-replayed")
    inv = inventory(fake)
    assert inv.nvml_ok and inv.reason == ""
    assert (inv.driver, inv.cuda) == ("580.159.04", "13.0")
    (gpu,) = inv.gpus
    assert (gpu.name, gpu.engine_name, gpu.uuid) == ("NVIDIA H200", "CUDA0", "GPU-replayed")
    assert (gpu.total, gpu.free, gpu.used, gpu.reserved) == (TOTAL, FREE_IDLE, 0, RESERVED)
    assert gpu.memory_api == "v2" and gpu.source == "from NVML" and not gpu.simulated
    assert (gpu.pcie_gen, gpu.pcie_width) == (5, 16)
    assert gpu.processes == () and gpu.processes_known
    assert fake.calls["nvmlShutdown"] == 1 and not fake.initialised


def test_process_list_comes_out_as_recorded() -> None:
    inv = inventory(FakeNvml(state="torch_ctx"))
    (gpu,) = inv.gpus
    assert gpu.free == FREE_WITH_CTX
    assert [(p.pid, p.used, p.kind) for p in gpu.processes] == [(419, 543_162_368, "compute")]


def test_driver_without_v2_memory_reports_v1_used_and_same_free() -> None:
    v2 = inventory(FakeNvml()).gpus[0]
    v1 = inventory(FakeNvml(v2=False)).gpus[0]
    assert v1.free == v2.free == FREE_IDLE  # free agrees in both APIs
    assert (v1.used, v1.reserved, v1.memory_api) == (RESERVED, 0, "v1")  # v1 used includes reserved
    assert (v2.used, v2.reserved) == (0, RESERVED)


def test_process_of_this_machine_gets_its_name_from_psutil() -> None:
    me = psutil.Process()
    fake = FakeNvml(compute=[(me.pid, 1 * GiB)], graphics=[(me.pid, 1 * GiB)])
    (proc,) = inventory(fake).gpus[0].processes
    assert (proc.pid, proc.used, proc.name) == (me.pid, 1 * GiB, me.name())
    assert proc.kind == "compute+graphics"  # listed twice by NVML, shown once


# ---- errors ---------------------------------------------------------------------------------------

def test_no_driver_still_answers_with_the_reason_and_host_memory() -> None:
    fake = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    inv = inventory(fake)
    assert (inv.gpus, inv.nvml_ok, inv.reason) == ((), False, "no NVIDIA driver found")
    assert inv.host.total == psutil.virtual_memory().total and inv.host.available > 0
    assert fake.calls["nvmlShutdown"] == 0  # nothing to shut down after a failed init


def test_other_init_errors_keep_nvmls_text() -> None:
    inv = inventory(FakeNvml(init_error=pynvml.NVML_ERROR_NO_PERMISSION))
    assert inv.reason == "NVML: Insufficient Permissions"
    assert "Driver Not Loaded" in inventory(FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).reason


def test_gpu_lost_mid_read_is_skipped_with_a_warning() -> None:
    fake = FakeNvml(device_count=2, fail={(1, "nvmlDeviceGetMemoryInfo"): pynvml.NVML_ERROR_GPU_IS_LOST})
    inv = inventory(fake)
    assert [g.index for g in inv.gpus] == [0] and inv.gpus[0].free == FREE_IDLE
    assert inv.warnings == ("GPU 1 (NVIDIA H200) skipped: GPU is lost",)
    assert fake.calls["nvmlShutdown"] == 1 and not fake.initialised


def test_every_gpu_lost_gives_a_reason_and_still_shuts_down() -> None:
    fake = FakeNvml(fail={(0, "nvmlDeviceGetHandleByIndex"): pynvml.NVML_ERROR_GPU_IS_LOST})
    inv = inventory(fake)
    assert inv.gpus == () and inv.nvml_ok
    assert inv.reason == "no usable NVIDIA GPU (GPU 0 skipped: NVML: GPU is lost)"
    assert not fake.initialised
    assert inventory(FakeNvml(device_count=0)).reason == "no NVIDIA GPU found"


def test_processes_not_supported_keeps_the_gpu() -> None:
    nope = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake = FakeNvml(state="torch_ctx", fail={(0, "nvmlDeviceGetComputeRunningProcesses"): nope,
                                             (0, "nvmlDeviceGetGraphicsRunningProcesses"): nope})
    inv = inventory(fake)
    (gpu,) = inv.gpus
    assert gpu.free == FREE_WITH_CTX and gpu.processes == () and not gpu.processes_known
    assert inv.warnings == ("GPU 0 (NVIDIA H200): NVML does not list its processes here",)


def test_this_machine_with_the_real_pynvml() -> None:
    inv = inventory()
    if _driver_present():
        assert inv.nvml_ok or inv.reason.startswith(("NVML: ", "NVIDIA driver not loaded"))
    else:
        assert (inv.gpus, inv.nvml_ok, inv.reason) == ((), False, "no NVIDIA driver found")
        assert resolve_gpus(["auto"]).reason == "no NVIDIA driver found"
    assert inv.host.total == psutil.virtual_memory().total


def test_doctor_nvml_report() -> None:
    status = nvml_status(FakeNvml(state="torch_ctx", pcie=(5, 16)))
    assert {k: status[k] for k in ("ok", "reason", "driver", "cuda", "gpus")} == {
        "ok": True, "reason": "", "driver": "580.159.04", "cuda": "13.0", "gpus": 1}
    assert status["devices"][0]["processes"][0]["pid"] == 419
    lines = _nvml_lines(status)
    assert "driver 580.159.04, CUDA 13.0, 1 GPU" in lines[0]
    assert "NVIDIA H200: 139.3 GiB free of 140.4 GiB (1 process, PCIe gen5 x16)" in lines[1]
    down = _nvml_lines(nvml_status(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)))
    assert "unavailable — no NVIDIA driver found" in down[0]


# ---- simulated cards ------------------------------------------------------------------------------

def test_simulated_h200_has_the_recorded_usable_memory() -> None:
    gpu = simulated_gpu("h200", 0)
    assert (gpu.total, gpu.free, gpu.reserved) == (TOTAL, FREE_IDLE, RESERVED)
    assert gpu.simulated and gpu.name == "NVIDIA H200 (simulated)" and gpu.engine_name == "CUDA0"


@pytest.mark.parametrize(("spec", "name", "gib"), [
    ("RTX 4090", "NVIDIA GeForce RTX 4090 (simulated)", 24),
    (" rtx-4090 ", "NVIDIA GeForce RTX 4090 (simulated)", 24),
    ("NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090 (simulated)", 32),
    ("rtx pro 6000", "NVIDIA RTX PRO 6000 Blackwell (simulated)", 96),
    ("A100 80GB", "NVIDIA A100-SXM4-80GB (simulated)", 80),
    ("MyCard:20GiB", "MyCard (simulated)", 20),
    ("H200:100GiB", "NVIDIA H200 (simulated)", 100),
])
def test_simulated_cards(spec: str, name: str, gib: int) -> None:
    gpu = simulated_gpu(spec, 1)
    assert (gpu.name, gpu.total, gpu.free, gpu.index, gpu.engine_name) == (name, gib * GiB, gib * GiB, 1, "CUDA1")


def test_unknown_card_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown GPU 'RTX 9999'.*RTX 4090.*H200.*MyCard:20GiB"):
        simulated_gpu("RTX 9999", 0)
    with pytest.raises(ValueError, match="not a size"):
        simulated_gpu("MyCard:lots", 0)


def test_a_card_size_without_a_unit_is_refused_not_planned_as_bytes() -> None:
    # 'MyCard:24' would be a 24-byte card whose plan says "short by 6 GiB": say what was missing
    with pytest.raises(ValueError, match=r"'MyCard:24': 24 B is not a GPU's memory; give a unit, e\.g\. 'MyCard:24GiB'"):
        simulated_gpu("MyCard:24", 0)
    # a unit given, just too little: no suggestion that appends another unit ("1MiBGiB")
    with pytest.raises(ValueError, match=r"'MyCard:1MiB': 1 MiB is not a GPU's memory \(at least .*\), e\.g\. 'MyCard:24GiB'"):
        simulated_gpu("MyCard:1MiB", 0)


def test_resolve_gpus() -> None:
    two = resolve_gpus(["H200", "H200"])
    assert [g.engine_name for g in two.gpus] == ["CUDA0", "CUDA1"] and all(g.simulated for g in two.gpus)
    assert two.host.total == psutil.virtual_memory().total
    assert [g.name for g in resolve_gpus(["RTX 4090,L40S"]).gpus] == [
        "NVIDIA GeForce RTX 4090 (simulated)", "NVIDIA L40S (simulated)"]
    real = resolve_gpus([], FakeNvml())
    assert [(g.name, g.free, g.simulated) for g in real.gpus] == [("NVIDIA H200", FREE_IDLE, False)]
    mixed = resolve_gpus(["auto", "RTX 4090"], FakeNvml())
    assert [(g.index, g.simulated) for g in mixed.gpus] == [(0, False), (1, True)]


# ---- live snapshots -------------------------------------------------------------------------------

@pytest.fixture
def engine_tree() -> Iterator[tuple[int, int]]:
    """A real parent process (stands in for the engine) and its child; yields their PIDs."""
    code = ("import subprocess, sys\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)\n"
            "print(c.pid, flush=True)\n"
            "sys.stdin.read()\n"
            "c.stdin.close(); c.wait()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None and parent.stdin is not None
    child = int(parent.stdout.readline())
    try:
        yield parent.pid, child
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)


def test_snapshot_tells_the_engine_and_its_children_from_others(engine_tree: tuple[int, int]) -> None:
    engine, child = engine_tree
    fake = FakeNvml(compute=[(engine, 2 * GiB), (child, 1 * GiB), (419, 543_162_368)])
    with Poller(fake) as poller:
        snap = poller.poll(engine_pid=engine)
        (gpu,) = snap.gpus
        assert (gpu.engine_used, gpu.other_used) == (3 * GiB, 543_162_368)
        assert {p.pid for p in gpu.processes if p.is_engine} == {engine, child}
        assert next(p for p in gpu.processes if p.pid == engine).name == psutil.Process(engine).name()
        assert poller.poll(engine_pid=None).gpus[0].engine_used == 0


def test_poller_inits_once_follows_changes_and_shuts_down() -> None:
    fake = FakeNvml(state="torch_ctx")
    poller = Poller(fake)
    first = poller.poll()
    assert first.ok and first.gpus[0].free == FREE_WITH_CTX and first.gpus[0].other_used == 543_162_368
    fake.state = "idle"  # the other process exits
    second = poller.poll()
    assert second.gpus[0].free == FREE_IDLE and second.gpus[0].processes == ()
    for _ in range(5):
        poller.poll()
    assert fake.calls["nvmlInit"] == 1 and fake.calls["nvmlDeviceGetName"] == 1  # static info cached
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 7
    poller.close()
    assert not fake.initialised and not poller.poll().ok


def test_the_pollers_inventory_reads_through_its_one_session_as_a_fresh_one_would() -> None:
    fake = FakeNvml(state="torch_ctx")
    poller = Poller(fake)
    poller.poll()
    inv = poller.inventory()  # the window's "Real GPUs": NVML is not opened again for it
    fresh = inventory(FakeNvml(state="torch_ctx"))
    assert inv.gpus == fresh.gpus and (inv.nvml_ok, inv.driver, inv.cuda) == (fresh.nvml_ok, fresh.driver, fresh.cuda)
    fake.state = "idle"
    assert poller.inventory().gpus[0].free == FREE_IDLE
    assert fake.calls["nvmlInit"] == 1 and fake.initialised
    poller.close()
    assert not fake.initialised and not poller.inventory().gpus


def test_poller_without_driver_and_with_a_lost_gpu() -> None:
    fake = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with Poller(fake) as poller:
        snaps = [poller.poll() for _ in range(3)]
    assert all(not s.ok and s.reason == "no NVIDIA driver found" for s in snaps)
    assert fake.calls["nvmlInit"] == 1  # a missing driver is not retried every second
    lost = FakeNvml(device_count=2)
    with Poller(lost) as poller:
        assert len(poller.poll().gpus) == 2
        lost.fail[(1, "nvmlDeviceGetMemoryInfo")] = pynvml.NVML_ERROR_GPU_IS_LOST
        snap = poller.poll()
    assert [g.index for g in snap.gpus] == [0]
    assert snap.warnings == ("GPU 1 (NVIDIA H200) skipped: GPU is lost",)
    assert not lost.initialised


def test_snapshot_reads_the_engines_rss_children_included(engine_tree: tuple[int, int]) -> None:
    engine, child = engine_tree

    def rss() -> int:
        return sum(psutil.Process(p).memory_info().rss for p in (engine, child))

    before = rss()
    with Poller(FakeNvml()) as poller:
        snap = poller.poll(engine_pid=engine)
        assert poller.poll(engine_pid=None).engine_rss is None  # no engine: nothing read
    after = rss()
    assert snap.engine_rss is not None
    assert snap.engine_rss > psutil.Process(engine).memory_info().rss  # the child's counts too
    assert min(before, after) * 0.9 <= snap.engine_rss <= max(before, after) * 1.1


def test_rss_of_a_process_that_is_gone_is_none_and_read_without_nvml_too() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    assert process_rss(gone.pid) is None
    with Poller(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)) as poller:
        snap = poller.poll(engine_pid=os.getpid())
    assert not snap.ok and snap.engine_rss is not None and snap.engine_rss > 0  # psutil needs no driver
