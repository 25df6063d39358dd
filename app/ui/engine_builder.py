""""No engine found — Build engine…": runs ``headroom engine build`` in a worker, with progress.

The build is the CLI's own (``python -m app engine build``, app/engine/native_build.py) in a child
process of its own session, so the window never compiles anything itself and Cancel stops the whole
build (CMake and the compilers under it). Its output goes to the console in batches, ten times a
second (a fast build prints thousands of lines); CMake's ``[ 45%]`` and Ninja's ``[12/345]`` progress
lines drive the bar.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

from app.ui.qt import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget, Signal
from app.ui.workers import StreamBatcher, TaskPool, TaskThread

BUILD_ARGV: tuple[str, ...] = (sys.executable, "-m", "app", "engine", "build")
#: How often queued build output reaches the window (ms).
FLUSH_MS = 100
#: make/CMake:  "[ 45%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")
#: Ninja:       "[12/345] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o"
_STEPS = re.compile(r"^\[(\d+)/(\d+)\]")


def progress_of(line: str) -> int | None:
    """Percent done that a build output line states, or None."""
    m = _PERCENT.match(line)
    if m:
        return min(int(m.group(1)), 100)
    m = _STEPS.match(line)
    if m and int(m.group(2)) > 0:
        return min(100 * int(m.group(1)) // int(m.group(2)), 100)
    return None


class EngineBuilder(QWidget):
    """Shown when discovery finds no engine. ``built`` when the build succeeded (discover again)."""

    built = Signal()
    failed = Signal(str)
    logLines = Signal(list)  # list[str]: build output, batched

    def __init__(self, argv: Sequence[str] = BUILD_ARGV, parent: QWidget | None = None,
                 pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.argv = list(argv)
        self.pool = pool if pool is not None else TaskPool(self)
        self.task: TaskThread | None = None  # the build running (cancelled too) until it has ended
        self._proc: subprocess.Popen[str] | None = None
        self._tail: list[str] = []
        self._stream = StreamBatcher(self, FLUSH_MS)  # the build's output, batched
        self._stream.flushed.connect(self._show_lines)
        self.label = QLabel("Build the stock llama-server from the bundled llama.cpp "
                            "(about 6 minutes on 2 cores; once per llama.cpp version).")
        self.label.setWordWrap(True)
        self.button = QPushButton("&Build engine…")
        self.button.setToolTip("Runs `headroom engine build` (CMake) in the background")
        self.button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel build")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setVisible(False)
        self.status = QLabel()
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.label)
        lay.addLayout(row)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)

    @property
    def running(self) -> bool:
        return self.task is not None

    def start(self) -> None:
        if self.task is not None:
            return
        self._tail = []
        self.button.setEnabled(False)
        self.cancel_button.setVisible(True)
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.status.setText("Building the engine…")
        self.task = self.pool.run(self._work, self._done, self._failed, owner=self, finished=self._finished)

    def _work(self, cancel: threading.Event) -> int:
        """Worker thread: run the build, pass each line on, return its exit status."""
        proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True, stdin=subprocess.DEVNULL)
        self._proc = proc
        if cancel.is_set():  # cancelled before the child existed
            self._kill(proc)
        assert proc.stdout is not None
        for line in proc.stdout:
            self._stream.add("build", line.rstrip("\n"))
        return proc.wait()

    def _flush_lines(self) -> None:
        """GUI thread: the lines queued now, at once (the build ended)."""
        self._show_lines(self._stream.take())

    def _show_lines(self, batch: object) -> None:
        """GUI thread: hand the queued lines on; the bar and the status show the latest."""
        assert isinstance(batch, dict)
        lines = [ln for part in batch.values() for ln in part]
        if not lines:
            return
        self._tail = [*self._tail, *lines][-20:]
        pct = next((p for p in map(progress_of, reversed(lines)) if p is not None), None)
        if pct is not None:
            self.progress.setRange(0, 100)
            self.progress.setValue(pct)
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        if last:
            self.status.setText(last[:160])
        self.logLines.emit(lines)

    def cancel(self) -> None:
        if self.task is None:
            return
        self.task.cancel()
        if self._proc is not None:
            self._kill(self._proc)
        self.status.setText("Build cancelled")

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        """The build runs in its own session: signal the whole group (CMake, the compilers)."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _done(self, rc: object) -> None:
        self._flush_lines()  # the last lines, and the error among them
        if rc == 0:
            self.status.setText("Engine built")
            self.built.emit()
            return
        last = next((ln for ln in reversed(self._tail) if ln.strip()), "")
        self._failed(f"the build exited with status {rc}" + (f": {last.strip()}" if last else ""))

    def _failed(self, message: str) -> None:
        self._flush_lines()
        self.status.setText(f"Build failed: {message}")
        self.failed.emit(message)

    def _finished(self, task: TaskThread) -> None:
        if self.task is task:
            self.task = None
            self._proc = None
        self._flush_lines()
        if task.cancelled:
            self.status.setText("Build cancelled")
        self.button.setEnabled(True)
        self.cancel_button.setVisible(False)
        self.progress.setVisible(False)

    def shutdown(self) -> None:
        if self.task is not None:
            self.cancel()
        self.pool.wait(self)
