"""The main window's sizes: its first size on the screen it opens on, and the split between the plan
and the log and sessions under it. Layout only (app/ui/main_window.py builds the window with them)."""

from __future__ import annotations

from pathlib import Path

from app.ui.qt import QIcon, QResizeEvent, QSize, QSplitter, Qt, QWidget

RESOURCES = Path(__file__).resolve().parent.parent.parent / "resources"


#: The plan and the form keep at least this share of the height; the log and sessions the rest, and
#: everything past PLAN_HEIGHT px (a tall screen: the plan does not need more, the sessions do).
PLAN_SHARE = 0.65
PLAN_HEIGHT = 620
#: While a fork's replies show, the plan's share (at least its own least height): the chat and K
#: replies side by side need the room more than the plan does then (1366×768: a line each, else).
FORK_PLAN_SHARE = 0.4


def app_icon() -> QIcon:
    return QIcon(str(RESOURCES / "headroom.svg"))


#: The window's first size on a screen with room for it; a smaller screen gets what it has.
FIRST_SIZE = (1280, 860)


def first_size(available: QSize) -> tuple[int, int]:
    """The first window size (no geometry remembered): FIRST_SIZE, or the screen's available area less a
    margin for the window frame where that is smaller (a 1366×768 laptop: Measure and Launch on screen)."""
    return (min(FIRST_SIZE[0], max(640, available.width() - 40)),
            min(FIRST_SIZE[1], max(480, available.height() - 60)))


def split_sizes(total: int, forking: bool = False) -> tuple[int, int]:
    """(plan, log and sessions) for a column ``total`` px tall (``forking``: a fork's replies show)."""
    bottom = max(int(total * (1 - PLAN_SHARE)), total - PLAN_HEIGHT)
    if forking:
        bottom = max(bottom, total - int(total * FORK_PLAN_SHARE))
    return total - bottom, bottom


class PlanSplit(QSplitter):
    """The plan over the log and sessions, sized by ``split_sizes`` whenever it is resized — until
    the user drags the handle (then it is theirs)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.automatic = True
        self.forking = False
        self.setChildrenCollapsible(False)  # a squeezed sessions pane drew its status over its text
        self.splitterMoved.connect(self._moved)

    def _moved(self, _pos: int, _index: int) -> None:
        self.automatic = False

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self._fit()

    def set_forking(self, on: bool) -> None:
        """A fork's replies show (or no longer): the log and sessions get the larger share then."""
        self.forking = on
        self._fit()

    def _fit(self) -> None:
        if self.automatic and self.count() == 2:
            self.setSizes(list(split_sizes(self.height() - self.handleWidth(), self.forking)))
