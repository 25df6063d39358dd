"""Start-up failures read from engine logs turn into messages that say what to do."""

from __future__ import annotations

from pathlib import Path

from app.llamacpp.failures import classify

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "engine_logs"


def _lines(name: str) -> list[str]:
    return [ln for ln in (LOGS / name).read_text().splitlines() if not ln.startswith("#")]


def test_recorded_host_oom_names_the_buffer_and_its_size() -> None:
    f = classify(_lines("cpu-oom-kv-buffer.log"), exit_code=1)
    assert f.kind == "oom"
    assert "CPU buffer of 24414 MiB" in f.message
    assert "Lower the context" in f.message
    assert f.tail[-1].endswith("exiting due to model loading error")


def test_cuda_oom_says_which_gpu_and_how_much() -> None:
    f = classify(_lines("cuda-oom-kv-constructed.log"), exit_code=1)
    assert f.kind == "oom"
    assert "CUDA0 could not allocate 196608.00 MiB" in f.message


def test_corrupt_gguf_is_reported_as_an_unreadable_model_with_the_reason() -> None:
    f = classify(_lines("corrupt-gguf.log"), exit_code=1)
    assert f.kind == "model_unreadable"
    assert "number of tensors is -1" in f.message
    assert "download it again" in f.message


def test_port_in_use_unknown_flag_missing_model_assert_and_realloc() -> None:
    cases = {
        "0.00.003.1 E srv  start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080":
            ("port_in_use", "127.0.0.1:8080"),
        "error: invalid argument: --kv-residency-mode": ("unknown_argument", "--kv-residency-mode"),
        "E gguf_init_from_file: failed to open GGUF file '/m/x.gguf' (No such file or directory)":
            ("model_unreadable", "No such file or directory"),
        "/src/llama-model.cpp:1234: GGML_ASSERT(!ml.no_alloc) failed": ("assert", "!ml.no_alloc"),
        "ggml-backend.cpp:1638: ggml_backend_sched_alloc_graph: unexpected graph reallocation (graph size = 1)":
            ("graph_realloc", "shared sequences"),
    }
    for line, (kind, text) in cases.items():
        f = classify(["I srv  llama_server: initializing ...", line, "Aborted"], exit_code=134)
        assert (f.kind, text in f.message) == (kind, True), line


def test_an_unknown_death_quotes_the_last_line() -> None:
    f = classify(["loading", "something odd happened", ""], exit_code=139)
    assert f.kind == "exited"
    assert "exited with code 139" in f.message and "something odd happened" in f.message
    assert "Last engine log lines" in str(f)


def test_a_healthy_h200_log_has_no_failure_lines(shared_fixtures: Path) -> None:
    text = (shared_fixtures / "h200" / "llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log").read_text()
    assert classify(text.splitlines()).kind == "exited"


def test_log_lines_from_the_file_are_escaped_when_a_failure_is_said() -> None:
    """Issue 31: llama.cpp's log lines carry the file's strings (key values, token texts); a failure
    printed on a terminal must not write the clipboard (OSC 52), retitle or clear the screen, or turn
    the text right to left. Its line breaks stay."""
    from app.llamacpp.failures import Failure, FailureKind
    from app.probe.measure import MeasureError

    hostile = "llama_model_loader: - kv   1: general.name str = x\x1b]52;c;cHduZWQ=\x07\x1b[2J\u202e\x9b"
    said = str(Failure(FailureKind.MODEL_UNREADABLE, "The engine could not load the model.", "", (hostile, "done")))
    assert "\x1b" not in said and "\u202e" not in said and "\x9b" not in said and "\x07" not in said
    assert r"x\x1b]52;c;cHduZWQ=\x07\x1b[2J\u202e\x9b" in said and said.count("\n") == 3
    error = str(MeasureError("pass 1 failed: boom", hint="try again", log_tail=[hostile]))
    assert "\x1b" not in error and r"\x1b]52" in error and error.splitlines()[1] == "try again"
