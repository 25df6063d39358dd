"""The README's picture of the chat in use (docs/screenshot-chat.png): the real window under Xvfb
(xcb) with the real engine on the tiny ChatML model, two turns and a fork of three, taken by
tests/ui/chat_screenshot.py; the copy lands in artifacts/screenshot-chat.png."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from app.ui.chat_panel import USER_COLOURS
from app.ui.qt import QColor, QImage
from tests.ui.chat_screenshot import SIZE
from tests.ui.test_screenshot import ROOT, xvfb  # noqa: F401 (the Xvfb fixture)

ARTIFACT = ROOT / "artifacts" / "screenshot-chat.png"


@pytest.mark.slow
@pytest.mark.engine
def test_screenshot_of_the_chat_with_a_fork_of_three(xvfb, tiny_chat_model, engine_build, tmp_path):  # noqa: F811
    out = tmp_path / "chat.png"
    env = dict(os.environ, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb", HEADROOM_CONFIG_DIR=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, "-m", "tests.ui.chat_screenshot", str(engine_build.server),
                           str(tiny_chat_model), str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"chat screenshot: {out}" in proc.stdout
    img = QImage(str(out))
    assert (img.width(), img.height()) == SIZE
    # Your turns were painted in their own colour (the chat drew its turns, not an empty pane).
    want = QColor(USER_COLOURS[0]).rgb()
    assert any(img.pixel(x, y) == want for y in range(0, img.height(), 3) for x in range(0, img.width(), 4))
    ARTIFACT.parent.mkdir(exist_ok=True)
    shutil.copyfile(out, ARTIFACT)

