"""Model and launch settings: the context (app/ui/context_control.py), KV types, slots, batch, layers,
margins, KV placement, LoRA adapters and a draft model (app/ui/extras_section.py) and the engine.

The panel owns no planning: it turns widget state into one ``PlanSettings`` (the launch settings
plus the safety margin, VRAM target and KV placement) and hands it to the window state on every
edit (``bind``); the state re-plans. It shows the largest context that fits for the plan it gets
back, and the engines found (the one chosen goes to the state too).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.planner import words
from app.planner.settings import ALL_LAYERS, DEFAULT_CACHE_RAM_MIB, KV_TYPES, FlashAttn, LaunchSettings
from app.planner.units import MiB
from app.text import printable
from app.ui.context_control import ContextControl, K
from app.ui.extras_section import ExtrasSection
from app.ui.qt import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSize,
    QSizePolicy,
    QSpinBox,
    QStandardItemModel,
    Qt,
    QToolButton,
    QWidget,
    Signal,
)
from app.ui.window_state import OpenModel, PlanSettings, WindowState

if TYPE_CHECKING:
    from app.engine.discover import EngineInfo
    from app.planner.gguf.model import ModelShape
    from app.planner.plan_types import ContextFit, Plan

KV_MODES = ("stock llama.cpp (whole layers)", "rolling KV window (opencoti)")
KV_MODE_TIP = ("Stock llama.cpp moves whole layers to the host; the opencoti engine keeps a resident window "
               "of recent positions on the GPU and the tail in host RAM")
UBATCH_VALUES = (64, 128, 256, 512, 1024, 2048, 4096)
#: The Engine combo's placeholder while engines are being looked for, and when none was found.
LOOKING = "looking for engines…"
NONE_FOUND = "no engine found — Build engine…"
#: The Engine list's last item: choose an engine file (File ▸ Choose engine… does the same).
OTHER_ENGINE = "Other…"


def window_refusal(engines: list[EngineInfo] | None, engine: EngineInfo | None) -> str:
    """Why the rolling KV window is not offered for ``engine`` ('' : it is; also while the engines
    are still being looked for, when nothing can be launched yet)."""
    from app.engine.discover import EngineKind

    if engines is None:
        return ""
    if engine is None:
        return words.window_not_offered(None)
    return "" if engine.kind == EngineKind.OPENCOTI else words.window_not_offered(str(engine.kind))


def _planner_placed(s: LaunchSettings) -> LaunchSettings:
    """``s`` with the placement left to the planner (an applied ``-ot`` came with its ``-ngl``)."""
    if s.tensor_overrides or s.n_cpu_moe:
        s = s.with_(n_gpu_layers=ALL_LAYERS)
    return s.with_(tensor_overrides=(), n_cpu_moe=0, tensor_split=())


def _row(*widgets: QWidget) -> QWidget:
    """Widgets side by side in one form field; the label's mnemonic focuses the first input."""
    box = QWidget()
    lay = QHBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    for w in widgets:
        lay.addWidget(w)
    lay.addStretch(1)
    box.setFocusProxy(next(w for w in widgets if not isinstance(w, QLabel)))
    return box


#: The longest projector file name the form shows whole ("mmproj-model-f16.gguf" fits; a longer one
#: is cut in the middle, so the settings column keeps its width).
PROJECTOR_NAME_CHARS = 28

