"""A scroll area for a form that scrolls only up and down: it is never narrower than its form (plus a
vertical scroll bar), so a splitter gives it the width its longest row needs and nothing is cut off
sideways, even when a row grows after the window is built (a longer "largest that fits")."""

from __future__ import annotations

from collections.abc import Sequence

from app.ui.qt import (
    QEvent,
    QHBoxLayout,
    QObject,
    QResizeEvent,
    QScrollArea,
    QShowEvent,
    QSize,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)


class FormScroll(QScrollArea):
    roomChanged = Signal()  # the form's height, or the room there is for it, changed

    def __init__(self, form: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setWidget(form)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        form.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        form = self.widget()
        if form is None:
            return hint
        width = form.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
        return QSize(max(hint.width(), width), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the form's minimum width may have changed: the splitter re-asks
            self._hold_column()
            self.roomChanged.emit()
        return super().eventFilter(watched, event)

    def _hold_column(self) -> None:
        """The column holding this scroll area (a splitter's child) at least as wide as the form needs, now:
        a splitter lays out a child by the minimum it was told when it last laid out, and would widen it only
        at its next layout (after Stop, moving the buttons under it)."""
        self.updateGeometry()
        column = self.parentWidget()
        if column is not None and column.minimumSizeHint().width() != column.minimumWidth():
            column.setMinimumWidth(column.minimumSizeHint().width())

    def showEvent(self, e: QShowEvent) -> None:
        super().showEvent(e)
        # (the scroll bar's width is the style's only once shown)
        self._hold_column()

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self.roomChanged.emit()


def form_with_footer(items: Sequence[QWidget | QHBoxLayout], footer: Sequence[QWidget], *,
                     max_width: int) -> tuple[QWidget, FormScroll]:
    """A column: ``items`` in a form that scrolls up and down (small screens), ``footer`` pinned under
    it so it never scrolls away (Measure, Launch / Stop and the endpoint)."""
    form = QVBoxLayout()
    for item in items:
        if isinstance(item, QHBoxLayout):
            form.addLayout(item)
        else:
            form.addWidget(item)
    form.addStretch(1)
    inner = QWidget()
    inner.setLayout(form)
    scroll = FormScroll(inner)
    foot = QVBoxLayout()
    foot.setContentsMargins(9, 0, 9, 4)
    for widget in footer:
        foot.addWidget(widget)
    column = QVBoxLayout()
    column.setContentsMargins(0, 0, 0, 0)
    column.addWidget(scroll, 1)
    column.addLayout(foot)
    outer = QWidget()
    outer.setLayout(column)
    outer.setMaximumWidth(max_width)
    return outer, scroll
