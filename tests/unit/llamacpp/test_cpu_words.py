"""An engine that dies on this CPU is said in words: which CPU code it ran and what to do (issue 27).
Replayed from recorded logs (tests/fixtures/engine_logs/README.md: the AMX ones from an Intel Xeon VM with
AMX), so every machine runs the same tests, whatever CPU it has."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.engine.argv import build_argv
from app.engine.capabilities import Capabilities, ProbeResult
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.selftest import selftest_argv
from app.llamacpp.failures import classify, engine_cpu
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "engine_logs"
SIGSEGV, SIGILL = -11, -4
VARIANT_LINE = "0.00.001.120 I load_backend: loaded CPU backend from /opt/headroom/engine/build/bin/libggml-cpu-haswell.so"
HASWELL_INFO = ("0.00.003.737 I cmn  common_param: system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : "
                "SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | REPACK = 1 | ")


AMX_SEGV = "amx-warmup-sigsegv-xeon-vm.log"


def _lines(name: str) -> list[str]:
    return [ln for ln in (LOGS / name).read_text().splitlines() if not ln.startswith("#")]


def test_an_amx_crash_at_warm_up_names_amx_and_what_to_do() -> None:
    f = classify(_lines(AMX_SEGV), SIGSEGV)
    assert f.kind == "cpu_code"
    assert f.message.startswith("The engine was killed by SIGSEGV while warming up the model, running CPU code "
                                "with AMX_INT8, AVX512_BF16, AVX512_VNNI, AVX512_VBMI, AVX512")
    assert "'AMX_INT8 = 1' in its system_info line" in f.message and "pull request 26954" in f.message
    assert "its weights in ggml's AMX buffer" in f.message
    assert "Headroom's own engine is built without AMX" in f.message and "--no-repack (-nr)" in f.message
    assert "damaged model file" not in f.message  # not blamed on the user's file
    sigill = classify(_lines("amx-warmup-sigill-xeon-vm.log"), SIGILL)  # the same build, another start: #UD
    assert sigill.kind == "cpu_code" and sigill.message.startswith("The engine was killed by SIGILL while warming up")


def test_an_amx_crash_before_its_warm_up_line_was_written_still_names_amx() -> None:
    """The engine logs from a thread of its own: three of four recorded starts died with the load as the
    log's last line. The AMX buffer the weights went to says what ran."""
    lines = _lines("amx-load-sigsegv-xeon-vm.log")
    assert not any("warming up" in ln for ln in lines)
    f = classify(lines, SIGSEGV)
    assert f.kind == "cpu_code" and f.message.startswith("The engine was killed by SIGSEGV, running CPU code with AMX_INT8")
    assert "damaged model file" not in f.message


def test_other_signals_and_an_engine_launched_with_nr_are_not_blamed_on_amx() -> None:
    """The out-of-memory killer (SIGKILL), a truncated mapped file (SIGBUS) and an abort keep their own
    words on an AMX engine; without weights in the AMX buffer (-nr, as Headroom launches it) its AMX code
    did not run, and a SIGILL there is the CPU's (built for another)."""
    lines = _lines(AMX_SEGV)
    for signal in (-9, -7, -6):
        assert classify(lines, signal).kind != "cpu_code", signal
    no_buffer = [ln for ln in lines if "AMX model buffer" not in ln]
    assert classify(no_buffer, SIGSEGV).kind == "killed"
    sigill = classify(no_buffer, SIGILL)
    assert sigill.kind == "cpu_code" and "AMX" not in sigill.message.split("running CPU code with")[0]
    assert "built for another CPU" in sigill.message


def test_a_segfault_without_amx_is_not_blamed_on_the_cpu() -> None:
    lines = [ln.replace("AMX_INT8 = 1 | ", "").replace("AMX model", "CPU_REPACK model") for ln in _lines(AMX_SEGV)]
    f = classify(lines, SIGSEGV)
    assert f.kind == "killed" and "segmentation fault" in f.message


