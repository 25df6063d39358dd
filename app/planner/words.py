"""The sentences a user reads about a plan, made here and only here.

The solver (:mod:`app.planner.plan`, :mod:`app.planner.stack`) works out facts — which device is
short and by how much, how many layers moved, which source a number has — and hands them to these
functions; the plan carries the resulting sentences (``Plan.reason``, ``Plan.warnings``,
``Alternative.label``/``note``, a source's detail), and the CLI (app/commands/plan.py, serve.py)
and the window (app/ui) print them as they are. What the CLI adds around a plan (its first line
when the plan launches otherwise than asked) is made here too, from the plan's fields.
"""

from __future__ import annotations

from app.planner.measurement import Measurement, gpu_caveat
from app.planner.plan_types import AlternativeKind, Plan
from app.planner.settings import ALL_LAYERS, LaunchSettings
from app.planner.sources import Source, SourceKind
from app.planner.units import Bytes, format_tokens

# ---- Text from a model file (general.name, general.architecture: written by strangers) ----------


def printable(text: str) -> str:
    """``text`` safe to print on a terminal or in a log: every character that is not printable
    (ESC and the other C0/C1 controls, DEL, bidirectional overrides and other format characters,
    unpaired surrogates) as its Python escape (``\\x1b``, ``\\u202e``); printable text unchanged.
    A model's ``general.name`` can carry ANSI sequences that would otherwise recolour, retitle or
    clear the user's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)

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
KV_ON_HOST_NOTE = "the whole KV cache in host RAM; attention runs on the CPU"


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
    if on_cpu:
        parts.append(f"{layers_on_cpu(n_layer, on_cpu)} and their KV on the CPU (-ngl {settings.n_gpu_layers})")
    if not settings.offload_kqv:
        parts.append("the whole KV cache in host RAM (-nkvo)")
    return "; ".join(parts) or "everything resident on the GPU"


def fewer_layers_label(n_gpu_layers: int) -> str:
    return f"-ngl {n_gpu_layers}"


def fewer_layers_note(n_layer: int, moved: int) -> str:
    return f"{layers_on_cpu(n_layer, moved)} and their KV run on the CPU"


def shorter_context_label(n_ctx: int) -> str:
    return f"-c {n_ctx}"


def shorter_context_note(n_ctx: int) -> str:
    return f"a shorter context ({format_tokens(n_ctx)}), fully resident"


# ---- Warnings -----------------------------------------------------------------------------------

WINDOW_WITHOUT_KVU = "the position window cannot be combined with --kv-unified: planned per-slot caches"


def flash_attention_off(n_ctx: int) -> str:
    return (f"flash attention is off at {format_tokens(n_ctx)} context: the compute buffer "
            "grows with context × ubatch × heads (gigabytes); turn it on")


def compute_source_warning(source: Source, measurement: Measurement | None) -> str | None:
    """What the compute buffers' source means for trusting the plan (None: measured for this launch)."""
    if source.kind is SourceKind.ESTIMATED and measurement is not None:
        # Whose numbers (issue 4): the one sentence the CLI and the UI both show, from gpu_caveat.
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
    """The detail of a CUDA compute estimate for a launch outside its fit (app/planner/estimate.py
    ``cuda_fit_gap``); "" inside it."""
    return f"never compared with CUDA {gap}" if gap else ""


def short_slots(settings: LaunchSettings, n_ctx_seq: int) -> str:
    return (f"each of the {settings.n_parallel} slots holds only {n_ctx_seq:,} tokens (-c "
            f"{settings.n_ctx:,} split by -np {settings.n_parallel}): raise -c, lower -np, or use -kvu")


def over_training_context(n_ctx_seq: int, n_ctx_train: int) -> str:
    return (f"context per sequence {format_tokens(n_ctx_seq)} exceeds the model's training "
            f"context {format_tokens(n_ctx_train)}")


def no_gpu(reason: str) -> str:
    return f"no GPU: {reason}"


def window_below_ubatch(window: int, n_ubatch: int) -> str:
    return (f"the resident window ({window} cells) is smaller than one ubatch "
            f"({n_ubatch}): prefill will stream from host RAM")


def chose_instead(why: str, label: str, note: str) -> str:
    return f"the settings as given do not fit ({why}); chose {label}: {note}"


def measure_again(label: str) -> str:
    return f"compute buffers were measured for the settings as given: measure {label} again before launching"


# ---- Sources' details ---------------------------------------------------------------------------

#: Host weights the CPU backend copies out of the mapping into its own layout (CPU_REPACK).
REPACKED_COPY = "repacked copy for the CPU backend"


def repacked_detail(repacked: int) -> str:
    """The weights_mapped source's detail when part of it is the CPU backend's copy."""
    return f"mapped file + {Bytes(repacked)} {REPACKED_COPY}"


def nvml_processes_detail(n_processes: int, held: int, reserve: int) -> str:
    return f"{n_processes} process(es) hold {Bytes(held)}, the driver keeps {Bytes(reserve)}"


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


# ---- Around a plan (the CLI) ----------------------------------------------------------------------


def ngl_text(n_gpu_layers: int) -> str:
    """``-ngl`` as a user writes it: a count, or ``all``."""
    return "all" if n_gpu_layers >= ALL_LAYERS else str(n_gpu_layers)


def changed(plan: Plan, asked: LaunchSettings) -> str:
    """The first line when the plan launches otherwise than asked ('' when it launches as asked):
    "512k DOES NOT FIT as asked (CUDA0 short 87.3 GiB); planned instead: -c 49,664"."""
    launch = plan.launch
    if launch == asked:
        return ""
    instead = []
    if launch.n_ctx != asked.n_ctx:
        instead.append(f"-c {format_tokens(launch.n_ctx)}")
    if launch.n_gpu_layers != asked.n_gpu_layers:
        instead.append(f"-ngl {ngl_text(launch.n_gpu_layers)}")
    if launch.offload_kqv != asked.offload_kqv:
        instead.append("-nkvo" if not launch.offload_kqv else "KV offloaded")
    # The planner prices the settings as given first; when they do not fit, its note says why.
    why = next((a.note for a in plan.alternatives if a.kind is AlternativeKind.AS_SET and not a.feasible), "")
    return (f"{format_tokens(asked.n_ctx)} DOES NOT FIT as asked{f' ({why})' if why else ''}; "
            f"planned instead: {' '.join(instead) or 'other settings'}")
