"""The place of the Hugging Face repo picker, which comes later (no network in this version).

The button is shown next to "Open model…" so the user knows where the picker will live. It looks
and reads as unavailable (disabled text colour, accessible description) but stays focusable, so a
keyboard or screen-reader user reaches it with Tab and hears why; pressing it only says so.
"""

from __future__ import annotations

from app.ui.qt import QPalette, QPushButton, QWidget, Signal

LATER = ("Picking a model from a Hugging Face repo comes in a later version; "
         "for now, open a downloaded .gguf file.")


class HubButton(QPushButton):
    """"Hugging Face repo…": unavailable for now; ``explained(text)`` when pressed."""

    explained = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Hugging Face repo…", parent)
        self.setToolTip(LATER)
        self.setAccessibleName("Hugging Face repo (not available yet)")
        self.setAccessibleDescription(LATER)
        self.setProperty("available", False)
        pal = self.palette()
        grey = pal.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText)
        for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
            pal.setColor(group, QPalette.ColorRole.ButtonText, grey)
        self.setPalette(pal)
        self.clicked.connect(lambda: self.explained.emit(LATER))
