"""A vision projector (``--mmproj FILE``): what its weights and its compute buffer take, and where.

Mirrors tools/mtmd/clip.cpp in the vendored llama.cpp (docs/domain.md §10):
- the projector is its own GGUF (``general.architecture`` "clip"); ``clip_model_loader`` puts all its
  weights in one buffer of the CLIP backend's default type (``ggml_backend_alloc_ctx_tensors_from_buft``:
  each tensor at the buffer's alignment, 32 bytes on the CPU, 128 on CUDA);
- the CLIP backend is the first GPU device in ggml's registry (``ggml_backend_init_by_type(GPU)``:
  local GPUs register before the ``--rpc`` workers), or the CPU with ``--no-mmproj-offload``
  (``mmproj_use_gpu`` false) or without a GPU;
- at load it reserves its compute buffer for a warm-up image of ``clip.vision.image_size`` squared
  (``get_dummy_batch``; some dynamic-resolution types warm up smaller, see ``set_warmup_n_tokens``).
  Pass 1 measures that reserve (app/probe/worker.py calls ``clip_init`` with ``no_alloc``, as the
  server's own ``mtmd_get_memory_usage`` does); without pass 1 :func:`estimate_compute` gives an
  upper estimate for a ViT encoder.
- mtmd.cpp refuses a projector whose output width is not the text model's ``n_embd``.

Pure: prices the projector's shape (read at the planner's boundary, app/planner/gguf/beside.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.planner.errors import PlannerError
from app.planner.gguf.beside import ProjectorShape
from app.planner.plan_types import ProjectorPlan
from app.planner.settings import FlashAttn
from app.planner.sources import Source, SourceKind
from app.planner.units import Bytes

if TYPE_CHECKING:
    from app.planner.devices import Inventory
    from app.planner.gguf.model import ModelShape
    from app.planner.measurement import Measurement
    from app.planner.settings import LaunchSettings

#: ggml-impl.h ``TENSOR_ALIGNMENT``: the CPU buffer type's alignment.
CPU_ALIGNMENT = 32
#: ggml-cuda ``ggml_backend_cuda_buffer_type_get_alignment`` (an RPC worker's is not printed: 128 too).
GPU_ALIGNMENT = 128
HOST = "host"


def weights_bytes(proj: ProjectorShape, *, on_gpu: bool) -> int:
    """The weights buffer: every tensor at the buffer type's alignment (ggml-alloc)."""
    align = GPU_ALIGNMENT if on_gpu else CPU_ALIGNMENT
    return sum(-(-n // align) * align for n in proj.tensor_bytes)


def estimate_compute(proj: ProjectorShape, flash_attn: FlashAttn) -> int:
    """An upper estimate of the warm-up reserve of a ViT encoder, f32 activations: per token two FFN
    rows and one embedding row live at once (``4·n_pos·(2·n_ff + n_embd)``), and without flash
    attention each head's KQ matrix (``4·n_head·n_pos²``). Against CPU pass 1 on the test projector
    (577 tokens, width 192, FFN 768): 3.80 MiB for 3.41 measured with flash attention, 8.88 for 7.22 without."""
    n_pos = proj.n_pos
    act = 4 * n_pos * (2 * proj.n_ff + proj.n_embd)
    kq = 4 * proj.n_head * n_pos * n_pos if flash_attn is FlashAttn.OFF else 0
    return act + kq


def projector_device(inv: Inventory, settings: LaunchSettings) -> str:
    """The CLIP backend's device: the first local GPU, else the first GPU (an RPC worker's), else
    the host; the host too with ``--no-mmproj-offload``."""
    if not settings.mmproj_offload or not inv.gpus:
        return HOST
    local = [g for g in inv.gpus if not g.is_rpc]
    return (local or list(inv.gpus))[0].engine_name


def _measured(measurement: Measurement | None, settings: LaunchSettings, device: str) -> tuple[int, int] | None:
    """(device compute, host compute) from pass 1 when it measured this projector on this device."""
    if measurement is None or not measurement.projector_compute:
        return None
    ran = measurement.launch
    if ran is not None and (ran.mmproj, ran.mmproj_offload, ran.flash_attn) != (
            settings.mmproj, settings.mmproj_offload, settings.flash_attn):
        return None
    from app.llamacpp.logs import is_host_device

    dev = sum(b for n, b in measurement.projector_compute if not is_host_device(n))
    host = sum(b for n, b in measurement.projector_compute if is_host_device(n))
    if device == HOST:
        return (host, 0) if dev == 0 else None
    if not any(n == device for n, _ in measurement.projector_compute):
        return None  # measured on another backend (a CPU probe for a GPU plan): its numbers are not these
    return dev, host


def projector_for(shape: ModelShape, inv: Inventory, settings: LaunchSettings,
                  measurement: Measurement | None, proj: ProjectorShape | None) -> ProjectorPlan | None:
    """The projector's plan for this launch (None without ``--mmproj``; ``proj``: its shape). PlannerError
    for one whose output does not match the model (the engine would refuse it)."""
    if not settings.mmproj or proj is None:
        return None
    if proj.n_embd_out and proj.n_embd_out != shape.n_embd:
        raise PlannerError(f"vision projector {proj.path.name} outputs {proj.n_embd_out} values per token, but "
                           f"the model's n_embd is {shape.n_embd}: llama.cpp would refuse it (a projector for "
                           "another model)")
    device = projector_device(inv, settings)
    weights = weights_bytes(proj, on_gpu=device != HOST)
    measured = _measured(measurement, settings, device)
    if measured is not None:
        compute, compute_host = measured
        src = Source(SourceKind.MEASURED)
    else:
        compute, compute_host = estimate_compute(proj, settings.flash_attn), 0
        src = Source(SourceKind.ESTIMATED, f"warm-up image {proj.image_size}x{proj.image_size}, {proj.n_pos} tokens")
    return ProjectorPlan(file=str(proj.path), device=device, weights=weights, compute=compute,
                         compute_host=compute_host,
                         sources={"weights": Source(SourceKind.FROM_GGUF, proj.path.name), "compute": src})


def describe(plan: ProjectorPlan) -> str:
    """One line: ``vision projector mmproj-….gguf on CUDA0: weights 596 MiB, compute 14 MiB``."""
    return (f"vision projector {Path(plan.file).name} on {plan.device}: weights {Bytes(plan.weights)}, "
            f"compute {Bytes(plan.compute + plan.compute_host)}")