#: What each setting means, in the user's words (the llama-server flag in brackets).
TIPS = {
    "type_k": "K cache type (-ctk): how each cached key is stored. f16 is exact; q8_0 halves the KV "
              "cache with a small quality cost; q4_0 quarters it with a larger one.",
    "type_v": "V cache type (-ctv): how each cached value is stored. A quantized V cache (q8_0, q4_0) "
              "needs flash attention on.",
    "kvu": "-kvu: one KV pool shared by all parallel sessions, instead of a fixed slice each; sessions "
           "forked from one prompt share its cached tokens.",
    "nkvo": "-nkvo: keep the whole KV cache in host RAM instead of on the GPU. Frees VRAM; every token "
            "then reads the cache over PCIe (slower).",
    "n_parallel": "-np: how many requests the engine serves at once; each gets its own share of the context.",
    "n_ubatch": "-ub: how many prompt tokens the GPU processes in one step. Larger is faster for long "
                "prompts and needs a larger compute buffer.",
    "flash_attn": "-fa: a fused attention kernel that uses less memory; a quantized V cache requires it.",
    "safety": "VRAM the plan leaves free on every GPU for what it cannot see coming (other apps, "
              "fragmentation).",
    "cache_ram": "--cache-ram: host RAM the server may fill over time with the prompts of finished "
                 "requests, to reuse them. auto: llama-server's 8192 MiB, or less when host RAM is short "
                 "(the plan says how much); 0 turns it off.",
    "vram_target": "--vram-target (opencoti engine): the most VRAM the engine may use on each GPU; "
                   "'all free VRAM' plans up to what the card has free.",
}


def advanced_summary(s: LaunchSettings, engine_window: bool, no_gpu: bool = False) -> str:
    """The flags the Advanced section holds, in one line ("K f16 V f16 · -np 1 · -ub 512 · -fa on ·
    -ngl all"); what is set beyond the defaults (-nkvo, an applied -ot, the prompt cache, adapters)
    is named too, so nothing hides behind the closed section. ``no_gpu``: planned for the CPU, which
    launches -ngl 0 whatever the setting says (what the window will launch, as the CLI does)."""
    ngl = "-ngl 0 (no GPU)" if no_gpu else f"-ngl {words.ngl_text(s.n_gpu_layers)}"
    parts = [f"K {s.type_k} V {s.type_v}", f"-np {s.n_parallel}" + (" -kvu" if s.kv_unified else ""),
             f"-ub {s.n_ubatch}", f"-fa {s.flash_attn.value}", ngl]
    if not s.offload_kqv:
        parts.append("-nkvo")
    if s.tensor_overrides or s.n_cpu_moe:
        parts.append("placement applied")
    if s.cache_ram_mib is not None:
        parts.append(f"-cram {s.cache_ram_mib}")
    if engine_window:
        parts.append("rolling KV window")
    if s.lora:
        parts.append(f"{len(s.lora)} LoRA")
    if s.draft_model:
        parts.append("draft model")
    return " · ".join(parts)


