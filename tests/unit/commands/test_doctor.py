"""`headroom doctor`'s Hugging Face line: which Hub, whether a token is there (never the token itself);
its engine line: the engine Headroom built, with its patches, and the library pass 1 loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.engine.native_build import EngineBuild
from app.planner.devices import Backend

ROOT = Path(__file__).resolve().parents[3]


def _doctor(tmp_path: Path, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_ENDPOINT")}
    base |= {"HF_HOME": str(tmp_path / "hf-home"), "HEADROOM_CACHE_DIR": str(tmp_path / "cache"), **env}
    proc = subprocess.run([sys.executable, "-m", "app", "doctor", "--no-selftest"], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("Hugging Face"))


def test_doctor_says_whether_a_token_is_there_but_never_prints_it(tmp_path: Path) -> None:
    with_token = _doctor(tmp_path, HF_TOKEN="hf_do_not_print_me", HF_ENDPOINT="http://127.0.0.1:9")
    assert "token from HF_TOKEN" in with_token and "hf_do_not_print_me" not in with_token
    assert "http://127.0.0.1:9" in with_token and "0 header-only copies" in with_token
    without = _doctor(tmp_path)
    assert "https://huggingface.co" in without and "no token (public repos only" in without


def test_doctor_names_the_engine_with_its_patches_and_pass_1_loads_that_build(engine_build: EngineBuild) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    proc = subprocess.run([sys.executable, "-m", "app", "doctor"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    engine = next(line for line in proc.stdout.splitlines()
                  if line.startswith("Engine") and str(engine_build.server) in line)
    assert "(llama.cpp 0c1e57098 + 5 Headroom patches)" in engine
    bindings = next(line for line in proc.stdout.splitlines() if line.startswith("llama-cpp-python"))
    assert f"library from {engine_build.bin_dir}" in bindings  # pass 1's libllama: the same patched build
    if engine_build.backend is Backend.CPU:  # what to do for GPU numbers: the engine build comes first
        assert "for GPU numbers build the engine with CUDA (headroom engine build --backend cuda)" in (
            proc.stdout)


def test_doctor_in_a_fresh_home_fails_and_says_an_engine_is_what_is_missing(tmp_path: Path) -> None:
    """Walkthrough finding 15: no engine found or chosen is exit 1 (nothing can serve), and the missing
    libllama is said as what it means (no engine yet), not as the bindings' error."""
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    env |= {"HEADROOM_CACHE_DIR": str(tmp_path / "cache"), "HEADROOM_CONFIG_DIR": str(tmp_path / "config"),
            "HEADROOM_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "app", "doctor"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = {line[:18].strip(): line[19:] for line in proc.stdout.splitlines()}
    assert lines["llama-cpp-python"].startswith("no llama.cpp library yet, so pass 1 cannot measure")
    assert "Shared library" not in proc.stdout
    # nothing to time the CPU's attention with either, and said so (not "measured", not a traceback)
    assert lines["CPU attention"] == ("not measured: this CPU's flash attention, 128-wide heads (no llama-batched-bench "
                                      "to time it with: `headroom engine build`): priced at memory bandwidth, not "
                                      "calibrated")
    assert lines["Engines"] == "none found (run `headroom engine build`, or choose one in the window, File ▸ Choose engine…)"
    assert lines["Engine self-test"] == "no engine to test, so nothing can serve yet (see Engines)"
    report = subprocess.run([sys.executable, "-m", "app", "doctor", "--no-selftest"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0  # the report only: it printed
