"""The settings form's "Adapters and draft model" section: LoRA adapters (``--lora``) and a draft model
for speculative decoding (``-md`` with ``-ngld``, ``-ctkd``/``-ctvd``, ``--spec-draft-n-max``).

One toggle row ("▸ Adapters and draft model: none") that opens onto a small form, closed while
nothing is chosen so the settings column keeps its height. A file is checked when it is chosen, as
the planner checks it (app/planner/gguf/beside.py ``check_lora``/``check_draft``, against the open model):
one llama.cpp would refuse is not kept, and ``refused`` carries the planner's sentence to the
window's error line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.planner.errors import PlannerError
from app.planner.gguf import beside
from app.planner.settings import ALL_LAYERS, DEFAULT_DRAFT_N_MAX, KV_TYPES, LaunchSettings
from app.ui.qt import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QResizeEvent,
    QSize,
    QSizePolicy,
    QSpinBox,
    Qt,
    QToolButton,
    QVBoxLayout,
    QWidget,
    Signal,
)

if TYPE_CHECKING:
    from app.planner.gguf.model import ModelShape

TITLE = "Adapters and draft model"
GGUF_FILTER = "GGUF files (*.gguf);;All files (*)"
#: The most tokens the window lets a draft propose per step (the CLI takes any).
DRAFT_N_MAX_LIMIT = 64


def refusal(what: str, path: str, problem: str) -> str:
    """The window's sentence for a file not taken: ``what`` and the planner's reason, the file named once."""
    name = Path(path).name
    return f"{what} not used: {problem if name in problem else f'{name}: {problem}'}"


def lora_problem(model: ModelShape | None, path: str) -> str:
    """Why the adapter at ``path`` cannot be used with ``model`` ('' when it can)."""
    try:
        beside.check_lora(model, path)
    except (PlannerError, OSError, ValueError) as exc:
        return str(exc)
    return ""


def draft_problem(model: ModelShape | None, path: str) -> str:
    """Why ``path`` cannot be ``model``'s draft model ('' when it can)."""
    try:
        beside.check_draft(model, path)
    except (PlannerError, OSError, ValueError) as exc:
        return str(exc)
    return ""


class Names(QLabel):
    """File names on one line, cut in the middle where the column is narrower (the tooltip has them all)."""

    def __init__(self) -> None:
        super().__init__()
        self._full = ""
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def set_names(self, text: str, tip: str) -> None:
        self._full = text
        self.setToolTip(tip)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("none…"), super().minimumSizeHint().height())

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self._elide()

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideMiddle, max(self.width(), 40)))


def _line(*widgets: QWidget, stretch: QWidget | None = None) -> QWidget:
    box = QWidget()
    lay = QHBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    for w in widgets:
        lay.addWidget(w, 1 if w is stretch else 0)
    if stretch is None:
        lay.addStretch(1)
    return box


