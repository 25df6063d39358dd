"""Which weights the CPU backend copies into its ``CPU_REPACK`` buffer, and the CPU features that decide it.

Mirrors llama.cpp 0c1e57098:
- src/llama-model.cpp ``make_cpu_buft_list``: a host layer's buffer types are tried in order — the
  first GPU's host (pinned) type, then the CPU's extra types (``CPU_REPACK``), then plain ``CPU``;
  src/llama-model-loader.cpp ``select_weight_buft`` takes the first whose device supports the
  tensor's op (``weight_buft_supported`` builds a MUL_MAT / MUL_MAT_ID with an F32 activation);
- ggml/src/ggml-cpu/repack.cpp ``extra_buffer_type::supports_op``: MUL_MAT with a 2-D weight or
  MUL_MAT_ID with a 3-D one, when ``ggml_repack_get_optimal_repack_type`` has a layout for its type
  and row count (the ``RULES`` below);
- the repack buffer's tensors take ``ggml_nbytes`` each (no ``get_alloc_size``), padded to
  ``TENSOR_ALIGNMENT`` = 32 (``ggml_backend_cpu_repack_buffer_type_get_alignment``, ggml-alloc.c).
The features are the build's (``ggml_cpu_has_avx2()`` is ``#if defined(__AVX2__)``): ``from_system_info``
reads them from the engine's ``system_info`` line; a native build has the machine's, which
``parse_cpuinfo`` reads from /proc/cpuinfo text (app/machine/cpu.py reads the file). They reach the
planner as ``Inventory.cpu``. Not modelled: AMX (Headroom's engines are built without it, and another
engine with it is launched with ``-nr``, which has no extra buffer at all), KleidiAI, SVE
vector lengths (the NEON rules cover the same tensors on the CPUs seen), RISC-V.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: ggml/src/ggml-impl.h ``TENSOR_ALIGNMENT``.
REPACK_ALIGNMENT = 32

# ggml/include/ggml.h ``enum ggml_type``.
Q4_0, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, Q1_0 = 2, 8, 10, 12, 13, 14, 20, 39, 41

#: ``ggml_repack_get_optimal_repack_type``: (type, features all required, ``ne[1]`` divisor), in the
#: order the engine tries them; the first that matches picks a layout. x86 first, then ARM.
RULES: tuple[tuple[int, frozenset[str], int], ...] = tuple(
    (t, frozenset(f), d) for t, f, d in (
        (Q4_0, {"AVX2"}, 8), (Q4_0, {"NEON", "MATMUL_INT8"}, 4), (Q4_0, {"NEON", "DOTPROD"}, 4),
        (Q4_K, {"AVX2"}, 8), (Q4_K, {"NEON", "MATMUL_INT8"}, 8), (Q4_K, {"NEON", "DOTPROD"}, 8),
        (Q2_K, {"AVX512"}, 8),
        (Q5_K, {"NEON", "MATMUL_INT8"}, 8), (Q5_K, {"NEON", "DOTPROD"}, 8),
        (Q6_K, {"NEON", "MATMUL_INT8"}, 8), (Q6_K, {"NEON", "DOTPROD"}, 8),
        (IQ4_NL, {"AVX2"}, 8), (IQ4_NL, {"NEON", "DOTPROD"}, 4),
        (MXFP4, {"AVX2"}, 8), (MXFP4, {"NEON", "DOTPROD"}, 4),
        (Q8_0, {"NEON", "MATMUL_INT8"}, 4), (Q8_0, {"NEON", "DOTPROD"}, 4),
        (Q1_0, {"NEON", "MATMUL_INT8"}, 4), (Q1_0, {"NEON", "DOTPROD"}, 4),
    ))

#: Weights whose op is not a matrix multiplication (src/llama-arch.cpp ``LLM_TENSOR_INFOS``:
#: GGML_OP_GET_ROWS, SSM_CONV, IM2COL, SSM_SCAN ...) but that can be 2-D and quantized.
NOT_MATMUL = frozenset({
    "token_embd", "position_embd", "token_types", "per_layer_token_embd", "nextn.embed_tokens",
    "attn_compressor_ape", "indexer_compressor_ape", "ffn_gate_tid2eid", "attn_rel_b", "cross_attn_rel_b",
    "d2t", "markov_w1", "selector_predecessor", "selector_successor", "conv1d", "conv1", "conv2", "dw",
    "ssm_conv1d", "shortconv.conv", "ple_conv1d", "ssm_a", "masked_embd_centroids", "masked_embd_ordering",
})

#: /proc/cpuinfo flag → the name ggml's ``system_info`` prints for it.
_CPUINFO = {"avx2": "AVX2", "avx512f": "AVX512", "amx_int8": "AMX_INT8", "asimd": "NEON",
            "asimddp": "DOTPROD", "i8mm": "MATMUL_INT8", "sve": "SVE"}


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU backend's features as ggml names them (``AVX2``, ``AVX512``, ``NEON`` …), and whether
    it was built with the repack buffer (``GGML_CPU_REPACK``, on by default)."""

    names: frozenset[str]
    repack: bool = True

    @classmethod
    def from_system_info(cls, line: str) -> CpuFeatures:
        """From ``system_info: ... | CPU : SSE3 = 1 | AVX2 = 1 | ... | REPACK = 1 |``."""
        cpu = line.split("CPU :", 1)[-1]
        on = frozenset(m.group(1) for m in re.finditer(r"(\w+) = 1\b", cpu))
        return cls(on - {"REPACK"}, "REPACK" in on)

    def repacks(self, ggml_type: int, ne1: int) -> bool:
        """A layout exists for a weight of this type with ``ne1`` rows."""
        if not self.repack:
            return False
        return any(t == ggml_type and need <= self.names and ne1 % div == 0 for t, need, div in RULES)


NO_REPACK = CpuFeatures(frozenset(), repack=False)


def parse_cpuinfo(text: str) -> CpuFeatures:
    """Features from /proc/cpuinfo text: x86 ``flags``, ARM ``Features`` (the first CPU's)."""
    m = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.MULTILINE)
    flags = set(m.group(1).split()) if m else set()
    return CpuFeatures(frozenset(v for k, v in _CPUINFO.items() if k in flags))


def _base(name: str) -> str | None:
    """``blk.3.ffn_up_exps.weight`` → ``ffn_up_exps`` (also ``enc.blk.N.``, ``posnet.N.``); None for
    anything but a ``.weight``."""
    if not name.endswith(".weight"):
        return None  # biases are GGML_OP_ADD
    return re.sub(r"^(?:[a-z_]+\.)+\d+\.", "", name[: -len(".weight")])


def is_repacked(name: str, shape: tuple[int, ...], ggml_type: int, cpu: CpuFeatures) -> bool:
    """Whether a host-layer weight lands in ``CPU_REPACK`` (see the module notes)."""
    base = _base(name)
    if base is None or base in NOT_MATMUL:
        return False
    dims = list(shape)
    while len(dims) > 1 and dims[-1] == 1:  # ggml_n_dims
        dims.pop()
    want = 3 if base.endswith(("_exps", "_chexps")) else 2  # MUL_MAT_ID : MUL_MAT
    return len(dims) == want and cpu.repacks(ggml_type, dims[1])


def repack_bytes(n_bytes: int) -> int:
    """What one repacked tensor takes in the buffer."""
    return -(-n_bytes // REPACK_ALIGNMENT) * REPACK_ALIGNMENT
