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
The files are read at the planner's boundary (app/planner/gguf/beside.py): this module prices shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.planner.errors import PlannerError
from app.planner.gguf.beside import LoraAdapter, lora_problem
from app.planner.gguf.model import ModelShape
from app.planner.memory.weights import GPU_ALIGNMENT, Override, tensor_device

#: ggml-impl.h ``TENSOR_ALIGNMENT``: the CPU buffer types' alignment (the LoRA buffer on the host).
HOST_ALIGNMENT = 32


def _aligned(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def lora_bytes(shape: ModelShape, adapters: Sequence[LoraAdapter], devices: Sequence[int | None], n_gpus: int,
               overrides: tuple[Override, ...] = ()) -> tuple[list[int], int]:
    """Bytes of every adapter per GPU and on the host, each tensor on its base tensor's device
    (``devices``: the model's layer devices, weights.layer_devices). PlannerError for an adapter
    llama.cpp would refuse for this model (``beside.lora_problem``)."""
    gpu = [0] * n_gpus
    host = 0
    by_name = {t.name: t for t in shape.tensors}
    for adapter in adapters:
        if problem := lora_problem(shape, adapter):
            raise PlannerError(problem)
        for name, ta, tb in adapter.pairs:
            dev = tensor_device(by_name[name], shape.n_layer, devices, overrides)
            if dev is None:
                host += _aligned(ta.n_bytes, HOST_ALIGNMENT) + _aligned(tb.n_bytes, HOST_ALIGNMENT)
            else:
                gpu[dev] += _aligned(ta.n_bytes, GPU_ALIGNMENT) + _aligned(tb.n_bytes, GPU_ALIGNMENT)
    return gpu, host