class SettingsPanel(QWidget):
    """Every launch setting; ``changed`` fires on any edit."""

    changed = Signal()
    engineChosen = Signal(int)  # the index of the engine chosen in the list shown
    otherEngineWanted = Signal()  # "Other…" in the Engine list: the user wants to pick an engine file
    refused = Signal(str)  # a LoRA or draft file not taken, and why (for the window's error line)
    notice = Signal(str)  # what changed without the user asking (adapters left out for another model)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._no_gpu = False  # the last plan was for the CPU: it launches -ngl 0
        self.context = ContextControl()
        self.type_k = QComboBox()
        self.type_v = QComboBox()
        for box in (self.type_k, self.type_v):
            box.addItems(list(KV_TYPES))
        self.type_k.setAccessibleName("K cache type")
        self.type_v.setAccessibleName("V cache type")
        self.n_parallel = QSpinBox()
        self.n_parallel.setRange(1, 64)
        self.n_parallel.setAccessibleName("Parallel sessions")
        self.kv_unified = QCheckBox("unified pool (-kvu)")
        self.n_ubatch = QComboBox()
        self.n_ubatch.addItems([str(v) for v in UBATCH_VALUES])
        self.n_ubatch.setAccessibleName("Micro-batch")
        self.flash_attn = QComboBox()
        self.flash_attn.addItems([f.value for f in FlashAttn])
        self.flash_attn.setAccessibleName("Flash attention")
        self.safety = QSpinBox()
        self.safety.setRange(0, 16 * 1024)
        self.safety.setSingleStep(64)
        self.safety.setSuffix(" MiB")
        self.safety.setAccessibleName("Safety margin")
        self.vram_target = QSpinBox()
        self.vram_target.setRange(0, 1024 * 1024)
        self.vram_target.setSingleStep(1024)
        self.vram_target.setSuffix(" MiB")
        self.vram_target.setSpecialValueText("all free VRAM")
        self.vram_target.setAccessibleName("VRAM target")
        self.n_gpu_layers = QSpinBox()
        self.n_gpu_layers.setRange(0, ALL_LAYERS)
        self.n_gpu_layers.setSpecialValueText("0 (CPU)")
        self.n_gpu_layers.setAccessibleName("GPU layers")
        self.n_gpu_layers.setToolTip(f"-ngl: layers on the GPU ({ALL_LAYERS} = all)")
        self.nkvo = QCheckBox("KV cache in host RAM (-nkvo)")
        self.cache_ram = QSpinBox()
        self.cache_ram.setRange(-1, 1024 * 1024)  # -1: auto (LaunchSettings.cache_ram_mib None)
        self.cache_ram.setSingleStep(1024)
        self.cache_ram.setSuffix(" MiB")
        self.cache_ram.setSpecialValueText(f"auto (one context's KV, up to {DEFAULT_CACHE_RAM_MIB} MiB)")
        self.cache_ram.setAccessibleName("Prompt cache")
        # A placement the planner chose and the user applied (--n-cpu-moe, -ot) has no control of its own:
        # it is shown here, with a way back to the planner's choice.
        self.placement = QLabel()
        self.placement.setObjectName("placementApplied")
        self.placement.setWordWrap(True)
        self.placement.setTextFormat(Qt.TextFormat.PlainText)  # -ot patterns hold backslashes and pipes
        self.placement_reset = QPushButton("Let the planner place")
        self.placement_reset.setToolTip("Forget the applied placement: every layer on the GPU, no -ot or "
                                        "--n-cpu-moe; the plan chooses again")
        self.placement_reset.clicked.connect(self.reset_placement)
        self.kv_mode = QComboBox()
        self.kv_mode.addItems(KV_MODES)
        self.kv_mode.setAccessibleName("KV placement")
        self.kv_mode.setToolTip(KV_MODE_TIP)
        self._wants_window = False  # what the user (or the demo) asked for; shown only where it can run
        self._window_refused = ""  # why the chosen engine cannot realise the window ("" : it can)
        self._kvu_wanted = False  # -kvu as set, kept while the window greys it
        # A vision projector beside the opened model, offered (checked, as llama.cpp's -hf loads one by
        # default); hidden when there is none (app/planner/memory/projector.py projector_beside).
        self.mmproj = QCheckBox("Vision projector")
        self.mmproj.setToolTip("--mmproj: load this vision projector (its weights and compute are planned)")
        self.mmproj_cpu = QCheckBox("on the CPU")
        self.mmproj_cpu.setToolTip("--no-mmproj-offload: keep the projector in host RAM, not on the GPU")
        self._mmproj_path = ""
        # LoRA adapters and a draft model: a section that stays one line high until something is chosen.
        self.extras = ExtrasSection()
        self.extras.changed.connect(self.changed.emit)
        self.extras.refused.connect(self.refused.emit)
        self.engine = QComboBox()
        self._shown_engine = -1  # the engine item shown chosen ("Other…" goes back to it)
        self.engine.setAccessibleName("Engine")
        self.engine.setToolTip("The engine to launch, with its detected kind and version")
        for widget, tip in ((self.type_k, TIPS["type_k"]), (self.type_v, TIPS["type_v"]),
                            (self.kv_unified, TIPS["kvu"]), (self.nkvo, TIPS["nkvo"]),
                            (self.n_parallel, TIPS["n_parallel"]), (self.n_ubatch, TIPS["n_ubatch"]),
                            (self.flash_attn, TIPS["flash_attn"]), (self.safety, TIPS["safety"]),
                            (self.vram_target, TIPS["vram_target"]), (self.cache_ram, TIPS["cache_ram"])):
            widget.setToolTip(tip)
        # The plain view: the model's context and the engine. Every flag is under "Advanced" (closed
        # by default, remembered by the window): its one-line summary says what they are set to.
        self.placement_row = QWidget()  # an applied placement: in the plain view, with the way back
        placement_lay = QHBoxLayout(self.placement_row)
        placement_lay.setContentsMargins(0, 0, 0, 0)
        placement_lay.addWidget(self.placement, 1)
        placement_lay.addWidget(self.placement_reset)
        form = QFormLayout(self)
        self._form = form
        form.addRow("&Context", self.context)
        self._mmproj_row = _row(self.mmproj, self.mmproj_cpu)
        form.addRow(self._mmproj_row)
        self._mmproj_row.setVisible(False)
        engine_label = QLabel("&Engine")
        form.addRow(self.placement_row)
        engine_label.setBuddy(self.engine)
        form.addRow(engine_label)  # the combo gets the whole width: "kind version (commit) — source"
        form.addRow(self.engine)
        self.advanced_toggle = QToolButton()
        self.advanced_toggle.setObjectName("advancedToggle")
        self.advanced_toggle.setCheckable(True)
        self.advanced_toggle.setAutoRaise(True)
        self.advanced_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.advanced_toggle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.advanced_toggle.setToolTip("The llama-server flags the plan launches with: KV cache types, parallel "
                                        "sessions, batch, flash attention, GPU layers, prompt cache, margins, "
                                        "KV placement, adapters and a draft model")
        self.advanced_toggle.toggled.connect(self._advanced_opened)
        form.addRow(self.advanced_toggle)
        self.advanced = QWidget()
        self.advanced.setObjectName("advancedSection")
        adv = QFormLayout(self.advanced)
        adv.setContentsMargins(12, 0, 0, 0)
        adv.addRow("&KV cache", _row(QLabel("K"), self.type_k, QLabel("V"), self.type_v))
        adv.addRow("&Parallel sessions", _row(self.n_parallel, self.kv_unified))
        adv.addRow("M&icro-batch", self.n_ubatch)
        adv.addRow("Flash attention", self.flash_attn)  # its letters are other controls' Alt keys (H: Help)
        adv.addRow("&GPU layers", _row(self.n_gpu_layers, self.nkvo))
        adv.addRow("Prompt cache", self.cache_ram)  # every letter of it is another control's Alt key
        adv.addRow("&Safety margin", self.safety)
        adv.addRow("&VRAM target", self.vram_target)
        adv.addRow("KV pl&acement", self.kv_mode)
        adv.addRow(self.extras)
        form.addRow(self.advanced)
        self.context.contextChanged.connect(lambda _v: self.changed.emit())
        self.context.longestChosen.connect(self.set_settings)
        for combo in (self.type_k, self.type_v, self.n_ubatch, self.flash_attn):
            combo.currentIndexChanged.connect(lambda _i: self.changed.emit())
        self.kv_mode.currentIndexChanged.connect(self._placement_chosen)
        self.kv_unified.toggled.connect(self._kvu_toggled)
        self.engine.setPlaceholderText(LOOKING)
        self.engine.currentIndexChanged.connect(self._engine_chosen)
        for spin in (self.n_parallel, self.safety, self.vram_target, self.n_gpu_layers, self.cache_ram):
            spin.valueChanged.connect(lambda _v: self.changed.emit())
        for check in (self.kv_unified, self.nkvo, self.mmproj, self.mmproj_cpu):
            check.toggled.connect(lambda _b: self.changed.emit())
        self.changed.connect(self._show_advanced_summary)
        self._base = LaunchSettings(n_ctx=32 * K)
        self.set_settings(self._base)
        self._advanced_opened(False)

    def settings(self) -> LaunchSettings:
        """The widgets' values over the last settings set (fields without a widget kept). In window
        mode -kvu is off: that engine cannot do it (the box is greyed, its setting kept)."""
        return self._base.with_(
            n_ctx=self.context.value(), type_k=self.type_k.currentText(), type_v=self.type_v.currentText(),
            n_parallel=self.n_parallel.value(), kv_unified=self.kv_unified.isChecked() and not self.engine_window(),
            n_ubatch=int(self.n_ubatch.currentText()), flash_attn=FlashAttn(self.flash_attn.currentText()),
            n_gpu_layers=self.n_gpu_layers.value(), offload_kqv=not self.nkvo.isChecked(),
            cache_ram_mib=None if self.cache_ram.value() < 0 else self.cache_ram.value(),
            mmproj=self._mmproj_path if self.mmproj.isChecked() else "", mmproj_offload=not self.mmproj_cpu.isChecked(),
            **self.extras.values())

    # ---- the Advanced section -------------------------------------------------------------------
    def minimumSizeHint(self) -> QSize:
        """As wide closed as open: opening "Advanced" does not move the splitter beside the form."""
        hint = super().minimumSizeHint()
        margins = self._form.contentsMargins()
        width = self.advanced.minimumSizeHint().width() + margins.left() + margins.right()
        return QSize(max(hint.width(), width), hint.height())

    def advanced_open(self) -> bool:
        """The Advanced section (every flag) is open."""
        return self.advanced_toggle.isChecked()

    def set_advanced_open(self, on: bool) -> None:
        self.advanced_toggle.setChecked(on)
        self._advanced_opened(on)

    def _advanced_opened(self, on: bool) -> None:
        self.advanced_toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.advanced.setVisible(on)
        self._show_advanced_summary()

    def _show_advanced_summary(self) -> None:
        """"Advanced: K f16 V f16 · -np 1 · -ub 512 · -fa on · -ngl all": what the closed section holds."""
        text = f"Advanced: {advanced_summary(self.settings(), self.engine_window(), self._no_gpu)}"
        self.advanced_toggle.setText(text)
        self.advanced_toggle.setAccessibleName("Advanced settings")
        self.advanced_toggle.setStatusTip(text)

    def _show_projector(self, path: Path | None) -> None:
        """"Vision projector: NAME", the name cut in the middle past PROJECTOR_NAME_CHARS (the form
        never grows wider for a long file name; the whole path is the tooltip)."""
        if path is None:
            self.mmproj.setText("Vision projector")
            self.mmproj.setToolTip("")
            return
        name = printable(path.name)
        if len(name) > PROJECTOR_NAME_CHARS:
            half = (PROJECTOR_NAME_CHARS - 1) // 2
            name = f"{name[:half]}…{name[-half:]}"
        self.mmproj.setText(f"Vision projector: {name}")
        self.mmproj.setToolTip(printable(f"--mmproj {path}"))

    def offer_projector(self, model: str | Path | None, *, emit: bool = True) -> bool:
        """Show "Vision projector: FILE" (checked) when a projector for ``model`` lies beside it, else
        hide the row (and plan without one). True when that changed the settings (then ``changed`` is
        emitted, unless ``emit`` is False)."""
        from app.planner.gguf.beside import projector_beside

        before = self.settings()
        found = projector_beside(model) if model is not None else None
        self._mmproj_path = str(found) if found is not None else ""
        for w in (self.mmproj, self.mmproj_cpu):
            w.blockSignals(True)
        self._show_projector(found)
        self.mmproj.setChecked(found is not None)
        self.mmproj_cpu.setChecked(False)
        for w in (self.mmproj, self.mmproj_cpu):
            w.blockSignals(False)
        self._mmproj_row.setVisible(found is not None)
        moved = self.settings() != before
        if moved and emit:
            self.changed.emit()
        return moved

    def set_settings(self, s: LaunchSettings, *, emit: bool = True) -> None:
        """Show ``s`` without emitting ``changed`` once per widget; emits it once at the end (unless
        not ``emit``: the caller hands ``plan_settings()`` on itself)."""
        self._base = s
        widgets = (self.context, self.type_k, self.type_v, self.n_parallel, self.kv_unified,
                   self.n_ubatch, self.flash_attn, self.n_gpu_layers, self.nkvo, self.cache_ram)
        for w in widgets:
            w.blockSignals(True)
        self.context.set_value(s.n_ctx)
        self.type_k.setCurrentText(s.type_k)
        self.type_v.setCurrentText(s.type_v)
        self.n_parallel.setValue(s.n_parallel)
        self._kvu_wanted = s.kv_unified
        self.kv_unified.setChecked(s.kv_unified and not self.engine_window())
        if str(s.n_ubatch) not in [self.n_ubatch.itemText(i) for i in range(self.n_ubatch.count())]:
            self.n_ubatch.addItem(str(s.n_ubatch))
        self.n_ubatch.setCurrentText(str(s.n_ubatch))
        self.flash_attn.setCurrentText(s.flash_attn.value)
        self.n_gpu_layers.setValue(s.n_gpu_layers)
        self.nkvo.setChecked(not s.offload_kqv)
        self.cache_ram.setValue(-1 if s.cache_ram_mib is None else max(s.cache_ram_mib, 0))  # no limit: CLI only
        self._show_overrides(s)
        self.extras.show_settings(s)
        if s.mmproj:  # a projector in the settings given (the CLI's --mmproj, an applied plan): shown, checked
            self._mmproj_path = s.mmproj
            for check, on in ((self.mmproj, True), (self.mmproj_cpu, not s.mmproj_offload)):
                check.blockSignals(True)
                check.setChecked(on)
                check.blockSignals(False)
            self._show_projector(Path(s.mmproj))
            self._mmproj_row.setVisible(True)
        for w in widgets:
            w.blockSignals(False)
        self._show_advanced_summary()
        if emit:
            self.changed.emit()

    def engine_window(self) -> bool:
        """True when planning for the rolling KV window (opencoti) instead of stock placement."""
        return self.kv_mode.currentIndex() == 1

    def wants_window(self) -> bool:
        """The placement asked for (kept while the chosen engine cannot realise it)."""
        return self._wants_window

    def set_engine_window(self, on: bool) -> None:
        """Ask for the rolling KV window (or not); shown only while the chosen engine can realise it."""
        self._wants_window = on
        self._show_placement()

    def refuse_window(self, why: str) -> None:
        """``why`` the chosen engine cannot realise the rolling KV window ('' : it can). The choice is
        greyed with the reason, and the plan falls back to stock placement until an engine can."""
        self._window_refused = why
        model = self.kv_mode.model()
        assert isinstance(model, QStandardItemModel)  # a QComboBox's own model
        item = model.item(1)
        item.setEnabled(not why)
        item.setText(KV_MODES[1] if not why else f"{KV_MODES[1]} — not with this engine")
        item.setToolTip(why or KV_MODE_TIP)
        self.kv_mode.setToolTip(f"{KV_MODE_TIP}.\nNot offered now: {why}" if why else KV_MODE_TIP)
        self._show_placement()

    def _show_placement(self) -> None:
        want = 1 if self._wants_window and not self._window_refused else 0
        if self.kv_mode.currentIndex() != want:
            self.kv_mode.blockSignals(True)
            self.kv_mode.setCurrentIndex(want)
            self.kv_mode.blockSignals(False)
            self._placement_changed()

    def _placement_chosen(self, index: int) -> None:
        """The user picked a placement in the combo."""
        self._wants_window = index == 1
        self._placement_changed()

    def _placement_changed(self) -> None:
        window = self.engine_window()
        self.kv_unified.blockSignals(True)
        self.kv_unified.setChecked(self._kvu_wanted and not window)
        self.kv_unified.blockSignals(False)
        self.kv_unified.setEnabled(not window)
        self.kv_unified.setToolTip(f"{TIPS['kvu']}\nNot offered now: {words.KVU_NOT_WITH_WINDOW}" if window
                                   else TIPS["kvu"])
        self.changed.emit()

    def _kvu_toggled(self, on: bool) -> None:
        if self.kv_unified.isEnabled():
            self._kvu_wanted = on

    def _show_overrides(self, s: LaunchSettings) -> None:
        parts = ([f"--n-cpu-moe {s.n_cpu_moe}"] if s.n_cpu_moe else []) + (
            [f"-ot {s.override_text()}"] if s.tensor_overrides else [])
        self.placement.setText("Placement applied: " + "  ".join(parts) if parts else "")
        self.placement_row.setVisible(bool(parts))

    def reset_placement(self) -> None:
        """Back to the planner's placement: every layer on the GPU, no ``-ot``, no ``--n-cpu-moe`` (an
        applied ``-ot`` comes with the ``-ngl`` that left its layers)."""
        self.set_settings(_planner_placed(self.settings()))

    def settings_for_model(self, n_ctx: int, shape: ModelShape | None = None) -> PlanSettings:
        """Another model opens: its context (``n_ctx``) and the planner's placement (every layer on
        the GPU, no -ot, no --n-cpu-moe, no -ts), shown without a
        plan for the model still open; the caller plans the new model with what this returns.

        With the new model's ``shape``, the LoRA adapters and the draft model go by the rule that
        takes a file when it is chosen: each one llama.cpp would load with this model stays (a LoRA
        of its architecture whose every tensor the model has, in that shape; a draft whose
        vocabulary is the model's), the others are left out, said by ``notice``. So a switch between
        quantizations or fine-tunes of one base keeps them; a LoRA is never planned against weights
        it does not fit, which the engine would refuse at load."""
        # -ngl counts another model's layers (an applied -ngl 0 or -ngl 22 is no setting for this one)
        s = _planner_placed(self.settings()).with_(n_ctx=n_ctx, n_gpu_layers=ALL_LAYERS)
        if shape is not None:
            s = self._extras_for(s, shape)
        self.set_settings(s, emit=False)
        return self.plan_settings()

    def has_extras(self) -> bool:
        """A LoRA adapter or a draft model is chosen."""
        return self.extras.has_extras()

    def extras_for_model(self, shape: ModelShape) -> PlanSettings:
        """The settings now with only the adapters and draft ``shape`` can take (``settings_for_model``'s
        rule; the demo opens with its own context), shown without a plan."""
        self.set_settings(self._extras_for(self.settings(), shape), emit=False)
        return self.plan_settings()

    def _extras_for(self, s: LaunchSettings, shape: ModelShape) -> LaunchSettings:
        kept, dropped = self.extras.kept_for(shape)
        if dropped:
            self.notice.emit("; ".join(dropped))
        return s.with_(**kept)

    def set_context(self, n_ctx: int) -> None:
        """Show ``n_ctx`` in the context field (as if typed)."""
        self.context.set_value(n_ctx, emit=True)

    def dragging(self) -> bool:
        """The user holds the context slider."""
        return self.context.slider.isSliderDown()

    def set_margins(self, safety_mib: int, vram_target_mib: int) -> None:
        """The safety margin and the VRAM target (0: all free VRAM), in MiB."""
        self.safety.setValue(safety_mib)
        self.vram_target.setValue(vram_target_mib)

    def safety_bytes(self) -> int:
        return self.safety.value() * MiB

    def vram_target_bytes(self) -> int | None:
        v = self.vram_target.value()
        return v * MiB if v else None

    def plan_settings(self) -> PlanSettings:
        """Everything the panel says, for the planner (``problem``: a context typed wrong)."""
        return PlanSettings(self.settings(), self.engine_window(), self.safety_bytes(), self.vram_target_bytes(),
                            self.context.invalid)

    # ---- the window state ----------------------------------------------------------------------
    def bind(self, state: WindowState) -> None:
        """Every edit goes to ``state`` (the settings now, at once); the largest context that fits
        and the engines found come back from it."""
        self.changed.connect(lambda: state.set_settings(self.plan_settings()))

        def model_changed(model: OpenModel) -> None:  # the model's own plan follows: it includes the projector
            self.extras.set_model(model.shape, None if model.demo else model.path)
            # (beside the GGUF: a llamafile's own archive holds its projector, shape.path names the GGUF there)
            if self.offer_projector(None if model.demo else model.shape.path, emit=False):
                state.set_settings(self.plan_settings(), replan=False)

        state.modelChanged.connect(model_changed)
        self.engineChosen.connect(state.choose_engine)
        state.planChanged.connect(lambda plan: self._show_fit(plan, state.fit, state.settings.engine_window))
        state.planChanged.connect(self._show_mode)
        state.noPlan.connect(lambda _why: self.context.set_largest_fit(None, words.NO_LARGEST))
        state.enginesChanged.connect(self.show_engines)
        state.engineChosen.connect(lambda engine: self.refuse_window(window_refusal(state.engines, engine)))
        state.set_settings(self.plan_settings())

    def _show_mode(self, plan: Plan) -> None:
        """A plan for the CPU launches -ngl 0: the Advanced summary says so, not the -ngl set."""
        from app.planner.plan_types import PlanMode

        self._no_gpu = plan.mode is PlanMode.CPU
        self._show_advanced_summary()

    def _show_fit(self, plan: Plan, fit: ContextFit | None, engine_window: bool) -> None:
        """"How far can I go", with the CLI's figures (words.context_reach): the largest context as set
        on the fits button, the longest with part of it in host RAM on the one under it."""
        from app.ui.options_view import cap_text

        if fit is None:
            return
        reach = words.context_reach(plan, fit)
        resident = next((e for e in reach if e.resident), None)
        longer = next((e for e in reach if not e.resident), None)
        if resident is None:  # not even the smallest context fits as set: say so, not a bare "fully on GPU"
            self.context.set_largest_fit(None, words.none_fits(words.largest_where(plan, 0, 0, False)[1]))
        else:
            self.context.set_largest_fit(resident.n_ctx, resident.where,
                                         capped=cap_text(fit) if resident.at_least else "",
                                         at_least=resident.at_least and fit.beyond_trained,
                                         speed=words.short_speed(resident.alternative))
        self.context.set_longest(words.end_words(longer) if longer else "", longer.launch if longer else None)

    # ---- engines -------------------------------------------------------------------------------
    def show_engines(self, engines: list[EngineInfo] | None) -> None:
        """The engines found, first chosen (None: still looking; the list shown stays)."""
        combo = self.engine
        if engines is None:
            combo.setPlaceholderText(LOOKING)
            return
        combo.blockSignals(True)
        combo.clear()
        for i, e in enumerate(engines):
            text = f"{e.kind} {e.version} ({e.llama_cpp.removeprefix('llama.cpp ')}) — {e.source}"
            combo.addItem(text, e.path)  # a narrow window cuts the text: the tooltip has it all
            combo.setItemData(i, f"{text}\n{e.path}", Qt.ItemDataRole.ToolTipRole)
        combo.addItem(OTHER_ENGINE, OTHER_ENGINE)  # the last item: pick an engine file (otherEngineWanted)
        combo.setItemData(len(engines), "Choose an engine file: llama-server or a llamafile",
                          Qt.ItemDataRole.ToolTipRole)
        view = combo.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + view.verticalScrollBar().sizeHint().width())
        combo.setCurrentIndex(0 if engines else -1)
        self._shown_engine = combo.currentIndex()
        combo.blockSignals(False)
        combo.setPlaceholderText(NONE_FOUND if not engines else "")
        self._engine_tooltip(combo.currentIndex())

    def choose_engine(self, path: str) -> bool:
        """Choose the engine at ``path`` if it is in the list; False when it is not."""
        i = self.engine.findData(path)
        if i < 0:
            return False
        self.engine.setCurrentIndex(i)
        return True

    def _engine_chosen(self, i: int) -> None:
        if self.engine.itemData(i) == OTHER_ENGINE:  # not an engine: back to the one chosen, then ask
            self.engine.blockSignals(True)
            self.engine.setCurrentIndex(self._shown_engine)
            self.engine.blockSignals(False)
            self.otherEngineWanted.emit()
            return
        self._shown_engine = i
        self._engine_tooltip(i)
        self.engineChosen.emit(i)

    def _engine_tooltip(self, i: int) -> None:
        """The chosen engine's full text and path, wherever the combo cuts it."""
        tip = self.engine.itemData(i, Qt.ItemDataRole.ToolTipRole)
        self.engine.setToolTip(f"The engine to launch: {tip}" if isinstance(tip, str) else
                               "The engine to launch, with its detected kind and version")
