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


#: Less free space than this on the cache's disk counts as full (a plan's cache entry, a header copy).
FULL_BYTES = 1024 * 1024


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def storage_problem() -> str | None:
    """One sentence when the cache or the config folder cannot be written (a read-only or a full disk: a
    HOME mounted read-only, a disk that filled up), else None. Headroom goes on without them: nothing it
    measures, downloads or chooses is kept. Checked on the nearest folder that exists (the rest is made
    on first use); ``os.access`` reports a read-only mount even to root."""
    for what, folder in (("cache", cache_dir()), ("settings", config_dir())):
        there = _nearest_existing(folder)
        full = False
        try:
            st = os.statvfs(there)
            full = st.f_bavail * st.f_frsize < FULL_BYTES
        except OSError:
            pass
        if not os.access(there, os.W_OK):
            why = "on a read-only disk" if _read_only(there) else "not writable by you"
        elif full:
            why = "on a full disk"
        else:
            continue
        return (f"the {what} folder {folder} is {why}: Headroom goes on without it (nothing it measures, "
                f"downloads or chooses is kept until it can be written)")
    return None


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False

