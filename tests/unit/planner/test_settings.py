"""LaunchSettings: the batch sizes llama.cpp will really use."""

from __future__ import annotations

from app.planner.settings import LaunchSettings


def test_a_context_below_one_batch_clamps_the_ubatch_as_llama_cpp_does() -> None:
    # src/llama-context.cpp: n_batch = min(n_ctx, n_batch) (causal models); n_ubatch = min(n_batch, n_ubatch).
    s = LaunchSettings(n_ctx=300, n_batch=2048, n_ubatch=512)
    assert (s.effective_n_batch, s.effective_n_ubatch) == (300, 300)
    assert LaunchSettings(n_ctx=4096, n_batch=256, n_ubatch=512).effective_n_ubatch == 256
