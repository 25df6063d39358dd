"""``plan`` prices attention on a CPU for the engine that will launch (issue 30): the host tail as Headroom's
patched build runs it, or as any other engine does; a head size this machine has no CPU-attention engine
run for is measured in the background (the plan at hand priced without it, said in one line on stderr),
and never again (app/engine/attention_runs.py).
The runs here replay a recorded ``llama-batched-bench`` table (tests/conftest.py ``replay_bench``); the real run is
tests/integration/test_cpu_attention_run.py."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import psutil
import pytest

from app import cli
from app.engine.attention_runs import BUILD_HEAD_DIMS, host_runs
from app.engine.native_build import EngineBuild
from app.machine import calibrate
from tests.unit.engine.test_discover import _install


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay_bench: Path) -> Path:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "cache"


def _plan(model: Path, engine: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str]:
    rc = cli.main(["plan", str(model), "-c", "4k", "--engine", str(engine), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out), out.err


def _background_done(err: str, cache: Path) -> str:
    """The background run a plan started (its pid in ``err``), waited for; its log."""
    m = re.search(r"in the background \(about a minute, once; pid (\d+)\)", err)
    assert m, err
    deadline = time.monotonic() + 120
    while Path(f"/proc/{m.group(1)}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{m.group(1)}").exists()
    return (cache / "logs" / "attention-run.log").read_text()


def test_headroom_s_build_is_priced_with_its_host_attention_and_another_engine_without(
        engine_build: EngineBuild, tiny_model: Path, own_cache: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ours, _ = _plan(tiny_model, engine_build.server, capsys)
    assert ours["speed_figures"]["host_attention"] is True  # type: ignore[index]
    other, _ = _plan(tiny_model, _install(tmp_path / "bin", "other.llamafile", opencoti=False), capsys)
    assert other["engine"]["kind"] == "llamafile"  # type: ignore[index]
    assert other["speed_figures"]["host_attention"] is False  # type: ignore[index]


def test_a_head_size_not_run_yet_is_measured_once_and_said(engine_build: EngineBuild, tiny_model: Path,
                                                           own_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, err = _plan(tiny_model, engine_build.server, capsys)
    assert err.startswith("headroom: measuring this CPU's attention speed for 16-wide heads in the background "
                          "(about a minute, once; pid ")
    assert err.rstrip().endswith("this plan is priced at memory bandwidth, the next plans with the measured speed")
    assert "host_cpu_attention" not in first["speed_figures"]  # type: ignore[operator]
    log = _background_done(err, own_cache)
    lines = ["", next(ln.removeprefix("[attention] ") for ln in log.splitlines() if ln.startswith("[attention] "))]
    assert lines[1].startswith("measured: this CPU's flash attention, 16-wide heads: f16 decode ")
    assert lines[1].endswith(" per KV cell and head")
    plan, err = _plan(tiny_model, engine_build.server, capsys)
    assert err == ""  # priced with what the background run kept
    # the GQA run (the recorded table of 16 query heads over 4 KV heads): a query head's decode, said beside
    stored_f16 = json.loads((own_cache / "speed-calibration.json").read_text())["engine_runs"]["host"]["16"]["f16"]
    # the deep runs (the recorded tables of 5, 17 and 65 layers, 32-wide): the decode by the KV a token reads,
    # from the in-cache run's to the deepest (4, 16 and 64 MiB at their long prompt of 2,032 cells:
    # each point at the middle of the cells its slope spans)
    curve = stored_f16["decode_curve"]
    assert curve[0][1] == stored_f16["decode"] and curve[-1][1] == stored_f16["decode_deep"]
    assert [round(b / 2**20, 1) for b, _ in curve] == [0.6, 3.4, 12.3, 48.5]
    words = ", ".join(f"{c * 1e9:.3g} ns over {b / 2**20:.2g} MiB" + (" of KV a token" if i == 0 else "")
                      for i, (b, c) in enumerate(curve))
    assert (f"f16 decode {words} ({stored_f16['decode_gqa'] * 1e9:.3g} ns a query head, 4 over a KV head)"
            ) in lines[1]
    rates = plan["speed_figures"]["host_cpu_attention"]  # type: ignore[index]
    # (f16 alone: a q8_0 K cache cannot be made at 16-wide heads, so it is not run: cpu_attention.kv_types_for)
    assert {(r["kv_type"], r["head_dim"]) for r in rates} == {("f16", 16)}
    assert all(r["decode"]["calibrated"] and "llama-batched-bench on the self-test model" in r["decode"]["source"]
               for r in rates)
    stored = json.loads((own_cache / "speed-calibration.json").read_text())
    assert set(stored["engine_runs"]["host"]) == {"16"}
    again, err = _plan(tiny_model, engine_build.server, capsys)
    assert err == ""  # kept with this machine: not measured again
    assert again["speed_figures"] == plan["speed_figures"]
    # the text names the figure a host tail's decode rests on
    f16 = next(r for r in rates if r["kv_type"] == "f16")
    assert cli.main(["plan", str(tiny_model), "-c", "4k", "--engine", str(engine_build.server)]) == 0
    # (a decode's by the KV a token reads: the curve the runs measured)
    assert f16["decode_curve"] == curve
    assert (f"host CPU attention (f16 decode, a KV cell and head) {words} (16-wide heads; "
            f"{f16['decode_gqa']['value'] * 1e9:.3g} ns a query head, 4 over a KV head) (calibrated)"
            ) in capsys.readouterr().out


def test_a_busy_machine_is_not_timed_and_a_later_plan_times_it(engine_build: EngineBuild, tiny_model: Path,
                                                                own_cache: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A figure is kept for good: one timed while the machine is busy would price every later plan too
    slow. A load average over 0.75 a core: said, nothing stored, attention priced at bandwidth."""
    monkeypatch.delenv(calibrate.MEASURE_WHEN_BUSY_ENV)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * cores, 1.0, 1.0))
    plan, err = _plan(tiny_model, engine_build.server, capsys)
    assert err == (f"headroom: not measured now: the attention speed of this CPU (the machine is busy: load "
                   f"{2.0 * cores:.1f} on {cores} cores): priced at memory bandwidth until a plan on a quieter "
                   "machine measures it\n")
    assert "host_cpu_attention" not in plan["speed_figures"]  # type: ignore[operator]
    stored = json.loads((own_cache / "speed-calibration.json").read_text())
    assert not stored.get("engine_runs", {}).get("host")  # nothing kept: a later plan times it
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))  # quiet again: the next plan times it
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: 3.0)
    _, err = _plan(tiny_model, engine_build.server, capsys)
    assert err.startswith("headroom: measuring this CPU's attention speed for 16-wide heads in the background")
    _background_done(err, own_cache)


