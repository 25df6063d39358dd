"""The sentences a user reads about a plan, made here and only here.

The solver (:mod:`app.planner.solve.plan`, :mod:`app.planner.solve.stack`) works out facts — which device is
short and by how much, how many layers moved, which source a number has — and hands them to these
functions; the plan carries the resulting sentences (``Plan.reason``, ``Plan.warnings``,
``Alternative.label``/``note``, a source's detail), and the CLI (app/commands/plan.py, serve.py)
and the window (app/ui) print them as they are. What the CLI adds around a plan (its first line
when the plan launches otherwise than asked) is made here too, from the plan's fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.planner.measurement import Measurement, gpu_caveat
from app.planner.plan_types import Alternative, AlternativeKind, ContextFit, Plan, PlanMode
from app.planner.settings import (
    ALL_LAYERS,
    AUTO_CACHE_MIN_MIB,
    AUTO_CACHE_RESERVE_MIB,
    DEFAULT_CACHE_RAM_MIB,
    LaunchSettings,
)
from app.planner.solve.speed import TURN_PROMPT, SpeedRow
from app.planner.sources import Source, SourceKind
from app.planner.units import Bytes, MiB, format_tokens, round_tokens


def plural(n: int, noun: str, plural_form: str = "") -> str:
    """``1 slot``, ``2 slots``, ``0 slots`` (``plural_form`` when adding an s is wrong)."""
    return f"{n} {noun if n == 1 else plural_form or noun + 's'}"


# ---- Where a plan does not fit (Plan.reason, an Alternative's note) ----------------------------


def gpu_short(device: str, short: int) -> str:
    return f"{device} is short by {Bytes(short)}"


def over_vram_target(device: str, needed: int, target: int) -> str:
    return f"{device} needs {Bytes(needed)}, over the VRAM target {Bytes(target)}"


def host_short(short: int, *, kv_tail: bool = False) -> str:
    """The issue's "host RAM short" sentence, the same words in every mode."""
    return f"host RAM is short by {Bytes(short)}" + (" for the KV tail" if kv_tail else "")


# ---- What a plan holds (Plan.reason when it fits) ----------------------------------------------

FITS_IN_HOST_RAM = "fits in host RAM"


def window_reason(window: int, cells: int) -> str:
    return (f"window {format_tokens(window)} of {format_tokens(cells)} cells resident, "
            f"host tail {format_tokens(cells - window)}")


def stock_reason(label: str, note: str, *, as_set: bool) -> str:
    """A stock plan that fits: what the settings as given put where, or the alternative chosen."""
    return note if as_set else f"{label}: {note}"


# ---- The stock alternatives (Alternative.label / note) ------------------------------------------

#: The label of the alternative that is the settings as given (priced first; its note says why not).
AS_SET = "as set"
KV_ON_HOST_LABEL = "-nkvo"


def kv_on_host_note(host_attention: bool) -> str:
    """-nkvo's note: where its attention runs for each token depends on the engine (Headroom's patch 5)."""
    return ("the whole KV cache in host RAM; attention runs on the CPU" if host_attention else
            "the whole KV cache in host RAM, read over the bus for each token by the stock engine")


def layers_on_cpu(n_layer: int, moved: int) -> str:
    """``-ngl`` counts the output layer as one more (llama.cpp: "offloaded 33/33 layers" for 32):
    say which are on the CPU in the model's own terms ("N of M layers")."""
    if moved > n_layer:
        return f"all {n_layer} layers, the output layer"
    return f"{moved} of {n_layer} layers"


def as_set_note(n_layer: int, settings: LaunchSettings) -> str:
    """What the settings as given put where, in words."""
    on_cpu = n_layer + 1 - min(settings.n_gpu_layers, n_layer + 1)
    parts = []
    if on_cpu and settings.tensor_overrides:  # -ngl leaves the layers, -ot brings weights back
        parts.append(f"the KV of {layers_on_cpu(n_layer, on_cpu)} in host RAM, their attention on the CPU "
                     f"(-ngl {settings.n_gpu_layers}); weights placed by -ot {settings.override_text()}")
    elif on_cpu:
        parts.append(f"{layers_on_cpu(n_layer, on_cpu)} and their KV on the CPU (-ngl {settings.n_gpu_layers})")
    elif settings.tensor_overrides:
        parts.append(f"weights placed by -ot {settings.override_text()}")
    if settings.n_cpu_moe:
        parts.append(f"the expert weights of the first {min(settings.n_cpu_moe, n_layer)} of {n_layer} layers "
                     f"in host RAM (--n-cpu-moe {settings.n_cpu_moe})")
    if not settings.offload_kqv:
        parts.append("the whole KV cache in host RAM (-nkvo)")
    return "; ".join(parts) or "everything resident on the GPU"


