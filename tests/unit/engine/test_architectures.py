"""docs/architectures.md is the engine's own list of architectures, each with how Headroom plans it: made
from the llama.cpp tree the engine is built from, so a new llama.cpp that adds or drops one fails here
until the table is made again (``python -m app.engine.architectures > docs/architectures.md``)."""

from __future__ import annotations

import re
from pathlib import Path

from app.engine.architectures import engine_source, read_architectures, rows, table
from app.engine.native_build import EngineBuild
from app.planner.gguf.model import MODELLED_ARCHS, MTP_SKIPPED_ARCHS

DOC = Path(__file__).resolve().parents[3] / "docs" / "architectures.md"


def test_the_table_is_the_engines_list(engine_build: EngineBuild) -> None:
    src = engine_source()
    assert src is not None, "the engine's llama.cpp source is not in the cache: build the engine (./dev setup)"
    names = read_architectures(src)
    assert len(names) > 100 and "llama" in names and "glm5-next" in names
    assert DOC.read_text() == table(names, engine_build.commit), \
        "docs/architectures.md is stale: python -m app.engine.architectures > docs/architectures.md"


def test_every_estimated_architecture_is_one_the_engine_knows_and_the_rest_are_planned_or_said(
        engine_build: EngineBuild) -> None:
    src = engine_source()
    assert src is not None
    names = read_architectures(src)
    assert set(MODELLED_ARCHS) <= set(names)
    found = {r.name: r for r in rows(names)}
    assert found["gpt-oss"].how == "measured" and found["glm5-next"].how == "measured"
    assert found["bert"].how.startswith("no chat model") and not found["bert"].planned


def test_the_architectures_whose_mtp_layers_the_planner_leaves_out_are_those_the_engine_skips(
        engine_build: EngineBuild) -> None:
    """A NextN/MTP layer's weights are planned nowhere exactly where the engine's model code skips them
    (``if (!ml.load_mtp) … TENSOR_SKIP``): a GLM-4.5-Air or DeepSeek-V3 file holds a layer the engine
    never allocates, and an architecture that loads its NextN layer has it planned."""
    src = engine_source()
    assert src is not None
    arch_of = {enum: name for enum, name in re.findall(r'\{\s*(LLM_ARCH_\w+)\s*,\s*"([^"]+)"\s*\}',
                                                       (src / "src" / "llama-arch.cpp").read_text())}
    enum_of = {cls: enum for enum, cls in re.findall(r"case (LLM_ARCH_\w+):\s*return new llama_model_(\w+)\(",
                                                     (src / "src" / "llama-model.cpp").read_text())}
    skipping = set()
    for code in (src / "src" / "models").glob("*.cpp"):
        text = code.read_text()
        if re.search(r"load_mtp\s*\)?\s*\?\s*0\s*:\s*TENSOR_SKIP|!\s*ml\.load_mtp", text):
            skipping |= {arch_of[enum_of[c]] for c in re.findall(r"llama_model_(\w+)::load_arch_tensors", text)}
    assert "glm4moe" in skipping and "deepseek2" in skipping
    assert skipping == MTP_SKIPPED_ARCHS
