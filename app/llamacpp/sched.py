"""The scheduler's graph splits as llama.cpp prints them with ``GGML_SCHED_DEBUG`` (1: the splits and
their inputs; 2: every node too): which backend runs each layer's attention, and which tensors cross
between backends. Read from an engine log at ``-v`` (the lines are DEBUG), where llama-server puts its
prefix (``0.00.319.627 D ``) before every fragment the scheduler logs, so a node's line arrives in
pieces; the prefixes are stripped first.

Format from ggml/src/ggml-backend.cpp ``ggml_backend_sched_print_assignments`` (llama.cpp 0c1e57098);
every regex has the line it matches above it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# llama-server's prefix on each fragment (common/log.cpp: time since start, then the level letter)
_PREFIX = re.compile(r"\d+\.\d{2}\.\d{3}\.\d{3} [DIWE] ")
# graph_reserve: reserving a graph for ubatch with n_tokens =  512, n_seqs =  1, n_outputs =    1
#                                                                     (src/llama-context.cpp, graph_reserve)
_RESERVE = re.compile(r"graph_reserve: reserving a graph for ubatch with n_tokens =\s*(?P<n>\d+)")
# ## SPLIT #3: RPC0[127.0.0.1:50531] # 4 inputs: [cache_k_l0 (view) (permuted) (   8M)] [attn_inp_kq_mask (  64K)]
# ## SPLIT #0: CPU # 0 inputs
_SPLIT = re.compile(r"^## SPLIT #(?P<i>\d+): (?P<backend>.+?) # (?P<n>\d+) inputs(?:: (?P<inputs>.*))?$")
_INPUT = re.compile(r"\[(?P<name>.+?) \(\s*[0-9.]+[KM]\)\]")
# node # 21 (FLASH_ATTN):              node_21 (   0K) [RPC0[         ] use=1,c=1: Qcur-0 (view) (permu (   0K) [RPC0[         ] …
# ("node #%3d (%10.10s): %20.20s (%5.5s) [%5.5s %8.8s] use=%d,c=%d:", then " %20.20s (%5.5s) [%5.5s %8.8s]" per source)
_NODE = re.compile(r"^node #\s*(?P<i>\d+) \((?P<op>.{10})\): (?P<name>.{20}) \(.{5}\) \[(?P<backend>.{5}) .{8}\] "
                   r"use=\d+,c=\d:(?P<srcs>.*)$")
_SRC = re.compile(r" (?P<name>.{20}) \(.{5}\) \[(?P<backend>.{5}) .{8}\]")
# the query of layer N as a source of its attention: "Qcur-12 (view) (perm" (names are cut at 20 characters),
# or the scheduler's copy of it on another backend: "CPU#Qcur-0 (view)#0"
_QUERY = re.compile(r"^(?:[^#\s]+#)?q(?:cur)?-(?P<il>\d+)\b", re.IGNORECASE)
# the KQ product of layer N, the attention without flash attention (src/llama-graph.cpp build_attn_mha)
_KQ = re.compile(r"^kq-(?P<il>\d+)$")
# a view of layer N's KV cache (src/llama-kv-cache.cpp: "cache_k_l%d", "cache_v_l%d")
_CACHE = re.compile(r"^cache_[kv]_l(?P<il>\d+)\b")


@dataclass(frozen=True)
class SchedNode:
    index: int
    op: str  # the op, cut at 10 characters: "FLASH_ATTN", "MUL_MAT"
    name: str  # cut at 20 characters
    srcs: tuple[str, ...]  # the sources' names, cut at 20 characters


@dataclass(frozen=True)
class SchedSplit:
    backend: str  # "CPU", "RPC0[127.0.0.1:50052]", "CUDA0"
    inputs: tuple[str, ...]  # the tensors copied in from another backend before the split runs
    nodes: tuple[SchedNode, ...]  # empty at GGML_SCHED_DEBUG=1

    @property
    def on_cpu(self) -> bool:
        return self.backend == "CPU"


@dataclass(frozen=True)
class SchedGraph:
    """One graph as the scheduler split it. ``n_tokens`` is the ubatch of a reserve (``graph_reserve``
    logs it just before); None for a graph computed later."""

    n_tokens: int | None
    splits: tuple[SchedSplit, ...]

    def attention(self) -> dict[int, str]:
        """Layer → the backend that runs its attention (the FLASH_ATTN_EXT node, or the KQ product)."""
        where: dict[int, str] = {}
        for split in self.splits:
            for node in split.nodes:
                if node.op == "FLASH_ATTN":
                    found = next((m for s in node.srcs if (m := _QUERY.match(s))), None)
                else:
                    found = _KQ.match(node.name) if node.op == "MUL_MAT" else None
                if found:
                    where[int(found["il"])] = split.backend
        return where

    def kv_copied(self) -> set[int]:
        """Layers whose KV cache (a view of it) is copied into a split: their KV crossed between backends."""
        return {int(m["il"]) for split in self.splits for name in split.inputs if (m := _CACHE.match(name))}


def sched_graphs(log: str) -> list[SchedGraph]:
    """Every graph the scheduler printed in ``log``, in order."""
    graphs: list[SchedGraph] = []
    for n_tokens, splits in _graphs(_PREFIX.sub("", log).splitlines()):
        graphs.append(SchedGraph(n_tokens, tuple(splits)))
    return graphs


def _graphs(lines: list[str]) -> Iterator[tuple[int | None, list[SchedSplit]]]:
    reserve: int | None = None
    splits: list[SchedSplit] = []
    n_tokens: int | None = None
    nodes: list[SchedNode] = []
    head: re.Match[str] | None = None

    def close() -> None:
        if head is not None:
            inputs = tuple(m["name"] for m in _INPUT.finditer(head["inputs"] or ""))
            splits.append(SchedSplit(head["backend"], inputs, tuple(nodes)))

    for line in lines:
        if m := _RESERVE.search(line):
            reserve = int(m["n"])
        elif m := _SPLIT.match(line):
            close()
            if m["i"] == "0":
                if splits:
                    yield n_tokens, splits
                splits, n_tokens, reserve = [], reserve, None
            head, nodes = m, []
        elif head is not None and (m := _NODE.match(line)):
            srcs = tuple(s["name"].strip() for s in _SRC.finditer(m["srcs"]))
            nodes.append(SchedNode(int(m["i"]), m["op"].strip(), m["name"].strip(), srcs))
    close()
    if splits:
        yield n_tokens, splits
