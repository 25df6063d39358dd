"""A CPU's attention cost read off the engine's own timings (app/engine/cpu_attention.py), from a
recorded ``llama-batched-bench`` run of the self-test model with 32-wide heads on a loopback RPC worker."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from app.engine import cpu_attention

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "engine_logs" / "batched-bench-selftest-h32-rpc.log"


def test_the_table_is_read_per_prompt_length() -> None:
    # (the decode column is 16 tokens' seconds: per token here)
    assert cpu_attention.parse_rows(LOG.read_text()) == {256: (0.011, 0.012 / 16), 2048: (0.366, 0.078 / 16)}


def test_costs_per_cell_and_head_from_how_the_times_grow_with_the_cells() -> None:
    rows = cpu_attention.parse_rows(LOG.read_text())
    got = cpu_attention.rates(rows, heads=8, flops_token=1e6)  # 2 layers × 4 heads
    assert got is not None
    # decode: 16 tokens took 12 ms after 256 cells, 78 ms after 2048: 4.125 ms / 16 over 1,792 cells, 8 heads
    assert got["decode"] == pytest.approx((0.078 - 0.012) / 16 / 1792 / 8)
    # prefill: seconds per prompt token grow with the mean fill (half the prompt)
    slope = (0.366 / 2048 - 0.011 / 256) / 896
    assert got["prefill"] == pytest.approx(slope / 8)
    # the rest of a token of the 256-token prompt is its matmuls: 1 MFLOP over it
    assert got["compute"] == pytest.approx(1e6 / (0.011 / 256 - slope * 128))
    # a decoded token at no cells: 0.75 ms at 256 cells less 256 cells of the decode slope
    assert got["decode_base"] == pytest.approx(0.012 / 16 - (0.078 - 0.012) / 16 / 1792 * 256)


def test_rows_that_do_not_grow_with_the_cells_say_nothing() -> None:
    assert cpu_attention.rates({256: (0.011, 0.080 / 16), 2048: (0.366, 0.078 / 16)}, heads=8, flops_token=1e6) is None
    assert cpu_attention.rates({256: (0.011, 0.012 / 16)}, heads=8, flops_token=1e6) is None


def test_runs_that_disagree_are_not_kept(tmp_path: Path) -> None:
    """A core taken by something else stalls the engine's thread barrier: one of five runs came out many
    times slower. Runs more than ``NOISY_SPREAD`` apart give no figure (a later plan measures again);
    runs that agree give their median."""
    from app.engine.selftest import selftest_model

    slow = LOG.read_text().replace("|    0.078 |", "|    0.780 |")  # the 2048-cell decode ten times slower
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
    assert set(got) == {"f16", "q8_0"} and got["f16"]["decode"] == pytest.approx((0.078 - 0.012) / 16 / 1792 / 8)


def test_a_row_between_gives_the_decode_with_the_kv_in_cache() -> None:
    """The run's middle prompt (1,024 cells): the decode over the first two rows is a query head's own
    work with the KV still in the CPU's caches; over all three, the rows come from memory too
    (app/planner/solve/speed.py shares that part among a GQA model's query heads)."""
    rows = {256: (0.011, 0.64 / 64 / 1000), 1024: (0.09, 1.0 / 64 / 1000), 2048: (0.366, 3.2 / 64 / 1000)}
    got = cpu_attention.rates(rows, heads=8, flops_token=1e6)
    assert got is not None
    assert got["decode"] == pytest.approx((3.2 - 0.64) / 64 / 1000 / 1792 / 8)  # first to last, as before
    assert got["decode_cached"] == pytest.approx((1.0 - 0.64) / 64 / 1000 / 768 / 8)
    # a middle row that does not grow (noise): no figure in cache, the rest as before
    flat = cpu_attention.rates(rows | {1024: (0.09, 0.5 / 64 / 1000)}, heads=8, flops_token=1e6)
    assert flat is not None and "decode_cached" not in flat and flat["decode"] == got["decode"]


def test_the_decode_in_cache_is_kept_only_where_most_runs_agree(tmp_path: Path) -> None:
    """Its slope is the shorter one (768 cells), so it is the noisier: a run whose middle row does not grow
    gives none, and the median of the others is kept when most gave one and they agree; runs that
    disagree give none (a GQA model is then priced at the whole cost, as before)."""
    from app.engine.selftest import selftest_model

    def table(mid_tg: float) -> str:
        return LOG.read_text().replace(
            "|  2048 |", f"|  1024 |     16 |    1 |   1040 |    0.090 | 11377.78 |    {mid_tg:.3f} |   500.00 |"
                         "    0.100 | 10400.00 |\n|  2048 |", 1)

    tables = tmp_path / "tables"
    tables.mkdir()
    for name, mid in (("good", 0.020), ("good2", 0.021), ("flat", 0.010), ("far", 0.060)):
        (tables / name).write_text(table(mid))
    bench = tmp_path / "llama-batched-bench"
    model = selftest_model(tmp_path / "models", head_dim=32)

    def run(order: list[str]) -> dict[str, float]:
        script = " ".join(order)
        bench.write_text(f"#!/bin/sh\nn=$(cat {tmp_path}/n 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/n\n"
                         f"set -- {script}\nshift $((n % $#))\ncat {tables}/$1\n")
        bench.chmod(0o755)
        (tmp_path / "n").unlink(missing_ok=True)
        return cpu_attention.measure(bench, model, ["-ngl", "0"])["f16"]

    # five runs: three good, one flat (no figure in cache), one good: the median of the four that gave one
    got = run(["good", "good2", "flat", "good", "good2"])
    assert got["decode_cached"] == pytest.approx(statistics.median(
        [(t - 0.012) / 16 / 768 / 8 for t in (0.020, 0.021, 0.020, 0.021)]))
    # two disagree by more than NOISY_SPREAD (8 ms against 48 ms over the same cells): none kept
    assert "decode_cached" not in run(["good", "far", "good", "far", "far"])
