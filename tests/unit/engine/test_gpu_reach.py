"""What the engine will run on, said before a launch (app/engine/gpu_reach.py): a CPU build under a GPU,
Headroom's CUDA build without a driver, with an old driver, on a card it has no code for, on one it
runs from PTX; and, after a launch, what the engine's log says (app/llamacpp/cuda_log.py, replaying
tests/fixtures/cuda_logs/ and the H200 recording)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import native_build
from app.engine.cuda_toolchain import DESKTOP_ARCHS, arch_span, runs_on
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin, identify
from app.engine.gpu_reach import decide, for_launch, listed_devices
from app.llamacpp.cuda_log import CudaStart, cuda_start
from app.llamacpp.failures import FailureKind, classify
from app.machine.devices import inventory
from app.machine.nvml_session import NO_DRIVER
from app.planner.devices import GpuDevice, HostMemory, Inventory, simulated_gpu
from app.planner.gguf.model import read_shape
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import GiB
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_nvml import FakeNvml

ARCHS = ";".join(DESKTOP_ARCHS)
HOST = HostMemory(total=64 * GiB, available=48 * GiB)
LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "cuda_logs"
H200_LOG = LOGS.parent / "h200" / "qwen2.5-14b-instruct-1m-q8_0-c512k-f16-np4-kvu-smoke.engine.log"


def _engine(backend: str = "cuda", archs: str = ARCHS) -> EngineInfo:
    return EngineInfo(EngineKind.LLAMA_SERVER, "/opt/headroom/engine/build/bin/llama-server", "0.5.0-dev",
                      "0c1e57098", EngineOrigin.BUNDLE, build_backend=backend, cuda_archs=archs)


def _card(index: int, name: str, compute: tuple[int, int] | None, uuid: str = "") -> GpuDevice:
    return GpuDevice(index=index, name=name, total=24 * GiB, free=23 * GiB, uuid=uuid or f"GPU-{index:04d}",
                     compute=compute)


def _machine(*gpus: GpuDevice, cuda: str = "13.0", driver: str = "580.95.05") -> Inventory:
    return Inventory(gpus=gpus, host=HOST, nvml_ok=True, driver=driver, cuda=cuda)


def test_the_desktop_list_runs_turing_to_blackwell_and_nothing_older() -> None:
    assert arch_span(ARCHS) == "sm_75–sm_120"
    assert runs_on(ARCHS, 8, 9) == "native" and runs_on(ARCHS, 8, 6) == "native" and runs_on(ARCHS, 12, 0) == "native"
    assert runs_on(ARCHS, 8, 7) == "native"  # sm_86 code runs on a later minor of its major
    assert runs_on(ARCHS, 7, 5) == "ptx" and runs_on(ARCHS, 9, 0) == "ptx" and runs_on(ARCHS, 8, 0) == "ptx"
    assert runs_on(ARCHS, 12, 1) == "ptx"  # 120a code runs on sm_120 alone
    assert runs_on(ARCHS, 6, 1) == "" and runs_on(ARCHS, 7, 0) == ""


def test_a_cpu_build_under_an_rtx_card_says_it_runs_on_the_cpu_and_how_to_get_the_gpu() -> None:
    found = decide(_engine("cpu", ""), _machine(_card(0, "NVIDIA GeForce RTX 4090", (8, 9))), listed=None,
                   driver_loads=True)
    assert found.gpus == () and found.gpu_code == "none: a CPU build"
    assert found.sentence == ("NVIDIA GeForce RTX 4090: this engine has no GPU code (a CPU build), so it runs on the "
                              "CPU; for the GPU, Headroom's CUDA bundle or an engine built with native/build.py "
                              "--backend cuda.")


def test_the_cuda_build_without_a_driver_says_so_in_one_sentence_with_the_cause() -> None:
    no_driver = ("This engine has CUDA code for sm_75–sm_120; no NVIDIA driver was found, so it runs on the CPU "
                 "(install the NVIDIA driver 580.65.06 or newer: nvidia-smi must work).")
    no_nvml = Inventory(gpus=(), host=HOST, nvml_ok=False, reason=NO_DRIVER)  # this machine
    assert decide(_engine(), no_nvml, listed=None, driver_loads=False).sentence == no_driver
    assert decide(_engine("cpu", ""), no_nvml, listed=None, driver_loads=False).sentence == ""  # nothing to say
    simulated = Inventory(gpus=(simulated_gpu("RTX 4090", 0),), host=HOST, nvml_ok=False, reason=NO_DRIVER)
    found = decide(_engine(), simulated, listed=None, driver_loads=False)
    assert found.gpus == ()
    assert found.sentence == ("NVIDIA GeForce RTX 4090 (simulated) is not on this machine: a launch here runs on the "
                              "CPU (this engine has CUDA code for sm_75–sm_120; it would run on the NVIDIA GeForce "
                              "RTX 4090 (simulated) (sm_89)).")
    real = _machine(_card(0, "NVIDIA GeForce RTX 3060", (8, 6)))  # NVML answers, libcuda.so.1 does not load
    assert decide(_engine(), real, listed=None, driver_loads=False).sentence == no_driver
    # the plan for what runs says it once: the sentence, not a "no GPU: no NVIDIA driver found" warning after it
    alone = decide(_engine(), no_nvml, listed=None, driver_loads=False)
    shape = read_shape(gguf_factory.ensure(shapes.QWEN25_14B_1M))
    cpu_plan = make_plan(shape, for_launch(no_nvml, alone), LaunchSettings(n_ctx=4096))
    assert cpu_plan.feasible and not any("no NVIDIA driver" in w for w in cpu_plan.warnings), cpu_plan.warnings
    assert any(NO_DRIVER in w for w in make_plan(shape, no_nvml, LaunchSettings(n_ctx=4096)).warnings)


def test_an_old_driver_is_named_with_the_version_the_engine_needs() -> None:
    found = decide(_engine(), _machine(_card(0, "NVIDIA GeForce RTX 3060", (8, 6)), cuda="12.9", driver="575.57.08"),
                   listed=None, driver_loads=True)
    assert found.gpus == ()
    assert "needs NVIDIA driver 580.65.06 or newer; this driver (575.57.08) runs CUDA 12.9" in found.sentence
    assert found.sentence.endswith("so it runs on the CPU: update the NVIDIA driver.")


def test_a_card_the_engine_has_no_code_for_is_left_out_and_hidden_from_the_engine() -> None:
    alone = decide(_engine(), _machine(_card(0, "NVIDIA GeForce GTX 1080", (6, 1))), listed=None, driver_loads=True)
    assert alone.gpus == () and alone.visible == ()
    assert alone.sentence == ("This engine has CUDA code for sm_75–sm_120; NVIDIA GeForce GTX 1080 (GPU 0) is sm_61, "
                              "so it runs on the CPU.")
    pair = _machine(_card(0, "NVIDIA GeForce RTX 4090", (8, 9), "GPU-aaaa"), _card(1, "NVIDIA GeForce GTX 1080", (6, 1)))
    mixed = decide(_engine(), pair, listed=None, driver_loads=True)
    assert mixed.gpus == (0,) and mixed.visible == ("GPU-aaaa",) and mixed.sentence.endswith("so it is left out.")
    assert [g.name for g in for_launch(pair, mixed).gpus] == ["NVIDIA GeForce RTX 4090"]


def test_a_card_it_runs_from_ptx_is_used_with_a_note_on_the_first_start() -> None:
    nvml = FakeNvml()  # the H200 recording: compute capability 9.0
    found = decide(_engine(), inventory(nvml), listed=None, driver_loads=True)
    assert found.gpus == (0,) and found.sentence == "" and found.visible is None
    assert found.note == ("NVIDIA H200: the driver compiles this engine's PTX for sm_90 at its first start "
                          "(minutes, once; kept in ~/.nv/ComputeCache).")
    native = decide(_engine(), _machine(_card(0, "NVIDIA GeForce RTX 4090", (8, 9))), listed=None, driver_loads=True)
    assert native.gpus == (0,) and native.sentence == native.note == ""
    assert native.gpu_code == ("CUDA 13 code for sm_75–sm_120 (machine code for sm_86, sm_89, sm_120a; PTX for sm_75 "
                               "and newer cards)")


def test_another_llama_server_is_asked_what_it_lists_and_a_cpu_build_lists_none(
        engine_build: native_build.EngineBuild) -> None:
    engine = identify(engine_build.server, EngineOrigin.SETTINGS, probe=False)
    assert engine is not None and not engine.build_backend  # (identified as a file: no stamp read)
    listed = listed_devices(engine)
    assert listed == ()  # the real engine's --list-devices: "(none)"
    found = decide(engine, _machine(_card(0, "NVIDIA GeForce RTX 4090", (8, 9))), listed=listed, driver_loads=True)
    assert found.gpus == () and "lists no GPU (llama-server --list-devices: none)" in found.sentence
    cuda = decide(engine, _machine(_card(0, "NVIDIA GeForce RTX 4090", (8, 9))), listed=("CUDA0",), driver_loads=True)
    assert cuda.gpus == (0,) and cuda.sentence == ""


@pytest.mark.parametrize(("log", "cause"), [
    ("old-driver.log", "CUDA did not start: the NVIDIA driver is older than the CUDA the engine was built with: "
                       "update the driver"),
    ("sm61-no-kernel-image.log", "the engine has no GPU code for this card: its CUDA kernels were built for other "
                                 "compute capabilities"),
])
def test_after_a_launch_the_log_says_why_no_gpu_was_used(log: str, cause: str) -> None:
    assert cuda_start((LOGS / log).read_text().splitlines()).cause == cause


def test_the_engine_without_a_driver_says_nothing_of_cuda_so_headroom_decides_before_it_runs() -> None:
    """The recorded start (no libcuda.so.1): no GPU opened, no GPU code reported, no cause in the log, and
    llama.cpp's own "offloaded 3/3 layers to GPU" all the same; the sentence comes from ``decide``."""
    engine = [ln for ln in (LOGS / "no-driver.log").read_text().splitlines() if not ln.startswith("#")]
    assert cuda_start(engine) == CudaStart((), "", "")
    assert not [ln for ln in engine if "cuda" in ln.lower()]
    assert any(ln.endswith("load_tensors: offloaded 3/3 layers to GPU") for ln in engine)


def test_the_h200_recording_opened_its_gpu_and_names_its_gpu_code() -> None:
    start = cuda_start(H200_LOG.read_text().splitlines())
    assert start.devices == ("CUDA0: NVIDIA H200",) and start.archs == "900" and start.cause == ""


def test_a_crash_on_a_card_without_kernels_is_told_as_missing_gpu_code_not_as_an_engine_bug() -> None:
    lines = (LOGS / "sm61-no-kernel-image.log").read_text().splitlines()
    failure = classify([ln for ln in lines if not ln.startswith("#")], exit_code=-6)
    assert failure.kind is FailureKind.GPU_CODE
    assert failure.message.startswith("The engine has no GPU code for this card")
