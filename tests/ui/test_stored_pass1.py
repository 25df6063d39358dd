"""A model already measured is shown measured when it opens: the window looks up the stored pass 1 of
the model and the launch it plans (runs nothing) and uses it without a click, as ``plan`` does in a
terminal. A walkthrough measured a model with ``headroom measure``, opened it in the window and was
shown estimates until it clicked Measure again."""

from __future__ import annotations

import threading
from pathlib import Path

from app.engine.native_build import EngineBuild
from app.planner.measurement import Measurement
from app.planner.settings import LaunchSettings
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
    # the same file opened again (the window forgets its measurement): found again
    with qtbot.waitSignal(window.measure.measured, timeout=30_000):
        assert window.open_model(tiny_model)
    assert window.current.measurement_for(launch) == stored


def test_a_stored_pass_1_that_answers_after_the_settings_changed_is_not_used(window, qtbot, tiny_model: Path,
                                                                            engine_build: EngineBuild) -> None:
    """The lookup runs in the background: its answer for settings no longer shown is dropped, and the
    settings shown now are looked up for themselves."""
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        window.launch.discover()
    release = threading.Event()
    asked: list[LaunchSettings] = []

    def slow(model: Path, settings: LaunchSettings, lib_dir: str | None) -> Measurement | None:
        asked.append(settings)
        release.wait(10)
        return measure_cached(model, settings, lib_dir=lib_dir)[0] if len(asked) == 1 else None

    window.measure.lookup = slow
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    first = window.current.settings.launch
    qtbot.waitUntil(lambda: len(asked) == 1, timeout=10_000)
    with qtbot.waitSignal(window.planned):  # other settings while the first lookup is still out
        window.settings.n_parallel.setValue(window.settings.n_parallel.value() + 1)
    qtbot.waitUntil(lambda: len(asked) == 2, timeout=10_000)
    assert asked == [first, window.current.settings.launch] and asked[1] != first
    with qtbot.assertNotEmitted(window.measure.measured, wait=1500):
        release.set()  # the first answers with a measurement: of settings no longer shown
    assert window.current.measurement_for(window.current.settings.launch) is None
    assert window.current.measurement_for(first) is None
    assert window.measure.status_text() == measure_bar.NOT_MEASURED
