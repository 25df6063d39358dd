"""Round-4 window fixes: a screenshot of a file that is not a model ends (with the error shown), the
picture stays on the running engine's plan, the Engine combo's full text, sessions of a stopped engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.ui.qt import QImage, Qt

ROOT = Path(__file__).resolve().parents[2]
LEFT = Qt.MouseButton.LeftButton


def _screenshot(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HEADROOM_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "app", "gui", *args, "--screenshot", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=50)  # under the 60 s deadline
    return proc, out


def test_screenshot_of_a_file_that_is_not_a_gguf_shows_the_error_and_exits(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    proc, out = _screenshot(tmp_path, str(text))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Cannot use notes.gguf: not a GGUF file" in proc.stderr
    assert "saving the window as it is" not in proc.stderr  # it ended on the error, not on the deadline
    assert f"screenshot: {out}: no plan" in proc.stdout
    img = QImage(str(out))  # the window, error and all, was saved
    assert (img.width(), img.height()) == (1400, 900)


def test_screenshot_of_a_plan_that_does_not_fit_as_set_and_of_the_demo(tmp_path):
    # No engine in this cache: no rolling KV window to plan for, so the demo plans for stock llama.cpp
    # — where 16M (a 900 GiB KV cache) does not fit as set, and a shorter context is planned instead.
    proc, out = _screenshot(tmp_path, "--demo", "--ctx", "16M")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("screenshot:"))
    assert "mode=stock" in line and "feasible=True" in line and "n_ctx=16777216" not in line
    assert not QImage(str(out)).isNull()
    proc, out = _screenshot(tmp_path, "--demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mode=stock" in proc.stdout and "feasible=True" in proc.stdout


