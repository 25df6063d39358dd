"""Background work for the window: nothing long runs on the GUI thread.

- ``TaskThread``: runs one callable (pass 1, engine discovery, model reading) and reports its
  result or its error message. Cancelling abandons the result at once; the callable gets a
  ``threading.Event`` it may watch to stop early.
- ``PollWorker``: calls a function about once a second (the NVML poller) until stopped.

Signals are emitted from the worker thread and delivered queued to the GUI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.ui.qt import QObject, QThread, Signal

#: Seconds between live device polls.
POLL_INTERVAL_S = 1.0


class TaskThread(QThread):
    """Run ``fn(cancel_event)`` once. ``succeeded(result)`` or ``failed(message)``, unless cancelled."""

    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, fn: Callable[[threading.Event], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn
        self.cancel_event = threading.Event()

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def run(self) -> None:
        try:
            result = self._fn(self.cancel_event)
        except Exception as exc:  # any failure becomes a message the window shows
            if not self.cancelled:
                self.failed.emit(error_message(exc))
            return
        if not self.cancelled:
            self.succeeded.emit(result)


def error_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__


class PollWorker(QThread):
    """Call ``fn()`` every ``interval`` seconds and emit ``polled(result)``; ``stop()`` ends it."""

    polled = Signal(object)
    failed = Signal(str)

    def __init__(self, fn: Callable[[], object], interval: float = POLL_INTERVAL_S,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn
        self._interval = interval
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.polled.emit(self._fn())
            except Exception as exc:  # keep polling; the panel shows the message
                self.failed.emit(error_message(exc))
            self._stop.wait(self._interval)
