"""Choosing an engine once the first-run guide is gone (issue 29): File ▸ Choose engine… and the Engine
list's "Other…" both take an engine file, which is then found first and chosen; what the window said
about finding no engine, or a pass 1 that failed for other settings, does not stay to contradict it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from app.engine.discover import EngineOrigin
from app.engine.native_build import EngineBuild
from app.ui import launch_panel, measure_bar, settings_panel
from app.ui.qt import QAction

ENGINES_S = 120_000  # discovery probes each engine's flags: generous on 2 busy cores


def test_file_menu_choose_engine_finds_the_file_first_and_chooses_it(window, qtbot, tmp_path: Path,
                                                                      engine_build: EngineBuild) -> None:
    assert any(a.text() == "Choose &engine…" for a in window.menuBar().actions()[0].menu().actions()
               if isinstance(a, QAction))
    mine = tmp_path / "my-build" / "bin"
    shutil.copytree(engine_build.bin_dir, mine, symlinks=True)
    window.launch.set_engines([])  # nothing found before: the panel says so
    assert window.launch.status.text() == launch_panel.NO_ENGINE
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        window.use_engine_file(mine / "llama-server")
    engine = window.current.engine
    assert engine is not None and engine.path == str(mine / "llama-server") and engine.source == EngineOrigin.SETTINGS
    assert window.settings.engine.currentData() == str(mine / "llama-server")
    assert window.launch.status.text() == ""  # "No engine found" is no longer said beside the engine chosen
    assert window.state.engine_path == str(mine / "llama-server")  # remembered, and found again at the next start


def test_other_in_the_engine_list_asks_for_a_file_and_keeps_the_engine_chosen(window, qtbot,
                                                                             engine_build: EngineBuild) -> None:
    with qtbot.waitSignal(window.launch.enginesFound, timeout=ENGINES_S):
        window.launch.discover()
    combo = window.settings.engine
    assert combo.itemText(combo.count() - 1) == settings_panel.OTHER_ENGINE
    chosen = combo.currentIndex()
    asked: list[bool] = []
    window.settings.otherEngineWanted.disconnect()
    window.settings.otherEngineWanted.connect(lambda: asked.append(True))
    with qtbot.assertNotEmitted(window.settings.engineChosen, wait=0):
        combo.setCurrentIndex(combo.count() - 1)
    assert asked == [True] and combo.currentIndex() == chosen  # the file dialog's turn; the engine stays


def test_a_failed_pass_1_is_not_said_for_other_settings(window, qtbot, tiny_model: Path) -> None:
    """The bar's "Measurement failed" was about the settings it ran with; after a change it says the
    compute buffer is estimated (not measured) for these."""
    from app.probe.measure import measure

    def failing(model, settings, cancel):
        worker = [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"]
        return measure(model, settings, worker=worker, cancel=cancel), False

    window.measure.probe = failing
    assert window.open_model(tiny_model)
    with qtbot.waitSignal(window.measure.failed, timeout=60_000):
        window.measure.button.click()
    assert window.measure.status_text() == "Measurement failed"
    with qtbot.waitSignal(window.planned):
        window.settings.n_parallel.setValue(window.settings.n_parallel.value() + 1)
    assert window.measure.status_text() == measure_bar.NOT_MEASURED


def test_the_engine_chosen_in_the_window_is_kept_where_the_cli_finds_it(qtbot, own_config_dir: Path,
                                                                       engine_build: EngineBuild) -> None:
    """Walkthrough finding 3: the chosen engine is the CLI's too (app/engine/chosen.py), from the moment
    it is chosen, and still after the window closed."""
    from app.engine.chosen import chosen_engine
    from app.ui.main_window import MainWindow
    from app.ui.state import UiState
    from tests.ui.windows import gpus_read

    chosen = engine_build.server
    w = MainWindow(state=UiState(), persist=True, state_file=own_config_dir / "gui-state.json",
                   read_host=lambda: None)
    qtbot.addWidget(w)
    gpus_read(qtbot, w)
    assert chosen_engine() is None
    with qtbot.waitSignal(w.launch.enginesFound, timeout=ENGINES_S):
        w.use_engine_file(chosen)
    assert chosen_engine() == chosen  # `headroom plan` run now launches with it
    w.close()
    assert chosen_engine() == chosen
