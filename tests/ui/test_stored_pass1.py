"""A model already measured is shown measured when it opens: the window looks up the stored pass 1 of
the model and the launch it plans (runs nothing) and uses it without a click, as ``plan`` does in a
terminal. A walkthrough measured a model with ``headroom measure``, opened it in the window and was
shown estimates until it clicked Measure again."""

from __future__ import annotations

from pathlib import Path

from app.engine.native_build import EngineBuild
from app.probe.measure import measure_cached
from app.ui import measure_bar

ENGINES_S = 120_000


def test_a_model_measured_before_opens_measured_and_other_settings_do_not(window, qtbot, tiny_model: Path,
                                                                           tiny_chat_model: Path,
                                                                           engine_build: EngineBuild) -> None:
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        window.launch.discover()
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    launch = window.current.settings.launch
    assert window.measure.status_text() == measure_bar.NOT_MEASURED  # nothing stored yet
    # pass 1 of exactly this launch, as `headroom measure` would store it (the real child)
    stored, hit = measure_cached(tiny_model, launch, lib_dir=window.measure._lib_dir_now())
    assert not hit
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)  # another model, then this one again
    with qtbot.waitSignal(window.measure.measured, timeout=30_000):
        assert window.open_model(tiny_model)
    assert window.current.settings.launch == launch
    assert window.current.measurement_for(launch) == stored
    assert window.measure.status_text() == "Compute buffer measured by pass 1 (CPU, from the measurement cache)"
    # the plan's compute buffer is pass 1's now, not an estimate
    qtbot.waitUntil(lambda: window.current.plan is not None
                    and str(window.current.plan.host.sources["compute_pinned"]) == "measured by pass 1", timeout=10_000)
    # other settings have no stored pass 1: not measured, and nothing is said to be
    with qtbot.waitSignal(window.planned):
        window.settings.n_parallel.setValue(window.settings.n_parallel.value() + 1)
    qtbot.wait(500)
    assert window.current.measurement_for(window.current.settings.launch) is None
    assert window.measure.status_text() != "Compute buffer measured by pass 1 (CPU, from the measurement cache)"
