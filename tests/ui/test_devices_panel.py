"""The devices panel with NVML replayed from the recorded H200 (tests/fixtures/fake_nvml.py): the
only fake here, because this machine has no NVIDIA driver."""

from __future__ import annotations

from app.planner.units import Bytes
from app.ui.main_window import MainWindow
from app.ui.state import UiState
from tests.fixtures.fake_nvml import FakeNvml, load_readings
from tests.ui.windows import gpus_read

QWEN14_1M = "qwen2.5-14b-instruct-1m-q8_0"


def test_real_gpu_card_shows_memory_and_processes_live(qtbot, tmp_path, shape_model):
    nvml = FakeNvml(state="idle")
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.show()
    rec = load_readings()
    assert w.devices.notice.isHidden()  # a driver: no notice
    card = w.devices.cards[0]
    assert "H200" in card.title.text() and "CUDA0" in card.title.text()
    assert f"free {Bytes(rec.free)}" in card.caption.text()
    assert "no processes" in card.toolTip()
    nvml.state = "torch_ctx"  # another app takes a CUDA context; the next poll must show it
    qtbot.waitUntil(lambda: "pid 419" in w.devices.cards[0].toolTip(), timeout=5_000)
    assert f"{Bytes(543162368)}" in w.devices.cards[0].toolTip()
    assert f"free {Bytes(rec.ctx_free)}" in w.devices.cards[0].caption.text()
    with qtbot.waitSignal(w.planned) as sig:
        assert w.open_model(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    gpu = sig.args[0].gpus[0]
    assert not gpu.simulated and "H200" in gpu.label
    assert "H200" in w.budget.rows[0].title.text()
    w.close()
    assert not nvml.initialised  # NVML shut down with the window


def test_simulated_card_is_marked_and_real_snapshots_do_not_overwrite_it(qtbot, tmp_path):
    nvml = FakeNvml(state="torch_ctx")
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=nvml)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    w.devices.choose_simulated("RTX 4090")
    assert "simulated" in w.devices.cards[0].title.text()
    with qtbot.waitSignal(w.poll.polled, timeout=5_000):
        pass
    assert "4090" in w.devices.cards[0].title.text()
    assert "simulated" in w.devices.cards[0].toolTip()


def test_two_simulated_cards_plan_a_split_and_are_remembered(no_gpu_window, shape_model, qtbot, tmp_path):
    window = no_gpu_window
    assert window.open_model(shape_model(QWEN14_1M))
    with qtbot.waitSignal(window.planned) as sig:
        window.devices.choose_simulated("H200,H200")  # as --gpu takes two
    plan = sig.args[0]
    assert [g.name for g in plan.gpus] == ["CUDA0", "CUDA1"]
    assert all(g.weights > 0 for g in plan.gpus)  # the weights are split over both
    assert len(window.budget.rows) == 2 and len(window.devices.cards) == 2
    assert "simulated GPUs below" in window.devices.notice.text()
    again = MainWindow(state=window.state, persist=False, state_file=tmp_path / "again.json")
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    assert again.devices.simulated_choice() == "H200,H200"
    assert again.devices.simulate.currentText().startswith("2 × H200")
    assert len(again.current.inventory.gpus) == 2
    again.close()


def test_without_a_driver_the_first_choice_says_the_cpu_not_gpus(no_gpu_window, qtbot):
    """A machine NVML finds no GPU on plans for its CPU: the choice says so beside "no NVIDIA driver"
    (the walkthrough of issue 46 read "Plan for: This machine's GPUs" there), and a GPU machine's says GPUs."""
    window = no_gpu_window
    assert not window.devices.notice.isHidden()
    assert window.devices.simulate.itemText(0) == "This machine's CPU"
    assert window.devices.simulate.currentIndex() == 0 and "GPUs" not in window.devices.simulate.currentText()


def test_with_a_driver_the_first_choice_is_this_machines_gpus(qtbot, tmp_path):
    w = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "s.json", nvml=FakeNvml(state="idle"))
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    assert w.devices.simulate.itemText(0) == "This machine's GPUs"
