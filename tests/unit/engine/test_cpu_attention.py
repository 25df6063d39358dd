"""A CPU's attention cost read off the engine's own timings (app/engine/cpu_attention.py), from a
recorded ``llama-batched-bench`` run of the self-test model with 32-wide heads on a loopback RPC worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine import cpu_attention

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "engine_logs" / "batched-bench-selftest-h32-rpc.log"


#: The recorded table's times, from its rates (``S_PP``, ``S_TG``: tokens/s): its seconds are printed to
#: the millisecond (0.011 and 0.012 for the first row).
PP_256, TG_256, PP_2048, TG_2048 = 256 / 22282.18, 16 / 1339.81, 2048 / 5595.00, 16 / 205.57


def test_the_table_is_read_per_prompt_length_from_its_rates() -> None:
    # (the decode column is 16 tokens' seconds: per token here)
    assert cpu_attention.parse_rows(LOG.read_text()) == {256: pytest.approx((PP_256, TG_256 / 16)),
                                                         2048: pytest.approx((PP_2048, TG_2048 / 16))}
    assert (round(PP_256, 6), round(TG_256, 6)) == (0.011489, 0.011942)  # (printed 0.011, 0.012)
    # a rate of 0 (a row too short to time) falls back to the seconds printed
    row = "|   256 |     16 |    1 |    272 |    0.011 |     0.00 |    0.012 |     0.00 |    0.023 | 11608.55 |"
    assert cpu_attention.parse_rows(row) == {256: (0.011, 0.012 / 16)}


def test_costs_per_cell_and_head_from_how_the_times_grow_with_the_cells() -> None:
    rows = cpu_attention.parse_rows(LOG.read_text())
    got = cpu_attention.rates(rows, heads=8, flops_token=1e6)  # 2 layers × 4 heads
    assert got is not None
    # decode: 16 tokens took 12 ms after 256 cells, 78 ms after 2048: 4.1 ms / 16 over 1,792 cells, 8 heads
    assert got["decode"] == pytest.approx((TG_2048 - TG_256) / 16 / 1792 / 8)
    # prefill: seconds per prompt token grow with the mean fill (half the prompt)
    slope = (PP_2048 / 2048 - PP_256 / 256) / 896
    assert got["prefill"] == pytest.approx(slope / 8)
    # the rest of a token of the 256-token prompt is its matmuls: 1 MFLOP over it
    assert got["compute"] == pytest.approx(1e6 / (PP_256 / 256 - slope * 128))
    # a decoded token at no cells: 0.75 ms at 256 cells less 256 cells of the decode slope
    assert got["decode_base"] == pytest.approx(TG_256 / 16 - (TG_2048 - TG_256) / 16 / 1792 * 256)


def test_rows_that_do_not_grow_with_the_cells_say_nothing() -> None:
    assert cpu_attention.rates({256: (0.011, 0.080 / 16), 2048: (0.366, 0.078 / 16)}, heads=8, flops_token=1e6) is None
    assert cpu_attention.rates({256: (0.011, 0.012 / 16)}, heads=8, flops_token=1e6) is None


def test_runs_that_disagree_are_not_kept(tmp_path: Path) -> None:
    """A core taken by something else stalls the engine's thread barrier: one of five runs came out many
    times slower. Runs more than ``NOISY_SPREAD`` apart give no figure (a later plan measures again);
    runs that agree give their median."""
    from app.engine.selftest import selftest_model

    # the 2048-cell decode ten times slower (its seconds and its rate, which is what is read)
    slow = LOG.read_text().replace("|    0.078 |   205.57 |", "|    0.780 |    20.56 |")
    assert slow != LOG.read_text()
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "fast").write_text(LOG.read_text())
    (tables / "slow").write_text(slow)
    bench = tmp_path / "llama-batched-bench"
    # every other call the slow table (a counter file): five runs, three fast and two slow
    bench.write_text(f"#!/bin/sh\nn=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n\n"
                     f"if [ $((n % 2)) -eq 1 ]; then cat {tables}/slow; else cat {tables}/fast; fi\n")
    bench.chmod(0o755)
    model = selftest_model(tmp_path / "models", head_dim=32)
    assert cpu_attention.measure(bench, model, ["-ngl", "0"]) == {}
    (tmp_path / "n").unlink()
    bench.write_text(f"#!/bin/sh\ncat {tables}/fast\n")
    got = cpu_attention.measure(bench, model, ["-ngl", "0"])
    assert set(got) == {"f16", "q8_0"} and got["f16"]["decode"] == pytest.approx((TG_2048 - TG_256) / 16 / 1792 / 8)


def test_a_kv_type_whose_runs_disagreed_is_run_once_more_before_it_is_left_out(tmp_path: Path) -> None:
    """Left out, a KV type is priced at memory bandwidth for good (a loopback worker's q8_0, ×0.2 of what it
    ran at): runs that disagreed (two of the first five ten times slow) are made once more, and kept
    when those agree."""
    from app.engine.selftest import selftest_model

    slow = tmp_path / "slow.log"
    slow.write_text(LOG.read_text().replace("|    0.078 |   205.57 |", "|    0.780 |    20.56 |"))
    bench = tmp_path / "llama-batched-bench"
    calls = tmp_path / "calls"
    # the f16 runs agree; q8_0's 2nd and 4th runs are slow, every later one is not
    bench.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *"-ctk q8_0"*) '
                     f'n=$(grep -c -- "-ctk q8_0" {calls}); if [ "$n" -eq 2 ] || [ "$n" -eq 4 ]; then cat {slow}; '
                     f'else cat {LOG}; fi ;; *) cat {LOG} ;; esac\n')
    bench.chmod(0o755)
    got = cpu_attention.measure(bench, selftest_model(tmp_path / "models", head_dim=32), ["-ngl", "0"])
    assert got["q8_0"]["decode"] == pytest.approx((TG_2048 - TG_256) / 16 / 1792 / 8)
    argvs = calls.read_text().splitlines()
    assert sum("-ctk q8_0" in a for a in argvs) == 2 * cpu_attention.REPEATS  # (f16's: once)
    assert sum("-ctk f16" in a for a in argvs) == cpu_attention.REPEATS


GQA_LOG = LOG.with_name("batched-bench-gqa4-h32-rpc.log")


def test_the_gqa_run_gives_f16s_decode_a_query_head_with_four_over_a_kv_head(tmp_path: Path) -> None:
    """After the f16 run, the same on the GQA run's model (16 query heads over 4 KV heads, 2 layers): its
    decode slope over its 32 query heads is ``decode_gqa``; a quantized KV has none (its prefill at
    four times the heads would take seconds a run)."""
    from app.engine.selftest import deep_attention_model, selftest_model

    model = selftest_model(tmp_path / "models", head_dim=32)
    gqa = deep_attention_model(32, 2, tmp_path / "models", n_head=16, n_head_kv=4)
    bench = tmp_path / "llama-batched-bench"
    calls = tmp_path / "calls"
    # (the recorded tables: the GQA model's for its file, the self-test model's for any other)
    bench.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *-q16-kv4-*) cat {GQA_LOG} ;; '
                     f'*) cat {LOG} ;; esac\n')
    bench.chmod(0o755)
    got = cpu_attention.measure(bench, model, ["-ngl", "0"], gqa)
    # 64 tokens took 75 ms after 256 cells, 418 ms after 2,048 (its rates: 855.02 and 153.15 tokens/s):
    # over 1,792 cells and 2 layers × 16 heads
    assert got["f16"]["decode_gqa"] == pytest.approx((1 / 153.15 - 1 / 855.02) / 1792 / 32)
    assert got["f16"]["gqa"] == 4
    assert "decode_gqa" not in got["q8_0"] and got["q8_0"]["decode"] == got["f16"]["decode"]
    argvs = calls.read_text().splitlines()
    assert sum(str(gqa) in a for a in argvs) == cpu_attention.GQA_REPEATS
    assert all("-ctk f16" in a for a in argvs if str(gqa) in a)
    assert len(argvs) == 2 * cpu_attention.REPEATS + cpu_attention.GQA_REPEATS


DEEP_LOGS = {n: LOG.with_name(f"batched-bench-{name}-h32-rpc.log") for n, name in ((5, "deep4"), (17, "deep16"),
                                                                                    (65, "deep"))}


def test_the_deep_runs_give_the_decode_by_the_kv_a_token_reads(tmp_path: Path) -> None:
    """After each KV type's run, one deep run a footprint (4, 16, 64 MiB of f16 KV at the long prompt:
    5, 17 and 65 layers of 4 32-wide heads at 2,048 cells): each one's decode slope a cell and head is a
    point of ``decode_curve`` at the KV bytes a token reads in the middle of its slope's cells, after
    the in-cache run's; the largest is ``decode_deep``. A float KV's runs fill 2,048 cells (past the
    caches a cell cost less over a longer context: 168 ns at 496 cells, 104–126 at 2,048 on the Xeon
    VM), a quantized KV's 496 (its prefill is not tiled). A footprint whose runs disagree is left out."""
    from app.engine.selftest import selftest_model

    model = selftest_model(tmp_path / "models", head_dim=32)
    f16_models = cpu_attention.deep_models(32, "f16")
    assert [m.name.split("-l")[1].split("-")[0] for m in f16_models] == ["5", "17", "65"]
    q8_models = cpu_attention.deep_models(32, "q8_0")
    assert [m.name.split("-l")[1].split("-")[0] for m in q8_models] == ["17", "67", "265"]
    bench = tmp_path / "llama-batched-bench"
    calls = tmp_path / "calls"
    # (the recorded tables by layers; the 17-layer model's q8_0 runs alternate with a ×10 slower one)
    slow = tmp_path / "slow.log"
    slow.write_text(DEEP_LOGS[17].read_text().replace("|    0.189 |    84.72 |", "|    1.890 |     8.47 |"))
    assert slow.read_text() != DEEP_LOGS[17].read_text()
    bench.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in\n'
        f'  *-l5-*) cat {DEEP_LOGS[5]} ;;\n'
        f'  *-l17-*q8_0*) n=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n; '
        f'if [ $((n % 2)) -eq 1 ]; then cat {slow}; else cat {DEEP_LOGS[17]}; fi ;;\n'
        f'  *-l17-*) cat {DEEP_LOGS[17]} ;;\n  *-l6[57]-*|*-l265-*) cat {DEEP_LOGS[65]} ;;\n  *) cat {LOG} ;;\nesac\n')
    bench.chmod(0o755)
    got = cpu_attention.measure(bench, model, ["-ngl", "0"], None, lambda kv: cpu_attention.deep_models(32, kv))

    def slope(log: Path, layers: int) -> float:
        rows = cpu_attention.parse_rows(log.read_text())
        (c1, (_, t1)), (c2, (_, t2)) = sorted(rows.items())
        return (t2 - t1) / (c2 - c1) / (layers * 4)

    f16 = got["f16"]["decode_curve"]
    # the in-cache run's point: 2 layers × 4 heads × 64-byte K and V rows over (256 + 2,048) / 2 + 32 cells
    assert f16[0] == [pytest.approx(2 * 4 * 128 * 1184), got["f16"]["decode"]]
    # each deep run's: its layers × 4 heads × 128 bytes over (1,008 + 2,032) / 2 + 8 cells
    assert f16[1:] == [[pytest.approx(n * 4 * 128 * 1528), pytest.approx(slope(DEEP_LOGS[n], n))] for n in (5, 17, 65)]
    assert got["f16"]["decode_deep"] == f16[-1][1]
    # q8_0: 34 bytes a 32-wide row, at 496 cells' runs ((240 + 496) / 2 + 8); its 17-layer run, whose
    # runs disagreed, left out
    q8 = got["q8_0"]["decode_curve"]
    assert [b for b, _ in q8] == [pytest.approx(2 * 4 * 68 * 1184), pytest.approx(67 * 4 * 68 * 376),
                                  pytest.approx(265 * 4 * 68 * 376)]
    argvs = calls.read_text().splitlines()
    assert all("-npp 1008,2032 " in a for a in argvs if "-ctk f16" in a and "-kv4-l" in a)
    assert all("-npp 240,496 " in a for a in argvs if "-ctk q8_0" in a and "-kv4-l" in a)


