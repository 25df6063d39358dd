"""A vision projector beside the opened model is offered in the settings: "Vision projector: FILE",
checked; the plan then holds it on the GPU (or in host RAM when asked), and a model without one
shows no such box."""

from __future__ import annotations

import os
from pathlib import Path

from app.machine.devices import resolve_gpus
from app.ui.settings_panel import SettingsPanel
from app.ui.window_state import WindowState
from tests.fixtures import gguf_factory, shapes


def _folder(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A model with a projector beside it, and another model alone in its own folder."""
    (tmp_path / "vl").mkdir()
    (tmp_path / "text").mkdir()
    model, mmproj, alone = tmp_path / "vl" / "model.gguf", tmp_path / "vl" / "mmproj-f16.gguf", tmp_path / "text" / "m.gguf"
    os.symlink(gguf_factory.ensure(shapes.TINY_CHAT), model)
    os.symlink(gguf_factory.ensure(shapes.TINY_MMPROJ), mmproj)
    os.symlink(gguf_factory.ensure(shapes.TINY_CHAT), alone)
    return model, mmproj, alone


def test_the_projector_beside_the_model_is_offered_and_planned(qtbot, tmp_path):
    model, mmproj, alone = _folder(tmp_path)
    state = WindowState(resolve_gpus(["RTX 4090"]))
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.bind(state)
    state.use_model(WindowState.read_model(model))
    assert panel.mmproj.isVisibleTo(panel) and panel.mmproj.isChecked()
    assert panel.mmproj.text() == "Vision projector: mmproj-f16.gguf" and panel.settings().mmproj == str(mmproj)
    assert state.plan is not None and state.plan.projector is not None
    assert state.plan.projector.device == "CUDA0" and state.plan.gpus[0].extras.projector > 6 * 2**20
    panel.mmproj_cpu.click()  # --no-mmproj-offload: the projector moves to host RAM
    assert state.plan is not None and state.plan.projector is not None and state.plan.projector.device == "host"
    assert state.plan.gpus[0].extras.projector == 0 and state.plan.host.extras.projector > 6 * 2**20
    panel.mmproj.click()  # unchecked: no projector planned
    assert state.plan is not None and state.plan.projector is None and not panel.settings().mmproj
    state.use_model(WindowState.read_model(alone))
    assert not panel.mmproj.isVisibleTo(panel) and not panel.settings().mmproj
    assert state.plan is not None and state.plan.projector is None


def test_a_long_projector_name_is_cut_in_the_middle_and_the_form_keeps_its_width(qtbot, tmp_path):
    """A Hub file name of 50 characters widened the settings column past the window (its right edge cut)."""
    from pathlib import Path

    from app.ui.settings_panel import PROJECTOR_NAME_CHARS, SettingsPanel

    panel = SettingsPanel()
    qtbot.addWidget(panel)
    before = panel.sizeHint().width()
    long = Path(tmp_path / "mmproj-Qwen2.5-VL-7B-Instruct-abliterated-f16-b873735838da.gguf")
    panel._show_projector(long)
    shown = panel.mmproj.text().removeprefix("Vision projector: ")
    assert len(shown) <= PROJECTOR_NAME_CHARS and shown.startswith("mmproj-Qwen2.") and shown.endswith("5838da.gguf")
    assert str(long) in panel.mmproj.toolTip()
    panel._mmproj_row.setVisible(True)
    assert panel.sizeHint().width() <= max(before, 480)
