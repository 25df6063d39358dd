"""The copy out of a llamafile, before a launch on an engine that cannot read its GGUF in place: in the
background on the window's task pool, its progress on the launch panel's bar, Stop to cancel (the part
copied is kept, and the next launch goes on from there). The copy itself is app/llamafile/extract.py."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

from app.llamafile.extract import Pending, extract, extracted_dir, pending
from app.llamafile.launch import files_for
from app.planner.plan_types import Plan
from app.planner.units import Bytes
from app.ui.qt import QObject, Signal
from app.ui.workers import TaskPool

KEY = "llamafile-copy"


class CopyOut(QObject):
    """``progress(done, total)`` in bytes (queued from the copying thread)."""

    progress = Signal(object, object)

    def __init__(self, pool: TaskPool, owner: object) -> None:
        super().__init__()
        self.pool, self.owner = pool, owner

    @staticmethod
    def for_engine(plan: Plan, model: Path, engine_path: str | None) -> tuple[Plan, Path, list[Pending]]:
        """The plan and model as the engine names their files, and what must be copied out first."""
        files = files_for(model, plan.launch, engine_path)
        same = files.launch == plan.launch  # (a plain GGUF: the plan itself, which the window knows as the plan)
        return plan if same else dataclasses.replace(plan, launch=files.launch), files.model, pending(files.to_extract)

    @staticmethod
    def words(items: list[Pending]) -> str:
        return (f"Engine: copying the GGUF out of the llamafile once ({Bytes(sum(p.left for p in items))} into "
                f"{extracted_dir()}; reused after; Stop cancels and keeps what was copied)…")

    def start(self, items: list[Pending], done: Callable[[object], None], failed: Callable[[str], None]) -> None:
        def run(cancel: threading.Event) -> object:
            return extract(items, progress=lambda d, t: self.progress.emit(d, t), cancel=cancel)

        self.pool.run(run, done, failed, owner=self.owner, key=KEY)

    def running(self) -> bool:
        return self.pool.current(self.owner, KEY) is not None

    def cancel(self) -> None:
        self.pool.cancel(self.owner, KEY)