def test_a_gqa_run_whose_runs_disagree_gives_no_figure_and_keeps_the_rest(tmp_path: Path) -> None:
    from app.engine.selftest import deep_attention_model, selftest_model

    model = selftest_model(tmp_path / "models", head_dim=32)
    gqa = deep_attention_model(32, 2, tmp_path / "models", n_head=16, n_head_kv=4)
    slow = tmp_path / "slow.log"
    slow.write_text(GQA_LOG.read_text().replace("|    0.418 |   153.15 |", "|    4.180 |    15.31 |"))
    assert slow.read_text() != GQA_LOG.read_text()
    bench = tmp_path / "llama-batched-bench"
    # the GQA model's runs alternate fast and slow (a counter file): ×10 apart
    bench.write_text(f'#!/bin/sh\ncase "$*" in *-q16-kv4-*) n=$(cat {tmp_path}/n 2>/dev/null || echo 0); '
                     f'echo $((n + 1)) > {tmp_path}/n; if [ $((n % 2)) -eq 1 ]; then cat {slow}; else cat {GQA_LOG}; fi ;; '
                     f'*) cat {LOG} ;; esac\n')
    bench.chmod(0o755)
    got = cpu_attention.measure(bench, model, ["-ngl", "0"], gqa)
    assert "decode_gqa" not in got["f16"] and got["f16"]["decode"] > 0


