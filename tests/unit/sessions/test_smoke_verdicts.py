"""How the smoke test names an engine that went away. The engine's last words are given in the
exact formats ggml prints them (ggml/src/ggml.c ``ggml_abort``: ``"%s:%d: "`` + message; the
message of ggml/src/ggml-backend.cpp:1638 and ``GGML_ASSERT(%s) failed``); the engine URL is a
real closed port."""

from __future__ import annotations

from app.sessions.fork import SharingProof
from app.sessions.smoke import DIAGNOSTIC_ENV, run_smoke
from tests.fixtures.server_proc import free_port

SRC = "/root/.cache/headroom/src/llama_cpp_python-0.3.36/vendor/llama.cpp"
REALLOC = (f"{SRC}/ggml/src/ggml-backend.cpp:1638: ggml_backend_sched_alloc_splits: unexpected graph "
           "reallocation (graph size = 2311, nodes = 2291, leafs = 20), debug_realloc = 1")
ASSERT = f"{SRC}/src/llama-kv-cache.cpp:512: GGML_ASSERT(p0 == 0 && p1 < 0) failed"
#: native/patches/0002's check, as patch 1 alone trips it (docs/engine-patches.md)
SCATTER = (f"{SRC}/src/llama-memory-hybrid-idx.cpp:1228: k-pool scatter race: entries 0 and 32 of this ubatch "
           "(64 entries) both write pooled row 3 (HEADROOM_KPOOL_SCATTER_CHECK)")


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_graph_reallocation_abort_is_named_as_the_kpool_shared_sequence_bug() -> None:
    log = ["srv  update_slots: all slots are idle", REALLOC, "libggml-base.so(+0x1a2b3) [0x7f]"]
    result = run_smoke(_dead_url(), log_tail=lambda: log, diagnostic=True)
    assert not result.ok and result.kind == "engine-bug"
    assert "unexpected graph reallocation" in result.message and "b11412" in result.message
    assert "-np 1" in result.message
    assert result.log_line == REALLOC


def test_an_assertion_during_the_shared_decode_is_reported_as_the_engine_bug_with_its_line() -> None:
    result = run_smoke(_dead_url(), log_tail=lambda: ["...", ASSERT])
    assert result.kind == "engine-bug" and "43fe9c642" in result.message
    assert ASSERT in result.message


def test_the_scatter_check_abort_is_named_as_the_race_43fe9c642_fixed() -> None:
    result = run_smoke(_dead_url(), log_tail=lambda: ["...", SCATTER, "libggml-base.so(+0x1a2b3) [0x7f]"],
                       diagnostic=True)
    assert not result.ok and result.kind == "engine-bug"
    assert "data race fixed in llama.cpp 43fe9c642" in result.message and "#29994" in result.message
    assert result.log_line == SCATTER


def test_an_engine_that_is_simply_gone_is_not_blamed_on_the_bug() -> None:
    result = run_smoke(_dead_url(), log_tail=lambda: ["main: server is listening"], log_grace_s=0.0)
    assert result.kind == "engine-died"
    assert "GGML_SCHED_DEBUG_REALLOC=1" in result.message  # how to find out more


def test_the_diagnostic_launch_environment_is_the_one_ggml_and_headroom_s_patch_read() -> None:
    assert DIAGNOSTIC_ENV == {"GGML_SCHED_DEBUG_REALLOC": "1", "HEADROOM_KPOOL_SCATTER_CHECK": "1"}


def test_sharing_proof_wording_for_once_k_times_and_unmeasured() -> None:
    assert str(SharingProof(3, 40, 40, 0)).startswith("prompt evaluated once, shared by 3")
    assert str(SharingProof(3, 40, 1, 39)).startswith("prompt evaluated once, shared by 3")
    assert str(SharingProof(3, 40, 120, 0)).startswith("prompt NOT shared: evaluated 3 times")
    assert "start it with --metrics" in str(SharingProof(3, 40, None, None))
    # /metrics answered before the fork and not after: the engine stopped, it did not lack /metrics
    gone = str(SharingProof(3, 40, None, None, gone=True))
    assert gone == "sharing not measured: the engine stopped answering before the fork ended"
    assert not SharingProof(3, 40, None, None).shared


def test_the_sharing_proof_counts_prompt_tokens_read_not_decoded() -> None:
    """The walkthrough read "/metrics: +213 decoded" of a 213-token prompt as 213 tokens generated:
    llama-server's prompt_tokens_total counts prompt tokens read."""
    said = str(SharingProof(3, 213, 213, 0))
    assert said == ("prompt evaluated once, shared by 3 (213-token prompt; /metrics: "
                    "213 prompt tokens read, 0 taken from the cache)")
    assert "decoded" not in said
