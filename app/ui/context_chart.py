"""The context chart: GPU and host memory against the context (log scale, 4k up to the training
context, or 1M once more is asked) for the settings now, one curve per KV cache type, the plan's
usable line, the largest contexts that fit (fully resident, and with part of the KV in host RAM: the
figures ``headroom plan`` prints as "largest context") and the context now; under them the predicted
decode tokens/s of the settings' own curve against the context (the speed model); a click on the
chart sets the context.

The numbers come from the planner (app/planner/curve.py: one plan per point); this only draws them.
Bound to the window state (``bind``), it redraws on every plan while it is shown, and once when it
is shown again after plans it missed (hidden in its tab, it prices nothing).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from app.planner.curve import ContextCurve, CurvePoint, KvCurve, Reach, context_curve
from app.planner.errors import PlannerError
from app.planner.plan_types import PlanMode
from app.planner.units import Bytes, GiB, round_tokens
from app.planner.words import tokens_per_s
from app.text import escape
from app.ui.budget_parts import RED, source_text
from app.ui.context_control import tokens_text
from app.ui.qt import (
    QColor,
    QEvent,
    QFrame,
    QHelpEvent,
    QImage,
    QLabel,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPointF,
    QRectF,
    QScrollArea,
    QShowEvent,
    QSize,
    QSizePolicy,
    Qt,
    QToolTip,
    QVBoxLayout,
    QWidget,
    Signal,
)

if TYPE_CHECKING:
    from app.ui.window_state import WindowState

#: A colour per KV type (Tableau 10, as the budget bars); another type the settings ask for gets OTHER.
TYPE_COLORS = {"f16": "#4e79a7", "q8_0": "#f28e2b", "q4_0": "#59a14f"}
OTHER_COLOR = "#b07aa1"
LARGEST_COLOR = "#2f6f3e"
#: The longest context with part of the KV in host RAM (beside the fully resident one, in green).
TAIL_COLOR = "#9c755f"
#: How far above the usable line the GPU axis goes at most: a 1M f16 curve of 150 GiB would flatten
#: a 24 GiB card's part of the picture to a few pixels (the curves are cut at the top, and it says so).
Y_CAP = 3.0
#: Curves all below this share of the usable line are drawn on their own scale (the line is off the top, and
#: the panel's title says how far): a small model's would lie flat on 0 GiB.
FAR_BELOW = 0.1
EMPTY_TEXT = "<b>No model yet.</b> Open one to see its memory against the context."


def curve_color(curve: KvCurve) -> str:
    return TYPE_COLORS.get(curve.label, OTHER_COLOR)


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^k) giving about ``ticks`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10.0 ** math.floor(math.log10(raw))
    return float(next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw))


def gib_text(v: float) -> str:
    """GiB as the axis says them; under one (a small model's curves) in MiB, with the unit."""
    if 0 < v < 1:
        return f"{v * 1024:.0f} MiB" if v * 1024 >= 1 else str(Bytes(v * GiB))
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def _with_unit(v: float) -> str:
    """``gib_text`` with its unit: ``12 GiB``, ``178 MiB``."""
    text = gib_text(v)
    return text if text.endswith("B") else f"{text} GiB"


def reach_color(i: int) -> str:
    """The largest contexts' colours: fully resident first, then with part in host RAM."""
    return LARGEST_COLOR if i == 0 else TAIL_COLOR


def reach_text(r: Reach) -> str:
    """"largest that fits: 49,664 fully on GPU" — the chart's and the legend's words for one reach (with
    its predicted decode where the plan priced it: "… (~0.37 tok/s full)")."""
    speed = f" (~{tokens_per_s(r.decode)} tok/s full)" if r.decode is not None else ""
    return f"largest that fits: {'≥ ' if r.capped else ''}{tokens_text(r.n_ctx)} {r.where}{speed}"


def value_of(kind: str, point: CurvePoint) -> float | None:
    """What a panel draws of a point: GiB on the GPUs or in host RAM, or decode tokens/s."""
    if kind == "gpu":
        return point.gpu_total / GiB
    if kind == "host":
        return point.host / GiB
    return point.decode


class ChartCanvas(QWidget):
    """The painted part: one panel for the GPUs (summed over devices) and one for host RAM."""

    clicked = Signal(int)  # the context of the grid point nearest the click

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.curve: ContextCurve | None = None
        self.labels: dict[str, QRectF] = {}  # each label painted last, by its text (for tests)
        self.setMinimumSize(300, 280)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def sizeHint(self) -> QSize:
        return QSize(640, 300)

    # ---- geometry ------------------------------------------------------------------------------
    def _panels(self) -> list[tuple[str, QRectF]]:
        """(which, plot rectangle) for each panel: "gpu" over "host"."""
        c = self.curve
        fm = self.fontMetrics()
        line = fm.height()
        right = 12
        top = 4
        bottom = line + 10  # the x tick labels under the last panel
        kinds = ["gpu", "host"] if c is not None and c.devices else ["host"]
        if c is not None and speed_points(c):
            kinds.append("speed")
        # room for the widest y label any panel draws ("25,000" tokens/s), so none loses its first digit
        left = max(fm.horizontalAdvance(t) for t in ["8888", *(self.y_label(k, self._scale(k)[0]) for k in kinds
                                                                 if c is not None)]) + 12
        gap = line + 10  # each panel's title above it
        avail = self.height() - top - bottom - gap * len(kinds) - 8 * (len(kinds) - 1)
        heights = {1: [1.0], 2: [0.6, 0.4] if kinds[-1] == "host" else [0.7, 0.3],
                   3: [0.45, 0.3, 0.25]}[len(kinds)]
        heights = [avail * f for f in heights]
        out = []
        y = float(top)
        for kind, h in zip(kinds, heights, strict=True):
            y += gap
            out.append((kind, QRectF(left, y, max(self.width() - left - right, 10), max(h, 10))))
            y += h + 8
        return out

    def _x(self, rect: QRectF, n_ctx: int) -> float:
        c = self.curve
        assert c is not None
        lo, hi = math.log2(c.contexts[0]), math.log2(c.contexts[-1])
        return rect.left() + (math.log2(n_ctx) - lo) / max(hi - lo, 1e-9) * rect.width()

    def _scale(self, kind: str) -> tuple[float, float, bool]:
        """(axis top in GiB, usable in GiB, curves cut at the top) for a panel; the speed panel's
        top in tokens/s (no usable line)."""
        c = self.curve
        assert c is not None
        if kind == "speed":
            ends = [r.decode for r in c.reaches if r.decode is not None]
            return max([p.decode or 0.0 for p in speed_points(c)] + ends + [0.1]) * 1.1, 0.0, False
        usable = (c.gpu_usable_total if kind == "gpu" else c.host_usable) / GiB
        values = [(p.gpu_total if kind == "gpu" else p.host) / GiB for k in c.curves for p in k.points]
        highest = max(values, default=0.0)
        if 0 < highest < FAR_BELOW * usable:  # a small model: its curves, not a flat line at 0 under the usable one
            return highest * 1.25, usable, False
        top = max([usable, *values, 0.1]) * 1.05
        cut = kind == "gpu" and usable > 0 and top > Y_CAP * usable
        if cut:
            top = Y_CAP * usable
        return top, usable, cut

    def panel_rects(self) -> list[tuple[str, QRectF]]:
        """(kind, plot rectangle) of each panel drawn, top to bottom."""
        return self._panels()

    def axis_top(self, kind: str) -> float:
        """The value at the top of a panel's y axis (GiB; tokens/s on the speed panel)."""
        return self._scale(kind)[0]

    def panel_title(self, kind: str) -> str:
        """The words over a panel."""
        c = self.curve
        assert c is not None
        if kind == "gpu":
            title = f"GPU memory, GiB ({'+'.join(c.devices)})" if len(c.devices) <= 3 else \
                f"GPU memory, GiB ({len(c.devices)} devices summed)"
        elif kind == "host":
            title = "Host RAM, GiB"
        else:
            cur = c.current
            title = f"Decode tokens/s, predicted with the context full ({cur.label if cur else ''})"
        top, usable, cut = self._scale(kind)
        if kind != "speed" and usable > top:
            room = "usable" if kind == "gpu" else "available"
            return title + f" — far below the {Bytes(usable * GiB)} {room} (the axis stops at {_with_unit(top)})"
        return title + (f" — cut at {_with_unit(top)}" if cut else "")

    @staticmethod
    def y_label(kind: str, v: float) -> str:
        """A y axis label: tokens/s on the speed panel, GiB on the others."""
        return tokens_per_s(v) if kind == "speed" and v > 0 else gib_text(v)

    def _y(self, rect: QRectF, top: float, gib: float) -> float:
        return rect.bottom() - min(gib, top) / top * rect.height()

    def point_pos(self, label: str, n_ctx: int, kind: str = "gpu") -> QPointF | None:
        """Where the chart draws ``label``'s point at ``n_ctx`` (None: not drawn)."""
        c = self.curve
        if c is None:
            return None
        curve = next((k for k in c.curves if k.label == label), None)
        point = curve.at(n_ctx) if curve is not None else None
        rect = dict(self._panels()).get(kind)
        if point is None or rect is None:
            return None
        top, _u, _cut = self._scale(kind)
        value = value_of(kind, point)
        if value is None:
            return None
        return QPointF(self._x(rect, n_ctx), self._y(rect, top, value))

    def reach_x(self, n_ctx: int) -> float | None:
        """Where the line of a largest context is drawn (None: off the axis, or no chart)."""
        c = self.curve
        panels = self._panels()
        if c is None or not panels or not c.contexts[0] <= n_ctx <= c.contexts[-1]:
            return None
        return self._x(panels[0][1], n_ctx)

    def reach_speed_pos(self, n_ctx: int) -> QPointF | None:
        """Where a largest context's own predicted decode is drawn on the speed panel (another
        placement's end: an open diamond on its line; None: not drawn)."""
        c = self.curve
        rect = dict(self._panels()).get("speed") if c is not None else None
        reach = next((r for r in c.reaches if r.n_ctx == n_ctx), None) if c is not None else None
        x = self.reach_x(n_ctx)
        if rect is None or reach is None or reach.decode is None or x is None or (
                reach.offered and c is not None and c.current is not None and c.current.at(n_ctx) is not None):
            return None
        return QPointF(x, self._y(rect, self._scale("speed")[0], reach.decode))

    def usable_y(self, kind: str = "gpu") -> float | None:
        """Where the usable line of a panel is drawn (None: no such panel)."""
        rect = dict(self._panels()).get(kind) if self.curve is not None else None
        if rect is None or self.curve is None:
            return None
        top, usable, _cut = self._scale(kind)
        return self._y(rect, top, usable) if usable <= top else None

    def context_at(self, x: float) -> int | None:
        """The grid context nearest ``x`` (in log distance), when ``x`` is over the plots."""
        c = self.curve
        panels = self._panels()
        if c is None or not panels:
            return None
        rect = panels[0][1]
        if not rect.left() - 8 <= x <= rect.right() + 8:
            return None
        return min(c.contexts, key=lambda n: abs(self._x(rect, n) - x))

    # ---- input ---------------------------------------------------------------------------------
    def mousePressEvent(self, e: QMouseEvent) -> None:
        if e.button() == Qt.MouseButton.LeftButton and self.isEnabled():
            n = self.context_at(e.position().x())
            if n is not None:
                self.clicked.emit(n)
                return
        super().mousePressEvent(e)

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip and isinstance(e, QHelpEvent):
            n = self.context_at(e.pos().x())
            if n is not None and self.curve is not None:
                QToolTip.showText(e.globalPos(), self.point_tooltip(n), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(e)

    def point_tooltip(self, n_ctx: int) -> str:
        """What each curve holds at ``n_ctx`` and where its compute came from."""
        c = self.curve
        assert c is not None
        lines = [f"<b>{tokens_text(n_ctx)} tokens</b> — click to use this context"]
        for k in c.curves:
            p = k.at(n_ctx)
            if p is None:
                continue
            gpu = f"GPU {Bytes(p.gpu_total)}, " if c.devices else ""
            fits = "fits" if p.fits else f"does not fit: {p.why}"
            speed = f"; decode ~{tokens_per_s(p.decode)} tok/s with it full" if p.decode is not None and k.current else ""
            lines.append(f"<span style='color:{curve_color(k)}'>■</span> {escape(k.label)}: {gpu}host "
                         f"{Bytes(p.host)} — {escape(fits)}{speed}; compute {escape(source_text(p.compute_source))}")
        return "<br>".join(lines)

    # ---- painting ------------------------------------------------------------------------------
    def paintEvent(self, _e: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        if not self.isEnabled():
            p.setOpacity(0.35)  # the settings give no plan: the last chart, greyed
        pal = self.palette()
        p.fillRect(self.rect(), pal.color(QPalette.ColorRole.Base))
        self.labels = {}
        if self.curve is not None and self.curve.curves:
            panels = self._panels()
            for i, (kind, rect) in enumerate(panels):
                self._panel(p, kind, rect, last=i == len(panels) - 1)
        p.end()

    def _panel(self, p: QPainter, kind: str, rect: QRectF, *, last: bool) -> None:
        c = self.curve
        assert c is not None
        pal = self.palette()
        fm = self.fontMetrics()
        text = pal.color(QPalette.ColorRole.Text)
        mid = pal.color(QPalette.ColorRole.Mid)
        top, usable, _cut = self._scale(kind)
        placed: list[QRectF] = []
        # The title over the panel.
        title = self.panel_title(kind)
        p.setPen(text)
        title = fm.elidedText(title, Qt.TextElideMode.ElideRight, int(rect.width()))
        p.drawText(QRectF(rect.left(), rect.top() - fm.height() - 6, rect.width(), fm.height()),
                   Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, title)
        # The grid and the y labels.
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)  # axis-aligned lines: no need, and much faster
        step = nice_step(top)
        grid = QPen(mid)
        grid.setWidthF(0.5)
        v = 0.0
        while v <= top + 1e-9:
            y = self._y(rect, top, v)
            p.setPen(grid)
            p.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            p.setPen(text)
            label = QRectF(0, y - fm.height() / 2, rect.left() - 6, fm.height())
            if label.top() >= rect.top() - fm.height() / 2 - 1:
                p.drawText(label, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, self.y_label(kind, v))
            v += step
        # Vertical grid at each power of two, labelled under the last panel (labels that would touch skipped).
        n = 1 << max(0, (c.contexts[0] - 1).bit_length())
        last_right = -1e9
        while n <= c.contexts[-1]:
            x = self._x(rect, n)
            p.setPen(grid)
            p.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))
            if last:
                t = round_tokens(n)  # the axis: its powers of two, "512k"
                w = fm.horizontalAdvance(t)
                box = QRectF(x - w / 2, rect.bottom() + 4, w, fm.height())
                if box.left() < rect.left() - fm.horizontalAdvance("8"):
                    box.moveLeft(rect.left() - fm.horizontalAdvance("8"))
                if box.right() > self.width() - 2:
                    box.moveRight(self.width() - 2)
                if box.left() > last_right + 6:
                    p.setPen(text)
                    p.drawText(box, Qt.AlignmentFlag.AlignCenter, t)
                    last_right = box.right()
            n *= 2
        p.setPen(QPen(mid))
        p.drawRect(rect)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        # (no clip: every y is clamped into the plot, and a clipped antialiased painter is slow)
        # The usable line (off the top of a small model's panel: its title says how far).
        if 0 < usable <= top:
            pen = QPen(QColor(RED))
            pen.setStyle(Qt.PenStyle.DashLine)
            pen.setWidthF(1.5)
            p.setPen(pen)
            yu = self._y(rect, top, usable)
            p.drawLine(QPointF(rect.left(), yu), QPointF(rect.right(), yu))
        # The curves, the current one last (on top) and wider; a point that does not fit is hollow.
        # The speed panel: the current curve's points that fit and have a prediction.
        for k in sorted(c.curves, key=lambda k: k.current):
            drawn = [pt for pt in k.points if value_of(kind, pt) is not None] if kind != "speed" or k.current else []
            if not drawn:
                continue
            color = QColor(curve_color(k))
            pen = QPen(color)
            pen.setWidthF(3.0 if k.current else 1.5)
            p.setPen(pen)
            pts = [QPointF(self._x(rect, pt.n_ctx), self._y(rect, top, value_of(kind, pt) or 0.0)) for pt in drawn]
            p.drawPolyline(pts)
            r = 3.5 if k.current else 2.5
            for pt, q in zip(drawn, pts, strict=True):
                p.setPen(QPen(color, 1.5))
                p.setBrush(color if pt.fits else pal.color(QPalette.ColorRole.Base))
                p.drawEllipse(q, r, r)
        p.setBrush(Qt.BrushStyle.NoBrush)
        # The context now: a thin line and a ring on the current curve.
        cur = c.current
        xn = self._x(rect, c.n_ctx)
        p.setPen(QPen(text, 1, Qt.PenStyle.DotLine))
        p.drawLine(QPointF(xn, rect.top()), QPointF(xn, rect.bottom()))
        if cur is not None and (now := cur.at(c.n_ctx)) is not None and (vn := value_of(kind, now)) is not None:
            p.setPen(QPen(text, 2))
            p.drawEllipse(QPointF(xn, self._y(rect, top, vn)), 6.0, 6.0)
        # The largest contexts that fit: a dashed line each through the panel; a diamond on the current
        # curve at the one the plan offers (the other is another placement's: not on this curve).
        for i, reach in enumerate(c.reaches):
            if not c.contexts[0] <= reach.n_ctx <= c.contexts[-1]:
                continue
            colour = QColor(reach_color(i))
            xl = self._x(rect, reach.n_ctx)
            p.setPen(QPen(colour, 1.5, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(xl, rect.top()), QPointF(xl, rect.bottom()))
            if reach.offered and cur is not None and (big := cur.at(reach.n_ctx)) is not None \
                    and (vb := value_of(kind, big)) is not None:
                y = self._y(rect, top, vb)
                p.setPen(QPen(colour, 2))
                p.setBrush(colour)
                p.drawPolygon([QPointF(xl, y - 6), QPointF(xl + 6, y), QPointF(xl, y + 6), QPointF(xl - 6, y)])
                p.setBrush(Qt.BrushStyle.NoBrush)
            elif kind == "speed" and (at := self.reach_speed_pos(reach.n_ctx)) is not None:
                # another placement's end (the longest with a host tail): its own predicted decode, an
                # open diamond on its line (the curve is the settings as set, which do not reach it)
                y = at.y()
                p.setPen(QPen(colour, 2))
                p.drawPolygon([QPointF(xl, y - 6), QPointF(xl + 6, y), QPointF(xl, y + 6), QPointF(xl - 6, y)])
        # Labels inside the plot, each on a box of the base colour, never over one another nor across the
        # usable line: its own label first (at the left end, over the line: where the curves are lowest).
        if 0 < usable <= top:
            yu = self._y(rect, top, usable)
            t = f"usable {Bytes(usable * GiB)}" if kind == "gpu" else f"available {Bytes(usable * GiB)}"
            self._label(p, t, rect.left() + 6 + fm.horizontalAdvance(t) / 2, yu - fm.height() - 2, rect,
                        placed, QColor(RED), below=yu + 2)
            placed.append(QRectF(rect.left(), yu - 1, rect.width(), 2))
        if kind == placed_kind(c):
            for i, reach in enumerate(c.reaches):
                if not c.contexts[0] <= reach.n_ctx <= c.contexts[-1]:
                    continue
                t = reach_text(reach)
                xl, w = self._x(rect, reach.n_ctx), fm.horizontalAdvance(t) + 8
                # Beside its line, on the side away from the curves' rise (a log axis: they rise to the right).
                xc = xl - 4 - w / 2 if xl > rect.center().x() else xl + 4 + w / 2
                self._label(p, t, xc, rect.top() + 3, rect, placed, QColor(reach_color(i)))
            self._label(p, f"now: {tokens_text(c.n_ctx)}", xn, rect.bottom() - fm.height() - 3, rect, placed, text)

    def _label(self, p: QPainter, text: str, x: float, y: float, rect: QRectF, placed: list[QRectF],
               color: QColor, *, below: float | None = None) -> None:
        """``text`` centred on ``x`` at ``y`` (moved inside ``rect``; to the other side of the line,
        ``below``, or down the plot when it would cover a label already placed)."""
        fm = self.fontMetrics()
        w, h = fm.horizontalAdvance(text) + 8, fm.height() + 2
        box = QRectF(x - w / 2, y, w, h)
        box.moveLeft(min(max(box.left(), rect.left() + 2), rect.right() - 2 - w))
        tries = [box.top()] + ([below] if below is not None else []) + [rect.top() + 3 + i * (h + 2) for i in range(6)]
        for top in tries:
            box.moveTop(min(max(top, rect.top() + 1), rect.bottom() - h - 1))
            if not any(box.intersects(o) for o in placed):
                break
        else:
            return  # no room that covers nothing: the legend says it too
        placed.append(QRectF(box))
        self.labels[text] = QRectF(box)
        base = self.palette().color(QPalette.ColorRole.Base)
        base.setAlphaF(0.85)
        p.fillRect(box, base)
        p.setPen(color)
        p.drawText(box, Qt.AlignmentFlag.AlignCenter, text)


def speed_points(c: ContextCurve) -> list[CurvePoint]:
    """The current curve's points with a predicted decode speed (none: no speed panel)."""
    cur = c.current
    return [p for p in cur.points if p.decode is not None] if cur is not None else []


def placed_kind(c: ContextCurve) -> str:
    """The panel that carries the "now" and "largest" labels: the GPU's when there is one."""
    return "gpu" if c.devices else "host"


class ContextChart(QWidget):
    """The chart with its legend and its sources; ``contextChosen`` when a point is clicked."""

    contextChosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._state: WindowState | None = None
        self._stale = False  # plans came while hidden: price again when shown
        self.notice = QLabel(EMPTY_TEXT)
        self.notice.setObjectName("chartNotice")
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("border: 1px solid palette(mid); padding: 6px;")
        self.legend = QLabel()
        self.legend.setObjectName("chartLegend")
        self.legend.setWordWrap(True)
        self.canvas = ChartCanvas()
        self.canvas.clicked.connect(self.contextChosen)
        self.sources = QLabel()
        self.sources.setObjectName("chartSources")
        self.sources.setWordWrap(True)
        for label in (self.notice, self.legend, self.sources):
            label.setTextFormat(Qt.TextFormat.RichText)
        inner = QWidget()
        lay = QVBoxLayout(inner)
        lay.addWidget(self.notice)
        lay.addWidget(self.legend)
        lay.addWidget(self.canvas, 1)
        lay.addWidget(self.sources)
        # A short pane scrolls up and down (as the budget's does) instead of squeezing the plots.
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll_area)
        self._show_parts(False)

    def _show_parts(self, on: bool) -> None:
        for w in (self.legend, self.canvas, self.sources):
            w.setVisible(on)

    # ---- the window state ----------------------------------------------------------------------
    def bind(self, state: WindowState) -> None:
        """Price and draw ``state``'s settings on each plan (when shown; else once shown again)."""
        self._state = state
        state.planChanged.connect(lambda _plan: self._planned())
        state.noPlan.connect(self.show_no_plan)

    def _planned(self) -> None:
        self._stale = True
        if self.isVisible():
            self.refresh()

    def showEvent(self, e: QShowEvent) -> None:
        super().showEvent(e)
        if self._stale:
            self.refresh()

    def refresh(self) -> None:
        """Price the chart for the state's settings now and draw it."""
        state = self._state
        self._stale = False
        if state is None:
            return
        request = state.plan_request()
        if request is None:
            return
        settings = state.settings.launch
        try:
            curve = context_curve(request, settings, measurement=state.measurement_for(settings), fit=state.fit,
                                  plan=state.plan)
        except (PlannerError, ValueError) as exc:
            self.show_no_plan(str(exc))
            return
        self.show_curve(curve)

    @property
    def curve(self) -> ContextCurve | None:
        """What the chart shows (None before a model)."""
        return self.canvas.curve

    def show_curve(self, curve: ContextCurve) -> None:
        self.notice.setVisible(False)
        self._show_parts(True)
        for w in (self.legend, self.canvas, self.sources):
            w.setEnabled(True)
        self.canvas.curve = curve
        self.legend.setText(legend_html(curve))
        self.sources.setText(sources_html(curve))
        self.canvas.setAccessibleDescription(accessible_text(curve))
        self.canvas.update()

    def show_no_plan(self, message: str) -> None:
        """The settings give no plan: the last chart stays, greyed, under the reason; no click sets anything."""
        self.notice.setText(f"<b>No plan</b>: {escape(message)}"
                            + (" — the chart below is for the last settings." if self.curve is not None else ""))
        self.notice.setStyleSheet(f"color: {RED}; border: 1px solid {RED}; padding: 6px;")
        self.notice.setVisible(True)
        for w in (self.legend, self.canvas, self.sources):
            w.setEnabled(False)

    # ---- for tests and the benchmark -----------------------------------------------------------
    def point_pos(self, label: str, n_ctx: int, kind: str = "gpu") -> QPointF | None:
        """Where ``label``'s point at ``n_ctx`` is drawn, in the canvas's coordinates."""
        return self.canvas.point_pos(label, n_ctx, kind)

    def usable_y(self, kind: str = "gpu") -> float | None:
        """Where the usable line of the "gpu" or "host" panel is drawn, in the canvas's coordinates."""
        return self.canvas.usable_y(kind)

    def reach_x(self, n_ctx: int) -> float | None:
        """Where the line of a largest context is drawn, in the canvas's coordinates."""
        return self.canvas.reach_x(n_ctx)

    def reach_speed_pos(self, n_ctx: int) -> QPointF | None:
        """Where a largest context's own predicted decode is drawn, in the canvas's coordinates."""
        return self.canvas.reach_speed_pos(n_ctx)

    def panel_kinds(self) -> list[str]:
        """The panels drawn, top to bottom: "gpu", "host", "speed"."""
        return [k for k, _r in self.canvas._panels()]

    def panel_titles(self) -> list[str]:
        """The words over each panel, top to bottom."""
        return [self.canvas.panel_title(k) for k, _r in self.canvas.panel_rects()]

    def label_boxes(self) -> dict[str, QRectF]:
        """The labels inside the plots as last painted: text -> box, in the canvas's coordinates."""
        return dict(self.canvas.labels)

    def plot_widget(self) -> QWidget:
        """The painted part (a click there sets the context)."""
        return self.canvas

    def render_image(self) -> QImage:
        """The chart as it is painted now, in an image of its size."""
        img = QImage(self.size(), QImage.Format.Format_ARGB32_Premultiplied)
        img.fill(self.palette().color(QPalette.ColorRole.Window))
        self.render(img)
        return img


