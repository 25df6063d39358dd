"""Measure (pass 1) in the background: the button, a busy indicator, Cancel, and what was measured.

Pass 1 runs in a child process (app.planner.measure); here it runs on a ``TaskThread`` so the
window stays responsive. Cancel returns at once: the result, if it still arrives, is dropped.
"""

from __future__ import annotations

import threading
from pathlib import Path

from app.planner.measure import gpu_caveat, measure_cached
from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings
from app.ui.qt import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget, Signal
from app.ui.workers import TaskThread

NOT_MEASURED = "Compute buffer: estimated (not measured)"
STALE = "Compute buffer: estimated (pass 1 ran for other settings; measure again)"


class MeasureBar(QWidget):
    measured = Signal(object, object)  # Measurement, the LaunchSettings it ran with
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.task: TaskThread | None = None
        self.button = QPushButton("&Measure (pass 1)")
        self.button.setToolTip("Measure the compute buffer with the engine's own allocator")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate
        self.busy.setVisible(False)
        self.status = QLabel(NOT_MEASURED)
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.cancel_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(row)
        lay.addWidget(self.busy)
        lay.addWidget(self.status)

    @property
    def running(self) -> bool:
        return self.task is not None

    def start(self, model: Path, settings: LaunchSettings, *, targets_gpu: bool) -> None:
        if self.task is not None:
            return

        def work(_cancel: threading.Event) -> tuple[Measurement, bool]:
            return measure_cached(model, settings)

        task = TaskThread(work, self)
        self.task = task
        task.succeeded.connect(lambda r: self._done(task, r, settings, targets_gpu))
        task.failed.connect(self._failed)
        task.finished.connect(lambda: self._finished(task))
        self._set_busy(True)
        self.status.setText("Measuring with the engine's allocator…")
        task.start()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.status.setText("Measurement cancelled")
            self._set_busy(False)

    def _set_busy(self, on: bool) -> None:
        self.busy.setVisible(on)
        self.cancel_button.setVisible(on)
        self.button.setEnabled(not on)

    def _done(self, task: TaskThread, result: object, settings: LaunchSettings, targets_gpu: bool) -> None:
        if task.cancelled:
            return  # a result already queued when Cancel was clicked
        assert isinstance(result, tuple)
        m, from_cache = result
        how = "from the measurement cache" if from_cache else f"{m.seconds:.2f} s"
        caveat = gpu_caveat(m, targets_gpu=targets_gpu)
        self.status.setText(f"Compute buffer measured by pass 1 ({m.backend}, {how})"
                            + (f"<br><i>{caveat}</i>" if caveat else ""))
        self._set_busy(False)
        self.measured.emit(m, settings)

    def _failed(self, message: str) -> None:
        self.status.setText("Measurement failed")
        self._set_busy(False)
        self.failed.emit(message)

    def _finished(self, task: TaskThread) -> None:
        if self.task is task:
            self.task = None
        task.deleteLater()

    def shutdown(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task.wait()
