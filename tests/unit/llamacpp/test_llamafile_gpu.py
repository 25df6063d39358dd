"""A llamafile's GPU story from its log: loaded, or why not and what to do, for the versions people run
(recordings constructed from llamafile's source: tests/fixtures/llamafile_logs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.llamacpp.failures import FailureKind, classify
from app.llamacpp.llamafile_gpu import gpu_story

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "llamafile_logs"


def _log(name: str) -> list[str]:
    return [line for line in (LOGS / name).read_text().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize(("name", "fatal", "cause", "way_out"), [
    ("0.8.17-gpu-auto-no-library.log", False, "carries no GPU library (/zip/ggml-cuda.so)", "Headroom's own engine"),
    ("0.9.3-gpu-nvidia-no-cc.log", True, "this machine has no cc", "sudo apt install gcc"),
    ("0.9.3-gpu-nvidia-no-driver.log", True, "the NVIDIA driver's libcuda.so.1 was not found", "install the NVIDIA driver"),
    ("0.10.6-gpu-nvidia-no-library.log", True, "a llamafile-thin build", "~/.llamafile/v/<version>/"),
    ("0.10.6-gpu-auto-no-library.log", False, "it found no GPU library", "Headroom's own engine"),
    ("0.10.6-no-kernels.log", False, "built for other cards", "Headroom's own engine"),
    ("0.10.6-old-driver.log", False, "older than the CUDA its GPU library was built with", "update the NVIDIA driver"),
])
def test_each_version_says_why_its_gpu_code_did_not_load(name: str, fatal: bool, cause: str, way_out: str) -> None:
    story = gpu_story(_log(name))
    assert story.loaded is False and story.fatal is fatal
    sentence = story.sentence()
    assert cause in sentence and way_out in sentence
    first = "could not load its GPU code and stopped (Headroom asks it for --gpu nvidia)" if fatal else "ran every layer on the CPU, not the GPU"
    assert sentence.startswith(f"The llamafile {first}: ")


def test_a_loaded_library_is_said_as_loaded_and_a_plain_log_as_nothing() -> None:
    assert gpu_story(_log("0.9.3-cuda-loaded.log")).loaded is True
    assert gpu_story(["load_tensors: offloaded 33/33 layers to GPU"]).loaded is None
    assert gpu_story(_log("0.9.3-cuda-loaded.log")).sentence() == ""


def test_a_llamafile_that_stopped_for_its_gpu_code_fails_with_the_cause_not_its_last_line() -> None:
    failure = classify(_log("0.9.3-gpu-nvidia-no-driver.log"), 1)
    assert failure.kind == FailureKind.GPU_CODE
    assert "libcuda.so.1 was not found" in failure.message and "install the NVIDIA driver" in failure.message