def legend_html(c: ContextCurve) -> str:
    """One entry per curve (the settings' own in bold), then the lines the chart marks."""
    parts = []
    for k in c.curves:
        name = f"<b>{escape(k.label)} (these settings)</b>" if k.current else escape(k.label)
        if k.problem:
            parts.append(f"<span style='color:{curve_color(k)}'>━━</span>&nbsp;{name}: not for this model "
                         f"({escape(k.problem)})")
        else:
            parts.append(f"<span style='color:{curve_color(k)}'>━━</span>&nbsp;{name}")
    usable = c.gpu_usable_total if c.devices else c.host_usable
    what = "usable" if c.devices else "available host RAM"
    parts.append(f"<span style='color:{RED}'><b>-&nbsp;-&nbsp;-</b></span>&nbsp;{what} {Bytes(usable)}")
    if c.reaches:
        for i, reach in enumerate(c.reaches):
            parts.append(f"<span style='color:{reach_color(i)}'>{'◆' if reach.offered else '┊'}</span>&nbsp;"
                         f"{escape(reach_text(reach))}")
    elif c.largest is not None:
        parts.append(f"<span style='color:{LARGEST_COLOR}'>◆</span>&nbsp;largest that fits: "
                     f"{'≥ ' if c.largest_capped else ''}{tokens_text(c.largest)} {escape(c.largest_where)}")
    else:
        parts.append(f"<span style='color:{LARGEST_COLOR}'>◆</span>&nbsp;nothing fits at "
                     f"{tokens_text(c.contexts[0])} or more")
    parts.append(f"○&nbsp;now: {tokens_text(c.n_ctx)} · hollow points do not fit · click a point to use its context")
    return " &nbsp; ".join(parts)



