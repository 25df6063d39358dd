"""Server settings and launch profiles (issue 20, build item 2): host, a port kept from run to run,
the API key masked with a copy button and kept 0600, the OpenAI base URL; a profile saved as a file
and opened again, a recent list, and a file that is no profile refused without changing anything."""

from __future__ import annotations

import json
import stat

import pytest

from app.ui.main_window import MainWindow
from app.ui.profile import Profile, load_profile
from app.ui.qt import QGuiApplication, QLineEdit
from app.ui.server_settings import ServerSettings
from app.ui.state import UiState, load_state
from tests.ui.windows import gpus_read

K = 1024


def test_beyond_loopback_a_key_is_required_masked_copyable_and_kept_0600(window, own_config_dir):
    server = window.server
    assert server.settings().host == "127.0.0.1" and not server.settings().needs_key
    assert server.key.text() == "" and not server.copy_key.isEnabled()
    assert "Only this machine" in server.note.text()
    server.host.setCurrentText("0.0.0.0")
    server.host.activated.emit(1)  # as picking it from the list does
    assert server.require_key.isChecked() and not server.require_key.isEnabled()  # not optional here
    key_file = own_config_dir / "api_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert server.key.text() == key and server.key.echoMode() == QLineEdit.EchoMode.Password
    server.show_key.click()
    assert server.key.echoMode() == QLineEdit.EchoMode.Normal and server.show_key.text() == "Hide"
    server.copy_key.click()
    assert QGuiApplication.clipboard().text() == key
    port = server.settings().port
    assert server.url.text() == f"http://127.0.0.1:{port}/v1"
    server.copy_url.click()
    assert QGuiApplication.clipboard().text() == f"http://127.0.0.1:{port}/v1"
    assert f"port {port}" in server.note.text() and str(key_file) in server.note.text()


def test_the_port_and_host_are_remembered(qtbot, tmp_path):
    state_file = tmp_path / "state.json"
    w = MainWindow(state=UiState(), persist=True, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, w)
    qtbot.addWidget(w)
    port = w.server.settings().port
    assert 1024 <= port <= 65535  # chosen once, free when chosen
    w.server.port.setValue(port + 1 if port < 65535 else port - 1)
    chosen = w.server.settings()
    w.close()
    assert ServerSettings.from_json(load_state(state_file).server) == chosen
    again = MainWindow(state=load_state(state_file), persist=False, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    assert again.server.settings() == chosen
    again.close()


def test_a_profile_saves_the_model_settings_and_server_and_opens_again(window, shape_model, qtbot, tmp_path):
    model = shape_model("llama-3.1-8b-instruct-q4_k_m")
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(model)
    window.settings.set_context(64 * K)
    window.settings.n_parallel.setValue(2)
    window.server.port.setValue(18_123)
    path = tmp_path / "mine.headroom.json"
    assert window.save_profile(path)
    saved = json.loads(path.read_text())
    assert saved["kind"] == "headroom launch profile" and saved["model"] == str(model)
    assert "api_key" not in path.read_text()  # never the key itself
    assert window.state.recent_profiles == [str(path)]
    again = MainWindow(state=UiState(), persist=False, state_file=tmp_path / "again.json", read_host=lambda: None)
    gpus_read(qtbot, again)
    qtbot.addWidget(again)
    assert again.open_profile(path)
    plan = again.plan
    assert plan is not None
    assert again.model_path == model and plan.launch.n_ctx == 64 * K and plan.launch.n_parallel == 2
    assert again.devices.simulated_choice() == "RTX 4090" and again.server.settings().port == 18_123
    assert again.recent_profiles_menu.actions()[0].text() == str(path)
    assert load_profile(path) == again.profile()
    again.close()


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "is not JSON"),
    ('{"kind": "something else"}', "not a Headroom launch profile"),
    ('{"kind": "headroom launch profile", "version": 1, "model": "/x.gguf", "launch": {"type_k": "q9"}}',
     "launch settings cannot be used"),
    ('{"kind": "headroom launch profile", "version": 1, "model": "/nowhere/x.gguf", "launch": {}}',
     "/nowhere/x.gguf"),
    ('{"kind": "headroom launch profile", "version": 1, "model": "/x.gguf", "launch": {}, "server": {"port": 70000}}',
     "not a port"),
])
def test_a_file_that_is_no_usable_profile_is_refused_and_changes_nothing(window, tiny_model, qtbot, tmp_path,
                                                                         content, says):
    assert window.open_model(tiny_model)
    before = (window.plan, window.server.settings(), window.devices.simulated_choice())
    bad = tmp_path / "bad.headroom.json"
    bad.write_text(content)
    assert not window.open_profile(bad)
    assert says in window.error_message and window.error_message.startswith("Cannot open the launch profile")
    assert (window.plan, window.server.settings(), window.devices.simulated_choice()) == before
    assert window.model_path == tiny_model and window.state.recent_profiles == []


def test_a_profile_round_trips_as_data(tmp_path):
    p = Profile("/m.gguf", UiState().launch_settings().with_(n_ctx=8 * K), True, 512, 0, "H200",
                ServerSettings("0.0.0.0", 8080, True))
    assert Profile.from_json(json.loads(json.dumps(p.to_json()))) == p