def fewer_layers_label(n_gpu_layers: int) -> str:
    return f"-ngl {n_gpu_layers}"


def fewer_layers_note(n_layer: int, moved: int) -> str:
    return f"{layers_on_cpu(n_layer, moved)} and their KV run on the CPU"


def shorter_context_label(n_ctx: int, placement: str = "") -> str:
    """``-c N``, and the placement it needs when the settings as given do not hold it
    ("-c 32768 --n-cpu-moe 39")."""
    return f"-c {n_ctx}" + (f" {placement}" if placement else "")


def shorter_context_note(n_ctx: int, placement_note: str = "") -> str:
    if placement_note:
        return f"a shorter context ({format_tokens(n_ctx)}); {placement_note}"
    return f"a shorter context ({format_tokens(n_ctx)}), fully resident"


# ---- Warnings -----------------------------------------------------------------------------------

WINDOW_WITHOUT_KVU = "the position window cannot be combined with --kv-unified: planned per-slot caches"


def flash_attention_off(n_ctx: int) -> str:
    return (f"flash attention is off at {format_tokens(n_ctx)} context: the compute buffer "
            "grows with context × ubatch × heads (gigabytes); turn it on")


def compute_source_warning(source: Source, measurement: Measurement | None) -> str | None:
    """What the compute buffers' source means for trusting the plan (None: measured for this launch)."""
    if source.kind is SourceKind.ESTIMATED and measurement is not None:
        # Whose numbers: the one sentence the CLI and the UI both show, from gpu_caveat.
        return (gpu_caveat(measurement, targets_gpu=True) or
                f"pass 1 measured {', '.join(d.name for d in measurement.devices)}, not these GPUs: "
                "compute buffers are an estimate")
    if source.kind is SourceKind.ESTIMATED:
        return (f"compute buffers are an estimate{f' ({source.detail})' if source.detail else ''}: "
                "run pass 1 (headroom measure) for measured numbers")
    if source.kind is SourceKind.MEASURED_ELSEWHERE:
        return (f"compute buffers were pass 1 for other settings at {source.detail}: run pass 1 again "
                "for this launch (headroom measure) before trusting them")
    return None


def cuda_gap(gap: str) -> str:
    """The detail of a CUDA compute estimate for a launch outside its fit (app/planner/memory/compute.py
    ``cuda_fit_gap``); "" inside it."""
    return f"never compared with CUDA {gap}" if gap else ""


def short_slots(settings: LaunchSettings, n_ctx_seq: int) -> str:
    return (f"each of the {settings.n_parallel} slots holds only {n_ctx_seq:,} tokens (-c "
            f"{settings.n_ctx:,} split by -np {settings.n_parallel}): raise -c, lower -np, or use -kvu")


