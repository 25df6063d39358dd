"""docs/architectures.md is the engine's own list of architectures, each with how Headroom plans it: made
from the llama.cpp tree the engine is built from, so a new llama.cpp that adds or drops one fails here
until the table is made again (``python -m app.engine.architectures > docs/architectures.md``)."""

from __future__ import annotations

from pathlib import Path

from app.engine.architectures import engine_source, read_architectures, rows, table
from app.engine.native_build import EngineBuild
from app.planner.gguf.model import MODELLED_ARCHS

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
