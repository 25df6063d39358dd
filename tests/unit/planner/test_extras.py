"""LoRA adapters and a draft model in the plan: on the devices of the weights they adapt, a draft
stacked as a second model with its own settings, each number with its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.llamacpp.logs import parse_log
from app.planner.devices import DeviceKind, GpuDevice, HostMemory, Inventory
from app.planner.errors import PlannerError
from app.planner.gguf.beside import check_draft, check_lora, read_lora
from app.planner.gguf.model import read_shape
from app.planner.measurement import DeviceMeasurement, Measurement
from app.planner.memory.extras import lora_bytes
from app.planner.memory.weights import layer_devices
from app.planner.settings import LaunchSettings
from app.planner.units import GiB, MiB
from tests.fixtures import adapters, gguf_factory, shapes
from tests.fixtures.plans import plan_with_files

RANK = 16




@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    lora = adapters.write_lora(shapes.TINY_DEEP, tmp_path_factory.mktemp("lora") / "l.gguf", rank=RANK)
    return gguf_factory.ensure(shapes.TINY_DEEP), lora


def _gpu() -> Inventory:
    gpu = GpuDevice(index=0, name="Sim", total=24 * GiB, free=23 * GiB, kind=DeviceKind.SIMULATED)
    return Inventory((gpu,), HostMemory(64 * GiB, 60 * GiB))


def test_lora_bytes_follow_the_layers_they_adapt(deep: tuple[Path, Path]) -> None:
    model, lora = deep
    shape = read_shape(model)
    pair = (128 * RANK + RANK * 128) * 4  # attn_q and attn_v: 128 × 128 each, f32 A and B
    on_gpu = lora_bytes(shape, [read_lora(str(lora))], layer_devices(8, 999, [1]), 1)
    assert on_gpu == ([8 * 2 * pair], 0)
    half = lora_bytes(shape, [read_lora(str(lora))], layer_devices(8, 5, [1]), 1)  # -ngl 5: layers 0-3 on the CPU
    assert half == ([4 * 2 * pair], 4 * 2 * pair)


def test_a_lora_for_another_model_is_refused_with_a_sentence(deep: tuple[Path, Path], tmp_path: Path) -> None:
    model, _ = deep
    other = adapters.write_lora(shapes.TINY, tmp_path / "tiny-lora.gguf")  # 64-wide: the wrong shape
    with pytest.raises(PlannerError, match="wrong shape"):
        lora_bytes(read_shape(model), [read_lora(str(other))], layer_devices(8, 999, [1]), 1)
    with pytest.raises(PlannerError, match="not a LoRA adapter"):
        read_lora(str(model))


def test_a_file_is_checked_alone_or_against_a_model_as_llama_cpp_would(deep: tuple[Path, Path], tmp_path: Path) -> None:
    model, lora = deep
    shape = read_shape(model)
    assert check_lora(None, str(lora)).arch == "llama" and check_lora(shape, str(lora)).pairs
    other = adapters.write_lora(shapes.TINY, tmp_path / "tiny-lora.gguf")
    assert check_lora(None, str(other)).arch == "llama"  # alone: a LoRA file
    with pytest.raises(PlannerError, match="wrong shape"):
        check_lora(shape, str(other))  # not for this model
    draft = str(adapters.draft_model())
    assert check_draft(shape, draft).n_vocab == shape.n_vocab
    big_vocab = str(gguf_factory.ensure(shapes.BY_NAME["llama-3.1-8b-instruct-q4_k_m"]))
    assert check_draft(None, big_vocab).n_vocab == 128256
    with pytest.raises(PlannerError, match=r"vocabulary \(128,256 tokens\) is not the model's"):
        check_draft(shape, big_vocab)


def test_a_plan_refuses_a_draft_llama_cpp_would_not_speculate_with(deep: tuple[Path, Path]) -> None:
    model, _ = deep
    big_vocab = str(gguf_factory.ensure(shapes.BY_NAME["llama-3.1-8b-instruct-q4_k_m"]))
    with pytest.raises(PlannerError, match="cannot speculate with it"):
        plan_with_files(read_shape(model), _gpu(), LaunchSettings(n_ctx=4096, draft_model=big_vocab))


def test_a_plan_with_a_lora_and_a_draft_counts_them_on_the_gpu_with_their_sources(deep: tuple[Path, Path]) -> None:
    model, lora = deep
    draft = str(adapters.draft_model())
    settings = LaunchSettings(n_ctx=32768, lora=(str(lora),), draft_model=draft, draft_type_k="q8_0",
                              draft_type_v="q8_0")
    plan = plan_with_files(read_shape(model), _gpu(), settings)
    plain = plan_with_files(read_shape(model), _gpu(), LaunchSettings(n_ctx=32768))
    g, p = plan.gpus[0], plain.gpus[0]
    assert g.extras.lora == 8 * 2 * (128 * RANK + RANK * 128) * 4
    assert 4 * MiB < g.extras.draft_kv < 4.5 * MiB  # one q8_0 layer of 64 K and 64 V values × 32k cells
    assert g.extras.draft_weights > 0 and g.extras.draft_compute > 0 and plan.host.extras.draft_weights > 0  # its token embedding
    assert p.free - g.free == g.extras.lora + g.extras.draft_weights + g.extras.draft_kv + g.extras.draft_compute
    assert str(g.sources["lora"]).startswith("from the GGUF") and g.sources["draft_compute"].kind.name == "ESTIMATED"
    assert plan.host.output_buffer == 2 * read_shape(model).n_vocab * 4  # the model's logits and the draft's


def test_pass_1_of_the_draft_gives_its_compute_and_the_log_parts_it_from_the_model(deep: tuple[Path, Path]) -> None:
    model, _ = deep
    draft = str(adapters.draft_model())
    settings = LaunchSettings(n_ctx=4096, draft_model=draft)
    m = Measurement((DeviceMeasurement("CPU", compute=5 * MiB, host=True),), "CPU", "0c1e57098", 0.1, launch=settings,
                    draft=Measurement((DeviceMeasurement("CPU", compute=3 * MiB, host=True),), "CPU", "0c1e57098",
                                      0.0, launch=settings.draft_settings()))
    inv = Inventory((), HostMemory(64 * GiB, 60 * GiB))
    plan = plan_with_files(read_shape(model), inv, settings.with_(n_gpu_layers=0), measurement=m)
    assert plan.host.extras.draft_compute == 3 * MiB and plan.host.compute_pinned == 5 * MiB
    assert str(plan.host.sources["draft_compute"]) == "measured by pass 1"
    log = parse_log("\n".join([
        "load_tensors:   CPU_Mapped model buffer size =     3.41 MiB",
        "llama_adapter_lora_init_impl: CPU_Mapped LoRA buffer size =     1.50 MiB",
        "sched_reserve:        CPU compute buffer size =     5.01 MiB",
        "common_speculative_init_result: loading draft model '/m/d.gguf'",
        "load_tensors:   CPU_Mapped model buffer size =     0.24 MiB",
        "sched_reserve:        CPU compute buffer size =     4.76 MiB",
        "spec common_specu: adding speculative implementation 'draft-simple'",
        "srv    load_model: prompt cache is enabled, size limit: 8192 MiB",
    ]))
    assert log.model == {"CPU_Mapped": round(3.41 * MiB)} and log.lora == {"CPU_Mapped": round(1.5 * MiB)}
    assert log.draft is not None and log.draft.compute == {"CPU": round(4.76 * MiB)}
    assert log.compute == {"CPU": round(5.01 * MiB)} and log.prompt_cache_mib == 8192
