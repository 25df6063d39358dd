"""The devices panel's RPC workers row: ``host:port`` addresses, asked in the background.

Typing addresses and pressing Connect (or Enter) asks each worker for its devices through the
engine (app/engine/rpc.py, a child per worker with a timeout, never on the GUI thread); the answer
comes back as ``readingsChanged(readings)`` and the window plans with the workers' devices beside
its GPUs. A worker that does not answer is named, with why, and left out. The addresses are
remembered by the window (UiState.rpc_workers) and asked again at the next start.
"""

from __future__ import annotations

import threading

from app.engine.rpc import (
    UNAUTHENTICATED,
    WorkerReading,
    describe_workers,
    parse_endpoints,
    query_workers,
    rpc_query_server,
)
from app.planner.words import plural
from app.ui.qt import QHBoxLayout, QLabel, QLineEdit, QPushButton, Qt, QVBoxLayout, QWidget, Signal
from app.ui.workers import TaskPool

TIP = ("ggml-rpc-server workers whose devices the engine also uses (llama-server --rpc), e.g. "
       "192.168.1.20:50052, 127.0.0.1:50052. Start one with `headroom rpc-worker`. Warning: "
       + UNAUTHENTICATED)


class WorkersRow(QWidget):
    """Addresses in, readings out (``readingsChanged``: a tuple of WorkerReading, () for none)."""

    readingsChanged = Signal(object)

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.pool = pool if pool is not None else TaskPool(self)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("host:port, … (none)")
        self.edit.setAccessibleName("RPC workers")
        self.edit.setToolTip(TIP)
        self.edit.returnPressed.connect(self.connect_workers)
        self.button = QPushButton("Connect")
        self.button.setToolTip(TIP)
        self.button.clicked.connect(self.connect_workers)
        self.status = QLabel()
        self.status.setObjectName("rpcWorkersStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.status.setVisible(False)
        label = QLabel("RPC &workers:")
        label.setBuddy(self.edit)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(label)
        row.addWidget(self.edit, 1)
        row.addWidget(self.button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(row)
        lay.addWidget(self.status)
        self.readings: tuple[WorkerReading, ...] = ()

    def endpoints(self) -> tuple[str, ...]:
        """The addresses typed (ValueError for one that is not HOST:PORT); () when the field is empty."""
        text = self.edit.text().strip()
        return parse_endpoints(text) if text else ()

    def set_endpoints(self, endpoints: list[str] | tuple[str, ...]) -> None:
        self.edit.setText(", ".join(endpoints))

    def _say(self, text: str, *, error: bool = False) -> None:
        self.status.setStyleSheet("color: #d62728;" if error else "")
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def connect_workers(self) -> None:
        """Ask the typed workers for their devices in the background (a running ask is abandoned)."""
        try:
            endpoints = self.endpoints()
        except ValueError as exc:
            self._say(str(exc), error=True)
            return
        self.pool.cancel(self, "ask")  # a running ask is abandoned
        if not endpoints:
            self.readings = ()
            self._say("")
            self.readingsChanged.emit(())
            return
        self._say(f"asking {plural(len(endpoints), 'worker')} for their devices…")
        self.button.setEnabled(False)

        def work(cancel: threading.Event) -> object:
            return query_workers(rpc_query_server(), endpoints)

        self.pool.run(work, self._answered, self._failed, owner=self, key="ask")

    def _answered(self, result: object) -> None:
        self.button.setEnabled(True)
        readings = tuple(r for r in result if isinstance(r, WorkerReading)) if isinstance(result, tuple) else ()
        self.readings = readings
        self._say(describe_workers(readings), error=not any(r.devices for r in readings))
        self.readingsChanged.emit(readings)

    def _failed(self, message: str) -> None:
        self.button.setEnabled(True)
        self._say(message, error=True)

    def wait(self) -> None:
        """Block until a running ask has finished (closing the window)."""
        self.pool.wait(self)
