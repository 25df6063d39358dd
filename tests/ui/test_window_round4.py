"""Round-4 window fixes: a screenshot of a file that is not a model ends (with the error shown), the
picture stays on the running engine's plan, the Engine combo's full text, sessions of a stopped engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.discover import EngineInfo
from app.ui.qt import QImage, Qt

ROOT = Path(__file__).resolve().parents[2]
LEFT = Qt.MouseButton.LeftButton
K = 1024


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


def test_screenshot_of_a_plan_that_does_not_fit_and_of_the_demo(tmp_path):
    proc, out = _screenshot(tmp_path, "--demo", "--ctx", "16M")  # a 900 GiB host tail: fits no machine
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "n_ctx=16777216 feasible=False" in proc.stdout
    assert not QImage(str(out)).isNull()
    proc, out = _screenshot(tmp_path, "--demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mode=window n_ctx=524288 feasible=True" in proc.stdout


def test_the_engine_combo_shows_its_whole_text_or_says_it_on_hover(window):
    engine = EngineInfo("llama-server", "/opt/llama.cpp/build/bin/llama-server", "0.5.0-dev", "0c1e570",
                        "headroom build")
    window.launch.set_engines([engine])
    combo = window.settings.engine
    text = "llama-server 0.5.0-dev (0c1e570) — headroom build"
    assert combo.currentText() == text
    assert text in combo.toolTip() and engine.path in combo.toolTip()
    assert engine.path in combo.itemData(0, Qt.ItemDataRole.ToolTipRole)
    # the combo has a row of its own: the text fits next to the arrow at the default window size
    assert combo.width() - combo.fontMetrics().horizontalAdvance(text) > 30


def test_the_engine_combo_names_headroom_s_patches(window):
    engine = EngineInfo("llama-server", "/opt/llama.cpp/build/bin/llama-server", "0.5.0-dev", "0c1e57098",
                        "headroom build", patches=("0001-kpool-one-graph-shape.patch", "0002-kpool-one-scatter-row-per-rep.patch"))
    window.launch.set_engines([engine])
    combo = window.settings.engine
    text = "llama-server 0.5.0-dev (0c1e57098 + 2 Headroom patches) — headroom build"
    assert combo.currentText() == text and text in combo.toolTip()
    # which llama.cpp, patches included, fits at the default window size; where it was found may be cut
    what = text[: text.index(")") + 1]
    assert combo.width() - combo.fontMetrics().horizontalAdvance(what) > 30


@pytest.mark.engine
def test_the_picture_stays_on_the_running_plan_and_sessions_go_with_the_engine(window, tiny_model,
                                                                               engine_build, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    window.settings.engine.setCurrentIndex([e.path for e in found.args[0]].index(str(engine_build.server)))
    window.settings.n_parallel.setValue(2)
    window.settings.kv_unified.setChecked(True)
    assert window.open_model(tiny_model)
    window.settings.context.set_value(4 * K, emit=True)
    running = window.plan
    assert running is not None and running.launch.n_ctx == 4 * K
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert "fork it into up to 2 sessions" in window.sessions.result.text()  # not "Launch the engine…"
    note = window.budget.running
    assert not note.isHidden() and "Engine running" in note.text() and "New settings" not in note.text()
    with qtbot.waitSignal(window.planned) as sig:  # new settings while it runs
        window.settings.context.set_value(8 * K, emit=True)
    assert sig.args[0].launch.n_ctx == 8 * K
    assert window.budget.plan is running  # the bars still show what runs
    assert "4k tokens" in note.text() and "New settings" in note.text() and "8k tokens" in note.text()
    assert not window.launch.launch_button.isEnabled() and window.launch.stop_button.isEnabled()
    window.sessions.prompt.setText("Once upon a time")
    with qtbot.waitSignal(window.sessions.turnDone, timeout=120_000) as done:
        qtbot.mouseClick(window.sessions.fork_button, LEFT)
    assert done.args[0].ok, done.args[0].error
    assert window.sessions.chosen.count() == 2
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert note.isHidden()
    assert window.budget.plan is window.plan and window.plan.launch.n_ctx == 8 * K  # now the new settings
    assert window.launch.launch_button.isEnabled()
    assert window.sessions.chosen.count() == 0 and window.sessions.text.toPlainText() == ""
    assert "Engine stopped" in window.sessions.result.text() and "s1, s2" in window.sessions.result.text()
    assert not window.sessions.continue_button.isEnabled()