def over_training_context(n_ctx_seq: int, n_ctx_train: int) -> str:
    """Past the training context the model needs its positions stretched (RoPE scaling), which the GGUF's
    own settings do not do and Headroom does not pass: said with the flags llama-server would need."""
    scale = -(-n_ctx_seq // n_ctx_train)
    return (f"context per sequence {format_tokens(n_ctx_seq)} exceeds the model's training "
            f"context {format_tokens(n_ctx_train)}: past it the model needs RoPE scaling (llama-server: "
            f"--rope-scaling yarn --rope-scale {scale} --yarn-orig-ctx {n_ctx_train}), which Headroom does not "
            f"set; without it replies degrade past {format_tokens(n_ctx_train)} tokens")


def no_gpu(reason: str) -> str:
    return f"no GPU: {reason}"


def window_below_ubatch(window: int, n_ubatch: int) -> str:
    return (f"the resident window ({window} cells) is smaller than one ubatch "
            f"({n_ubatch}): prefill will stream from host RAM")


def chose_instead(why: str, label: str, note: str) -> str:
    return f"the settings as given do not fit ({why}); chose {label}: {note}"


def chose_instead_of(plan: Plan) -> str:
    """The ``chose_instead`` warning a stock plan carries when it chose an alternative ('' when none):
    the window's verdict says the same, and shows it once."""
    first = next((a for a in plan.alternatives if a.kind is AlternativeKind.AS_SET), None)
    chosen = next((a for a in plan.alternatives if a.chosen), None)
    if first is None or first.feasible or chosen is None or chosen is first or not chosen.feasible:
        return ""
    return chose_instead(first.note, chosen.label, chosen.note)


def measure_again(label: str) -> str:
    return f"compute buffers were measured for the settings as given: measure {label} again before launching"


# ---- Sources' details ---------------------------------------------------------------------------

#: Host weights the CPU backend copies out of the mapping into its own layout (CPU_REPACK).
REPACKED_COPY = "repacked copy for the CPU backend"


def repacked_detail(repacked: int) -> str:
    """The weights_mapped source's detail when part of it is the CPU backend's copy."""
    return f"mapped file + {Bytes(repacked)} {REPACKED_COPY}"


def nvml_processes_detail(n_processes: int, held: int, reserve: int) -> str:
    verb = "holds" if n_processes == 1 else "hold"
    return f"{plural(n_processes, 'process', 'processes')} {verb} {Bytes(held)}, the driver keeps {Bytes(reserve)}"


# ---- Launching a plan ------------------------------------------------------------------------------


def plan_does_not_fit(reason: str) -> str:
    """Why a plan is not launched (``headroom serve`` and the engine's launch refusal)."""
    return f"the plan does not fit: {reason}"


# ---- A launch the user takes responsibility for (headroom serve --unplanned) ---------------------


def unplanned_reason(reason: str) -> str:
    return f"not planned ({reason})"


def unplanned_warning(reason: str) -> str:
    return (f"not planned: {reason}; launched with the flags as given and --fit off, "
            "so nothing was sized or will be checked")


# ---- What the KV cache holds where (the CLI's KV line, the window's numbers under the bars) ------


def _share(part: int, whole: int) -> str:
    return f"{part / max(whole, 1):.0%}"


def kv_placement(plan: Plan) -> str:
    """Where the plan puts the KV cache, in the words of its mode: a CPU plan has no window, a stock
    plan moves whole layers' KV (it has no position window either), a window plan has a resident
    window and maybe a host tail."""
    cells = plan.window_cells + plan.tail_cells
    if plan.mode is PlanMode.CPU or not plan.gpus:
        return f"KV cache: all {format_tokens(cells)} cells in host RAM (no GPU)"
    if plan.mode is PlanMode.WINDOW:
        if plan.tail_cells == 0:
            return f"KV window: all {format_tokens(cells)} cells resident on the GPU, no host tail"
        return (f"KV window: {format_tokens(plan.window_cells)} cells resident on the GPU "
                f"({_share(plan.window_cells, cells)}), host tail {format_tokens(plan.tail_cells)} cells "
                f"in host RAM ({_share(plan.tail_cells, cells)})")
    on_gpu, on_host = sum(int(g.kv_resident) for g in plan.gpus), int(plan.host.kv_tail)
    if not plan.launch.offload_kqv:
        return f"KV cache: all {format_tokens(cells)} cells in host RAM (-nkvo)"
    if on_host == 0:
        return f"KV cache: all {format_tokens(cells)} cells on the GPU"
    if on_gpu == 0:
        return f"KV cache: all {format_tokens(cells)} cells in host RAM, with every layer on the CPU"
    n_layer = (plan.kv.caches[0].get("layers", 0) if plan.kv and plan.kv.caches else 0) or 0
    if plan.kv_host_layers and n_layer:
        resident = n_layer - plan.kv_host_layers
        return (f"KV cache by layer: {resident} of {n_layer} layers resident ({Bytes(on_gpu)}), host tail "
                f"{plural(plan.kv_host_layers, 'layer')} in host RAM ({Bytes(on_host)}), all {format_tokens(cells)} cells each")
    return (f"KV cache by layer: {Bytes(on_gpu)} on the GPU, {Bytes(on_host)} in host RAM "
            "(the KV of the layers on the CPU)")


# ---- The window's verdict on a plan ------------------------------------------------------------

FITS = "Fits"
DOES_NOT_FIT = "Does not fit"
NO_PLAN = "No plan"
NO_GPU_FITS = "no GPU, every layer runs from host RAM"
#: The largest context when there is nothing to say it for.
NO_LARGEST = "none (no plan)"


DOES_NOT_FIT_AS_SET = "Does not fit as set"


def planned_instead(label: str, why: str = "") -> str:
    """After "Does not fit as set": why not (the settings as given), and what was planned."""
    return (f"({why}); " if why else "") + f"planned instead: {label}"


def window_drops_kvu(n_parallel: int) -> str:
    """Why a window plan launches without -kvu (not "does not fit": the engine cannot do both)."""
    return (f"the rolling KV window cannot be combined with -kvu: each of the {n_parallel} slots gets "
            "its own cache")


def window_not_offered(engine_kind: str | None) -> str:
    """Why the window does not offer the rolling KV window placement (the engine cannot do it)."""
    if engine_kind is None:
        return "the rolling KV window needs the opencoti engine, and no engine was found"
    return f"the rolling KV window needs the opencoti engine; the engine chosen is {engine_kind}"


#: Why -kvu is greyed while the window plans for the rolling KV window.
KVU_NOT_WITH_WINDOW = "the rolling KV window cannot be combined with -kvu: each slot gets its own cache"


def as_set_launch(plan: Plan) -> LaunchSettings:
    """The settings as given that ``plan`` was made for (its largest contexts are searched for
    these): the stock plan's first alternative, else the plan's launch (a CPU or window plan)."""
    return next((a.launch for a in plan.alternatives if a.kind is AlternativeKind.AS_SET), plan.launch)


def resident_where(settings: LaunchSettings | None) -> str:
    """Where a context that fits ``settings`` as set lives: "fully on GPU" only when they put every
    layer, its experts and its KV there (None: not known, the default launch)."""
    if settings is None:
        return "fully on GPU"
    if settings.n_gpu_layers == 0:
        return "in host RAM"  # every layer and its KV on the CPU
    if not settings.offload_kqv:
        return "with the KV in host RAM"
    if not all_on_gpu(settings):
        return "with these settings"
    return "fully on GPU"


def all_on_gpu(settings: LaunchSettings) -> bool:
    """Whether ``settings`` put every layer, its experts and its KV on the GPUs (-ngl all, no -ot,
    no --n-cpu-moe, no -nkvo)."""
    return (settings.n_gpu_layers >= ALL_LAYERS and settings.offload_kqv and not settings.tensor_overrides
            and not settings.n_cpu_moe)


def resident_note(settings: LaunchSettings) -> str:
    """The options row's note on the largest context as set: where its KV and layers are."""
    where = resident_where(settings)
    if where == "in host RAM":
        return "-ngl 0: every layer and its KV in host RAM"
    if where == "with the KV in host RAM":
        return "-nkvo: the whole KV cache in host RAM, attention on the CPU"
    if where == "with these settings":
        return "placed as the settings say (-ngl, -ot, --n-cpu-moe): part of it runs from host RAM"
    return "every KV cell resident"


def largest_where(plan: Plan, fit_resident: int, fit_tail: int, engine_window: bool) -> tuple[int, str, bool]:
    """The largest context to offer for ``plan`` and where it lives: (tokens, words, with a tail).
    "with a host tail" only when the tail buys more than the fully resident context; "fully on GPU"
    only when the settings as given put everything there."""
    return largest_for(bool(plan.gpus), fit_resident, fit_tail, engine_window, as_set_launch(plan))


def largest_for(gpus: bool, fit_resident: int, fit_tail: int, engine_window: bool,
                settings: LaunchSettings | None = None) -> tuple[int, str, bool]:
    """``largest_where`` for a plan with (``gpus``) or without GPUs, of ``settings`` as set."""
    if not gpus:
        return fit_resident, "in host RAM", False
    if engine_window and fit_tail > fit_resident:
        return fit_tail, "with a host tail", True
    return fit_resident, resident_where(settings), False


def none_fits(where: str) -> str:
    """The largest context when none fits (the settings as given hold not even the smallest)."""
    return f"none fits {where}"


def chart_measured_detail(at: str) -> str:
    """The context chart's compute source when pass 1 anchors a curve: "measured by pass 1 (…)"."""
    return f"at {at}; larger contexts add the estimate's growth, smaller ones keep it as a floor"


# ---- Around a plan (the CLI) ----------------------------------------------------------------------


def ngl_text(n_gpu_layers: int) -> str:
    """``-ngl`` as a user writes it: a count, or ``all``."""
    return "all" if n_gpu_layers >= ALL_LAYERS else str(n_gpu_layers)


NO_GPU_PLANNED = "no GPU: planned for the CPU (-ngl 0)"
#: What the marks in front of the CLI's alternatives mean.
ALTERNATIVES_LEGEND = "(* chosen, - does not fit, blank: fits, not chosen)"


def only_no_gpu(plan: Plan, asked: LaunchSettings) -> bool:
    """Whether ``plan`` changed ``asked`` only as having no GPU forces: a CPU plan's -ngl 0, with a
    vision projector on the CPU too (app/planner/solve/plan.py ``_cpu_plan``)."""
    return plan.mode is PlanMode.CPU and plan.launch == asked.with_(
        n_gpu_layers=0, mmproj_offload=plan.launch.mmproj_offload)


def changed(plan: Plan, asked: LaunchSettings) -> str:
    """The first line when the plan launches otherwise than asked ('' when it launches as asked):
    "512k DOES NOT FIT as asked (CUDA0 short 87.3 GiB); planned instead: -c 49,664"."""
    launch = plan.launch
    asked = asked.with_(rpc=launch.rpc, tensor_split=launch.tensor_split)  # the devices and the planner's split
    if launch == asked:                                                       # (--rpc, -ts) are not a change
        return ""
    if only_no_gpu(plan, asked):
        return NO_GPU_PLANNED  # not a change the settings forced: the only way
    if plan.mode is PlanMode.WINDOW and launch == asked.with_(kv_unified=False):
        return window_drops_kvu(asked.n_parallel)
    instead = []
    chosen = next((a for a in plan.alternatives if a.chosen), None)
    if chosen is not None and chosen.kind in (AlternativeKind.KV_HOST_LAYERS, AlternativeKind.EXPERTS_ON_CPU,
                                              AlternativeKind.BOTH, AlternativeKind.SMALLER_KV_TYPE):
        instead.append(chosen.label)  # (its -ngl is the means, not the point; "-ctk q8_0 -ctv q8_0")
    elif chosen is not None and chosen.kind is AlternativeKind.SHORTER_CONTEXT and chosen.placement:
        instead += [f"-c {launch.n_ctx}", chosen.placement]  # "-c 32768 --n-cpu-moe 39"
    else:
        if launch.n_ctx != asked.n_ctx:
            instead.append(f"-c {launch.n_ctx}")
        if launch.n_gpu_layers != asked.n_gpu_layers:
            instead.append(f"-ngl {ngl_text(launch.n_gpu_layers)}")
        if launch.offload_kqv != asked.offload_kqv:
            instead.append("-nkvo" if not launch.offload_kqv else "KV offloaded")
    # The planner prices the settings as given first; when they do not fit, its note says why.
    why = next((a.note for a in plan.alternatives if a.kind is AlternativeKind.AS_SET and not a.feasible), "")
    ends = context_ends(plan)
    both = ""
    if chosen is not None and ends is not None and chosen.launch.n_ctx == ends[0].launch.n_ctx:
        both = f" ({speed_words(chosen)}); longest: {' '.join(_end_flags(ends[1]))} ({speed_words(ends[1])})"
    return (f"{round_tokens(asked.n_ctx)} DOES NOT FIT as asked{f' ({why})' if why else ''}; "
            f"planned instead: {' '.join(instead) or 'other settings'}{both}")


def _end_flags(a: Alternative) -> list[str]:
    return [f"-c {a.launch.n_ctx}", *([a.placement] if a.placement else [])]


def context_ends(plan: Plan) -> tuple[Alternative, Alternative] | None:
    """The two ends a stock plan offers when the asked context fits no way (fastest, longest): the
    largest context fully resident and the longest with part of it in host RAM; None otherwise."""
    shorter = [a for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT and a.feasible]
    if len(shorter) < 2:
        return None
    return min(shorter, key=lambda a: a.launch.n_ctx), max(shorter, key=lambda a: a.launch.n_ctx)


def tokens_per_s(x: float) -> str:
    """A predicted rate as a person reads it: "1,234", "45", "4.3", "0.06", "0.0049" (two significant
    figures under 1: a host tail at a long context can be that slow, and "0.00" said nothing)."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.0f}"
    return f"{x:.1f}" if x >= 1 else f"{x:#.2g}"


def speed_words(a: Alternative) -> str:
    """"~45 tok/s decode, ~1,234 prefill (half full)": the alternative's predicted speed."""
    return row_speed_words(a.speed)


def row_speed_words(row: SpeedRow | None) -> str:
    """``speed_words`` of a predicted speed row."""
    if row is None:
        return "speed not predicted"
    half = row.at_fill(0.5)
    return f"~{tokens_per_s(half.decode)} tok/s decode, ~{tokens_per_s(half.prefill)} prefill at half context"


def dead_worker(endpoint: str, why: str) -> str:
    """A plan warning for an RPC worker that did not answer."""
    return f"RPC worker {endpoint} did not answer ({why}): planned without it"


def network_summary(per_token: int, per_ubatch: int, n_ubatch: int, load: int, crossings: int) -> str:
    """What crosses the network for a plan over RPC workers, in one line."""
    return (f"network: {Bytes(per_token)} per generated token and {Bytes(per_ubatch)} per {n_ubatch}-token "
            f"prefill batch ({plural(crossings, 'crossing')} of the hidden state, the logits when a worker holds the "
            f"output layer); {Bytes(load)} of weights sent once at load (ggml-rpc-server -c caches them)")


def kv_host_layers_label(n: int) -> str:
    return f"KV of {plural(n, 'layer')} on host"


def kv_host_layers_note(n_layer: int, n: int, host_attention: bool = False) -> str:
    where = ("their attention on the CPU for each token (Headroom's engine)" if host_attention else
             "read over the bus for each token by the stock engine")
    return f"every weight resident; the KV of layers 0–{n - 1} ({n} of {n_layer}) in host RAM, {where} (-ngl + -ot)"


def experts_on_cpu_label(n: int) -> str:
    return f"--n-cpu-moe {n}"


def experts_on_cpu_note(n_layer: int, n: int) -> str:
    return (f"the expert weights of the first {n} of {n_layer} layers in host RAM (a token reads only its "
            "experts' share); attention, dense weights and the KV resident")


def prompt_cache_detail(cache_ram_mib: int | None, held_mib: int, context_kv: int, cells: int) -> str:
    """Why the server's prompt cache holds ``held_mib``: auto sizes it for one full context's KV
    (``context_kv`` bytes, ``cells`` tokens), within the engine's default and the host RAM left."""
    if cache_ram_mib is None:
        if held_mib == 0:
            return "--cache-ram 0: host RAM has no room left for the server's prompt cache (-cram MiB sets it)"
        if held_mib >= DEFAULT_CACHE_RAM_MIB:
            return f"--cache-ram {held_mib}: the server's default; its prompt cache may fill this much over time"
        wanted = max(AUTO_CACHE_MIN_MIB, -(-context_kv // MiB))
        if held_mib >= wanted:
            return (f"--cache-ram {held_mib}: room for one full context's KV ({cells:,} tokens) in the server's "
                    f"prompt cache, not its {DEFAULT_CACHE_RAM_MIB} MiB default (-cram MiB sets it)")
        short_of = (f"the server's {DEFAULT_CACHE_RAM_MIB} MiB" if wanted >= DEFAULT_CACHE_RAM_MIB
                    else f"one full context's KV ({wanted:,} MiB)")
        return (f"--cache-ram {held_mib}: less than {short_of}, to leave {AUTO_CACHE_RESERVE_MIB} MiB of host "
                "RAM to the rest of the desktop (-cram MiB sets it)")
    if cache_ram_mib == -1:
        return "--cache-ram -1: no limit, not held back"
    if cache_ram_mib == 0:
        return "--cache-ram 0: off"
    return f"--cache-ram {cache_ram_mib}: the server's prompt cache may fill this much over time"


UNLIMITED_PROMPT_CACHE = ("--cache-ram -1: the server's prompt cache has no limit and can fill host RAM hours "
                          "after a launch that fit; give it a size (--cache-ram MiB)")


def both_label(n_layer: int, n: int) -> str:
    return f"--n-cpu-moe {n_layer} + KV of {plural(n, 'layer')} on host"


def both_note(n_layer: int, n: int) -> str:
    return (f"every layer's expert weights in host RAM, and the KV of layers 0–{n - 1} ({n} of {n_layer}); "
            "attention and dense weights of the rest resident")


def smaller_kv_label(settings: LaunchSettings) -> str:
    return f"-ctk {settings.type_k} -ctv {settings.type_v}"


SMALLER_KV_NOTE = ("a smaller KV cache type, everything resident: it changes the numbers the model computes "
                   "(chosen only when nothing that keeps the asked context and KV type fits; before a shorter "
                   "context)")


#: Where a LoRA adapter's bytes are planned (app/planner/memory/extras.py).
LORA_DETAIL = "the adapter's tensors, on the devices of the weights they adapt"


def output_buffer_detail(settings: LaunchSettings) -> str:
    slots = f"{settings.n_parallel} slot" + ("s" if settings.n_parallel != 1 else "")
    draft = ", and the draft model's" if settings.draft_model else ""
    return f"logits: n_vocab × {slots} × 4 bytes{draft}"


# ---- How far it goes, and the choice the plan made (the CLI and the window) -----------------------


@dataclass(frozen=True)
class ContextEnd:
    """One answer to "how far can I go": a context, where it lives and the settings that run it.
    ``resident``: the settings as given hold it (the CLI says "fully resident", the window "fully on
    GPU"); else ``where`` says what goes to host RAM. ``alternative``: the plan's priced alternative
    for it (its predicted speed), None when only the context search found it."""

    n_ctx: int
    where: str
    launch: LaunchSettings
    resident: bool
    alternative: Alternative | None = None
    at_least: bool = False  # the search stopped there, not the memory


def context_reach(plan: Plan, fit: ContextFit) -> list[ContextEnd]:
    """The largest context with everything as set and the longest with part of it in host RAM
    (one when the longer one buys nothing; no resident one when not even the smallest fits as set): the plan's
    own two ends when it offers them (``context_ends``, with their speeds), else the context search's."""
    as_set = as_set_launch(plan)
    resident = resident_where(as_set) if plan.gpus else "in host RAM"
    ends = context_ends(plan)
    if ends is not None:
        fast, longest = ends
        return [ContextEnd(fast.launch.n_ctx, resident, fast.launch, True, fast),
                ContextEnd(longest.launch.n_ctx, f"with {longest.placement or 'part of it in host RAM'}",
                           longest.launch, False, longest)]
    out = [ContextEnd(fit.resident, resident, as_set.with_(n_ctx=fit.resident), True,
                      at_least=fit.resident_capped)] if fit.resident > 0 else []
    if plan.gpus and fit.with_tail > fit.resident:
        # the plan's own shorter context when it is this one: its placement and its speed
        priced = next((a for a in plan.alternatives if a.kind is AlternativeKind.SHORTER_CONTEXT and a.feasible
                       and a.placement and a.launch.n_ctx == fit.with_tail), None)
        if priced is not None:
            out.append(ContextEnd(fit.with_tail, f"with {priced.placement}", priced.launch, False, priced))
        else:
            tail = "with a host tail" if plan.mode is PlanMode.WINDOW else "with part of it in host RAM"
            out.append(ContextEnd(fit.with_tail, tail, as_set.with_(n_ctx=fit.with_tail), False,
                                  at_least=fit.tail_capped))
    return out


def short_speed(a: Alternative | None) -> str:
    """"~45 tok/s": an alternative's predicted decode speed at half context ('' when not predicted)."""
    return row_short_speed(a.speed if a is not None else None)


def row_short_speed(row: SpeedRow | None) -> str:
    """"~45 tok/s": decode at half context, the one fill every short speed the window shows uses (the
    Expected speed line names it: "~45 half-way"); '' when not predicted."""
    if row is None:
        return ""
    return f"~{tokens_per_s(row.at_fill(0.5).decode)} tok/s"


def seconds_text(s: float) -> str:
    """A predicted wait as a person says it: "~0.04 s", "~0.4 s", "~12 s", "~3 min"."""
    if s < 1:
        return f"~{s:.1g} s"
    if s < 90:
        return f"~{s:.0f} s"
    return f"~{s / 60:.0f} min"


def speed_sentence(row: SpeedRow) -> str:
    """The expected speed in words: "~38 tokens/s when you start, ~34 half-way, ~31 at a full context;
    reads a 2k prompt in ~2 s" (decode with the context empty, half and full, a typical prompt read into
    an empty one: ``SpeedRow.prompt_s``). Half-way is the figure the verdict, the buttons and the options
    quote."""
    empty, half, full = row.at_fill(0.0), row.at_fill(0.5), row.at_fill(1.0)
    took = row.prompt_s(TURN_PROMPT)
    read = seconds_text(took) if math.isfinite(took) else "an unknown time"
    return (f"~{tokens_per_s(empty.decode)} tokens/s when you start, ~{tokens_per_s(half.decode)} half-way, "
            f"~{tokens_per_s(full.decode)} at a full context; reads a {round_tokens(TURN_PROMPT)} prompt in {read}")


def end_words(end: ContextEnd) -> str:
    """"312k fully on GPU (~40 tok/s)": one end as the window offers it."""
    speed = short_speed(end.alternative)
    return (f"{'≥ ' if end.at_least else ''}{format_tokens(end.n_ctx)} {end.where}"
            + (f" ({speed})" if speed else ""))


@dataclass(frozen=True)
class Choice:
    """The choice the plan made instead of the settings as asked, in one sentence with its cost
    (``head``: what did not fit, ``rest``: what was planned and the other way), and the other way to
    run it, one click away (``other``; None: no other way that fits)."""

    head: str
    rest: str
    other: LaunchSettings | None = None
    other_label: str = ""

    @property
    def text(self) -> str:
        return f"{self.head}: {self.rest}"


def automatic_choice(plan: Plan, asked: LaunchSettings, fit: ContextFit | None) -> Choice | None:
    """What the plan chose instead of ``asked`` and what it costs, with the other end a click away:
    "512k does not fit as set (CUDA0 is short by 25.8 GiB): planned 48k fully on GPU (~62 tok/s).
    Longest: 424,192 with KV of 26 layers on host (~2.2 tok/s)." The same ends and figures as the
    CLI's first line (``changed``) and its "largest context" line (``context_reach``). None when the
    plan launches as asked (or fits no way)."""
    asked = asked.with_(rpc=plan.launch.rpc, tensor_split=plan.launch.tensor_split)
    chosen = next((a for a in plan.alternatives if a.chosen), None)
    if plan.launch == asked or not plan.feasible or chosen is None:
        return None
    why = next((a.note for a in plan.alternatives if a.kind is AlternativeKind.AS_SET and not a.feasible), "")
    head = f"{round_tokens(asked.n_ctx)} does not fit as set" + (f" ({why})" if why else "")
    reach = context_reach(plan, fit) if fit is not None else []
    speed = f" ({short_speed(chosen)})" if chosen.speed is not None else ""
    mine = next((e for e in reach if e.launch == chosen.launch), None)
    if mine is not None:
        planned = end_words(mine)
    elif chosen.kind is AlternativeKind.SHORTER_CONTEXT:
        where = f"with {chosen.placement}" if chosen.placement else resident_where(chosen.launch)
        planned = f"{format_tokens(chosen.launch.n_ctx)} {where}{speed}"
    else:
        gist = chosen.note.split(":")[0]  # its gist; a rule after the colon is said in the alternatives' row
        planned = chosen.label + (f" — {gist}" if gist else "") + speed
    others = [e for e in reach if e.launch != plan.launch and e.n_ctx != plan.launch.n_ctx]
    if not others:
        return Choice(head, f"planned {planned}.")
    other = others[-1] if chosen.kind is AlternativeKind.SHORTER_CONTEXT else others[0]
    name = "Longest" if other.n_ctx > plan.launch.n_ctx else "As set, at most"
    return Choice(head, f"planned {planned}. {name}: {end_words(other)}.", other.launch, end_words(other))
