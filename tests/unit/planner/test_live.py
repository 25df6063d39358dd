"""Live while serving (app/planner/live.py): a plan for the replayed H200, live snapshots taken by
the real poller from the fake NVML (this test process standing in for the engine: its RSS is real),
and the rows and warnings a user reads."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from app.machine.devices import Poller, host_memory, resolve_gpus
from app.planner.devices import HostMemory, Snapshot
from app.planner.gguf.model import read_shape
from app.planner.live import CPU_RUN_NOTE, HOST, RowState, host_planned, live_report
from app.planner.plan_types import Plan, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import Bytes, GiB, MiB
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_nvml import FakeNvml

MARGIN = 256 * MiB
ENGINE = os.getpid()  # a real process: its RSS is psutil's


@pytest.fixture(scope="module")
def plan() -> Plan:
    shape = read_shape(gguf_factory.ensure(shapes.TINY))
    p = make_plan(shape, resolve_gpus([], FakeNvml()), LaunchSettings(n_ctx=4096), safety=MARGIN)
    assert p.mode == PlanMode.STOCK and p.feasible and len(p.gpus) == 1
    return p


def _snap(fake: FakeNvml, host: HostMemory | None = None) -> Snapshot:
    with Poller(fake, read_host=lambda: host) as poller:
        return poller.poll(engine_pid=ENGINE)


def test_an_engine_on_its_gpu_reads_against_its_plan_with_others_free_and_host(plan: Plan) -> None:
    used = plan.gpus[0].used
    fake = FakeNvml(compute=[(ENGINE, used)])
    fake.taken = used  # what the engine took came off the recorded free memory
    host = host_memory()
    report = live_report(plan, _snap(fake, host), host_margin=MARGIN)
    gpu, hostrow = report.rows
    assert (gpu.device, gpu.state, gpu.engine, gpu.planned) == ("CUDA0", RowState.OK, used, used)
    recorded = fake.recorded
    assert gpu.free == recorded.free - used and gpu.margin == MARGIN
    assert gpu.others == recorded.total - recorded.free == plan.gpus[0].other_processes  # the driver's reserve
    assert hostrow.device == HOST and hostrow.state is RowState.OK and hostrow.free == host.available
    assert hostrow.engine is not None and hostrow.engine > 10 * MiB  # this process's real RSS
    assert hostrow.planned == host_planned(plan.host) and hostrow.prompt_cache == plan.host.prompt_cache
    assert report.warnings == () and report.note == ""


def test_free_vram_under_the_margin_warns_naming_the_device_the_numbers_and_what_to_do(plan: Plan) -> None:
    used = plan.gpus[0].used
    fake = FakeNvml(compute=[(ENGINE, used), (4_000_001, 139 * GiB)])  # another app took nearly all of it
    fake.taken = fake.recorded.free - 100 * MiB
    report = live_report(plan, _snap(fake), host_margin=MARGIN)
    gpu = report.rows[0]
    assert gpu.state is RowState.LOW and gpu.free == 100 * MiB
    (warning,) = report.warnings
    assert warning.startswith("CUDA0 (NVIDIA H200): free VRAM 100 MiB is under the 256 MiB safety margin")
    assert f"other apps hold {Bytes(gpu.others or 0)}" in warning and "more than when it was planned" in warning
    assert "close what took the memory, or stop the engine and plan again" in warning


def test_available_host_ram_under_the_margin_warns(plan: Plan) -> None:
    low = replace(host_memory(), available=200 * MiB)
    report = live_report(plan, _snap(FakeNvml(compute=[(ENGINE, plan.gpus[0].used)]), low), host_margin=MARGIN)
    hostrow = report.rows[-1]
    assert hostrow.state is RowState.LOW
    (warning,) = report.warnings
    assert warning.startswith("host RAM: available 200 MiB is under the 256 MiB safety margin (the engine holds ")
    assert "close other programs, or stop the engine and plan again" in warning


def test_a_gpu_plan_run_on_the_cpu_has_no_gpu_rows_to_read_but_the_host_row(plan: Plan) -> None:
    fake = FakeNvml()  # NVML lists nothing of the engine
    fake.taken = fake.recorded.free - 100 * MiB  # and a full GPU is not the engine's problem
    report = live_report(plan, _snap(fake, host_memory()), host_margin=MARGIN, ran_on_cpu=True)
    gpu, hostrow = report.rows
    assert gpu.state is RowState.UNREAD and gpu.engine is None and "runs on the CPU" in gpu.why
    assert report.note == CPU_RUN_NOTE and report.warnings == ()
    assert hostrow.state is RowState.OK and hostrow.engine is not None


def test_before_the_check_a_loading_engine_reads_zero_on_its_gpu(plan: Plan) -> None:
    gpu = live_report(plan, _snap(FakeNvml()), host_margin=MARGIN).rows[0]
    assert gpu.state is RowState.OK and gpu.engine == 0


def test_simulated_cards_and_an_unusable_nvml_cannot_be_read(plan: Plan) -> None:
    simulated = replace(plan, gpus=(replace(plan.gpus[0], simulated=True),))
    snap = Snapshot(gpus=(), ok=False, reason="no NVIDIA driver found", engine_pid=ENGINE, engine_rss=64 * MiB)
    sim = live_report(simulated, snap, host_margin=MARGIN)
    assert sim.rows[0].state is RowState.UNREAD and sim.rows[0].why == "a simulated card: nothing to read"
    real = live_report(plan, snap, host_margin=MARGIN)
    assert real.rows[0].why == "no NVML reading (no NVIDIA driver found)"
    assert real.note == "NVML cannot be read (no NVIDIA driver found): only the host row is live."
    assert real.rows[-1].engine == 64 * MiB and real.rows[-1].free is None  # host RAM not read: not low


def test_a_driver_that_lists_no_processes_still_warns_on_free_vram(plan: Plan) -> None:
    import pynvml

    nope = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake = FakeNvml(fail={(0, "nvmlDeviceGetComputeRunningProcesses"): nope,
                          (0, "nvmlDeviceGetGraphicsRunningProcesses"): nope})
    fake.taken = fake.recorded.free - 10 * MiB
    report = live_report(plan, _snap(fake), host_margin=MARGIN)
    gpu = report.rows[0]
    assert gpu.engine is None and gpu.others is None and "does not list processes" in gpu.why
    assert gpu.state is RowState.LOW and report.warnings[0].startswith("CUDA0 (NVIDIA H200): free VRAM 10 MiB")


def test_the_host_row_plans_every_part_the_engine_allocates_but_the_prompt_cache(plan: Plan) -> None:
    """The logits, adapters, a draft and a projector in host RAM are the engine's RSS too: the live host
    row's plan counts them (the prompt cache is a limit it fills later, shown beside)."""
    h = plan.host
    assert h.output_buffer > 0
    assert host_planned(h) == (h.weights_mapped + h.kv_tail + h.compute_pinned + h.output_buffer
                               + h.extras.lora + h.extras.draft_weights + h.extras.draft_kv
                               + h.extras.draft_compute + h.extras.projector)
