"""What the window remembers between runs: geometry, last model, recent files, settings.

One small JSON file under the config directory (``~/.config/headroom/gui-state.json``: settings, not a
cache a user may clear), written atomically (app/files.py) so a crash mid-write never
leaves a half file; an unreadable file is treated as "no state". An older Headroom kept it under
the cache directory: that file is read when the config one does not exist yet, and the next save
writes the config one (the old one is left as it was).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.files import atomic_text
from app.paths import GUI_STATE_FILE, cache_dir, config_dir
from app.planner.settings import LaunchSettings

#: How many recent models (and launch profiles) the File menu lists.
MAX_RECENT = 8


STATE_FILE = GUI_STATE_FILE


def state_path() -> Path:
    return config_dir() / STATE_FILE


def legacy_state_path() -> Path:
    """Where Headroom kept the state before it moved to the config directory."""
    return cache_dir() / STATE_FILE


@dataclass
class UiState:
    geometry: str = ""  # QMainWindow.saveGeometry() as hex
    last_model: str = ""
    recent: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # LaunchSettings.to_json()
    simulated_gpus: list[str] = field(default_factory=list)
    safety_mib: int = 256
    vram_target_mib: int = 0  # 0 = all free VRAM
    engine_path: str = ""
    engine_window: bool = False  # plan for the opencoti rolling KV window
    rpc_workers: list[str] = field(default_factory=list)  # ggml-rpc-server addresses, asked again at start
    server: dict[str, Any] = field(default_factory=dict)  # ServerSettings.to_json(): host, port, key
    recent_profiles: list[str] = field(default_factory=list)  # launch profiles saved or opened
    library_folders: list[str] = field(default_factory=list)  # the model library's folders, beside the HF cache
    advanced_open: bool = False  # the settings' Advanced section (every flag) was open

    def launch_settings(self) -> LaunchSettings:
        try:
            return LaunchSettings.from_json(self.settings)
        except (TypeError, ValueError):
            return LaunchSettings()

    def remember_model(self, path: str) -> None:
        self.last_model = path
        self.recent = [path, *[p for p in self.recent if p != path]][:MAX_RECENT]

    def remember_profile(self, path: str) -> None:
        self.recent_profiles = [path, *[p for p in self.recent_profiles if p != path]][:MAX_RECENT]


def load_state(path: Path | None = None) -> UiState:
    p = path or state_path()
    if path is None and not p.exists() and legacy_state_path().is_file():
        p = legacy_state_path()  # a settings file from before the move: read once, saved to the new place
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return UiState()
    if not isinstance(data, dict):
        return UiState()
    return UiState(**usable_fields(data)[0])


def ignored_fields(path: Path | None = None) -> list[str]:
    """The fields of the state file that ``load_state`` could not use (the window says so once)."""
    p = path or state_path()
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return []
    return usable_fields(data)[1] if isinstance(data, dict) else []


def _fits(value: object, default: object) -> bool:
    """``value`` has the type of the field's default (a list of strings where the default is a list)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, type(default))


def usable_fields(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The fields of a state file that ``UiState`` can use, and the names of those it cannot (a
    hand-edited or older file: ``"simulated_gpus": "RTX 4090"``, ``"engine_path": 7``): those keep their
    defaults, so the window opens whatever the file holds."""
    defaults = asdict(UiState())
    known: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in data.items():
        if name not in defaults:
            continue  # a field of another version: not ours to use
        if _fits(value, defaults[name]):
            known[name] = value
        else:
            ignored.append(name)
    return known, ignored


def save_state(state: UiState, path: Path | None = None) -> None:
    """Write atomically (app/files.py ``atomic_text``)."""
    atomic_text(path or state_path(), json.dumps(asdict(state), indent=1))
