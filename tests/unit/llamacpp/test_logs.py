"""The llama.cpp log parser against a recorded H200 engine log, the opencoti boot format, and the
lines the vendored llama.cpp prints (formats quoted from its source in app/llamacpp/logs.py)."""

from __future__ import annotations

from pathlib import Path

from app.llamacpp.logs import NO_BUFFER_LINES, LogParser, is_host_device, parse_fit_print, parse_log
from app.planner.units import MiB

OPENCOTI = Path(__file__).resolve().parents[2] / "fixtures" / "opencoti"


def h200_log(shared_fixtures: Path) -> str:
    return (shared_fixtures / "h200" / "llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log").read_text()


def test_h200_engine_log_gives_every_buffer_per_device(shared_fixtures: Path) -> None:
    buf = parse_log(h200_log(shared_fixtures))
    assert buf.model == {"CPU_Mapped": round(788.91 * MiB), "CUDA0": round(14179.61 * MiB)}
    assert buf.kv == {"CUDA0": 98304 * MiB}
    assert buf.output == {"CUDA_Host": round(2.32 * MiB)}
    assert buf.compute == {"CUDA0": round(623.01 * MiB), "CUDA_Host": round(532.01 * MiB)}
    assert buf.warnings == ()


def test_h200_kv_cache_line_and_memory_breakdown(shared_fixtures: Path) -> None:
    buf = parse_log(h200_log(shared_fixtures))
    (cache,) = buf.kv_caches
    assert (cache.cells, cache.layers, cache.n_seq_max, cache.n_stream) == (524288, 48, 4, 1)
    assert (cache.type_k, cache.type_v, cache.k, cache.v) == ("f16", "f16", 49152 * MiB, 49152 * MiB)
    assert buf.kv_total == 98304 * MiB
    gpu, host = buf.breakdown
    assert (gpu.name, gpu.description, gpu.total, gpu.free, gpu.model, gpu.context, gpu.compute,
            gpu.unaccounted) == ("CUDA0", "H200", 143155, 29447, 14179, 98304, 623, 602)
    assert (host.name, host.host, host.model, host.compute, host.total) == ("Host", True, 788, 532, None)


def test_host_memory_is_recognised_by_name() -> None:
    for name in ("CUDA_Host", "CPU_Mapped", "CPU", "CPU_REPACK", "Host"):
        assert is_host_device(name), name
    for name in ("CUDA0", "CUDA1", "Vulkan0"):
        assert not is_host_device(name), name


def test_iswa_prints_two_caches_and_both_count() -> None:
    # Lines as the probe printed them for the gemma-3 shape (two caches, one device).
    log = """llama_context: constructing llama_context
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size = 4352.00 MiB (131072 cells,   8 layers,  4/1 seqs), K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB
llama_kv_cache: attn_rot_k = 0, n_embd_head_k_all = 256
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size =  765.00 MiB (  4608 cells,  40 layers,  4/1 seqs), K (q8_0):  382.50 MiB, V (q8_0):  382.50 MiB
sched_reserve:        CPU compute buffer size =   254.01 MiB
"""
    buf = parse_log(log)
    assert [c.cells for c in buf.kv_caches] == [131072, 4608]
    assert buf.kv_total == (4352 + 765) * MiB
    assert buf.compute == {"CPU": round(254.01 * MiB)}


def test_a_relogged_block_replaces_the_earlier_one() -> None:
    buf = parse_log((OPENCOTI / "window-boot-two-pass.log").read_text())
    # pass 1 had 48 MiB of KV on the GPU; pass 2's re-logged block (4608 MiB) is what stands.
    assert buf.kv == {"CUDA0": 4608 * MiB, "CUDA_Host": 1536 * MiB}
    assert len(buf.kv_caches) == 1
    assert buf.compute == {"CUDA0": round(635.01 * MiB), "CUDA_Host": round(76.01 * MiB)}


def test_a_second_compute_block_without_a_marker_still_replaces() -> None:
    log = """sched_reserve:      CUDA0 compute buffer size =   100.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    10.00 MiB
sched_reserve: graph: nodes = 1638, splits = 2
sched_reserve:      CUDA0 compute buffer size =   200.00 MiB
"""
    assert parse_log(log).compute == {"CUDA0": 200 * MiB}


def test_opencoti_window_and_two_pass_lines() -> None:
    oc = parse_log((OPENCOTI / "window-boot-two-pass.log").read_text()).opencoti
    assert oc.measured_compute == 635 * MiB
    assert oc.iterations == 1
    assert (oc.tactic, oc.residency_mode) == ("POSITION_WINDOW", "auto")
    # the latest window line wins: pass 2 re-sized the window
    assert (oc.window_cells, oc.n_cells, oc.host_tail_cells) == (24576, 32768, 8192)
    assert oc.tactic_table == (("GPU_RESIDENT", 36), ("POSITION_WINDOW", 12))