class ExtrasSection(QWidget):
    """``changed``: an adapter or the draft (or one of its settings) changed; ``refused``: a file was
    not taken, and why (the planner's sentence)."""

    changed = Signal()
    refused = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._lora: tuple[str, ...] = ()
        self._draft = ""
        self._model: ModelShape | None = None
        self._folder = ""  # where the file dialogs open: the model's folder
        self.toggle = QToolButton()
        self.toggle.setObjectName("extrasToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setToolTip("LoRA adapters (--lora) and a draft model for speculative decoding (-md): "
                               "planned, measured, passed to the engine and checked")
        self.toggle.toggled.connect(self._opened)
        self.lora_names = Names()
        self.lora_names.setAccessibleName("LoRA adapters")
        self.lora_add = QPushButton("Add…")
        self.lora_add.setToolTip("--lora: add a LoRA adapter (GGUF) for this model; its tensors are planned "
                                 "beside the weights they adapt")
        self.lora_add.clicked.connect(self.choose_lora)
        self.lora_clear = QPushButton("Clear")
        self.lora_clear.setToolTip("Launch without LoRA adapters")
        self.lora_clear.clicked.connect(self.clear_lora)
        self.draft_name = Names()
        self.draft_name.setAccessibleName("Draft model")
        self.draft_choose = QPushButton("Choose…")
        self.draft_choose.setToolTip("-md: a smaller model with the same vocabulary that proposes tokens for "
                                     "this one to check (speculative decoding)")
        self.draft_choose.clicked.connect(self.choose_draft_file)
        self.draft_clear = QPushButton("Clear")
        self.draft_clear.setToolTip("Launch without a draft model")
        self.draft_clear.clicked.connect(self.clear_draft)
        for b in (self.lora_add, self.lora_clear, self.draft_choose, self.draft_clear):
            b.setAutoDefault(False)
        self.lora_clear.setAccessibleName("Clear the LoRA adapters")
        self.draft_clear.setAccessibleName("Clear the draft model")
        self.draft_ngl = QSpinBox()
        self.draft_ngl.setRange(0, ALL_LAYERS)
        self.draft_ngl.setSpecialValueText("0 (CPU)")
        self.draft_ngl.setAccessibleName("Draft GPU layers")
        self.draft_ngl.setToolTip(f"-ngld: the draft model's layers on the GPU ({ALL_LAYERS} = all)")
        self.draft_type_k = QComboBox()
        self.draft_type_v = QComboBox()
        for box, name, flag in ((self.draft_type_k, "Draft K cache type", "-ctkd"),
                                (self.draft_type_v, "Draft V cache type", "-ctvd")):
            box.addItems(list(KV_TYPES))
            box.setAccessibleName(name)
            box.setToolTip(f"{flag}: how the draft model's KV cache stores each {'key' if 'K' in name else 'value'}")
        self.draft_n_max = QSpinBox()
        self.draft_n_max.setRange(1, DRAFT_N_MAX_LIMIT)
        self.draft_n_max.setAccessibleName("Draft tokens")
        self.draft_n_max.setToolTip("--spec-draft-n-max: tokens the draft proposes per step "
                                    f"(llama-server's default {DEFAULT_DRAFT_N_MAX}); each adds an output row")
        self.body = QWidget()
        form = QFormLayout(self.body)
        form.setContentsMargins(16, 0, 0, 0)
        form.addRow("LoRA", _line(self.lora_names, self.lora_add, self.lora_clear, stretch=self.lora_names))
        form.addRow("Draft model", _line(self.draft_name, self.draft_choose, self.draft_clear, stretch=self.draft_name))
        self.draft_options = _line(QLabel("layers"), self.draft_ngl, QLabel("K"), self.draft_type_k,
                                   QLabel("V"), self.draft_type_v, QLabel("tokens"), self.draft_n_max)
        form.addRow(self.draft_options)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.toggle)
        lay.addWidget(self.body)
        for spin in (self.draft_ngl, self.draft_n_max):
            spin.valueChanged.connect(lambda _v: self.changed.emit())
        for combo in (self.draft_type_k, self.draft_type_v):
            combo.currentIndexChanged.connect(lambda _i: self.changed.emit())
        self.show_settings(LaunchSettings())

    # ---- what the settings say -----------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The LaunchSettings fields this section sets."""
        return {"lora": self._lora, "draft_model": self._draft, "draft_n_gpu_layers": self.draft_ngl.value(),
                "draft_type_k": self.draft_type_k.currentText(), "draft_type_v": self.draft_type_v.currentText(),
                "draft_n_max": self.draft_n_max.value()}

    def show_settings(self, s: LaunchSettings) -> None:
        """Show ``s``'s adapters and draft (no ``changed``). The section stays as it is (the toggle's
        summary names what is chosen: a window opened with a LoRA still fits at 1280×860), and closes
        when it loses all of it."""
        had = self.has_extras()
        widgets = (self.draft_ngl, self.draft_type_k, self.draft_type_v, self.draft_n_max)
        for w in widgets:
            w.blockSignals(True)
        self._lora, self._draft = s.lora, s.draft_model
        self.draft_ngl.setValue(s.draft_n_gpu_layers)
        self.draft_type_k.setCurrentText(s.draft_type_k)
        self.draft_type_v.setCurrentText(s.draft_type_v)
        self.draft_n_max.setValue(min(max(s.draft_n_max, 1), DRAFT_N_MAX_LIMIT))
        for w in widgets:
            w.blockSignals(False)
        if had and not self.has_extras():
            self.toggle.setChecked(False)
        self._show()

    def has_extras(self) -> bool:
        return bool(self._lora or self._draft)

    def _show(self) -> None:
        names = [Path(p).name for p in self._lora]
        self.lora_names.set_names(", ".join(names) or "none", "\n".join(self._lora) or "No LoRA adapter")
        self.lora_clear.setEnabled(bool(self._lora))
        self.draft_name.set_names(Path(self._draft).name if self._draft else "none", self._draft or "No draft model")
        self.draft_clear.setEnabled(bool(self._draft))
        self.draft_options.setVisible(bool(self._draft))
        parts = ([f"{len(names)} LoRA"] if names else []) + (["a draft model"] if self._draft else [])
        self.toggle.setText(f"{TITLE}: {', '.join(parts) or 'none'}")
        self._opened(self.toggle.isChecked())

    def _opened(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.body.setVisible(on)

    # ---- the model they are for ----------------------------------------------------------------
    def set_model(self, model: ModelShape | None, path: Path | None) -> None:
        """The model files are checked against, and the folder the file dialogs open in."""
        self._model = model
        if path is not None:
            self._folder = str(path.parent)

    def kept_for(self, model: ModelShape) -> tuple[dict[str, Any], list[str]]:
        """Another model opens: the adapters and the draft that llama.cpp would take with ``model``
        (the check ``add_lora``/``choose_draft`` make), and a sentence for each one left out."""
        kept = tuple(p for p in self._lora if not lora_problem(model, p))
        dropped = [refusal("LoRA adapter", p, lora_problem(model, p)) for p in self._lora if p not in kept]
        draft = self._draft
        if draft and (problem := draft_problem(model, draft)):
            dropped.append(refusal("Draft model", draft, problem))
            draft = ""
        return {"lora": kept, "draft_model": draft}, dropped

    # ---- the user's choices --------------------------------------------------------------------
    def choose_lora(self) -> None:
        paths, _f = QFileDialog.getOpenFileNames(self, "Add LoRA adapters", self._folder, GGUF_FILTER)
        self.add_lora(paths)

    def add_lora(self, paths: str | Path | Sequence[str | Path]) -> bool:
        """Add the adapters at ``paths`` (in order); False, with ``refused``, when one cannot be used:
        that one is not kept (the ones before it are)."""
        for p in [paths] if isinstance(paths, (str, Path)) else paths:
            path = str(Path(p).resolve())
            if path in self._lora:
                continue
            problem = "a LoRA file name with a comma cannot be passed (--lora splits on commas)" if "," in path \
                else lora_problem(self._model, path)
            if problem:
                self.refused.emit(refusal("LoRA adapter", path, problem))
                return False
            self._lora = (*self._lora, path)
            self.toggle.setChecked(True)
            self._show()
            self.changed.emit()
        return True

    def clear_lora(self) -> None:
        if self._lora:
            self._lora = ()
            self._show()
            self.changed.emit()

    def choose_draft_file(self) -> None:
        path, _f = QFileDialog.getOpenFileName(self, "Choose a draft model", self._folder, GGUF_FILTER)
        if path:
            self.choose_draft(path)

    def choose_draft(self, path: str | Path) -> bool:
        """Plan with the draft model at ``path``; False, with ``refused``, when it cannot be used (the
        draft before it stays)."""
        full = str(Path(path).resolve())
        problem = draft_problem(self._model, full)
        if problem:
            self.refused.emit(refusal("Draft model", full, problem))
            return False
        self._draft = full
        self.toggle.setChecked(True)
        self._show()
        self.changed.emit()
        return True

    def clear_draft(self) -> None:
        if self._draft:
            self._draft = ""
            self._show()
            self.changed.emit()
