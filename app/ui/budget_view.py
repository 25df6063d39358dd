"""The budget picture: per GPU a stacked bar of where its memory goes, and one for host RAM.

Segments come straight from the plan's ``DevicePlan`` / ``HostPlan`` fields (nothing is recomputed
here); each segment's tooltip says where its number came from (``sources``). An infeasible plan is
drawn in red, with the reason and the best alternative one click away. Bound to the window state
(``bind``), it draws each new plan — or, while an engine runs, the plan it runs, with the settings
now on one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.glossary import window_words
from app.planner import words
from app.planner.plan_types import AlternativeKind, PlanMode
from app.planner.settings import LaunchSettings
from app.planner.units import Bytes
from app.text import escape
from app.ui.budget_parts import (
    AMBER,
    DEFAULT_SOURCES,
    GPU_PARTS,
    HOST_PARTS,
    RED,
    Segment,
    _legend,
    device_segments,
    host_segments,
    legend_entries,
    legend_tooltip,
    source_text,
)
from app.ui.context_control import tokens_text
from app.ui.options_view import OptionsView
from app.ui.qt import (
    QColor,
    QEvent,
    QHBoxLayout,
    QHelpEvent,
    QLabel,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPushButton,
    QRectF,
    QSizePolicy,
    Qt,
    QToolTip,
    QVBoxLayout,
    QWidget,
    Signal,
)

if TYPE_CHECKING:
    from app.planner.plan_types import Alternative, ContextFit, Plan
    from app.ui.window_state import WindowState

#: The parts that are other programs' memory (read when the plan was made, not live).
OTHER_KEYS = ("other", "other_processes")
#: The parts' names stay importable from here (the tests and the screenshot use them).
__all__ = ["GPU_PARTS", "HOST_PARTS", "BudgetView", "DeviceRow", "Segment", "StackedBar", "legend_entries"]


class StackedBar(QWidget):
    """One custom-painted bar; the free part is the palette's base colour. Tooltip per segment."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.total = 0
        self.segments: list[Segment] = []
        self.over = False
        self.target: int | None = None  # the VRAM target: a dashed line where the plan must stop
        self.setMinimumHeight(26)
        self.setMinimumWidth(200)
        self.setMouseTracking(True)

    def set_data(self, total: int, segments: list[Segment], over: bool, target: int | None = None) -> None:
        self.total = total
        self.target = target
        self.segments = [s for s in segments if s.size > 0]
        self.over = over
        used = sum(s.size for s in self.segments)
        free = max(0, total - used)
        self.setAccessibleDescription(
            ", ".join(f"{s.label} {Bytes(s.size)}" for s in self.segments) + f", free {Bytes(free)}")
        self.update()

    def _scale(self) -> int:
        return max(self.total, sum(s.size for s in self.segments), 1)

    def segment_rects(self) -> list[tuple[QRectF, Segment]]:
        w = self.width() - 2.0
        h = self.height() - 2.0
        x = 1.0
        out = []
        for s in self.segments:
            sw = w * s.size / self._scale()
            out.append((QRectF(x, 1.0, sw, h), s))
            x += sw
        if self.total > 0:
            used = sum(s.size for s in self.segments)
            free = Segment("free", "Free", max(0, self.total - used), "", source_text(DEFAULT_SOURCES["free"]))
            out.append((QRectF(x, 1.0, max(0.0, w + 1.0 - x), h), free))
        return out

    def segment_at(self, x: float) -> Segment | None:
        for rect, seg in self.segment_rects():
            if rect.left() <= x < rect.right() + 0.5:
                return seg
        return None

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip and isinstance(e, QHelpEvent):
            seg = self.segment_at(e.pos().x())
            if seg is not None:
                QToolTip.showText(e.globalPos(), seg.tooltip, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(e)

    def paintEvent(self, _e: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        if not self.isEnabled():
            p.setOpacity(0.3)  # a stale picture (no plan for the settings): greyed
        pal = self.palette()
        outer = QRectF(0.5, 0.5, self.width() - 1.0, self.height() - 1.0)
        p.fillRect(outer, pal.color(QPalette.ColorRole.Base))
        for rect, seg in self.segment_rects():
            if seg.key != "free" and rect.width() > 0:
                p.fillRect(rect, QColor(seg.color))
        if self.total > 0 and self.over:
            # Where the planned parts pass the device's memory: hatched red.
            xcap = 1.0 + (self.width() - 2.0) * self.total / self._scale()
            p.fillRect(QRectF(xcap, 1.0, self.width() - 1.0 - xcap, self.height() - 2.0),
                       Qt.BrushStyle.BDiagPattern)
        if self.target is not None and 0 < self.target < self._scale():
            xt = 1.0 + (self.width() - 2.0) * self.target / self._scale()
            line = QPen(pal.color(QPalette.ColorRole.Text))
            line.setStyle(Qt.PenStyle.DashLine)
            p.setPen(line)
            p.drawLine(int(xt), 0, int(xt), self.height())
        pen = QPen(QColor(RED) if self.over else pal.color(QPalette.ColorRole.Mid))
        pen.setWidth(2 if self.over else 1)
        p.setPen(pen)
        p.drawRect(outer)
        p.end()


class DeviceRow(QWidget):
    """Title, bar and a one-line caption for one device."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.title.setWordWrap(True)  # a long card name wraps instead of widening the plan pane
        self.bar = StackedBar()
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        for label in (self.title, self.caption):  # escaped HTML, even when it has no tag (one part)
            label.setTextFormat(Qt.TextFormat.RichText)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 4)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.bar)
        lay.addWidget(self.caption)

    def show_device(self, title: str, total: int, segments: list[Segment], free: int, over: bool,
                    target: int | None = None) -> None:
        self.title.setText(f"<b>{title}</b> — {Bytes(total)}"
                           + (f" · VRAM target {Bytes(target)} (dashed line)" if target else ""))
        self.bar.set_data(total, segments, over, target)
        # "when planned": the devices panel above shows the same memory live, a moment later
        parts = [f"{s.label.lower()} {Bytes(s.size)}" + (" when planned" if s.key in OTHER_KEYS else "")
                 for s in segments if s.size > 0]
        shown_free = f"free {Bytes(free)}" if free >= 0 else f"<span style='color:{RED}'>short {Bytes(-free)}</span>"
        self.caption.setText(" · ".join([*parts, shown_free]))


@dataclass(frozen=True)
class Verdict:
    """What the plan means for the user, and the one-click way out when it is not as asked."""

    text: str
    color: str  # "" = palette text
    action: str = ""  # button text
    settings: LaunchSettings | None = None  # what the button applies
    says: str = ""  # a plan warning the verdict already says (shown once: here)
    other: LaunchSettings | None = None  # the other way to run it (words.automatic_choice), one click away
    other_action: str = ""


def verdict(plan: Plan, requested: LaunchSettings | None, fit: ContextFit | None) -> Verdict:
    if not plan.feasible:
        head = f"<b>{words.DOES_NOT_FIT}</b>: {escape(plan.reason)}"
        alt = best_alternative(plan)
        if alt is not None:
            return Verdict(head, RED, f"Use instead: {alternative_text(alt)}", alt.launch)
        n_fit = (fit.with_tail if plan.mode == PlanMode.WINDOW else fit.resident) if fit else 0
        if n_fit > 0:
            return Verdict(head, RED, f"Use the largest context that fits: {tokens_text(n_fit)}",
                           plan.launch.with_(n_ctx=n_fit))
        return Verdict(head, RED)
    if requested is not None:  # the RPC workers (--rpc) and the planner's split (-ts) are not a change
        requested = requested.with_(rpc=plan.launch.rpc, tensor_split=plan.launch.tensor_split)
    if requested is not None and words.only_no_gpu(plan, requested):
        # No GPU to plan for: running on the CPU is the only way, not a change the user must apply.
        return Verdict(f"<b>{words.FITS}</b> — {plan.mode} mode: {words.NO_GPU_FITS}", "")
    if requested is not None and plan.mode == PlanMode.WINDOW and requested.with_(kv_unified=False) == plan.launch \
            and requested != plan.launch:
        # Not "does not fit": the window engine cannot run one unified pool at all.
        return Verdict(f"<b>{words.FITS}</b> — {plan.mode} mode, {escape(words.window_drops_kvu(plan.launch.n_parallel))}",
                       AMBER)
    if requested is not None and plan.launch != requested:
        chosen = next((a for a in plan.alternatives if a.chosen), None)
        choice = words.automatic_choice(plan, requested, fit)
        apply = f"Apply: {chosen.label if chosen else 'planned settings'}"
        if choice is not None:  # the choice and its cost in one sentence, the other end one click away
            return Verdict(f"<b>{escape(choice.head)}</b>: {escape(choice.rest)}", AMBER, apply, plan.launch,
                           says=words.chose_instead_of(plan), other=choice.other,
                           other_action=f"Use this: {choice.other_label}" if choice.other is not None else "")
        label = alternative_text(chosen) if chosen else plan.reason
        why = next((a.note for a in plan.alternatives if a.kind is AlternativeKind.AS_SET and not a.feasible), "")
        return Verdict(f"<b>{words.DOES_NOT_FIT_AS_SET}</b> {escape(words.planned_instead(label, why))}", AMBER,
                       apply, plan.launch, says=words.chose_instead_of(plan))
    return Verdict(f"<b>{words.FITS}</b> — {plan.mode} mode" + (f": {escape(plan.reason)}" if plan.reason else ""), "")


#: What the plan pane says before any model is open.
EMPTY_HINT = ("<b>No model yet.</b> Open a GGUF model or a llamafile (File ▸ Open model…, or drop a .gguf or .llamafile here), pick one "
              "from Hugging Face, or try the demo (File ▸ Open the demo model).")


class BudgetView(QWidget):
    """All bars for one plan, the window/tail numbers, and the verdict."""

    settingsChosen = Signal(object)  # LaunchSettings: the alternative the user clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan: Plan | None = None
        self._verdict: Verdict | None = None
        self.running = QLabel()  # while an engine runs: the picture is its plan, not the settings'
        self.running.setObjectName("runningNote")
        self.running.setWordWrap(True)
        self.running.setStyleSheet("border: 1px solid palette(mid); padding: 4px;")
        self.running.setVisible(False)
        # Before a model: how to start. After a settings error: "No plan: …" over the greyed picture.
        self.notice = QLabel(EMPTY_HINT)
        self.notice.setObjectName("planNotice")
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("border: 1px solid palette(mid); padding: 6px;")
        self.verdict = QLabel()
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.alternative = QPushButton()
        self.alternative.setVisible(False)
        # A long "Use instead: …" must not widen the pane (no sideways scrolling); its tooltip has it all.
        self.alternative.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.alternative.clicked.connect(self._choose_alternative)
        # The other way to run it (the longest end, or the settings as set at their largest context).
        self.other_way = QPushButton()
        self.other_way.setObjectName("otherWay")
        self.other_way.setVisible(False)
        self.other_way.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.other_way.clicked.connect(self._choose_other_way)
        # What it will feel like: the plan's predicted speed in words (words.speed_sentence).
        self.speed = QLabel()
        self.speed.setObjectName("speedWords")
        self.speed.setWordWrap(True)
        self.speed.setVisible(False)
        self.window_numbers = QLabel()
        self.window_numbers.setObjectName("windowNumbers")
        self.window_numbers.setWordWrap(True)
        self.window_numbers.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.warnings = QLabel()
        self.warnings.setWordWrap(True)
        self.warnings.setObjectName("planWarnings")
        self.warnings.setStyleSheet(f"color: {AMBER};")  # caveats the user should read before launching
        self.legend = QLabel(_legend())
        self.legend.setWordWrap(True)
        self.legend.setVisible(False)  # no legend until there is a plan
        self.options = OptionsView()
        self.options.setVisible(False)
        self.options.settingsChosen.connect(self.settingsChosen)
        # Each of these shows escaped HTML; said so, because Qt guesses "plain" for a text without a
        # tag in its first line (one warning with an apostrophe showed "backend&#x27;s").
        for label in (self.running, self.notice, self.verdict, self.speed, self.window_numbers, self.warnings,
                      self.legend):
            label.setTextFormat(Qt.TextFormat.RichText)
        self.rows: list[DeviceRow] = []
        self.host_row = DeviceRow()
        self.host_row.setVisible(False)  # no empty bar before a model
        self._rows_box = QVBoxLayout()
        lay = QVBoxLayout(self)
        lay.addWidget(self.notice)
        lay.addWidget(self.running)
        lay.addWidget(self.verdict)
        # the bars right under the verdict (at 1024×700 both show without scrolling), then what it
        # will feel like and the one-click ways, side by side
        lay.addLayout(self._rows_box)
        lay.addWidget(self.host_row)
        lay.addWidget(self.speed)
        ways = QHBoxLayout()
        ways.addWidget(self.alternative)
        ways.addWidget(self.other_way)
        lay.addLayout(ways)
        lay.addWidget(self.window_numbers)
        lay.addWidget(self.warnings)
        lay.addWidget(self.legend)
        lay.addWidget(self.options)
        lay.addStretch(1)

    def bind(self, state: WindowState) -> None:
        """Draw ``state``'s plans; while an engine runs the picture stays on what it runs."""

        def planned(plan: Plan) -> None:
            if state.running is None:
                self.show_plan(plan, state.settings.launch, state.fit)
            self.set_running(state.running, plan)

        def no_plan(why: str) -> None:
            if state.running is None:
                self.show_no_plan(why)

        state.planChanged.connect(planned)
        state.noPlan.connect(no_plan)
        state.runningChanged.connect(lambda running: self.set_running(running, running))

    def _ensure_rows(self, n: int) -> None:
        while len(self.rows) < n:
            row = DeviceRow()
            self.rows.append(row)
            self._rows_box.addWidget(row)
        while len(self.rows) > n:
            row = self.rows.pop()
            row.setParent(None)
            row.deleteLater()

    def _picture(self) -> list[QWidget]:
        """The widgets that draw a plan (greyed when the settings give none)."""
        return [self.verdict, self.speed, self.alternative, self.other_way, *self.rows, self.host_row, self.window_numbers,
                self.warnings, self.legend, self.options]

    def show_no_plan(self, message: str) -> None:
        """The settings give no plan: the last picture stays, greyed, under "No plan: …"; nothing in it
        can be applied."""
        self.plan = None
        self._verdict = None
        self.notice.setText(f"<b>No plan</b>: {escape(message)} — the picture below is the last plan, "
                            "not these settings.")
        self.notice.setStyleSheet(f"color: {RED}; border: 1px solid {RED}; padding: 6px;")
        self.notice.setVisible(True)
        self.verdict.setText("<b>No plan</b> for these settings")
        self.verdict.setStyleSheet("")
        self.alternative.setVisible(False)
        self.other_way.setVisible(False)
        self.warnings.setVisible(False)  # they were about the last plan
        for w in self._picture():
            w.setEnabled(False)

    def show_plan(self, plan: Plan, requested: LaunchSettings | None = None,
                  fit: ContextFit | None = None) -> None:
        self.plan = plan
        self.notice.setVisible(False)
        for w in self._picture():
            w.setEnabled(True)
        self.host_row.setVisible(True)
        self.legend.setVisible(True)
        self._ensure_rows(len(plan.gpus))
        shown: list[Segment] = []
        for row, dp in zip(self.rows, plan.gpus, strict=True):
            segs = device_segments(dp, window=plan.mode == PlanMode.WINDOW)
            shown += segs
            row.show_device(f"{dp.name}: {dp.label}", int(dp.total), segs, int(dp.free),
                            over=int(dp.free) < 0, target=plan.vram_target)
        hp = plan.host
        segs = host_segments(hp, no_gpu=not plan.gpus, window=plan.mode == PlanMode.WINDOW)
        shown += segs
        self.host_row.show_device("Host RAM", int(hp.total), segs, int(hp.free), over=int(hp.free) < 0)
        self.legend.setText(_legend(shown))
        self.legend.setToolTip(legend_tooltip(shown))
        self.window_numbers.setText(window_text(plan))
        v = verdict(plan, requested, fit)
        self._verdict = v
        shown_warnings = [w for w in plan.warnings if w != v.says]
        self.warnings.setText("<br>".join(f"⚠ {escape(window_words(w))}" for w in shown_warnings))
        self.warnings.setVisible(bool(shown_warnings))
        self.verdict.setText(v.text)
        self.verdict.setStyleSheet(f"color: {v.color};" if v.color else "")
        self.alternative.setVisible(v.settings is not None)
        self.alternative.setText(v.action)
        self.alternative.setToolTip(v.action)
        self.other_way.setVisible(v.other is not None)
        self.other_way.setText(v.other_action)
        self.other_way.setToolTip(v.other_action)
        self.speed.setText(f"<b>Expected speed</b>: {escape(words.speed_sentence(plan.speed))}"
                           if plan.speed is not None and plan.feasible else "")
        self.speed.setVisible(plan.speed is not None and plan.feasible)
        self.options.show_options(plan, fit, plan.mode == PlanMode.WINDOW)

    def set_running(self, running: Plan | None, pending: Plan | None = None) -> None:
        """While an engine runs the picture stays on the plan it was launched with (the caller stops
        showing new plans); ``pending``, the plan for the settings as they are now, is one line."""
        text = ""
        if running is not None:
            text = f"▶ <b>Engine running</b>: {escape(plan_line(running))} — the picture shows this plan."
            if pending is not None and pending != running:
                text += (f"<br><b>New settings</b> (not running): {escape(plan_line(pending))} — "
                         "Stop the engine, then Launch to use them.")
        self.running.setText(text)
        self.running.setVisible(bool(text))

    def _choose_other_way(self) -> None:
        if self._verdict is not None and self._verdict.other is not None:
            self.settingsChosen.emit(self._verdict.other)

    def _choose_alternative(self) -> None:
        if self._verdict is not None and self._verdict.settings is not None:
            self.settingsChosen.emit(self._verdict.settings)


def window_text(plan: Plan) -> str:
    """Where the KV cache lives, in the words of the plan's mode (app.planner.words)."""
    return escape(words.kv_placement(plan))


def plan_line(plan: Plan) -> str:
    """A plan in one line: what a launch of it gets, and whether it fits."""
    s = plan.launch
    slots = f"{s.n_parallel} slot" + ("s" if s.n_parallel != 1 else "")
    fits = "fits" if plan.feasible else f"does not fit ({plan.reason})"
    return f"{tokens_text(s.n_ctx)} tokens · KV {s.type_k}/{s.type_v} · {slots} · {plan.mode} mode · {fits}"


def best_alternative(plan: Plan) -> Alternative | None:
    """For an infeasible plan, the first feasible alternative the planner priced (best first)."""
    if plan.feasible:
        return None
    return next((a for a in plan.alternatives if a.feasible and not a.chosen), None)


def alternative_text(alt: Alternative) -> str:
    return f"{alt.label}" + (f" — {alt.note}" if alt.note else "")
