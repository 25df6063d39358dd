"""A fresh machine (no model, no GPU, no engine) opens on the built-in demo: never an empty picture."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.planner.gguf.model import read_shape
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.probe.measure import measure
from app.ui import demo
from app.ui.application import open_first


def test_demo_model_is_a_sparse_qwen2_shape(tmp_path):
    path = demo.write_demo_model(tmp_path / "demo.gguf")
    shape = read_shape(path)
    assert (shape.arch, shape.n_layer, shape.n_vocab, shape.n_ctx_train) == ("qwen2", 28, 152064, 1_010_000)
    st = path.stat()
    assert st.st_size > 4 * 1024**3  # a 4.7 GB model on paper ...
    assert st.st_blocks * 512 < 16 * 1024**2  # ... costing a few MB of disk


@pytest.mark.engine
def test_the_engine_itself_accepts_the_demo_model(tmp_path, engine_build):
    path = demo.write_demo_model(tmp_path / "demo.gguf")
    m = measure(path, LaunchSettings(n_ctx=8192))  # llama.cpp's own no_alloc load
    assert any("28 layers" in line for line in m.kv_lines)


def test_fresh_machine_opens_on_the_demo(window, qtbot):
    assert window.state.last_model == ""
    with qtbot.waitSignal(window.planned) as sig:
        open_first(window, None, demo=False)
    plan = sig.args[0]
    assert window.model_path == demo.demo_model_path()
    assert plan.launch.n_ctx == 512 * 1024 and plan.mode == PlanMode.WINDOW
    assert len(plan.gpus) == 1 and plan.gpus[0].simulated and plan.gpus[0].total == 24 * 1024**3
    assert plan.window_cells > 0 and plan.tail_cells > 0  # the picture shows both
    assert window.state.recent == []  # the demo is not a "recent model"


def test_a_missing_last_model_falls_back_to_the_demo(window, qtbot, tmp_path):
    window.state.last_model = str(Path(tmp_path / "deleted.gguf"))
    with qtbot.waitSignal(window.planned):
        open_first(window, None, demo=False)
    assert window.model_path == demo.demo_model_path()
