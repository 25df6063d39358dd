"""Which names an engine is given for files that lie inside a llamafile.

The llamafile that holds them reads them in place, by the ``/zip/`` names its own ``.args`` uses
(``-m /zip/model.gguf``: llamafile/llamafile.c ``llamafile_open_gguf`` maps the member where it lies);
any other engine gets a copy of its own (app/llamafile/extract.py), made once. A plain file is passed as
it is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.llamafile.extract import target_of
from app.planner.gguf.model import model_parts
from app.planner.gguf.reader import in_archive, split_member
from app.planner.settings import LaunchSettings


@dataclass(frozen=True)
class EngineFiles:
    """The model and the launch as the engine names their files, and the members to copy out first."""

    model: Path
    launch: LaunchSettings
    to_extract: tuple[Path, ...] = ()

    @property
    def reads_in_place(self) -> bool:
        return str(self.model).startswith("/zip/")


def files_for(model: Path, launch: LaunchSettings, engine_path: str | Path | None) -> EngineFiles:
    """``model`` and ``launch``'s projector, draft and adapters named for the engine at ``engine_path``."""
    extract: list[Path] = []

    def named(path: str | Path, *, parts: Sequence[Path] | None = None) -> str:
        inside = split_member(path)
        if inside is None:
            return str(path)
        if engine_path is not None and _same_file(inside[0], Path(engine_path)):
            return "/zip/" + inside[1]
        extract.extend(parts or (Path(path),))
        return str(target_of(Path(path)))

    parts = model_parts(model) if in_archive(model) else (model,)
    first = Path(named(parts[0], parts=parts))
    changed = launch.with_(mmproj=named(launch.mmproj) if launch.mmproj else "",
                           draft_model=_named_model(launch.draft_model, named) if launch.draft_model else "",
                           lora=tuple(named(f) for f in launch.lora))
    return EngineFiles(first, changed, tuple(dict.fromkeys(extract)))


def _named_model(path: str, named: object) -> str:
    parts = model_parts(Path(path)) if in_archive(path) else (Path(path),)
    return named(parts[0], parts=parts)  # type: ignore[operator, no-any-return]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