def test_engine_build_and_doctor_say_the_figures_for_real_models_head_sizes(own_cache: Path) -> None:
    # doctor --no-selftest: a bench is there, but the report alone measures nothing
    assert host_runs(measure_missing=False) == [
        f"not measured: this CPU's flash attention, {h}-wide heads (`headroom doctor` measures it; with "
        "--no-selftest it does not): priced at memory bandwidth, not calibrated" for h in BUILD_HEAD_DIMS]
    said: list[str] = []
    made = host_runs(measure_missing=True, say=said.append)
    assert said == ["measuring this CPU's attention speed for 64-wide and 128-wide heads (once; up to a minute)…"]
    assert [m.split(": f16 decode")[0] for m in made] == [
        "measured: this CPU's flash attention, 64-wide heads", "measured: this CPU's flash attention, 128-wide heads"]
    assert host_runs(measure_missing=True, say=said.append) == [m.replace("measured", "stored", 1) for m in made]
    assert len(said) == 1


def test_doctor_recalibrate_forgets_the_stored_figures_and_measures_the_cpu_again(
        own_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Figures timed on a bad day are kept for good; ``doctor --recalibrate`` is how a user gets rid of
    them: everything stored is forgotten (the host's timings, the CPU-attention runs, what launches
    taught), the CPU is timed again there and then, and the report says so."""
    host_runs(measure_missing=True)
    store = calibrate.calibration_path()
    stale = json.loads(store.read_text())
    stale["host_bandwidth"] = 1e9  # a timing of a busy moment
    stale["engine_runs"]["host"]["128"]["f16"]["decode"] = 9e-6
    stale["learned"] = {"cpu · tiny": {"decode_scale": 0.2}}
    store.write_text(json.dumps(stale))
    capsys.readouterr()
    assert cli.main(["doctor", "--no-selftest", "--recalibrate"]) == 0
    out = capsys.readouterr().out
    lines = {line[:18].strip(): line[19:] for line in out.splitlines() if line[:18].strip()}
    assert lines["Speed figures"].startswith("forgotten and measured again: host memory ")
    fresh = json.loads(store.read_text())
    assert fresh["host_bandwidth"] != 1e9 and fresh["learned"] == {}
    assert fresh["engine_runs"]["host"]["128"]["f16"]["decode"] != 9e-6
    assert "measured: this CPU's flash attention, 128-wide heads: f16 decode" in out  # not "stored"


def test_doctor_recalibrate_on_a_cache_it_cannot_change_says_so_and_fails(
        own_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # what cannot be removed: a folder where the file would be (a read-only cache is the same to a user,
    # but root, which CI may run as, writes to those anyway)
    store = calibrate.calibration_path()
    (store / "kept").mkdir(parents=True)
    assert cli.main(["doctor", "--no-selftest", "--recalibrate"]) == 1
    out = capsys.readouterr().out
    assert f"Speed figures      could not forget the stored figures: {store} cannot be removed" in out
    assert (store / "kept").is_dir()


def test_a_kv_type_whose_runs_disagreed_is_said_not_dropped() -> None:
    """doctor on this project's VM: the 128-wide f16 runs disagreed and the line named only q8_0, as if
    f16 had not been asked for."""
    from app.engine.attention_runs import run_lines

    runs = {"host": {"128": {"run_version": calibrate.ENGINE_RUN_VERSION,
                             "q8_0": {"decode": 39.8e-9, "prefill": 35.6e-9}}}}
    assert run_lines(runs, [(None, 128)]) == [
        "measured: this CPU's flash attention, 128-wide heads: q8_0 decode 39.8 ns, prefill 35.6 ns per KV cell "
        "and head; f16: no figure (its runs failed or disagreed)"]


def test_doctor_recalibrate_on_a_busy_machine_forgets_nothing(
        own_cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What is timed now is kept for good: on a busy machine it would be a busy moment's figure, and the
    good ones would be gone with nothing to replace them."""
    host_runs(measure_missing=True)
    before = calibrate.calibration_path().read_text()
    monkeypatch.delenv("HEADROOM_MEASURE_WHEN_BUSY")
    monkeypatch.setattr(os, "getloadavg", lambda: (7.5, 7.0, 6.0))
    capsys.readouterr()
    assert cli.main(["doctor", "--no-selftest", "--recalibrate"]) == 1
    out = capsys.readouterr().out
    assert f"Speed figures      not forgotten: the machine is busy (load 7.5 on {os.cpu_count()} cores)" in out
    assert calibrate.calibration_path().read_text() == before
    assert "stored: this CPU's flash attention, 128-wide heads: f16 decode" in out


def test_an_earlier_versions_run_is_said_as_such_and_made_again(own_cache: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A cache from before the GQA run was made: its figures still price plans
    (better than bandwidth), doctor says what they are instead of "not measured", and the next run
    replaces them."""
    host_runs(measure_missing=True)
    store = calibrate.calibration_path()
    old = json.loads(store.read_text())
    for run in old["engine_runs"]["host"].values():
        run.pop(calibrate.RUN_VERSION_KEY)
    store.write_text(json.dumps(old))
    said = host_runs(measure_missing=False)
    assert len(said) == 2 and all(line.startswith(
        f"stored: this CPU's flash attention, {h}-wide heads: an earlier version's run, without the server run"
        ) and line.endswith("; a later plan measures it again") for h, line in zip((64, 128), said, strict=True))
    assert "f16 decode " in said[0]
    made = host_runs(measure_missing=True)
    assert [m.split(": f16 decode")[0] for m in made] == [
        "measured: this CPU's flash attention, 64-wide heads", "measured: this CPU's flash attention, 128-wide heads"]


def test_figures_of_any_shape_in_the_cache_are_said_not_a_traceback() -> None:
    from app.engine.attention_runs import run_lines

    runs = {"host": {"128": {"run_version": calibrate.ENGINE_RUN_VERSION, "f16": {"decode": "6e-8", "prefill": 1e-8},
                             "q8_0": {"decode": 0, "prefill": 1e-8}}}}
    assert run_lines(runs, [(None, 128)]) == [
        "measured: this CPU's flash attention, 128-wide heads: no figure (the engine run failed or was too noisy): "
        "priced at memory bandwidth, not calibrated"]