def test_a_native_build_from_another_cpu_says_sigill_and_where_to_get_one_that_runs() -> None:
    f = classify(_lines("sigill-native-build-on-older-cpu.log"), SIGILL)
    assert f.kind == "killed"
    assert "killed by SIGILL before it was ready" in f.message
    assert "built for another CPU" in f.message and "headroom engine build" in f.message
    assert "the bundle's, which picks its CPU code at run time" in f.message


def test_sigill_with_a_system_info_line_names_the_cpu_code_that_ran() -> None:
    lines = _lines(AMX_SEGV)[:12]
    assert any("system_info:" in ln for ln in lines)
    native = classify([ln.replace("AMX_INT8 = 1 | ", "") for ln in lines], SIGILL)
    assert native.kind == "cpu_code"
    assert "running CPU code with AVX512_BF16, AVX512_VNNI, AVX512_VBMI, AVX512, AVX_VNNI, AVX2" in native.message
    assert "-march=native on the machine that built it" in native.message
    portable = classify([VARIANT_LINE, HASWELL_INFO], SIGILL)
    assert "the haswell variant (AVX2, FMA, F16C, AVX, SSE3)" in portable.message


def test_the_cpu_lines_count_when_the_tail_no_longer_holds_them() -> None:
    """A supervisor keeps 400 lines; a big model's start-up can push system_info out of them."""
    lines = _lines(AMX_SEGV)
    cpu = [ln for ln in lines if "system_info:" in ln]
    tail = [ln for ln in lines if "system_info:" not in ln]
    assert classify(tail, SIGSEGV).kind == "killed"
    assert classify(tail, SIGSEGV, cpu_lines=cpu).kind == "cpu_code"
    found = engine_cpu([VARIANT_LINE, HASWELL_INFO])
    assert found is not None and found.variant == "haswell" and not found.amx


def test_a_crash_while_serving_is_not_a_start_up_cpu_problem() -> None:
    f = classify(_lines(AMX_SEGV), SIGSEGV, serving_at="http://127.0.0.1:8080",
                 served_for=30.0)
    assert f.kind == "killed" and "while serving" in f.message


AMX_INFO = next(ln for ln in _lines(AMX_SEGV) if "system_info:" in ln)
ENGINE = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama-server", "0.5.0", "0c1e570", EngineOrigin.PATH,
                    capabilities=Capabilities({"-nr": ProbeResult("accepted"), "-lv": ProbeResult("accepted")},
                                              AMX_INFO.split("common_param: ", 1)[1]))


def test_an_engine_with_amx_is_launched_without_its_amx_buffer_and_planned_so() -> None:
    assert ENGINE.uses_amx and ENGINE.cpu_code == "uses AMX: launched with -nr (no AMX buffer)"
    features = ENGINE.cpu_features
    assert features is not None and not features.repack and "AVX512" in features.names
    argv = build_argv(ENGINE, LaunchSettings(n_ctx=4096), PlanMode.CPU, Path("/m.gguf"), "127.0.0.1", 8080)
    assert "-nr" in argv
    assert "-nr" in selftest_argv(ENGINE, Path("/m.gguf"), 8080)
    plain = replace(ENGINE, capabilities=Capabilities(ENGINE.capabilities.results,  # type: ignore[union-attr]
                                                      HASWELL_INFO.split("common_param: ", 1)[1]))
    assert not plain.uses_amx and plain.cpu_features is not None and plain.cpu_features.repack
    assert "-nr" not in build_argv(plain, LaunchSettings(n_ctx=4096), PlanMode.CPU, Path("/m.gguf"), "127.0.0.1", 8080)
    without = replace(ENGINE, capabilities=Capabilities({"-nr": ProbeResult("rejected")}, ENGINE.system_info))
    assert "-nr" not in build_argv(without, LaunchSettings(n_ctx=4096), PlanMode.CPU, Path("/m.gguf"), "127.0.0.1", 8080)
