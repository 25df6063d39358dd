"""The Hugging Face dialog's offer of a vision projector with the chosen model: "Also download the vision
projector: FILE (SIZE)", checked, shown only when the repo holds one beside the model
(``app.hub.remote.projector_for``: named most like the model, then F16).

Checked, Download fetches it after the model into the same Hugging Face cache snapshot (where the window
finds it beside the model and offers it in the settings), and Plan from header fetches its header beside
the model's header-only copy. What the dialog says about it is made here too.
"""

from __future__ import annotations

from app.hub.download import UNVERIFIED, downloaded
from app.hub.remote import RemoteGguf, RepoListing, projector_for
from app.planner.units import Bytes
from app.ui.qt import QCheckBox, QWidget

TIP = ("Downloaded after the model into the same Hugging Face cache folder, where the window finds it "
       "beside the model and offers it in the settings (--mmproj); Plan from header fetches its header too")
#: Before a projector's progress line, so a user knows which of the two files is moving.
PROGRESS_PREFIX = "Vision projector: "


class ProjectorOffer(QCheckBox):
    """The checkbox; ``projector`` is the offered file (None: hidden)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("projectorOffer")
        self.setToolTip(TIP)
        self.projector: RemoteGguf | None = None
        self.setVisible(False)

    def offer(self, listing: RepoListing | None, model: RemoteGguf | None) -> None:
        """Offer the projector for ``model`` (checked again whenever the offered file changes)."""
        found = projector_for(listing, model) if listing is not None and model is not None else None
        if found != self.projector:
            self.setChecked(found is not None)
        self.projector = found
        self.setVisible(found is not None)
        if found is None:
            self.setText("")
            return
        here = downloaded(found) is not None
        self.setText(f"Also download the vision projector: {found.name} "
                     f"({'in the Hugging Face cache already' if here else Bytes(found.size)})")
        self.setAccessibleName(self.text())
        self.setToolTip(TIP if found.verified or here else f"{TIP}\nIts download is {UNVERIFIED}")

    def chosen(self) -> RemoteGguf | None:
        """The offered projector when it is checked."""
        return self.projector if self.projector is not None and self.isChecked() else None

    def to_download(self) -> RemoteGguf | None:
        """The checked projector when the Hugging Face cache does not hold it yet."""
        p = self.chosen()
        return p if p is not None and downloaded(p) is None else None


def failed_text(model: str, projector: RemoteGguf, what: str, message: str) -> str:
    """The error shown when the projector's ``what`` ("download", "header fetch") failed after the model's:
    the model is open, the reason follows."""
    return f"{model} is open without its vision projector {projector.name}: the projector's {what} failed.\n{message}"


def cancelled_text(projector: RemoteGguf) -> str:
    """Cancel during the projector's download: the model is whole, the projector's partial file kept."""
    return (f"The model is downloaded; the download of its vision projector {projector.name} was cancelled: "
            "the partial file is kept, and Open downloaded resumes it.")
