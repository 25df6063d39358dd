"""`headroom gui` from a terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_display_it_says_what_to_do_instead_of_crashing():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    proc = subprocess.run([sys.executable, "-m", "app", "gui"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "no display" in proc.stderr and "headroom plan" in proc.stderr


def test_help_lists_the_demo_and_screenshot_options():
    proc = subprocess.run([sys.executable, "-m", "app", "gui", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert "--demo" in proc.stdout and "--screenshot" in proc.stdout
