"""Background work for the window: nothing long runs on the GUI thread.

- ``TaskPool``: every task a panel starts (pass 1, engine discovery, a launch, a Hub download, a chat
  reply, the NVML inventory): started, replaced by key, cancelled and waited for at close in one place.
  The window holds one and hands it to its panels; a panel made alone makes its own.
- ``TaskThread``: one such task: runs one callable and reports its result or its error message.
  Cancelling abandons the result at once; the callable gets a ``threading.Event`` it may watch to
  stop early.
- ``PollWorker``: calls a function about once a second (the NVML poller) until stopped.
- ``StreamBatcher``: text a worker streams (a reply's pieces, an engine's log lines), handed to the GUI
  thread in batches ten times a second, so a fast model or a chatty engine never floods the window.

Signals are emitted from the worker thread and delivered queued to the GUI thread.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Abandon:
    """A task that may outlive its window (a network call that times out on its own): at close it is
    waited for ``wait_ms`` at most, then kept referenced (never destroyed running) until it ends; at
    exit it is waited for ``exit_wait_s`` at most."""

    wait_ms: int
    exit_wait_s: float


#: Tasks that outlived their window (``Abandon``): referenced here until they end.
ABANDONED: dict[TaskThread, float] = {}


def _wait_abandoned() -> None:
    """At exit: Qt aborts the process if a QThread is destroyed while it still runs."""
    for task, exit_wait_s in list(ABANDONED.items()):
        task.wait(int(exit_wait_s * 1000))


atexit.register(_wait_abandoned)


@dataclass
class _Entry:
    owner: int  # id() of the panel that started it
    key: Hashable | None
    abandon: Abandon | None


class TaskPool(QObject):
    """The window's background tasks, each on its own ``TaskThread``, in one place.

    ``run(fn, ok, failed, owner=panel)`` starts ``fn(cancel_event)``; ``ok(result)`` or
    ``failed(message)`` follow on the GUI thread unless the task was cancelled meanwhile (a late
    answer is dropped, even one already queued). With a ``key``, one task per (owner, key): starting
    another cancels the one before (``current`` is the one whose answer is wanted). ``finished(task)``
    comes once the thread has ended, cancelled or not (a download has stopped writing its file).
    ``wait(owner)`` cancels a panel's tasks and waits for them; ``close()`` every task's (the
    window's close), so Qt never destroys a thread still running."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._live: dict[TaskThread, _Entry] = {}
        self._wanted: dict[tuple[int, Hashable], TaskThread] = {}

    def run(self, fn: Callable[[threading.Event], object], ok: Callable[[Any], None] | None = None,
            failed: Callable[[str], None] | None = None, *, owner: object, key: Hashable | None = None,
            finished: Callable[[TaskThread], None] | None = None, abandon: Abandon | None = None) -> TaskThread:
        if key is not None:
            self.cancel(owner, key)
        task = TaskThread(fn, self)
        entry = _Entry(id(owner), key, abandon)
        self._live[task] = entry
        if key is not None:
            self._wanted[(entry.owner, key)] = task

        def answered(call: Callable[[Any], None] | None, value: object) -> None:
            if task.cancelled:
                return
            self._unwant(task)
            if call is not None:
                call(value)

        task.succeeded.connect(lambda result: answered(ok, result))
        task.failed.connect(lambda message: answered(failed, message))
        task.finished.connect(lambda: self._finished(task, finished))
        task.start()
        return task

    def current(self, owner: object, key: Hashable) -> TaskThread | None:
        """The task started for ``key`` whose answer is still wanted (None: none, or it answered)."""
        return self._wanted.get((id(owner), key))

    def busy(self, owner: object | None = None) -> bool:
        """Some task (of ``owner``) has not ended yet, a cancelled one included."""
        return any(owner is None or e.owner == id(owner) for e in self._live.values())

    def cancel(self, owner: object, key: Hashable | None = None) -> None:
        """Cancel ``owner``'s task for ``key`` (None: all of its tasks); their answers are dropped."""
        for task, entry in list(self._live.items()):
            if entry.owner == id(owner) and (key is None or entry.key == key):
                task.cancel()
                self._unwant(task)

    def wait(self, owner: object | None = None) -> None:
        """Cancel ``owner``'s tasks (None: every task) and wait for them to end; one that may be
        abandoned is waited for a little, then left to end on its own (``Abandon``)."""
        tasks = [(t, e) for t, e in self._live.items() if owner is None or e.owner == id(owner)]
        for task, _e in tasks:
            task.cancel()
            self._unwant(task)
        for task, entry in tasks:
            if entry.abandon is None:
                task.wait()
            elif not task.wait(entry.abandon.wait_ms):
                self._abandon(task, entry.abandon)

    def close(self) -> None:
        """The window closes: every task cancelled and waited for (or abandoned)."""
        self.wait(None)

    def _unwant(self, task: TaskThread) -> None:
        entry = self._live.get(task)
        if entry is not None and entry.key is not None and self._wanted.get((entry.owner, entry.key)) is task:
            del self._wanted[(entry.owner, entry.key)]

    def _finished(self, task: TaskThread, finished: Callable[[TaskThread], None] | None) -> None:
        if task not in self._live:
            return  # abandoned: its window has gone
        self._unwant(task)
        del self._live[task]
        task.deleteLater()
        if finished is not None:
            finished(task)

    def _abandon(self, task: TaskThread, abandon: Abandon) -> None:
        for signal in (task.succeeded, task.failed, task.finished):  # its window may be gone before it ends
            signal.disconnect()
        del self._live[task]
        task.setParent(None)
        for done in [t for t in ABANDONED if t.isFinished()]:
            del ABANDONED[done]
        ABANDONED[task] = abandon.exit_wait_s
