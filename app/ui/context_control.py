"""The context control: a log-scale slider that snaps to round sizes, a typed entry (``512k``), and
the largest context that fits for the current plan; plus ``tokens_text``, how the window writes a
token count.
"""

from __future__ import annotations

import math
from html import escape

from app.planner import words
from app.planner.settings import LaunchSettings, context_problem
from app.planner.units import format_tokens, parse_tokens, round_tokens
from app.ui.qt import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    Qt,
    QVBoxLayout,
    QWidget,
    Signal,
)

K = 1024
#: Where the context slider snaps: roughly geometric (x1.33–1.5) from 4k to 1M, values people use.
SNAP_VALUES: tuple[int, ...] = tuple(v * K for v in (
    4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 896, 1024))
#: Slider resolution: positions are log2(ctx) scaled; a release snaps to the nearest SNAP_VALUES.
_STEPS_PER_OCTAVE = 100


def ctx_to_pos(n_ctx: int) -> int:
    """Slider position for a context length (log scale)."""
    return round(math.log2(max(n_ctx, 1)) * _STEPS_PER_OCTAVE)


def snap_ctx(pos: int) -> int:
    """The snap value nearest (in log distance) to a slider position."""
    target = pos / _STEPS_PER_OCTAVE
    return min(SNAP_VALUES, key=lambda v: abs(math.log2(v) - target))


def step_snap(n_ctx: int, direction: int) -> int:
    """The next snap value above (direction 1) or below (-1) ``n_ctx``, clamped to the range."""
    if direction > 0:
        return next((v for v in SNAP_VALUES if v > n_ctx), SNAP_VALUES[-1])
    return next((v for v in reversed(SNAP_VALUES) if v < n_ctx), SNAP_VALUES[0])


