"""`headroom gui` from a terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.fake_hub import FakeHub, fake_hub  # noqa: F401 (the fixture)

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


def test_a_bad_context_or_a_missing_model_is_one_line_before_any_window(tmp_path: Path) -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    shot = tmp_path / "shot.png"  # with --screenshot a window that opened would have exited by itself
    for args, says in ((["--demo", "--ctx", "lots"], "argument --ctx: not a token count: 'lots'"),
                       ([str(tmp_path / "gone.gguf")], f"headroom gui: model not found: {tmp_path / 'gone.gguf'}")):
        proc = subprocess.run([sys.executable, "-m", "app", "gui", *args, "--screenshot", str(shot)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not shot.exists()


def test_a_hugging_face_ref_opens_the_header_only_copy(tmp_path: Path, fake_hub: FakeHub,  # noqa: F811
                                                        tiny_chat_model: Path) -> None:
    """`headroom gui hf:owner/name:QUANT`: the header is fetched before the window opens, which plans it;
    a repo that is not there is one line, before any window."""
    fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-Q8_0.gguf": tiny_chat_model})
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    shot = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "app", "gui", "hf:acme/Tiny-GGUF:Q8_0", "--screenshot", str(shot)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "header of acme/Tiny-GGUF/tiny-Q8_0.gguf" in proc.stderr and shot.stat().st_size > 0
    proc = subprocess.run([sys.executable, "-m", "app", "gui", "hf:acme/Gone-GGUF", "--screenshot", str(shot)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("headroom gui: ") and "acme/Gone-GGUF" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_headroom_model_gguf_opens_the_window_on_it_and_a_typo_is_still_a_typo(tmp_path: Path,
                                                                               tiny_model: Path) -> None:
    """``headroom MODEL.gguf`` (what a user types, or a file manager runs) is ``headroom gui MODEL.gguf``;
    a mistyped command is still said as one, not taken for a model."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEADROOM_CONFIG_DIR": str(tmp_path / "config")}
    shot = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "app", str(tiny_model), "--screenshot", str(shot)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    typo = subprocess.run([sys.executable, "-m", "app", "plann", str(tiny_model)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and "invalid choice: 'plann'" in typo.stderr