def test_a_kv_type_that_cannot_be_made_at_a_head_size_is_not_run_nor_said_to_have_failed(tmp_path: Path) -> None:
    """A q8_0 K cache needs heads a multiple of its block of 32 (the engine refuses the context): a
    16-wide model's walkthrough read "q8_0: no figure (its runs failed or disagreed)" as a flaky run."""
    from app.engine.attention_runs import run_lines
    from app.engine.selftest import selftest_model
    from app.machine import calibrate

    bench = tmp_path / "llama-batched-bench"
    calls = tmp_path / "calls"
    bench.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncat {LOG}\n')
    bench.chmod(0o755)
    assert cpu_attention.kv_types_for(16) == ("f16",) and cpu_attention.kv_types_for(128) == cpu_attention.KV_TYPES
    got = cpu_attention.measure(bench, selftest_model(tmp_path / "models", head_dim=16), ["-ngl", "0"])
    assert set(got) == {"f16"} and all("-ctk f16" in a for a in calls.read_text().splitlines())
    runs = {calibrate.HOST_RUN: {"16": {**got, calibrate.RUN_VERSION_KEY: calibrate.ENGINE_RUN_VERSION}}}
    (line,) = run_lines(runs, [(None, 16)])
    assert line.startswith("measured: this CPU's flash attention, 16-wide heads: f16 decode") and "q8_0" not in line
