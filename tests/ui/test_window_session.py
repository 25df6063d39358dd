"""The main window's decisions without a window (app/ui/window_session.py): what the demo changed and
puts back, which model is another one, where the file dialogs start, what is remembered at close."""

from __future__ import annotations

from pathlib import Path

from app.ui.state import UiState
from app.ui.window_session import BeforeDemo, ClosingPanels, WindowSession

MODEL = Path("/models/qwen.gguf")


def _panels(**changes: object) -> ClosingPanels:
    base: dict[str, object] = {"geometry": "01ab", "wants_window": False, "settings": {"n_ctx": 8192},
                               "model_is_demo": False, "safety_mib": 512, "vram_target_mib": 0,
                               "server": {"port": 8080}, "engine_path": "/opt/llama-server"}
    return ClosingPanels(**(base | changes))  # type: ignore[arg-type]


def test_the_demo_remembers_what_it_changed_once_and_gives_it_back_once() -> None:
    session = WindowSession(UiState())
    session.enter_demo("RTX 4060", False, showing_demo=False)
    session.enter_demo("RTX 4090 (demo)", True, showing_demo=True)  # Demo again while it shows
    assert session.leave_demo() == BeforeDemo("RTX 4060", False)
    assert session.leave_demo() is None  # a second real model has nothing to put back
    session.enter_demo("", True, showing_demo=False)
    session.forget_demo()  # a profile says its own card and placement
    assert session.leave_demo() is None


def test_another_model_is_the_demo_or_another_file_or_not_the_one_the_settings_were_saved_with() -> None:
    session = WindowSession(UiState(last_model=str(MODEL)))
    assert not session.is_another_model(MODEL, MODEL, open_is_demo=False)
    assert session.is_another_model(MODEL, Path("/models/other.gguf"), open_is_demo=False)
    assert session.is_another_model(MODEL, Path("/cache/demo.gguf"), open_is_demo=True)
    assert not session.is_another_model(MODEL, None, open_is_demo=False)  # the settings were saved with it
    assert session.is_another_model(Path("/models/other.gguf"), None, open_is_demo=False)
    assert not WindowSession(UiState()).is_another_model(MODEL, None, open_is_demo=False)  # the user's own


def test_file_dialogs_start_where_the_user_was_last() -> None:
    assert WindowSession(UiState()).model_folder() == Path.home()
    session = WindowSession(UiState(last_model=str(MODEL), recent_profiles=["/work/p/a.headroom.json"]))
    assert session.model_folder() == Path("/models") and session.profile_folder() == Path("/work/p")


def test_closing_remembers_the_users_settings_not_the_demos() -> None:
    state = UiState(settings={"n_ctx": 4096}, simulated_gpus=["RTX 4060"], engine_path="/old/llama-server")
    session = WindowSession(state)
    saved = session.remember_at_close(_panels(engine_path=None))
    assert saved.settings == {"n_ctx": 8192} and saved.geometry == "01ab" and saved.safety_mib == 512
    assert saved.engine_path == "/old/llama-server"  # none found now: the last choice stays
    session.enter_demo("RTX 4060", False, showing_demo=False)
    saved = session.remember_at_close(_panels(settings={"n_ctx": 524288}, wants_window=True, model_is_demo=True))
    assert saved.settings == {"n_ctx": 8192}  # the demo's 512k is not the user's
    assert saved.engine_window is False and saved.simulated_gpus == ["RTX 4060"]
    started_on_demo = WindowSession(UiState(settings={"n_ctx": 4096}))
    saved = started_on_demo.remember_at_close(_panels(settings={"n_ctx": 524288}, wants_window=True,
                                                      model_is_demo=True))
    assert saved.settings == {"n_ctx": 4096} and saved.engine_window is True


def test_the_first_window_fits_the_screen_it_opens_on() -> None:
    """No geometry remembered: 1280×860 where there is room, else the screen's available area less the
    window frame (a 1366×768 laptop keeps Measure, Launch and the chat box on screen; issue 29)."""
    from app.ui.main_window import first_size
    from app.ui.qt import QSize

    assert first_size(QSize(1920, 1050)) == (1280, 860)
    assert first_size(QSize(1366, 740)) == (1280, 680)
    assert first_size(QSize(1024, 700)) == (984, 640)
