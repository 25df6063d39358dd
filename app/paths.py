"""Where Headroom keeps things: the XDG base directories, each with a ``HEADROOM_*_DIR`` override.

Standard library only (native/build.py imports it before any virtual environment exists).

A bundle (packaging/, PyInstaller) uses the same directories: nothing is written beside the bundle,
which may be read-only. ``bundle_dir()`` says where the bundle is, for what it carries (its engine).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _xdg(override_var: str, xdg_var: str, default: tuple[str, ...]) -> Path:
    override = os.environ.get(override_var)
    if override:
        return Path(override)
    base = os.environ.get(xdg_var) or str(Path.home().joinpath(*default))
    return Path(base) / "headroom"


#: The window's state (geometry, last model, settings) in the config directory (app/ui/state.py).
GUI_STATE_FILE = "gui-state.json"
#: The engine file the user chose (the window's File ▸ Choose engine… or Engine list), one path on
#: one line in the config directory: the CLI launches and measures with it too (app/engine/chosen.py).
CHOSEN_ENGINE_FILE = "chosen-engine"


def cache_dir() -> Path:
    """Builds, measurements, generated models, engine logs (HEADROOM_CACHE_DIR; XDG_CACHE_HOME)."""
    return _xdg("HEADROOM_CACHE_DIR", "XDG_CACHE_HOME", (".cache",))


def config_dir() -> Path:
    """The API key and settings (HEADROOM_CONFIG_DIR; XDG_CONFIG_HOME)."""
    return _xdg("HEADROOM_CONFIG_DIR", "XDG_CONFIG_HOME", (".config",))


def data_dir() -> Path:
    """Engines the user keeps with Headroom (HEADROOM_DATA_DIR; XDG_DATA_HOME)."""
    return _xdg("HEADROOM_DATA_DIR", "XDG_DATA_HOME", (".local", "share"))


def bundle_dir() -> Path | None:
    """The folder of the bundle Headroom runs from (its executable's), or None for a checkout or an
    installed wheel. Read-only to Headroom: caches, settings and data stay in the directories above."""
    if not getattr(sys, "frozen", False):
        return None
    return Path(sys.executable).resolve().parent
