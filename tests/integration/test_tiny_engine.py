"""The real llama-server loads the generated models: the tiny one generates tokens, and the
smallest multi-GB shape-only file comes up healthy (its zero weights are paged in, not read
from disk: the file is sparse)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.units import GiB
from tests.fixtures import gguf_factory, pagecache, shapes
from tests.fixtures.server_proc import running_server
from tests.fixtures.spec import ModelSpec

pytestmark = pytest.mark.engine

#: What Headroom passes once it has planned: no silent refit, explicit layers (docs/domain.md §1).
PLANNED = ("--fit", "off", "-ngl", "0", "-np", "1")


@pytest.mark.parametrize("spec", [shapes.TINY, shapes.TINY_GLM5_NEXT], ids=lambda s: s.name)
def test_tiny_model_generates_tokens(engine_build: EngineBuild, spec: ModelSpec, tmp_path: Path) -> None:
    """The llama and the k-pool glm5-next (MLA + indexer, KDA) tiny models both serve."""
    with running_server(engine_build.server, gguf_factory.ensure(spec), tmp_path / "server.log",
                        ("-c", "512", *PLANNED)) as srv:
        ask = {"prompt": "Hello", "n_predict": 8, "seed": 1, "ignore_eos": True}
        reply = srv.post("/completion", ask)
        assert reply["tokens_predicted"] == 8, reply
        assert reply["content"], reply
        assert reply["stop_type"] == "limit", reply
        again = srv.post("/completion", ask)
        assert again["content"] == reply["content"], "same seed, same weights: same text"
    assert srv.proc.returncode is not None


def test_tiny_chat_model_answers_chat_completions(engine_build: EngineBuild, tiny_chat_model: Path,
                                                  tmp_path: Path) -> None:
    with running_server(engine_build.server, tiny_chat_model, tmp_path / "server.log",
                        ("-c", "512", "--jinja", *PLANNED)) as srv:
        reply = srv.post("/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert reply["usage"]["completion_tokens"] == 4, reply
        assert reply["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.slow
def test_multi_gb_shape_comes_up_healthy(engine_build: EngineBuild, tmp_path: Path) -> None:
    """Llama-3.1-8B Q4_K_M shape (4.6 GiB): the one multi-GB start (MAP_POPULATE fills the page
    cache with the whole file; --no-repack avoids a second, anonymous copy of the q4_K weights)."""
    spec = shapes.LLAMA31_8B
    path = gguf_factory.ensure(spec)
    log = tmp_path / "server.log"
    try:
        with running_server(engine_build.server, path, log,
                            ("-c", "512", "--no-repack", "--no-warmup", "-lv", "4", *PLANNED),
                            deadline_s=300) as srv:
            assert srv.health() == 200
            text = log.read_text(errors="replace")
            # load_tensors:   CPU_Mapped model buffer size =  4685.30 MiB
            assert f"CPU_Mapped model buffer size = {spec.tensor_bytes / GiB * 1024:8.2f} MiB" in text
            assert "292 tensors" in text
    finally:
        pagecache.drop(path)  # give the page cache back (pages another process maps stay)
