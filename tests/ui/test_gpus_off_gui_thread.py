"""NVML is never read on the GUI thread (issue 28): the window's inventory and its live readings come
from one NVML session, read by its background tasks; until the first answer it plans for no GPU and
says it is reading them. NVML is replayed from the recorded H200 (tests/fixtures/fake_nvml.py)."""

from __future__ import annotations

import threading
from collections import Counter

from app.ui.main_window import MainWindow
from app.ui.planning import READING_GPUS
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml


class WatchedNvml(FakeNvml):
    """The recorded H200, noting which thread makes each call."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.threads: list[tuple[str, threading.Thread]] = []
        self.gate = threading.Event()
        self.gate.set()

    def _enter(self, name: str, index: int | None = None, *, needs_init: bool = True) -> None:
        self.threads.append((name, threading.current_thread()))
        if name == "nvmlDeviceGetCount":
            self.gate.wait(10)  # a slow driver answers when the test says
        super()._enter(name, index, needs_init=needs_init)


def test_the_window_reads_the_gpus_off_the_gui_thread_through_one_session(qtbot, tmp_path, shape_model) -> None:
    nvml = WatchedNvml(state="idle")
    nvml.gate.clear()  # NVML has not answered yet
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml,
                   read_host=lambda: None)
    qtbot.addWidget(w)
    w.show()
    assert w.reading_gpus and not w.current.inventory.gpus  # the window is up before NVML answers
    assert READING_GPUS in w.devices.notice.text()
    with qtbot.waitSignal(w.gpusRead, timeout=10_000):
        nvml.gate.set()
    assert "H200" in w.devices.cards[0].title.text()
    with qtbot.waitSignal(w.planned) as sig:
        assert w.open_model(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    assert "H200" in sig.args[0].gpus[0].label
    with qtbot.waitSignal(w.gpusRead, timeout=10_000):
        w.devices.choose_simulated("RTX 4090")
        w.devices.choose_simulated("")  # Real GPUs: read again, in the background
    qtbot.waitUntil(lambda: Counter(nvml.calls)["nvmlDeviceGetMemoryInfo"] >= 3, timeout=10_000)  # live polls too
    w.close()
    on_gui = {name for name, thread in nvml.threads if thread is threading.main_thread()}
    assert len(nvml.threads) > 10 and on_gui <= {"nvmlShutdown"}  # closing the session is the GUI's only call
    assert nvml.calls["nvmlInit"] == 1 and not nvml.initialised  # one session, shut down with the window
