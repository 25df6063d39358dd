"""The chosen engine: the engine file the user chose, which the window and the CLI both launch.

The window writes it when the user chooses an engine (File ▸ Choose engine…, the Engine list) and
when it closes: ``~/.config/headroom/chosen-engine`` (``app.paths.CHOSEN_ENGINE_FILE``), one path.
``headroom doctor``, ``engine where``, ``plan``, ``measure`` and ``serve`` without ``--engine`` read it
here (``app.engine.discover.candidates`` puts it first). An older window kept the
choice only in its state file (``gui-state.json``, its ``engine_path``): that is read when there is no
chosen-engine file yet. Standard library only; no Qt.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.files import atomic_text
from app.paths import CHOSEN_ENGINE_FILE, GUI_STATE_FILE, cache_dir, config_dir


def chosen_engine_file(folder: Path | None = None) -> Path:
    """Where the choice is kept: ``folder`` (the window's settings folder), else the config directory."""
    return (folder if folder is not None else config_dir()) / CHOSEN_ENGINE_FILE


def _from_window_state() -> str:
    """The ``engine_path`` of the window's state file (config directory, else the old cache one)."""
    for state in (config_dir() / GUI_STATE_FILE, cache_dir() / GUI_STATE_FILE):
        if not state.is_file():
            continue
        try:
            data = json.loads(state.read_text())
        except (OSError, ValueError):
            return ""
        value = data.get("engine_path") if isinstance(data, dict) else None
        return value if isinstance(value, str) else ""
    return ""


def chosen_engine() -> Path | None:
    """The engine file the user chose, or None when none was (it may since have been moved or deleted:
    discovery then skips it, and ``chosen_engine_missing`` says so)."""
    try:
        text = chosen_engine_file().read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        text = _from_window_state()
    except OSError:
        return None
    return Path(text).expanduser() if text else None


def chosen_engine_missing() -> Path | None:
    """The chosen engine when its file is gone (said by ``doctor`` and ``engine where``), else None."""
    chosen = chosen_engine()
    return chosen if chosen is not None and not chosen.is_file() else None


def remember_chosen_engine(path: str | Path, folder: Path | None = None) -> None:
    """Keep ``path`` as the chosen engine ("": none), written atomically (app/files.py).
    Raises OSError on a full or read-only disk."""
    atomic_text(chosen_engine_file(folder), f"{path}\n" if str(path) else "")
