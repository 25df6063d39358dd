"""The ggml tensor types of the engine Headroom builds, and which of them it can compute with.

Read from the vendored llama.cpp (0c1e57098) itself, not from the ``gguf`` package (which lags it:
it has no ``q2_0``, type 42, and gives ``q8_1`` 40 bytes a block where ggml has 36):
ggml/include/ggml.h ``enum ggml_type`` and ggml/src/ggml.c ``type_traits`` (``blck_size``,
``type_size``). ``tests/integration/test_engine_tables.py`` compares this table with ``ggml_type_name``,
``ggml_blck_size`` and ``ggml_type_size`` of the built engine's libggml-base, for every type up to
``GGML_TYPE_COUNT``, so a new type in a newer engine fails a test instead of being refused.
"""

from __future__ import annotations

#: ggml type id → (name, elements per block, bytes per block). Ids absent here were removed from ggml
#: (4, 5, 31–33, 36–38: gguf.cpp refuses them as invalid).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36), 10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136),
    24: ("i8", 1, 1), 25: ("i16", 1, 2), 26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8),
    29: ("iq1_m", 256, 56), 30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66),
    39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}
#: ggml.h GGML_TYPE_COUNT: one past the last id.
GGML_TYPE_COUNT = 43
#: Types a file may store but no backend computes a model's weights in: the integer and f64 types
#: (no matrix multiplication or row lookup for them: an I32 ``token_embd.weight`` crashes llama-server
#: at warm-up) and the activation-only q8_1 and q8_K (the ``vec_dot_type`` of other quantisations).
NOT_WEIGHT_TYPES = frozenset({9, 15, 24, 25, 26, 27, 28})


def type_name(ggml_type: int) -> str:
    known = GGML_TYPES.get(ggml_type)
    return known[0].upper() if known else f"type {ggml_type}"
