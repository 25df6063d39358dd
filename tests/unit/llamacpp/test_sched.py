"""Where each placement's attention runs and what crosses between backends, from the scheduler's own
recorded assignments (tests/fixtures/sched_debug/: Headroom's engine, the 8-layer test model, a loopback
RPC device, ``GGML_SCHED_DEBUG=2``; ``python -m tests.fixtures.sched_record`` records them again).

A user who sees "the KV of 2 layers in host RAM, their attention on the CPU" gets exactly that for
each decoded token: two graph splits per host layer and none of the KV over the link. Prefill keeps
the scheduler's choice (the KV streamed to the device) unless op offload is off.
"""

from __future__ import annotations

from pathlib import Path

from app.llamacpp.sched import SchedGraph, sched_graphs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sched_debug"
LAYERS = range(8)


def _graphs(name: str) -> tuple[SchedGraph, SchedGraph]:
    """The recorded decode (1-token) and prefill (512-token) graphs of one placement."""
    graphs = sched_graphs((FIXTURES / f"{name}.log").read_text())
    decode, prefill = graphs
    assert (decode.n_tokens, prefill.n_tokens) == (1, 512)
    return decode, prefill


def _where(graph: SchedGraph) -> str:
    """Each layer's attention backend, one letter a layer: C (the CPU) or D (the device)."""
    attention = graph.attention()
    assert sorted(attention) == list(LAYERS)
    return "".join("C" if attention[il] == "CPU" else "D" for il in LAYERS)


def test_the_parser_reads_a_split_and_its_nodes_from_llama_servers_prefixed_fragments() -> None:
    log = ("0.00.319.597 D graph_reserve: reserving a graph for ubatch with n_tokens =    1, n_seqs =  1, n_outputs =    1\n"
           "## SPLIT #0: CPU # 0 inputs0.00.319.627 D \n"
           "0.00.319.645 D node #  0 (  GET_ROWS):                 embd (   0K) [  CPU         ] use=2,c=1:"
           "0.00.319.662 D     token_embd.weight ( 129K) [  CPU         ]0.00.319.678 D \n"
           "## SPLIT #1: RPC0[127.0.0.1:50531] # 2 inputs0.00.067.189 D : 0.00.067.190 D "
           "[cache_k_l0 (view) (permuted) (   8M)] 0.00.067.190 D [attn_inp_kq_mask (  64K)] 0.00.067.191 D \n"
           "node # 21 (FLASH_ATTN):              node_21 (   0K) [RPC0[         ] use=1,c=1: Qcur-0 (view) (permu"
           " (   0K) [RPC0[         ]\n")
    (graph,) = sched_graphs(log)
    assert graph.n_tokens == 1
    assert [(s.backend, s.inputs) for s in graph.splits] == [
        ("CPU", ()), ("RPC0[127.0.0.1:50531]", ("cache_k_l0 (view) (permuted)", "attn_inp_kq_mask"))]
    assert graph.splits[0].nodes[0].srcs == ("token_embd.weight",)
    assert graph.attention() == {0: "RPC0[127.0.0.1:50531]"} and graph.kv_copied() == {0}


def test_the_host_tail_decodes_its_host_layers_attention_on_the_cpu_in_two_splits_each() -> None:
    decode, prefill = _graphs("host-tail-2")
    assert _where(decode) == "CCDDDDDD"
    assert len(decode.splits) == 2 + 2 * 2  # the embeddings on the CPU, the device; then 2 a host layer
    assert decode.kv_copied() == set()  # no layer's KV crosses for a token
    # prefill (512 tokens, op offload on) keeps the scheduler's choice: the host KV streamed to the device
    assert _where(prefill) == "DDDDDDDD" and prefill.kv_copied() == {0, 1} and len(prefill.splits) == 6


def test_without_op_offload_the_host_tail_prefills_on_the_cpu_as_well() -> None:
    decode, prefill = _graphs("host-tail-2-no-op-offload")
    assert _where(decode) == _where(prefill) == "CCDDDDDD"
    assert decode.kv_copied() == prefill.kv_copied() == set()


def test_nkvo_decodes_every_layers_attention_on_the_cpu() -> None:
    decode, prefill = _graphs("nkvo")
    assert _where(decode) == "CCCCCCCC" and decode.kv_copied() == set()
    assert len(decode.splits) == 2 + 2 * 8
    assert _where(prefill) == "DDDDDDDD" and prefill.kv_copied() == set(LAYERS)


def test_fewer_gpu_layers_run_the_cpu_layers_whole_on_the_cpu() -> None:
    decode, prefill = _graphs("ngl-7")
    assert _where(decode) == _where(prefill) == "CCDDDDDD"
    assert len(decode.splits) == len(prefill.splits) == 2
    assert decode.kv_copied() == prefill.kv_copied() == set()


def test_before_patch_5_the_host_tail_copied_its_kv_to_the_device_for_every_token() -> None:
    """The engine before patch 5 (llama.cpp 0c1e57098 + 4 Headroom patches), recorded the same way."""
    decode, _ = _graphs("host-tail-2-before-patch-5")
    assert _where(decode) == "DDDDDDDD" and decode.kv_copied() == {0, 1}
    assert len(decode.splits) == 2 + 5 * 2  # the norms pinned to the CPU: five more splits a host layer
    nkvo, _ = _graphs("nkvo-before-patch-5")
    assert _where(nkvo) == "DDDDDDDD" and nkvo.kv_copied() == set(LAYERS)