def sources_html(c: ContextCurve) -> str:
    """Where the chart's numbers come from, in the plan's words."""
    mode = {PlanMode.STOCK: "Each point: the launch exactly as set (stock llama.cpp)",
            PlanMode.WINDOW: "Each point: the rolling-window plan (its host tail in host RAM)",
            PlanMode.CPU: "Each point: the CPU plan (no GPU)"}[c.mode]
    computes = "; ".join(f"{escape(k.label)} {escape(source_text(k.source))}" for k in c.curves if not k.problem)
    usable = "free memory less the safety margin and any VRAM target" if c.devices else "what the OS says is available"
    speed = ("Decode tokens/s: the predicted speed of each point that fits, with its context full." if speed_points(c) else
             "Decode tokens/s: not predicted for these points (the rolling KV window's engine)."
             if c.mode is PlanMode.WINDOW else "Decode tokens/s: no point fits.")
    return (f"<small>{escape(mode)}. Weights, KV: from the GGUF. Compute: {computes}. Usable: {escape(usable)}. "
            f"Host RAM: mapped weights, KV host tail, pinned compute, prompt cache. {escape(speed)}</small>")


def accessible_text(c: ContextCurve) -> str:
    cur = c.current
    if cur is None or not cur.points:
        return "context chart: no curve"
    p = cur.at(c.n_ctx)
    now = f"{Bytes(p.gpu_total)} on the GPUs, {Bytes(p.host)} host RAM" if p is not None else ""
    speed = f", decode ~{tokens_per_s(p.decode)} tok/s with it full" if p is not None and p.decode is not None else ""
    reaches = "; ".join(reach_text(r) for r in c.reaches) or (
        f"largest that fits {tokens_text(c.largest) if c.largest else 'none'}")
    return f"context chart, {cur.label}: at {tokens_text(c.n_ctx)} {now}{speed}; {reaches}"
