"""Background work for the window: nothing long runs on the GUI thread.

- ``TaskThread``: runs one callable (pass 1, engine discovery, model reading) and reports its
  result or its error message. Cancelling abandons the result at once; the callable gets a
  ``threading.Event`` it may watch to stop early.
- ``PollWorker``: calls a function about once a second (the NVML poller) until stopped.
- ``StreamBatcher``: text a worker streams (a reply's pieces, an engine's log lines), handed to the GUI
  thread in batches ten times a second, so a fast model or a chatty engine never floods the window.

Signals are emitted from the worker thread and delivered queued to the GUI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from app.ui.qt import QObject, QThread, QTimer, Signal

#: Seconds between live device polls.
POLL_INTERVAL_S = 1.0
#: Milliseconds between two batches of streamed text (a reply's pieces, log lines).
STREAM_FLUSH_MS = 100


class StreamBatcher(QObject):
    """Text streamed by a worker thread, per key (a reply's index, a session's name), handed over on
    the GUI thread every ``interval_ms`` as ``flushed({key: [piece, …]})``. ``add`` from any thread;
    ``take`` empties it at once (a reply that just finished); ``clear`` drops what waits (a new request);
    ``stop`` ends the timer (the panel closes)."""

    flushed = Signal(object)

    def __init__(self, parent: QObject | None = None, interval_ms: int = STREAM_FLUSH_MS) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._pending: dict[Hashable, list[str]] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.flush)
        self._timer.start()

    def add(self, key: Hashable, text: str) -> None:
        with self._lock:
            self._pending.setdefault(key, []).append(text)

    def take(self) -> dict[Hashable, list[str]]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def clear(self) -> None:
        self.take()

    def flush(self) -> None:
        pending = self.take()
        if pending:
            self.flushed.emit(pending)

    def stop(self) -> None:
        self._timer.stop()


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
