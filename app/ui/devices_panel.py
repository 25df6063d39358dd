"""The devices panel: a card per GPU (live used/free, other processes on hover) and one for host RAM.

Without an NVIDIA driver it says so plainly and offers simulated GPUs, so planning still works.
Live numbers arrive from the poll worker (``app.ui.workers.PollWorker``) as ``Snapshot`` objects;
the inventory planned for from the window state (``bind``).
"""

from __future__ import annotations

from app.engine.rpc import WorkerReading
from app.planner.devices import GpuDevice, HostMemory, Inventory, Snapshot
from app.planner.gpu_table import cards_by_memory, parse_spec
from app.planner.units import Bytes
from app.ui.qt import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)
from app.ui.rpc_workers import WorkersRow
from app.ui.window_state import WindowState
from app.ui.workers import TaskPool

#: The simulated-GPU choice meaning "use the real inventory".
REAL_GPUS = "This machine's GPUs"
#: The same choice on a machine NVML finds no GPU on: what is planned for then is its CPU.
REAL_CPU = "This machine's CPU"
#: Memory cards a row (the panel is in the form's column, about 440 px wide).
CARDS_PER_ROW = 2
SIMULATE_TIP = ("Plan for a GPU you do not have: pick a card, or type one as --gpu takes it "
                "(a name from the list, or NAME:SIZE such as MyCard:12GiB) and press Enter")


def _processes_tooltip(gpu_name: str, procs: list[tuple[int, str, int, bool]], known: bool) -> str:
    if not known:
        return f"{gpu_name}: this driver does not list processes"
    if not procs:
        return f"{gpu_name}: no processes using it"
    lines = [f"{'engine' if eng else name or 'pid'} (pid {pid}): {Bytes(used)}"
             for pid, name, used, eng in procs]
    return f"{gpu_name} is used by:\n" + "\n".join(lines)


