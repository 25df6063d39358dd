"""The vision projector (``--mmproj``): read from its header, placed on the CLIP backend's device,
its weights and compute counted there, refused when it is not one or not for this model, and
offered when it lies beside the model."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.argv import build_argv
from app.engine.check import check_plan
from app.llamacpp.logs import parse_log
from app.planner.devices import Inventory
from app.planner.errors import PlannerError
from app.planner.gguf.beside import projector_beside, read_projector
from app.planner.gguf.model import read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.memory.projector import CPU_ALIGNMENT, GPU_ALIGNMENT, estimate_compute, weights_bytes
from app.planner.plan_types import PlanMode
from app.planner.settings import FlashAttn, LaunchSettings
from app.planner.sources import SourceKind
from app.planner.units import MiB
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.plans import plan_with_files
from tests.unit.engine.test_argv import MODEL, STOCK
from tests.unit.planner.test_plan import h200

#: The engine's own lines for the test projector on the CPU build (llama-server -lv 4, tools/mtmd/clip.cpp).
ENGINE_LINES = """\
0.00.288.522 I clip_ctx: CLIP using CPU backend
0.00.288.833 I load_hparams: model size:         3.11 MiB
0.00.305.428 I reserve_compute_meta:        CPU compute buffer size =     3.41 MiB
0.00.305.480 I warmup: flash attention is enabled
"""




@pytest.fixture(scope="module")
def mmproj() -> Path:
    return gguf_factory.ensure(shapes.TINY_MMPROJ)


@pytest.fixture(scope="module")
def chat() -> Path:
    return gguf_factory.ensure(shapes.TINY_CHAT)


def test_the_header_gives_the_type_the_warm_up_image_and_the_output_width(mmproj: Path) -> None:
    p = read_projector(mmproj)
    assert (p.proj_type, p.image_size, p.patch_size, p.n_pos, p.n_embd_out) == ("mlp", 336, 14, 577, 64)
    # every tensor of this one is a multiple of 128 bytes: no padding on either
    assert weights_bytes(p, on_gpu=False) == weights_bytes(p, on_gpu=True) == shapes.TINY_MMPROJ.tensor_bytes
    odd = replace(p, tensor_bytes=(100, 33))  # each tensor at the buffer type's alignment (ggml-alloc)
    assert (weights_bytes(odd, on_gpu=False), weights_bytes(odd, on_gpu=True)) == (
        4 * CPU_ALIGNMENT + 2 * CPU_ALIGNMENT, 2 * GPU_ALIGNMENT)


def test_the_estimate_is_above_what_pass_1_measured_with_and_without_flash_attention(mmproj: Path) -> None:
    p = read_projector(mmproj)  # CPU pass 1 of this projector: 3.41 MiB (fa on), 7.22 MiB (fa off)
    assert 3.41 * MiB < estimate_compute(p, FlashAttn.ON) < 1.2 * 3.41 * MiB
    assert 7.22 * MiB < estimate_compute(p, FlashAttn.OFF) < 1.3 * 7.22 * MiB


def test_on_a_gpu_the_projector_takes_that_gpus_memory_and_off_it_host_ram(mmproj: Path, chat: Path) -> None:
    shape = read_shape(chat)
    bare = plan_with_files(shape, h200(), LaunchSettings(n_ctx=4096))
    on = plan_with_files(shape, h200(), LaunchSettings(n_ctx=4096, mmproj=str(mmproj)))
    assert on.projector is not None and on.projector.device == "CUDA0"
    assert on.gpus[0].extras.projector == on.projector.weights + on.projector.compute > 6 * MiB
    assert bare.gpus[0].free - on.gpus[0].free == on.gpus[0].extras.projector and on.host.free == bare.host.free
    assert on.gpus[0].used - bare.gpus[0].used == on.gpus[0].extras.projector
    assert on.projector.sources["compute"].kind is SourceKind.ESTIMATED
    off = plan_with_files(shape, h200(), LaunchSettings(n_ctx=4096, mmproj=str(mmproj), mmproj_offload=False))
    assert off.projector is not None and off.projector.device == "host" and off.gpus[0].extras.projector == 0
    assert bare.host.free - off.host.free == off.host.extras.projector == off.projector.total
    assert on.to_json()["projector"]["device"] == "CUDA0" and on.to_json()["gpus"][0]["projector"] > 0


def test_without_a_gpu_the_launch_says_no_mmproj_offload_and_pass_1_numbers_are_used(mmproj: Path,
                                                                                     chat: Path) -> None:
    settings = LaunchSettings(n_ctx=4096, mmproj=str(mmproj))
    measured = Measurement((DeviceMeasurement("CPU", compute=5 * MiB, host=True),), "CPU", "0c1e570", 0.1,
                           launch=settings.with_(n_gpu_layers=0, mmproj_offload=False),
                           projector_compute=(("CPU", round(3.41 * MiB)),))
    plan = plan_with_files(read_shape(chat), Inventory((), h200().host), settings, measurement=measured)
    assert plan.mode is PlanMode.CPU and not plan.launch.mmproj_offload
    assert plan.projector is not None and plan.projector.compute == round(3.41 * MiB)
    assert plan.projector.sources["compute"].kind is SourceKind.MEASURED
    argv = build_argv(STOCK, plan.launch, plan.mode, MODEL, "127.0.0.1", 8080)
    assert argv[argv.index("--mmproj"):argv.index("--mmproj") + 3] == ["--mmproj", str(mmproj), "--no-mmproj-offload"]
    # the engine's log of that launch: both rows within 1 MiB
    check = check_plan(plan, ENGINE_LINES.splitlines())
    rows = {r.part: r for r in check.rows if r.part.startswith("projector")}
    assert set(rows) == {"projector weights", "projector compute"} and all(r.device == "host" for r in rows.values())
    assert all(r.ok for r in rows.values()), check.table()


def test_a_cpu_pass_1_is_not_taken_for_a_gpus_projector(mmproj: Path, chat: Path) -> None:
    settings = LaunchSettings(n_ctx=4096, mmproj=str(mmproj))
    cpu_probe = Measurement((DeviceMeasurement("CPU", compute=5 * MiB, host=True),), "CPU", "0c1e570", 0.1,
                            launch=settings, projector_compute=(("CPU", round(3.41 * MiB)),))
    plan = plan_with_files(read_shape(chat), h200(), settings, measurement=cpu_probe)
    assert plan.projector is not None and plan.projector.sources["compute"].kind is SourceKind.ESTIMATED


def test_the_engine_log_lines_parse_and_a_second_reserve_replaces_the_first() -> None:
    b = parse_log(ENGINE_LINES + "reserve_compute_meta:        CPU compute buffer size =     4.00 MiB\n")
    assert (b.projector_backend, b.projector_weights, b.projector_compute) == (
        "CPU", round(3.11 * MiB), {"CPU": 4 * MiB})


def test_a_file_that_is_not_a_projector_or_not_for_this_model_is_refused(mmproj: Path, chat: Path) -> None:
    with pytest.raises(PlannerError, match=r"not a vision projector: its general\.architecture is 'llama'"):
        plan_with_files(read_shape(chat), h200(), LaunchSettings(n_ctx=4096, mmproj=str(chat)))
    deep = read_shape(gguf_factory.ensure(shapes.TINY_DEEP))  # n_embd 128, the projector outputs 64
    with pytest.raises(PlannerError, match="outputs 64 values per token, but the model's n_embd is 128"):
        plan_with_files(deep, h200(), LaunchSettings(n_ctx=4096, mmproj=str(mmproj)))
    with pytest.raises(PlannerError, match="cannot read"):
        plan_with_files(deep, h200(), LaunchSettings(n_ctx=4096, mmproj="/nonexistent/mmproj.gguf"))


def test_a_projector_beside_the_model_is_offered_when_it_fits(tmp_path: Path, mmproj: Path, chat: Path) -> None:
    model = tmp_path / "model.gguf"
    os.symlink(chat, model)
    assert projector_beside(model) is None
    os.symlink(chat, tmp_path / "mmproj-not-really.gguf")  # named so, but a llama: not offered
    assert projector_beside(model) is None
    os.symlink(mmproj, tmp_path / "mmproj-model-f16.gguf")
    assert projector_beside(model) == tmp_path / "mmproj-model-f16.gguf"
    deep = tmp_path / "deep.gguf"  # another model in the same folder: this projector is not for it
    os.symlink(gguf_factory.ensure(shapes.TINY_DEEP), deep)
    assert projector_beside(deep) is None
