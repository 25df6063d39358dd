"""The main window's decisions, apart from its widgets (issue 28): what the demo changed and puts back,
whether a model is another one than the settings are for, where a file dialog starts, and what is
remembered when the window closes. No Qt here: ``MainWindow`` asks, then sets its panels, so every
decision is testable without a window (tests/ui/test_window_session.py).

The remembered state is ``UiState`` (app/ui/state.py); the plan's state is ``WindowState``
(app/ui/window_state.py); this object sits between them and holds only what neither does: what the
demo changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.ui.state import UiState


@dataclass(frozen=True)
class BeforeDemo:
    """What the demo changed, to put back when a real model is opened (or to remember at close instead
    of the demo's own): the simulated card chosen (``""``: the real GPUs) and the KV-window placement."""

    simulated: str
    engine_window: bool


@dataclass(frozen=True)
class ClosingPanels:
    """What the panels hold when the window closes (read by ``MainWindow`` from its widgets)."""

    geometry: str
    wants_window: bool
    settings: dict[str, Any]  # LaunchSettings.to_json()
    model_is_demo: bool
    safety_mib: int
    vram_target_mib: int
    server: dict[str, Any]  # ServerSettings.to_json()
    engine_path: str | None  # the engine chosen now (None: none found)


class WindowSession:
    """One window's memory of the demo and its remembered state (``state``, written at close)."""

    def __init__(self, state: UiState) -> None:
        self.state = state
        self.before_demo: BeforeDemo | None = None

    # ---- the demo --------------------------------------------------------------------------------
    def enter_demo(self, simulated: str, engine_window: bool, *, showing_demo: bool) -> None:
        """The demo opens: remember what it changes, unless it is already what the user had before
        (a second Demo, or the demo shown already)."""
        if self.before_demo is None and not showing_demo:
            self.before_demo = BeforeDemo(simulated, engine_window)

    def leave_demo(self) -> BeforeDemo | None:
        """A real model opens: what to put back (None: the demo changed nothing to undo)."""
        before, self.before_demo = self.before_demo, None
        return before

    def forget_demo(self) -> None:
        """A launch profile opens: it says which card and placement; nothing of the demo's is undone."""
        self.before_demo = None

    # ---- models ----------------------------------------------------------------------------------
    def is_another_model(self, path: Path, open_path: Path | None, open_is_demo: bool) -> bool:
        """``path`` is not the model the settings are for: the one open (``open_path``; the demo is
        always another), else the one they were saved with (none open, none saved: the settings are
        the user's own, kept)."""
        if open_path is not None:
            return open_path != path or open_is_demo
        return bool(self.state.last_model) and self.state.last_model != str(path)

    def model_folder(self) -> Path:
        """Where Open model… starts: the last model's folder, else the home folder."""
        return Path(self.state.last_model).parent if self.state.last_model else Path.home()

    def profile_folder(self) -> Path:
        """Where the launch-profile dialogs start: the last profile's folder, else the home folder."""
        return Path(self.state.recent_profiles[0]).parent if self.state.recent_profiles else Path.home()

    # ---- closing ---------------------------------------------------------------------------------
    def remember_at_close(self, panels: ClosingPanels) -> UiState:
        """The state to save: the window's geometry, the settings (not the demo's: its 512k and its card
        are not the user's; the settings it replaced are remembered instead), margins, server and the
        engine chosen (the last one, when none is found now)."""
        state = self.state
        state.geometry = panels.geometry
        if self.before_demo is None:
            state.engine_window = panels.wants_window
            if not panels.model_is_demo:
                state.settings = panels.settings
        else:
            state.engine_window = self.before_demo.engine_window
            state.simulated_gpus = [self.before_demo.simulated] if self.before_demo.simulated else []
        state.safety_mib = panels.safety_mib
        state.vram_target_mib = panels.vram_target_mib
        state.server = panels.server
        state.engine_path = panels.engine_path if panels.engine_path is not None else state.engine_path
        return state