class MemoryCard(QFrame):
    """Name, a used/free bar and a caption. The tooltip lists the processes using it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(10)
        self.caption = QLabel()
        self.caption.setWordWrap(True)  # two cards side by side fit a 1024-wide window
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.bar)
        lay.addWidget(self.caption)

    def show_memory(self, title: str, total: int, free: int, tooltip: str) -> None:
        used = max(0, total - free)
        self.title.setText(title)
        self.bar.setValue(round(1000 * used / total) if total else 0)
        self.caption.setText(f"used {Bytes(used)} now · free {Bytes(free)} of {Bytes(total)}")
        self.setToolTip(tooltip)
        self.setAccessibleDescription(f"{title}: {self.caption.text()}")


class DevicesPanel(QWidget):
    """Cards for the planning inventory; ``simulationChanged`` when the user picks a simulated GPU."""

    simulationChanged = Signal(str)  # "" = real GPUs, else card names known to gpu_table ("A,B": two)
    workersAnswered = Signal(object)  # the RPC workers' readings (a tuple; () when the list was emptied)

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.notice = QLabel()
        self.notice.setObjectName("driverNotice")
        self.notice.setWordWrap(True)
        self.notice.setTextFormat(Qt.TextFormat.RichText)
        self.simulate = QComboBox()
        self.simulate.setAccessibleName("Simulated GPU")
        self.simulate.setToolTip(SIMULATE_TIP)
        # As wide as a card's name and size, not as the longest pair ("2 × RTX PRO 6000 · 96.0 GiB each").
        self.simulate.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.simulate.setMinimumContentsLength(14)
        self.simulate.addItem(REAL_GPUS, "")
        cards = cards_by_memory()
        for card, total in cards:
            self.simulate.addItem(f"{card} · {Bytes(total)}", card)
        for card, total in cards:  # a split across two cards (resolve_gpus takes "A,B")
            self.simulate.addItem(f"2 × {card} · {Bytes(total)} each", f"{card},{card}")
        self.simulate.currentIndexChanged.connect(self._on_simulate)
        # A card of any size, typed as the CLI's --gpu takes it.
        self.spec = QLineEdit()
        self.spec.setPlaceholderText("or NAME:SIZE")
        self.spec.setAccessibleName("Simulated GPU (typed)")
        self.spec.setToolTip(SIMULATE_TIP)
        self.spec.setMinimumWidth(self.spec.fontMetrics().horizontalAdvance("or NAME:SIZE") + 16)
        self.spec.setMaximumWidth(180)
        self.spec.returnPressed.connect(self._typed)
        self.spec_error = QLabel()
        self.spec_error.setObjectName("gpuSpecError")
        self.spec_error.setStyleSheet("color: #d62728;")
        self.spec_error.setTextFormat(Qt.TextFormat.PlainText)
        self.spec_error.setVisible(False)
        self.cards: list[MemoryCard] = []
        self._gpus: tuple[GpuDevice, ...] = ()
        self.host_card = MemoryCard()
        # Two cards a row, host RAM last: the panel sits in the form's column (app/ui/main_window.py).
        self._cards_box = QGridLayout()
        top = QHBoxLayout()
        plan_for = QLabel("Pla&n for:")
        plan_for.setBuddy(self.simulate)
        top.addWidget(plan_for)
        top.addWidget(self.simulate)
        top.addWidget(self.spec)
        top.addWidget(self.spec_error, 1)
        top.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        self.workers = WorkersRow(pool=pool)
        self.workers.readingsChanged.connect(self.workersAnswered)
        lay.addWidget(self.workers)
        lay.addWidget(self.notice)
        lay.addLayout(self._cards_box)
        self._place_cards()

    def ask_workers(self, endpoints: list[str]) -> None:
        """Ask these RPC workers for their devices (in the background; ``workersAnswered`` follows)."""
        self.workers.set_endpoints(endpoints)
        self.workers.connect_workers()

    def worker_readings(self) -> tuple[WorkerReading, ...]:
        """What the RPC workers last answered (() for none)."""
        return self.workers.readings

    def worker_endpoints(self) -> list[str]:
        """The worker addresses as typed ([] when there are none, or one is not an address)."""
        try:
            return list(self.workers.endpoints())
        except ValueError:
            return []

    def shutdown(self) -> None:
        """Wait for a running worker query (closing the window)."""
        self.workers.wait()

    def bind(self, state: WindowState) -> None:
        """Show the devices ``state`` plans for (now, and whenever they change)."""
        state.inventoryChanged.connect(self.show_inventory)
        self.show_inventory(state.inventory, state.nvml_reason)

    def simulated_choice(self) -> str:
        return str(self.simulate.currentData() or "")

    def choose_simulated(self, name: str) -> bool:
        """Pick ``name`` as the user would (a card of the list, "A,B" for two, or a ``NAME:SIZE``
        spec); ``simulationChanged`` follows. False, with the reason shown, for a spec it cannot use."""
        self.spec.setText(name)
        return self._typed()

    def set_simulated_choice(self, name: str) -> None:
        """Show ``name`` (a card of the list, or a ``NAME:SIZE`` spec: added to the list)."""
        self.simulate.blockSignals(True)
        idx = self.simulate.findData(name) if name else 0
        if idx < 0 and name:
            self.simulate.addItem(name, name)
            idx = self.simulate.count() - 1
        self.simulate.setCurrentIndex(max(idx, 0))
        self.simulate.blockSignals(False)
        self._say("")

    def _on_simulate(self, _i: int) -> None:
        self._say("")
        self.simulationChanged.emit(self.simulated_choice())

    def _typed(self) -> bool:
        """Enter in the field: a card of the list by its name, else a ``NAME:SIZE`` spec as the CLI's
        ``--gpu`` takes it (added to the list); anything else is said beside the field and changes
        nothing."""
        text = self.spec.text().strip()
        key = text.lower()
        for i in range(self.simulate.count()):
            if key in (self.simulate.itemText(i).lower(), str(self.simulate.itemData(i) or "").lower()):
                self._choose(i)
                return True
        try:
            for part in text.split(","):  # "A,B": two cards, as --gpu takes them
                parse_spec(part)
        except ValueError as exc:
            self._say(str(exc))
            return False
        self.simulate.addItem(text, text)
        self._choose(self.simulate.count() - 1)
        return True

    def _choose(self, index: int) -> None:
        self.spec.clear()
        self._say("")
        self.simulate.setCurrentIndex(index)  # emits simulationChanged when it is another choice

    def _say(self, message: str) -> None:
        self.spec_error.setText(message)
        self.spec_error.setToolTip(message)
        self.spec_error.setVisible(bool(message))

    def _ensure_cards(self, n: int) -> None:
        while len(self.cards) < n:
            self.cards.append(MemoryCard())
        while len(self.cards) > n:
            card = self.cards.pop()
            self._cards_box.removeWidget(card)
            card.setParent(None)
            card.deleteLater()
        self._place_cards()

    def _place_cards(self) -> None:
        """The GPU cards, then host RAM, CARDS_PER_ROW to a row."""
        for i, card in enumerate([*self.cards, self.host_card]):
            self._cards_box.removeWidget(card)
            self._cards_box.addWidget(card, i // CARDS_PER_ROW, i % CARDS_PER_ROW)

    def show_inventory(self, inv: Inventory, nvml_reason: str = "") -> None:
        """The GPUs being planned for. ``nvml_reason``: why the machine has no real GPU, if so."""
        reason = nvml_reason or ("" if inv.gpus else inv.reason)
        real = self.simulate.currentIndex() <= 0
        self.simulate.setItemText(0, REAL_CPU if nvml_reason or (real and not inv.gpus) else REAL_GPUS)
        if reason:
            note = (f"<b>{reason}</b>" + (f" — planning uses the simulated GPU{'s' if len(inv.gpus) > 1 else ''} below." if inv.gpus
                                           else " — planning still works: pick a simulated GPU above, "
                                                "or plan for the CPU."))
            self.notice.setText(note)
        self.notice.setVisible(bool(reason))
        self._ensure_cards(len(inv.gpus))
        for card, gpu in zip(self.cards, inv.gpus, strict=True):
            self._show_gpu(card, gpu)
        self._gpus = inv.gpus
        self.show_host(inv.host)

    @staticmethod
    def _show_gpu(card: MemoryCard, gpu: GpuDevice) -> None:
        title = f"<b>{gpu.engine_name}</b> {gpu.label}"
        procs = [(p.pid, p.name, p.used, p.is_engine) for p in gpu.processes]
        tip = _processes_tooltip(gpu.name, procs, gpu.processes_known)
        if gpu.simulated:
            tip = f"{gpu.name}: simulated — {gpu.source or 'no real device'}"
        elif gpu.is_rpc:
            tip = f"{gpu.device_name}: a device of the RPC worker {gpu.endpoint} ({gpu.source})"
        card.show_memory(title, gpu.total, gpu.free, tip)

    def show_host(self, host: HostMemory) -> None:
        self.host_card.show_memory("<b>Host RAM</b>", host.total, host.available,
                                   f"Host RAM: {Bytes(host.available)} available (psutil)")

    def show_snapshot(self, snap: Snapshot) -> None:
        """Live update of host RAM, and of the real GPUs (not while planning for simulated ones)."""
        if snap.host is not None:
            self.show_host(snap.host)
        if self.simulated_choice() or not snap.ok:
            return
        if any(g.is_rpc for g in self._gpus):  # the workers' cards stay; the local GPUs' follow NVML
            samples = {s.index: s for s in snap.gpus}
            for card, g in zip(self.cards, self._gpus, strict=True):
                live = None if g.is_rpc else samples.get(g.index)
                if live is not None:
                    procs = [(p.pid, p.name, p.used, p.is_engine) for p in live.processes]
                    card.show_memory(f"<b>CUDA{live.index}</b> {live.name}", live.total, live.free,
                                     _processes_tooltip(live.name, procs, live.processes_known))
            return
        self._ensure_cards(len(snap.gpus))
        for card, s in zip(self.cards, snap.gpus, strict=True):
            procs = [(p.pid, p.name, p.used, p.is_engine) for p in s.processes]
            card.show_memory(f"<b>CUDA{s.index}</b> {s.name}", s.total, s.free,
                             _processes_tooltip(s.name, procs, s.processes_known))
