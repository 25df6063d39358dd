"""The README's live-view picture (docs/screenshot-live.png): run as ``python -m tests.ui.live_shot OUT``
on a display (tests/ui/test_screenshot.py runs it under Xvfb). The real window and the real engine
built by native/ serve the tiny generated model; NVML is the replayed H200 (tests/fixtures/fake_nvml.py),
told what a GPU run would list: the engine's pid holding its plan, and another app taking the card
down to 100 MiB free — under the 256 MiB safety margin, so the warning shows. Prints one line
(``live: …``) saying what the picture shows; exit 0 when it was saved with the warning on screen."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.engine import native_build
from app.engine.discover import EngineInfo
from app.planner.devices import Inventory
from app.planner.live import LiveReport, RowState
from app.planner.units import MiB
from app.ui.application import SCREENSHOT_SIZE, make_app, save_screenshot
from app.ui.main_window import MainWindow
from app.ui.qt import QApplication
from app.ui.state import UiState
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_nvml import FakeNvml

OTHER_APP = 4_000_001
DEADLINE_S = 120.0


def wait(app: QApplication, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"live_shot: no {what} after {DEADLINE_S:.0f} s")
        app.processEvents()
        time.sleep(0.02)


def main(out: Path) -> int:
    # The picture replays a GPU run: the engine here is the CPU build, which the window would (rightly) launch
    # on the CPU (app/engine/gpu_reach.py); for the picture it is taken to run on the replayed card.
    from app.engine.gpu_reach import GpuReach
    from app.ui import launch_panel

    def on_the_card(engine: EngineInfo | None, inventory: Inventory) -> GpuReach:
        return GpuReach(tuple(g.index for g in inventory.local_gpus))

    launch_panel.reach = on_the_card  # type: ignore[attr-defined]
    build = native_build.find_build()
    if build is None:
        print("live_shot: no engine built (headroom engine build)", file=sys.stderr)
        return 1
    model = gguf_factory.ensure(shapes.TINY)
    app = make_app()
    nvml = FakeNvml()
    with tempfile.TemporaryDirectory() as tmp:
        w = MainWindow(state=UiState(), persist=False, state_file=Path(tmp) / "s.json", nvml=nvml)
        w.resize(*SCREENSHOT_SIZE)
        w.show()
        wait(app, lambda: not w.reading_gpus, "the recorded H200 read")
        found: list[object] = []
        w.launch.enginesFound.connect(found.append)
        w.launch.discover()
        wait(app, lambda: bool(found), "engine list")
        w.settings.choose_engine(str(build.server))
        w.open_model(model)
        w.settings.set_context(4096)
        checked: list[object] = []
        w.launch.checked.connect(checked.append)
        w.launch.launch()
        wait(app, lambda: bool(checked), "plan check")
        engine, plan = w.current.running_engine, w.current.running
        assert engine is not None and engine.pid is not None and plan is not None and plan.gpus
        used = plan.gpus[0].used
        nvml.compute = [(engine.pid, used), (OTHER_APP, nvml.recorded.free - used - 100 * MiB)]
        nvml.taken = nvml.recorded.free - 100 * MiB
        reports: list[LiveReport] = []
        w.live_view.updated.connect(reports.append)
        wait(app, lambda: any(r.rows[0].state is RowState.LOW for r in reports), "warning")
        settle = time.monotonic() + 0.3
        wait(app, lambda: time.monotonic() > settle, "settled layout")
        ok = save_screenshot(w, out)
        print(f"live: {out}: rows={[r[0] for r in w.live_view.rows]} warnings={len(reports[-1].warnings)}",
              flush=True)
        w.close()  # stops the engine
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
