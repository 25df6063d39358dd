"""LoRA adapters and a draft model chosen in the window's "Adapters and draft model" section: planned
with their rows in the budget bars, refused with the planner's sentence when llama.cpp would refuse
the file, kept across windows and in launch profiles, sorted out when another model opens, and
launched on the real engine with every row of the check ok. The file dialogs hand their result to
``add_lora``/``choose_draft``; the tests call those."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.planner.settings import DEFAULT_DRAFT_N_MAX
from app.ui import profile as profile_module
from app.ui.main_window import MainWindow
from app.ui.qt import QApplication, Qt
from app.ui.state import UiState, load_state
from tests.fixtures import adapters, shapes
from tests.ui.windows import gpus_read

LEFT = Qt.MouseButton.LeftButton
LLAMA8B = "llama-3.1-8b-instruct-q4_k_m"


@pytest.fixture
def deep_lora(tmp_path: Path) -> Path:
    return adapters.write_lora(shapes.TINY_DEEP, tmp_path / "deep-lora.gguf")


def _host_parts(window: MainWindow) -> dict[str, str]:
    return {s.key: s.tooltip for s in window.budget.host_row.bar.segments}


def test_a_lora_and_a_draft_chosen_in_the_window_are_planned_with_their_sources(window, tiny_deep_model,
                                                                                deep_lora, qtbot):
    extras = window.settings.extras
    assert extras.toggle.text() == "Adapters and draft model: none" and extras.body.isHidden()  # one line
    assert window.open_model(tiny_deep_model)
    qtbot.mouseClick(extras.toggle, LEFT)
    assert not extras.body.isHidden() and extras.lora_names.full_text() == "none"
    assert extras.draft_options.isHidden()  # no draft: no draft settings
    with qtbot.waitSignal(window.planned) as lora_plan:
        assert extras.add_lora(deep_lora)
    assert lora_plan.args[0].launch.lora == (str(deep_lora),)
    assert extras.lora_names.full_text() == "deep-lora.gguf" and extras.lora_names.toolTip() == str(deep_lora)
    draft = adapters.draft_model()
    with qtbot.waitSignal(window.planned) as draft_plan:
        assert extras.choose_draft(draft)
    assert not extras.draft_options.isHidden()
    with qtbot.waitSignal(window.planned) as tuned:
        extras.draft_type_k.setCurrentText("q8_0")
    launch = tuned.args[0].launch
    assert launch.draft_model == str(draft) and launch.draft_type_k == "q8_0"
    assert launch.draft_n_max == DEFAULT_DRAFT_N_MAX and launch.lora == (str(deep_lora),)
    assert draft_plan.args[0].launch.draft_type_k == "f16"
    assert extras.toggle.text() == "Adapters and draft model: 1 LoRA, a draft model"
    parts = _host_parts(window)  # no GPU here: every part is in host RAM
    assert parts["lora"].startswith("Host LoRA: ") and "from the GGUF (the adapter's tensors" in parts["lora"]
    assert parts["draft_weights"].startswith("Host draft model: ") and "from the GGUF" in parts["draft_weights"]
    assert parts["draft_kv"].startswith("Host draft KV: ")
    assert parts["draft_compute"].startswith("Host draft compute: ") and "estimated" in parts["draft_compute"]
    assert "and the draft model's" in parts["output_buffer"]
    assert window.error.isHidden()
    qtbot.mouseClick(extras.lora_clear, LEFT)
    qtbot.mouseClick(extras.draft_clear, LEFT)
    assert window.plan is not None and window.plan.launch.lora == () and window.plan.launch.draft_model == ""
    assert "lora" not in {s.key for s in window.budget.host_row.bar.segments}


def test_a_file_llama_cpp_would_refuse_is_said_and_not_kept(window, tiny_deep_model, tiny_model, shape_model,
                                                            corrupt_gguf, deep_lora, tmp_path, qtbot):
    extras = window.settings.extras
    assert window.open_model(tiny_deep_model)
    assert extras.add_lora(deep_lora)
    before = window.plan
    moe_lora = adapters.write_lora(shapes.TINY_MOE, tmp_path / "moe-lora.gguf")
    small_lora = adapters.write_lora(shapes.TINY, tmp_path / "small-lora.gguf")
    gone = tmp_path / "gone.gguf"
    refused = [
        (extras.add_lora, tiny_model, "not a LoRA adapter"),  # a model is no adapter
        (extras.add_lora, moe_lora, "is for qwen3moe, the model is llama"),
        (extras.add_lora, small_lora, "has the wrong shape for this model"),
        (extras.add_lora, gone, "cannot read"),
        (extras.choose_draft, shape_model(LLAMA8B), "vocabulary (128,256 tokens) is not the model's"),
        (extras.choose_draft, corrupt_gguf, ""),
        (extras.choose_draft, deep_lora, ""),  # an adapter is no model
    ]
    for choose, path, says in refused:
        with qtbot.waitSignal(window.errorShown) as shown:
            assert not choose(path)
        message = shown.args[0]
        assert says in message and message == window.error.text(), message
        assert message.startswith(("LoRA adapter not used: ", "Draft model not used: "))
        assert message.count(path.name) == 1, message  # the file named once
        settings = window.settings.settings()
        assert settings.lora == (str(deep_lora),) and settings.draft_model == ""  # what was there stays
        assert window.plan is before
    assert extras.lora_names.full_text() == "deep-lora.gguf"


def test_the_adapters_and_draft_persist_in_the_state_and_in_a_profile(qtbot, tiny_deep_model, deep_lora, tmp_path):
    state_file = tmp_path / "gui-state.json"
    first = MainWindow(state=UiState(), persist=True, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, first)
    qtbot.addWidget(first)
    assert first.open_model(tiny_deep_model)
    draft = adapters.draft_model()
    assert first.settings.extras.add_lora(deep_lora) and first.settings.extras.choose_draft(draft)
    first.settings.extras.draft_n_max.setValue(5)
    first.settings.extras.draft_ngl.setValue(0)
    profile = tmp_path / "deep.headroom.json"
    assert first.save_profile(profile)
    first.close()
    again = MainWindow(state=load_state(state_file), persist=False, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    again.show()
    extras = again.settings.extras
    assert extras.toggle.text() == "Adapters and draft model: 1 LoRA, a draft model"
    assert extras.body.isHidden()  # kept, named, and the form as short as before
    assert again.open_model(tiny_deep_model)
    plan = again.plan
    assert plan is not None
    assert (plan.launch.lora, plan.launch.draft_model, plan.launch.draft_n_max, plan.launch.draft_n_gpu_layers) == (
        (str(deep_lora),), str(draft), 5, 0)
    loaded = profile_module.load_profile(profile)
    assert loaded.launch == again.settings.settings()
    other = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "other.json", read_host=lambda: None)
    gpus_read(qtbot, other)
    qtbot.addWidget(other)
    assert other.open_profile(profile)
    assert other.plan is not None and other.plan.launch.lora == (str(deep_lora),)
    assert other.settings.settings() == loaded.launch
    assert other.profile() == loaded
    again.close()
    other.close()


def test_another_model_keeps_the_draft_its_vocabulary_takes_and_drops_a_lora_it_does_not(
        window, tiny_deep_model, tiny_model, deep_lora, qtbot):
    extras = window.settings.extras
    assert window.open_model(tiny_deep_model)
    draft = adapters.draft_model()
    assert extras.add_lora(deep_lora) and extras.choose_draft(draft)
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(tiny_model)  # the same byte vocabulary, half the width
    launch = sig.args[0].launch
    assert launch.lora == () and launch.draft_model == str(draft)
    message = window.statusBar().currentMessage()
    assert message.startswith("LoRA adapter not used: ") and "deep-lora.gguf" in message
    assert window.error.isHidden()  # a notice, not an error: the plan is there
    assert extras.lora_names.full_text() == "none"
    assert extras.add_lora(adapters.write_lora(shapes.TINY, deep_lora.parent / "small-lora.gguf"))


def test_the_demo_leaves_out_what_its_shape_cannot_take_and_says_so(window, tiny_deep_model, deep_lora, qtbot):
    extras = window.settings.extras
    assert window.open_model(tiny_deep_model)
    second = adapters.write_lora(shapes.TINY_DEEP, deep_lora.parent / "ffn-lora.gguf", targets=("ffn_up",))
    assert extras.add_lora([deep_lora, second]) and extras.choose_draft(adapters.draft_model())
    assert extras.lora_names.full_text() == "deep-lora.gguf, ffn-lora.gguf"
    assert extras.toggle.text() == "Adapters and draft model: 2 LoRA, a draft model"
    assert window.open_demo()
    assert window.plan is not None and window.error.isHidden()  # planned, not "Cannot plan: LoRA …"
    message = window.statusBar().currentMessage()
    assert message.count("LoRA adapter not used: ") == 2 and "Draft model not used: " in message, message
    assert extras.toggle.text() == "Adapters and draft model: none"


def test_with_nothing_chosen_the_form_still_fits_at_1280x860(window, tiny_deep_model, qtbot):
    assert window.open_model(tiny_deep_model)
    window.settings.set_advanced_open(True)  # the section the adapters live in
    window.resize(1280, 860)
    qtbot.waitUntil(lambda: window.width() == 1280 and window.height() == 860)
    QApplication.processEvents()
    assert window.settings.extras.isVisible() and window.settings.extras.body.isHidden()
    # (the devices panel leaves the form when it has no room for it: the layout settles, then no scroll)
    qtbot.waitUntil(lambda: not window.left_scroll.verticalScrollBar().isVisible())


@pytest.mark.engine
def test_launch_with_a_lora_and_a_draft_from_the_window_checks_every_row(window, tiny_deep_model, engine_build,
                                                                         deep_lora, qtbot):
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    window.settings.engine.setCurrentIndex([e.path for e in found.args[0]].index(str(engine_build.server)))
    assert window.open_model(tiny_deep_model)
    extras = window.settings.extras
    draft = adapters.draft_model()
    assert extras.add_lora(deep_lora) and extras.choose_draft(draft)
    extras.draft_type_k.setCurrentText("q8_0")
    extras.draft_type_v.setCurrentText("q8_0")
    window.settings.set_context(8192)
    with qtbot.waitSignal(window.measured, timeout=180_000):  # pass 1 loads the draft too: its compute measured
        qtbot.mouseClick(window.measure.button, LEFT)
    assert "measured by pass 1" in _host_parts(window)["draft_compute"]
    with qtbot.waitSignal(window.launch.checked, timeout=180_000) as chk:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    command = window.launch.command.text()
    assert f"--lora {deep_lora}" in command and f"-md {draft}" in command, command
    assert "-ctkd q8_0 -ctvd q8_0" in command and "--spec-type draft-simple" in command, command
    check = chk.args[0]
    for part in ("lora", "draft weights", "draft kv", "draft compute", "output"):
        row = check.row("host", part)
        assert row is not None and row.ok, (part, check.table())
    assert check.ok, check.table()  # every buffer the engine allocated is where the plan said
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