def test_domain_lines_verbatim() -> None:
    # The three lines exactly as docs/domain.md §4 records them.
    parser = LogParser()
    parser.feed("rolling-kv POSITION_WINDOW mode ON (--kv-residency-mode auto) — window 256 / 32768 cells, host tail 32512")
    parser.feed("two-pass — measured GPU compute buffer = 635 MiB; re-sizing (iter 0)")
    parser.feed("tactic table: GPU_RESIDENT=36     POSITION_WINDOW=0")
    oc = parser.result().opencoti
    assert (oc.window_cells, oc.host_tail_cells, oc.measured_compute) == (256, 32512, 635 * MiB)
    assert oc.tactic_table == (("GPU_RESIDENT", 36), ("POSITION_WINDOW", 0))


def test_streamed_chunks_that_split_lines() -> None:
    parser = LogParser()
    for chunk in ("sched_reserve:      CUDA0 compute buf", "fer size =   623.01 MiB\nsched_res",
                  "erve:  CUDA_Host compute buffer size =   532.01 MiB"):
        parser.feed_text(chunk)
    assert parser.result().compute == {"CUDA0": round(623.01 * MiB), "CUDA_Host": round(532.01 * MiB)}


def test_a_log_without_buffer_lines_warns() -> None:
    buf = parse_log("0.00.101.711 I srv  llama_server: initializing ...\nsomething else\n")
    assert buf.warnings == (NO_BUFFER_LINES,)
    assert "-lv 4" in NO_BUFFER_LINES
    assert parse_log("nothing", expect_buffers=False).warnings == ()


def test_fit_params_print_rows() -> None:
    rows = parse_fit_print("CUDA0 14179 98304 623 \nHost 788 0 532 \n")
    assert [(r.name, r.model, r.context, r.compute) for r in rows] == [
        ("CUDA0", 14179, 98304, 623), ("Host", 788, 0, 532)]


def test_a_split_gguf_maps_each_file_and_the_sizes_add_up() -> None:
    log = """load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
load_tensors:   CPU_Mapped model buffer size = 47000.00 MiB
load_tensors:   CPU_Mapped model buffer size = 12000.50 MiB
load_tensors:        CUDA0 model buffer size = 80000.00 MiB
"""
    assert parse_log(log).model == {"CPU_Mapped": round(59000.50 * MiB), "CUDA0": 80000 * MiB}


def test_hybrid_recurrent_state_is_reported_beside_the_kv_cache() -> None:
    # As the probe printed them for the granite-4.0-h shape (4 attention layers, 40 Mamba layers).
    log = """llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size =   64.00 MiB (  8192 cells,   4 layers,  1/1 seqs), K (f16):   32.00 MiB, V (f16):   32.00 MiB
llama_memory_recurrent:        CPU RS buffer size =    55.37 MiB
llama_memory_recurrent: size =   55.37 MiB (     1 cells,  40 layers,  1 seqs  0 rs_seq), R (f32):    1.37 MiB, S (f32):   54.00 MiB, P (f32):    0.00 MiB
sched_reserve:        CPU compute buffer size =    59.01 MiB
"""
    buf = parse_log(log)
    assert buf.kv_total == 64 * MiB
    assert buf.recurrent == {"CPU": round(55.37 * MiB)}
    assert buf.recurrent_total == round(55.37 * MiB)
    assert buf.recurrent_lines[0].startswith("llama_memory_recurrent: size =   55.37 MiB")


def test_kv_layers_per_device_split_each_cache() -> None:
    # A partial offload as llama.cpp logs it (the DEBUG per-layer lines the probe passes on):
    # 3 of 4 layers on CUDA0, one on the host; with no_alloc the buffer lines say 0.00.
    log = """llama_kv_cache: layer   0: dev = CPU
llama_kv_cache: layer   1: dev = CUDA0
llama_kv_cache: layer   2: dev = CUDA0
llama_kv_cache: layer   3: dev = CUDA0
llama_kv_cache:      CUDA0 KV buffer size =     0.00 MiB
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
llama_kv_cache: size =  512.00 MiB (  8192 cells,   4 layers,  1/1 seqs), K (f16):  256.00 MiB, V (f16):  256.00 MiB
"""
    (cache,) = parse_log(log).kv_caches
    assert cache.layer_devices == (("CPU", 1), ("CUDA0", 3))
    assert (cache.on_device("CUDA0"), cache.on_device("CPU")) == (384 * MiB, 128 * MiB)
