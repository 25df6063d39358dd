"""PySide6 6.12.0 on Python 3.11 drops a reference to None on every void call (``setText``) and to
True on every ``emit``: a window that has run for a while (one poll a second, every plan, every log
batch) aborts with "Fatal Python error: none_dealloc". pyproject.toml keeps PySide6 below 6.12; this
test is what fails if a release with that bug comes back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys
    from app.ui.qt import QApplication, QLabel, QObject, QThread, Signal

    class Worker(QThread):
        line = Signal(str)
        def run(self):
            for i in range(20_000):
                self.line.emit(f"line {i}")

    class Sink(QObject):
        n = 0
        def take(self, _text):
            Sink.n += 1

    app = QApplication([])
    sink, worker = Sink(), Worker()
    worker.line.connect(sink.take)
    worker.start()
    worker.wait()
    app.processEvents()
    label = QLabel()
    for i in range(200_000):  # about an hour of a busy window's label updates
        label.setText("x")
    print("received", Sink.n, "label", label.text(), flush=True)
""")


def test_a_long_busy_session_of_emits_and_updates_does_not_abort_the_app():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]  # -6 (abort in none_dealloc) on PySide6 6.12.0
    assert "received 20000 label x" in proc.stdout