class ContextControl(QWidget):
    """Slider (4k…1M, log scale, snapping) + typed entry ("512k") + "largest that fits" button."""

    contextChanged = Signal(int)
    longestChosen = Signal(object)  # LaunchSettings: the longest end's (its placement with its context)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._value = 32 * K
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(ctx_to_pos(SNAP_VALUES[0]), ctx_to_pos(SNAP_VALUES[-1]))
        self.slider.setSingleStep(1)
        self.slider.setPageStep(_STEPS_PER_OCTAVE // 2)
        self.slider.setAccessibleName("Context length")
        self.slider.setToolTip("Context length, log scale 4k…1M; snaps to common values")
        self.entry = QLineEdit()
        self.entry.setMaximumWidth(90)
        self.entry.setAccessibleName("Context length (typed)")
        self.entry.setToolTip("Type a context length: 131072, 128k, 512k, 1M")
        self.error = QLabel("")
        self.error.setObjectName("ctxError")
        self.error.setWordWrap(True)  # its own line: beside the fits button it was cut off
        self.error.setStyleSheet("color: #d62728;")
        self.error.setVisible(False)
        self.fits = QPushButton(f"largest that fits: {words.NO_LARGEST}")
        self.fits.setFlat(True)
        self.fits.setEnabled(False)
        self.fits.setToolTip("Click to use the largest context that fits fully on the GPUs")
        self._fits_value: int | None = None
        # The other end of "how far can I go" (words.context_reach, as the CLI's "largest context"
        # line): the longest context with part of it in host RAM, when it buys more.
        self.longest = QLabel()  # wraps: a long placement never widens the form nor is cut
        self.longest.setObjectName("longestContext")
        self.longest.setWordWrap(True)
        self.longest.setTextFormat(Qt.TextFormat.RichText)
        self.longest.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                             | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.longest.setVisible(False)
        self._longest: LaunchSettings | None = None
        self.longest.linkActivated.connect(lambda _link: self.use_longest())
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.slider, 1)
        row.addWidget(self.entry)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(row)
        below = QHBoxLayout()
        below.addWidget(self.fits)
        below.addStretch(1)
        col.addLayout(below)
        col.addWidget(self.longest)
        col.addWidget(self.error)
        self.slider.valueChanged.connect(self._on_slider)
        self.entry.editingFinished.connect(self._on_entry)
        self.fits.clicked.connect(self._use_fits)
        self.set_value(self._value)

    def value(self) -> int:
        return self._value

    def set_value(self, n_ctx: int, *, emit: bool = False) -> None:
        """Show ``n_ctx`` (any value, typed ones need not be snap values)."""
        changed = n_ctx != self._value
        self._value = n_ctx
        self.slider.blockSignals(True)
        self.slider.setValue(ctx_to_pos(n_ctx))
        self.slider.blockSignals(False)
        self.entry.setText(round_tokens(n_ctx))  # where the user types: "512k" as they would
        self._say("")
        if emit and changed:
            self.contextChanged.emit(n_ctx)

    def set_largest_fit(self, n_ctx: int | None, note: str = "", *, capped: str = "", at_least: bool = False,
                        speed: str = "") -> None:
        """``capped``: why ``n_ctx`` is where the search stopped, not the memory (on hover); ``at_least``:
        more may fit ("≥ n_ctx": the search stopped past the trained context);
        ``speed``: its predicted speed ("~62 tok/s"), when the plan priced it."""
        self._fits_value = n_ctx
        if n_ctx is None:
            self.fits.setText(f"largest that fits: {note or words.NO_LARGEST}")
            self.fits.setToolTip(f"No context to use: {note or words.NO_LARGEST}")
            self.fits.setEnabled(False)
        else:
            self.fits.setText(f"largest that fits: {'≥ ' if at_least else ''}{tokens_text(n_ctx)}"
                              + (f" {note}" if note else "") + (f" ({speed})" if speed else ""))
            self.fits.setToolTip(f"Click to use the largest context that fits {note or 'these devices'}"
                                 + (f": {tokens_text(n_ctx)}; {capped}" if capped else ""))
            self.fits.setEnabled(True)

    def set_longest(self, text: str, settings: LaunchSettings | None) -> None:
        """The longest context with part of it in host RAM ("longest: <u>424,192 with KV of 26 layers
        on host</u> (~2.1 tok/s)"), a link that applies ``settings`` (None: hidden, nothing longer fits)."""
        self._longest = settings
        self.longest.setVisible(settings is not None)
        where, paren, speed = text.rpartition(" (")
        # the speed kept on one line ("(~9.6 tok/s)", not "tok/" and "s"): no-break spaces, a word joiner
        whole = "&nbsp;(" + escape(speed).replace(" ", "&nbsp;").replace("/", "/\u2060")
        self.longest.setText(f"longest: <a href='longest'>{escape(where)}</a>{whole}" if paren
                             else f"longest: <a href='longest'>{escape(text)}</a>")
        self.longest.setToolTip(f"Click to use the longest context that fits with part of it in host RAM: {text}")

    def use_longest(self) -> None:
        """What a click on the longest context does: its settings, placement included."""
        if self._longest is not None:
            self.longestChosen.emit(self._longest)

    def _on_slider(self, pos: int) -> None:
        """Dragging snaps to the nearest value; a key or click step goes to the next one."""
        value = snap_ctx(pos)
        if value == self._value and not self.slider.isSliderDown():
            value = step_snap(self._value, 1 if pos > ctx_to_pos(self._value) else -1)
        self.set_value(value, emit=True)

    @property
    def invalid(self) -> str:
        """Why the typed context is not one ("" when it is): the window plans nothing until fixed."""
        return self.error.text()

    def _on_entry(self) -> None:
        was_invalid = bool(self.invalid)
        try:
            value = parse_tokens(self.entry.text())
            problem = context_problem(value)  # a bound, before any plan or Qt int sees it
            if problem:
                raise ValueError(problem)
        except ValueError as exc:
            self._say(str(exc))
            self.contextChanged.emit(self._value)  # the settings are now invalid: the window says so
            return
        if value == self._value and was_invalid:
            self._say("")
            self.contextChanged.emit(value)  # valid again, at the old value: plan it again
            return
        self.set_value(value, emit=True)

    def _say(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def _use_fits(self) -> None:
        if self._fits_value is not None:
            self.set_value(self._fits_value, emit=True)


def tokens_text(n: int) -> str:
    """A context in the window's words: exact, '524,288', as every message writes it (``format_tokens``)."""
    return format_tokens(n)
