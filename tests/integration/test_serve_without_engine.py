"""A fresh home with no engine built: ``headroom serve MODEL`` refuses in a sentence that says what is missing
and what to do (the walkthrough of issue 46 read Python's "FileNotFoundError: Shared library with base name
'llama' not found" there). The real pass 1 runs, on a cache that holds no engine build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_serve_without_an_engine_says_what_is_missing_in_words(tiny_model: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    env |= {"HOME": str(tmp_path), "HEADROOM_CACHE_DIR": str(tmp_path / "cache"),
            "HEADROOM_CONFIG_DIR": str(tmp_path / "config"), "PATH": "/usr/bin:/bin"}
    served = subprocess.run([sys.executable, "-m", "app", "serve", str(tiny_model), "-c", "4k"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert served.returncode == 1, served.stderr
    assert "refused: pass 1 failed, so the engine is not launched: there is no llama.cpp library (libllama) " \
           "to measure with" in served.stderr
    assert "headroom engine build" in served.stderr
    assert "FileNotFoundError" not in served.stderr and "Traceback" not in served.stderr
