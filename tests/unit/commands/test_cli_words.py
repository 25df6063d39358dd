"""The CLI says a plan in the window's words (issue 20): on a machine without a GPU a CPU plan is
not "DOES NOT FIT as asked", and it has no KV window or host tail, just a KV cache in host RAM."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from app import cli
from app.machine import devices
from app.planner.devices import Inventory
from tests.fixtures.fake_nvml import FakeNvml

LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without an NVIDIA driver, whatever machine the test runs on."""
    real = devices.resolve_gpus

    def resolve(specs: list[str], nvml: ModuleType | None = None) -> Inventory:
        return real(specs, nvml or FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))

    monkeypatch.setattr(devices, "resolve_gpus", resolve)


def test_a_cpu_plan_on_a_machine_without_a_gpu_reads_as_one(no_gpu: None, shape_model: Callable[[str], Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(shape_model(LLAMA8B)), "-c", "32k"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "no GPU: planned for the CPU (-ngl 0)"
    assert "DOES NOT FIT" not in out and "  mode cpu: FITS — fits in host RAM" in lines
    assert "  KV cache: all 32,768 cells in host RAM (no GPU)" in lines
    assert "KV window" not in out and "host tail" not in out
    # the host holds the whole KV cache: its row is not a "kv tail" (walkthrough finding 11)
    assert any(line.startswith("    kv cache ") for line in lines) and "kv tail" not in out
    assert any(line.startswith("  largest context: ") and line.endswith("in host RAM (trained 131,072)")
               for line in lines)


def test_a_stock_gpu_plan_names_no_window(shape_model: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    assert cli.main(["plan", str(shape_model(LLAMA8B)), "-c", "32k", "--gpu", "RTX 4090"]) == 0
    out = capsys.readouterr().out
    assert "  KV cache: all 32,768 cells on the GPU" in out.splitlines()
    assert "KV window" not in out and "with a host tail" not in out


def test_a_context_past_what_llama_server_takes_is_refused(shape_model: Callable[[str], Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(shape_model(LLAMA8B)), "-c", "5000000000"]) == 2
    assert "at most 2,147,483,647" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--gpu", "RTX 4090"], ["--gpu", "RTX 4090", "-c", "1M"], []])
def test_no_plan_line_ends_in_spaces(flags: list[str], shape_model: Callable[[str], Path],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    # a row whose number came from nowhere (free) ended "   ": invisible on a terminal, noise in a diff
    cli.main(["plan", str(shape_model(LLAMA8B)), *flags])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("free ") for line in lines)
    assert [line for line in lines if line != line.rstrip()] == []
