"""The main window's decisions, apart from its widgets: what the demo changed and puts back,
what opening a model does to the settings (another model starts at its own context), reading and
saving launch profiles, the engine file chosen and the KV placement an engine found asks for, the
card simulated, where a file dialog starts, and what is remembered when the window closes. No Qt
here: ``MainWindow`` asks, then sets its panels, so every decision is testable without a window
(tests/ui/test_window_session.py).

The remembered state is ``UiState`` (app/ui/state.py); the plan's state is ``WindowState``
(app/ui/window_state.py); this object sits between them and holds only what neither does: what the
demo changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.discover import EngineInfo, EngineKind
from app.planner.errors import PlannerError
from app.planner.gpu_table import parse_spec
from app.planner.settings import default_context
from app.ui import profile as profile_module
from app.ui.profile import Profile
from app.ui.state import UiState


@dataclass(frozen=True)
class BeforeDemo:
    """What the demo changed, to put back when a real model is opened (or to remember at close instead
    of the demo's own): the simulated card chosen (``""``: the real GPUs) and the KV-window placement."""

    simulated: str
    engine_window: bool


@dataclass(frozen=True)
class ModelStart:
    """What opening a model changes besides the model itself."""

    #: Another model than the settings are for: they start at this context (within its training),
    #: with no placement or adapters of the last model's. None: the settings stay.
    context: int | None
    #: The demo: the user's LoRA and draft are no extras for its shape (dropped from the settings).
    drop_extras: bool
    #: A real model after the demo: the card and placement to put back (None: nothing to undo).
    put_back: BeforeDemo | None


class ProfileError(Exception):
    """A launch profile that cannot be used; the message says why, naming the file."""


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
    advanced_open: bool = False  # the settings' Advanced section is open


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

    # ---- the card simulated ----------------------------------------------------------------------
    def simulated_at_start(self) -> tuple[str, bool]:
        """The card to simulate at start ("": the real GPUs) and whether the remembered one was
        dropped (a card this Headroom does not know: an edited or newer file; the real GPUs instead)."""
        name = self.state.simulated_gpus[0] if self.state.simulated_gpus else ""
        try:
            for part in name.split(","):
                if part.strip() and part.strip().lower() != "auto":
                    parse_spec(part.strip())
        except ValueError:
            self.state.simulated_gpus = []
            return "", True
        return name, False

    def simulate(self, name: str) -> None:
        """The window plans for ``name`` now ("": the real GPUs); remembered."""
        self.state.simulated_gpus = [name] if name else []

    def workers_answered(self, endpoints: list[str], answered: bool) -> None:
        """The RPC workers answered (or the list was emptied): their addresses remembered."""
        self.state.rpc_workers = endpoints if answered else []

    # ---- engines ---------------------------------------------------------------------------------
    def engine_folder(self) -> Path:
        """Where Choose engine… starts: the chosen engine's folder, else the home folder."""
        return Path(self.state.engine_path).parent if self.state.engine_path else Path.home()

    def choose_engine_file(self, path: Path) -> None:
        """An engine file chosen by the user: the one to choose once discovery has found it."""
        self.state.engine_path = str(path)

    def engine_to_choose(self) -> str:
        """The engine chosen last time ("": none), chosen again when discovery finds it still there."""
        return self.state.engine_path

    @staticmethod
    def wants_window_for(engines: Sequence[EngineInfo]) -> bool:
        """Engines found, the one chosen last time not among them: an opencoti engine first in the
        list plans for its rolling KV window."""
        return bool(engines) and engines[0].kind == EngineKind.OPENCOTI

    # ---- models ----------------------------------------------------------------------------------
    def opening(self, path: Path, n_ctx_train: int, *, is_demo: bool, open_path: Path | None,
                open_is_demo: bool, has_extras: bool) -> ModelStart:
        """What opening ``path`` (trained for ``n_ctx_train``) does besides: another model starts at a
        context within its training (``default_context``: the last model's 512k is no setting for a
        model trained for 8k); a real model after the demo gets back what the demo changed."""
        if is_demo:
            return ModelStart(None, has_extras, None)
        new = self.is_another_model(path, open_path, open_is_demo)
        return ModelStart(default_context(n_ctx_train) if new else None, False, self.leave_demo())

    def opened(self, path: Path) -> None:
        """A model opened by the user (not the demo): the last model, first in Open recent."""
        self.state.remember_model(str(path))

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

    # ---- launch profiles ---------------------------------------------------------------------------
    def profile_path(self, model: Path) -> Path:
        """Where Save launch profile… proposes to save one for ``model``."""
        return self.profile_folder() / f"{model.stem}{profile_module.SUFFIX}"

    def read_profile(self, path: Path, read_model: Callable[[Path], object]) -> tuple[Profile, object]:
        """The profile at ``path`` and its model, read with ``read_model`` before anything changes.
        ProfileError, saying why, for a profile that cannot be used or whose model cannot be read."""
        try:
            profile = profile_module.load_profile(path)
        except ValueError as exc:
            raise ProfileError(f"Cannot open the launch profile: {exc}") from None
        try:
            model = read_model(Path(profile.model))
        except ValueError as exc:
            raise ProfileError(f"Cannot open the launch profile: {exc}") from None
        except (PlannerError, OSError) as exc:
            raise ProfileError(f"Cannot open the launch profile {path.name}: its model {profile.model}: {exc}") from None
        self.forget_demo()  # the profile says which card and placement
        return profile, model

    def save_profile(self, profile: Profile, path: Path) -> str:
        """Save ``profile`` to ``path`` and remember it; the message to show (an error, or ""). """
        try:
            profile_module.save_profile(profile, path)
        except OSError as exc:
            return f"Cannot save the launch profile to {path}: {exc.strerror or exc}"
        self.state.remember_profile(str(path))
        return ""

    def profile_opened(self, path: Path) -> None:
        self.state.remember_profile(str(path))

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
        state.advanced_open = panels.advanced_open
        state.engine_path = panels.engine_path if panels.engine_path is not None else state.engine_path
        return state
