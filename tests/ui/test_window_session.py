"""The main window's decisions without a window (app/ui/window_session.py): what the demo changed and
puts back, what opening a model does to the settings, the card simulated, the engine chosen, launch
profiles read and saved, where the file dialogs start, what is remembered at close."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner.settings import LaunchSettings
from app.ui.profile import Profile
from app.ui.state import UiState
from app.ui.window_session import BeforeDemo, ClosingPanels, ModelStart, ProfileError, WindowSession

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
    from app.ui.qt import QSize
    from app.ui.window_layout import first_size

    assert first_size(QSize(1920, 1050)) == (1280, 860)
    assert first_size(QSize(1366, 740)) == (1280, 680)
    assert first_size(QSize(1024, 700)) == (984, 640)


# ---- opening a model -----------------------------------------------------------------------------

def test_another_model_starts_at_a_context_within_its_training_and_the_same_one_keeps_its_settings() -> None:
    session = WindowSession(UiState(last_model=str(MODEL)))
    same = session.opening(MODEL, 32768, is_demo=False, open_path=None, open_is_demo=False, has_extras=True)
    assert same == ModelStart(context=None, drop_extras=False, put_back=None)
    other = session.opening(Path("/models/small.gguf"), 8192, is_demo=False, open_path=MODEL,
                            open_is_demo=False, has_extras=True)
    assert other.context == 8192 and not other.drop_extras  # not the last model's context
    session.opened(Path("/models/small.gguf"))
    assert session.state.last_model == "/models/small.gguf" and session.state.recent[0] == "/models/small.gguf"


def test_the_demo_drops_the_users_adapters_and_the_next_real_model_gets_the_card_back() -> None:
    session = WindowSession(UiState())
    session.enter_demo("RTX 4090", False, showing_demo=False)
    demo = session.opening(Path("/cache/demo.gguf"), 1 << 20, is_demo=True, open_path=None,
                           open_is_demo=False, has_extras=True)
    assert demo == ModelStart(context=None, drop_extras=True, put_back=None)
    real = session.opening(MODEL, 32768, is_demo=False, open_path=Path("/cache/demo.gguf"),
                           open_is_demo=True, has_extras=False)
    assert real.put_back == BeforeDemo("RTX 4090", False) and real.context is not None  # the demo is another model
    assert session.before_demo is None


# ---- the card simulated, the engine --------------------------------------------------------------

def test_a_remembered_card_this_headroom_does_not_know_is_dropped_for_the_real_gpus() -> None:
    assert WindowSession(UiState(simulated_gpus=["H200,H200"])).simulated_at_start() == ("H200,H200", False)
    unknown = WindowSession(UiState(simulated_gpus=["Voodoo 5 6000"]))
    assert unknown.simulated_at_start() == ("", True) and unknown.state.simulated_gpus == []
    session = WindowSession(UiState())
    session.simulate("RTX 4090")
    assert session.state.simulated_gpus == ["RTX 4090"]
    session.simulate("")
    assert session.state.simulated_gpus == []
    session.workers_answered(["127.0.0.1:50052"], answered=True)
    assert session.state.rpc_workers == ["127.0.0.1:50052"]
    session.workers_answered([], answered=False)
    assert session.state.rpc_workers == []


def _engine(kind: EngineKind) -> EngineInfo:
    return EngineInfo(kind=kind, path=f"/opt/{kind.value}/llama-server", version="b1", commit="abc",
                      source=EngineOrigin.PATH)


def test_an_engine_file_chosen_is_chosen_again_and_an_opencoti_engine_first_asks_for_the_window() -> None:
    session = WindowSession(UiState())
    assert session.engine_folder() == Path.home() and session.engine_to_choose() == ""
    session.choose_engine_file(Path("/opt/bin/llama-server"))
    assert session.engine_to_choose() == "/opt/bin/llama-server" and session.engine_folder() == Path("/opt/bin")
    assert session.wants_window_for([_engine(EngineKind.OPENCOTI), _engine(EngineKind.LLAMA_SERVER)])
    assert not session.wants_window_for([_engine(EngineKind.LLAMA_SERVER), _engine(EngineKind.OPENCOTI)])
    assert not session.wants_window_for([])


# ---- launch profiles -----------------------------------------------------------------------------

def test_a_profile_is_saved_and_read_back_with_its_model_and_remembered(tmp_path: Path) -> None:
    session = WindowSession(UiState(recent_profiles=[str(tmp_path / "old.headroom.json")]))
    assert session.profile_path(MODEL) == tmp_path / "qwen.headroom.json"  # beside the last profile
    profile = Profile(str(MODEL), LaunchSettings(n_ctx=65536), engine_window=True, simulated="RTX 4090")
    path = tmp_path / "qwen.headroom.json"
    assert session.save_profile(profile, path) == ""
    assert session.state.recent_profiles[0] == str(path)
    session.enter_demo("", False, showing_demo=False)
    read, model = session.read_profile(path, lambda p: f"shape of {p.name}")
    assert read == profile and model == "shape of qwen.gguf"
    assert session.before_demo is None  # the profile says which card and placement, not the demo


def test_a_profile_that_cannot_be_used_says_why_and_changes_nothing(tmp_path: Path) -> None:
    session = WindowSession(UiState())
    bad = tmp_path / "bad.headroom.json"
    bad.write_text('{"kind": "something else"}')
    with pytest.raises(ProfileError, match=r"^Cannot open the launch profile: bad\.headroom\.json: not a Headroom launch profile$"):
        session.read_profile(bad, lambda p: p)
    good = tmp_path / "gone.headroom.json"
    assert session.save_profile(Profile("/models/gone.gguf", LaunchSettings()), good) == ""

    def unreadable(path: Path) -> object:
        raise OSError(f"No such file: {path}")

    session.enter_demo("RTX 4090", False, showing_demo=False)
    with pytest.raises(ProfileError, match=r"gone\.headroom\.json: its model /models/gone\.gguf: No such file"):
        session.read_profile(good, unreadable)
    assert session.before_demo is not None  # nothing changed
    assert session.save_profile(Profile(str(MODEL), LaunchSettings()), bad / "x.json").startswith(  # a file as folder
        "Cannot save the launch profile to ")


def test_closing_remembers_whether_advanced_was_open() -> None:
    session = WindowSession(UiState())
    assert not session.remember_at_close(_panels()).advanced_open  # the plain view, unless said
    assert session.remember_at_close(_panels(advanced_open=True)).advanced_open
    session.enter_demo("RTX 4060", False, showing_demo=False)  # the demo does not change it
    assert session.remember_at_close(_panels(advanced_open=True, model_is_demo=True)).advanced_open
