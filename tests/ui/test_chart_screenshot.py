"""The context chart's README picture (docs/screenshot-chart.png): the real window under Xvfb (xcb),
the demo (512k asked on a simulated 24 GB card; no opencoti engine here: stock llama.cpp) with the
Context chart tab open, taken by ``python -m tests.ui.chart_shot``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from app.ui.budget_parts import RED
from app.ui.context_chart import LARGEST_COLOR, TYPE_COLORS
from app.ui.qt import QColor, QImage
from tests.ui.test_screenshot import ARTIFACT, ROOT, xvfb  # noqa: F401 (the Xvfb fixture)


@pytest.mark.slow
def test_screenshot_of_the_context_chart_on_the_demo(xvfb, tmp_path):  # noqa: F811
    out = tmp_path / "chart.png"
    env = dict(os.environ, DISPLAY=xvfb, QT_QPA_PLATFORM="xcb", HEADROOM_CACHE_DIR=str(tmp_path / "cache"),
               HEADROOM_CONFIG_DIR=str(tmp_path / "config"), HEADROOM_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run([sys.executable, "-m", "tests.ui.chart_shot", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("chart:"))
    assert "curves=f16,q8_0,q4_0" in line and "n_ctx=524288" in line and "mode=stock" in line
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1400, 900)
    seen = {img.pixel(x, y) for x in range(0, img.width(), 2) for y in range(0, img.height(), 2)}
    for colour in (*TYPE_COLORS.values(), RED, LARGEST_COLOR):  # every curve, the usable line, the mark
        assert QColor(colour).rgb() in seen, colour
    ARTIFACT.parent.mkdir(exist_ok=True)
    shutil.copyfile(out, ARTIFACT.with_name("screenshot-chart.png"))
