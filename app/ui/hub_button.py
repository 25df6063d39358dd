"""The window's way into the Hugging Face Hub: the "Hugging Face repo…" button, and how a model that
came from the Hub reads in the window.

A header-only copy (``app.hub.preview``) is planned and measured like any file, but its weights
are zeros: the window names it "<repo>/<file> — header only" and withholds Launch with ``PREVIEW_LAUNCH``.
A download whose bytes nobody could check against a sha256 says so (``UNVERIFIED``).
"""

from __future__ import annotations

from pathlib import Path

from app.hub.cache import unverified
from app.hub.download import UNVERIFIED
from app.hub.preview import preview_origin
from app.planner.gguf.reader import shown_name
from app.text import escape
from app.ui.qt import QPushButton, QWidget

TIP = ("List the GGUF files of a Hugging Face repo, then plan one from its header (a few MiB) "
       "or download it")
PREVIEW_LAUNCH = "header-only preview: download the model to launch"


class HubButton(QPushButton):
    """"Hugging Face repo…": opens the repo picker (the window connects ``clicked``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Hugging Face repo…", parent)
        self.setToolTip(TIP)
        self.setAccessibleName("Open from a Hugging Face repo")
        self.setAccessibleDescription(TIP)


def preview_name(path: Path) -> str | None:
    """"<repo>/<file>" when ``path`` is a header-only copy of a Hub file, else None."""
    origin = preview_origin(path)
    return f"{origin.repo}/{origin.path}" if origin is not None else None


def model_title(path: Path) -> str:
    """The model label's first line, as HTML: the file name (a llamafile's with the GGUF inside, given the
    member's path: ``Model.llamafile: model.gguf``; and, for a download nobody could check by
    its sha256, that it is unverified), or "<repo>/<file> — header only"."""
    name = preview_name(path)
    if name is None:
        note = f"<br><i>Downloaded {escape(UNVERIFIED)}</i>" if unverified(path) else ""
        return f"<b>{escape(shown_name(path))}</b>{note}"
    return f"<b>{escape(name)} — header only</b><br><i>{escape(PREVIEW_LAUNCH)}</i>"
