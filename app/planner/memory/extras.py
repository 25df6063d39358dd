"""What a launch adds to its model: LoRA adapters (``--lora``) and a draft model (``-md``).

- **LoRA**: llama.cpp copies each adapter's tensors into a buffer of the *base tensor's* buffer type
  (src/llama-adapter.cpp ``llama_adapter_lora_init_impl``: ``ggml_backend_buffer_get_type(
  model_tensor->buffer)``; a repacked base tensor's goes to the plain CPU type), one buffer per type,
  each tensor at that type's alignment. So an adapter's bytes lie on the devices of the weights it
  adapts. Pass 1 cannot load one (the no_alloc model has no buffers to take the type from): these
  bytes are computed from the adapter's GGUF, and the check compares them with the engine's
  ``LoRA buffer size`` lines.
- **Draft model**: llama-server loads it after the model's context with the model's own settings
  (common/speculative.cpp ``common_base_params_to_speculative``): the same split, its own ``-ngld``,
  ``-ctkd``/``-ctvd``, the model's context size; ``LaunchSettings.draft_settings()`` says which.
  Its weights and KV are planned like the model's (app/planner/solve/stack.py stacks it as a second model);
  pass 1 measures its compute and output buffers (app/probe/worker.py loads it too).
Every file is read once per (path, size, mtime), like the model's header.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from app.planner.errors import PlannerError
from app.planner.gguf.model import ModelShape, read_shape
from app.planner.gguf.reader import FileStamp, TensorInfo, file_stamp, read_header
from app.planner.memory.weights import GPU_ALIGNMENT, Override, layer_devices, tensor_device

#: ggml-impl.h ``TENSOR_ALIGNMENT``: the CPU buffer types' alignment (the LoRA buffer on the host).
HOST_ALIGNMENT = 32


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter file: its architecture and, per base tensor it adapts, its A and B tensors."""

    path: Path
    arch: str
    pairs: tuple[tuple[str, TensorInfo, TensorInfo], ...]  # (base tensor name, lora_a, lora_b)


def _stamp(path: str) -> FileStamp:
    try:
        return file_stamp(path)
    except OSError as exc:
        raise PlannerError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_lora(path: str) -> LoraAdapter:
    """The adapter at ``path``, checked as llama.cpp checks it; PlannerError says what is wrong."""
    return _read_lora(_stamp(path))


@lru_cache(maxsize=32)
def _read_lora(stamp: tuple[str, int, int]) -> LoraAdapter:
    path = Path(stamp[0])
    header = read_header(path)
    f = header.fields
    if f.get("general.type") != "adapter" or f.get("adapter.type") != "lora":
        raise PlannerError(f"{path.name} is not a LoRA adapter (general.type {f.get('general.type')!r}, "
                           f"adapter.type {f.get('adapter.type')!r}; llama.cpp wants 'adapter' and 'lora')")
    a: dict[str, TensorInfo] = {}
    b: dict[str, TensorInfo] = {}
    for t in header.tensors:
        if t.name.endswith(".lora_a"):
            a[t.name.removesuffix(".lora_a")] = t
        elif t.name.endswith(".lora_b"):
            b[t.name.removesuffix(".lora_b")] = t
        elif not t.name.endswith("_norm.weight"):  # llama.cpp skips norm vectors, refuses the rest
            raise PlannerError(f"LoRA tensor {t.name} in {path.name} has an unexpected suffix")
    if set(a) != set(b):
        missing = sorted(set(a) ^ set(b))[0]
        raise PlannerError(f"LoRA tensor pair for {missing} in {path.name} is missing one component")
    return LoraAdapter(path, str(f.get("general.architecture", "")),
                       tuple((name, a[name], b[name]) for name in sorted(a)))


def _aligned(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def lora_bytes(shape: ModelShape, paths: Sequence[str], devices: Sequence[int | None], n_gpus: int,
               overrides: tuple[Override, ...] = ()) -> tuple[list[int], int]:
    """Bytes of every adapter per GPU and on the host, each tensor on its base tensor's device
    (``devices``: the model's layer devices, weights.layer_devices). PlannerError for an adapter
    llama.cpp would refuse for this model (another architecture, a tensor the model lacks or of
    another shape)."""
    gpu = [0] * n_gpus
    host = 0
    by_name = {t.name: t for t in shape.tensors}
    for path in paths:
        adapter = read_lora(path)
        if adapter.arch != shape.arch:
            raise PlannerError(f"LoRA {adapter.path.name} is for {adapter.arch or 'no architecture'}, "
                               f"the model is {shape.arch} (llama.cpp: model arch and LoRA arch mismatch)")
        for name, ta, tb in adapter.pairs:
            base = by_name.get(name)
            if base is None:
                raise PlannerError(f"LoRA {adapter.path.name} adapts {name}, which the model does not have "
                                   "(a LoRA for another base model?)")
            if not name.endswith("token_embd.weight") and (
                    base.shape[:2] != (ta.shape[0], tb.shape[1]) or ta.shape[1] != tb.shape[0]):
                raise PlannerError(f"LoRA {adapter.path.name}: {name} has the wrong shape for this model")
            dev = tensor_device(base, shape.n_layer, devices, overrides)
            if dev is None:
                host += _aligned(ta.n_bytes, HOST_ALIGNMENT) + _aligned(tb.n_bytes, HOST_ALIGNMENT)
            else:
                gpu[dev] += _aligned(ta.n_bytes, GPU_ALIGNMENT) + _aligned(tb.n_bytes, GPU_ALIGNMENT)
    return gpu, host


def check_lora(model: ModelShape | None, path: str) -> LoraAdapter:
    """The adapter at ``path``, checked as llama.cpp checks it against ``model`` (None: the file
    alone); PlannerError says what is wrong (the window refuses a file with it)."""
    adapter = read_lora(path)
    if model is not None:
        lora_bytes(model, [path], layer_devices(model.n_layer, 0, []), 0)
    return adapter


def draft_shape(path: str) -> ModelShape:
    """The draft model's shape (PlannerError when it cannot be read)."""
    _stamp(path)
    return read_shape(path)


def check_draft(model: ModelShape | None, path: str) -> ModelShape:
    """The draft model at ``path``; PlannerError when it cannot be read or llama.cpp would not
    speculate with it for ``model`` (None: the file alone): ``draft_problem``."""
    draft = draft_shape(path)
    problem = draft_problem(model, draft) if model is not None else ""
    if problem:
        raise PlannerError(f"{Path(path).name}: {problem}")
    return draft


def draft_problem(model: ModelShape, draft: ModelShape) -> str:
    """Why llama.cpp would not speculate with ``draft`` for ``model`` ('' when it would): the
    vocabularies must match (common/speculative.cpp ``common_speculative_are_compatible``: the same
    type and special tokens, sizes at most 128 apart)."""
    if abs(model.n_vocab - draft.n_vocab) > 128:
        return (f"the draft model's vocabulary ({draft.n_vocab:,} tokens) is not the model's ({model.n_vocab:,}): "
                "llama.cpp cannot speculate with it")
    return ""


