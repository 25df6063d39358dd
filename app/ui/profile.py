"""Launch profiles: a model, its launch settings, the planning options and the server, saved as one
JSON file to load again later (File ▸ Save launch profile… / Open launch profile…).

Versioned and checked on load: a file that is not a profile, or names a setting Headroom cannot
use, is refused with the reason and changes nothing. The API key is never in a profile (it stays in
its 0600 file, app.engine.apikey); a profile says only whether one is required.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.files import atomic_text
from app.planner.settings import LaunchSettings
from app.ui.server_settings import ServerSettings

PROFILE_VERSION = 1
KIND = "headroom launch profile"
SUFFIX = ".headroom.json"


@dataclass(frozen=True)
class Profile:
    model: str
    launch: LaunchSettings
    engine_window: bool = False
    safety_mib: int = 256
    vram_target_mib: int = 0  # 0: all free VRAM
    simulated: str = ""  # the simulated card(s) planned for ("": the real GPUs)
    server: ServerSettings = field(default_factory=ServerSettings)

    def to_json(self) -> dict[str, Any]:
        return {"kind": KIND, "version": PROFILE_VERSION, "model": self.model, "launch": self.launch.to_json(),
                "engine_window": self.engine_window, "safety_mib": self.safety_mib,
                "vram_target_mib": self.vram_target_mib, "simulated": self.simulated,
                "server": self.server.to_json()}

    @classmethod
    def from_json(cls, data: object) -> Profile:
        """ValueError, saying what is wrong, for anything that is not a profile Headroom can use."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ValueError("not a Headroom launch profile")
        if data.get("version") != PROFILE_VERSION:
            raise ValueError(f"profile version {data.get('version')!r}: this Headroom reads version {PROFILE_VERSION}")
        model, launch = data.get("model"), data.get("launch")
        if not isinstance(model, str) or not model:
            raise ValueError("the profile names no model file")
        if not isinstance(launch, dict):
            raise ValueError("the profile has no launch settings")
        try:
            settings = LaunchSettings.from_json(launch)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the profile's launch settings cannot be used: {exc}") from None
        numbers = {k: data.get(k, d) for k, d in (("safety_mib", 256), ("vram_target_mib", 0))}
        for k, v in numbers.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"the profile's {k} is not a size in MiB: {v!r}")
        simulated = data.get("simulated", "")
        if not isinstance(simulated, str):
            raise ValueError(f"the profile's simulated GPU is not a card name: {simulated!r}")
        return cls(model, settings, bool(data.get("engine_window", False)), numbers["safety_mib"],
                   numbers["vram_target_mib"], simulated, ServerSettings.from_json(data.get("server", {})))


def save_profile(profile: Profile, path: Path) -> None:
    """Write atomically (app/files.py ``atomic_text``)."""
    atomic_text(path, json.dumps(profile.to_json(), indent=1) + "\n")


def load_profile(path: Path) -> Profile:
    """The profile in ``path``; ValueError (with the file's name) when it cannot be used."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise ValueError(f"{path.name} is not JSON: not a Headroom launch profile") from None
    try:
        return Profile.from_json(data)
    except ValueError as exc:
        raise ValueError(f"{path.name}: {exc}") from None
