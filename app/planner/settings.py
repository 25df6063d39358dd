"""The launch settings: one object that both pass 1 (the probe) and the engine argv are built from.

Pass 1 is only true when its context parameters are *exactly* the launch's (docs/domain.md §1), so
both sides read this one dataclass. Defaults mirror llama-server's, not the C API's
(``swa_full`` is false in llama-server, true in ``llama_context_default_params``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

#: Cache types llama-server accepts for ``-ctk/-ctv`` (common/arg.cpp, kv_cache_types).
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: ggml_type enum values (ggml/include/ggml.h) for the cache types above.
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
                 "iq4_nl": 20, "bf16": 30}

#: ``--rpc`` endpoint: ``host:port`` (a name, IPv4, or ``[IPv6]``), as common/arg.cpp splits it.
_ENDPOINT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")

#: llama-server's prompt cache in host RAM, MiB (``-cram/--cache-ram``; common/common.h
#: ``cache_ram_mib``; -1 no limit, 0 off): it fills as conversations come and go (docs/domain.md §6).
DEFAULT_CACHE_RAM_MIB = 8192

#: Headroom's default is ``cache_ram_mib=None``, "auto": room for one full context's KV (a prompt the
#: server keeps is its slot's KV: one context's worth holds every slot's conversation once), at least
#: AUTO_CACHE_MIN_MIB, at most the engine's 8192 MiB, and less when host RAM is short (a 30B MoE with
#: its experts on the CPU on a 32 GB desktop): what host RAM leaves after everything the launch needs,
#: less AUTO_CACHE_RESERVE_MIB for the rest of the desktop. A size the user gives is held back as
#: given (and the plan says when it does not fit).
AUTO_CACHE_RESERVE_MIB = 1024
AUTO_CACHE_MIN_MIB = 64

#: llama-server's default number of tokens a draft model proposes per step (``--spec-draft-n-max``;
#: common/common.h ``common_params_speculative_draft::n_max``).
DEFAULT_DRAFT_N_MAX = 3

#: Sentinel for "offload every layer" (llama-server ``-ngl 999`` / ``all``).
ALL_LAYERS = 999

#: The largest ``-c`` llama-server takes: common/arg.cpp parses it with ``std::stoi`` into an ``int``.
MAX_CONTEXT = 2**31 - 1
#: The context a newly opened model starts with, when it was trained for at least this much.
DEFAULT_CONTEXT = 32 * 1024


class FlashAttn(StrEnum):
    """``-fa``: the value is the word llama-server takes (common/arg.cpp ``--flash-attn on|off|auto``),
    and so what the CLI, the window, the JSON and the argv carry."""

    ON = "on"
    OFF = "off"
    #: llama.cpp turns it on where the backend has the kernel (src/llama-context.cpp ``flash_attn_type``).
    AUTO = "auto"

    @property
    def llama_type(self) -> int:
        """llama.h ``enum llama_flash_attn_type`` (clip.h's ``clip_flash_attn_type`` takes the same values)."""
        return {FlashAttn.AUTO: -1, FlashAttn.OFF: 0, FlashAttn.ON: 1}[self]


def context_problem(n_ctx: int) -> str:
    """Why ``n_ctx`` cannot be a launch's context ('' when it can)."""
    if n_ctx < 1:
        return f"a context must be at least 1 token, not {n_ctx:,}"
    if n_ctx > MAX_CONTEXT:
        return f"{n_ctx:,} tokens is more than llama-server's -c takes (at most {MAX_CONTEXT:,})"
    return ""


def default_context(n_ctx_train: int) -> int:
    """The context a newly opened model starts with: DEFAULT_CONTEXT, or less when the model was
    trained for less (its training context then); DEFAULT_CONTEXT when the model does not say."""
    return min(DEFAULT_CONTEXT, n_ctx_train) if n_ctx_train > 0 else DEFAULT_CONTEXT


@dataclass(frozen=True)
class LaunchSettings:
    """Every parameter that changes what the engine allocates.

    n_parallel: ``-np``. kv_unified: ``-kvu`` (llama-server's ``-np`` auto means 4 slots *and*
    unified; Headroom always passes both explicitly). flash_attn: ``-fa``, a :class:`FlashAttn` (its word,
"on", "off" or "auto", is taken too and kept as the enum).
    n_gpu_layers: ``-ngl`` (ALL_LAYERS = everything). offload_kqv False = ``-nkvo``.
    rpc: ``--rpc`` endpoints (``host:port``), in order: their devices come *first* in the engine's
    device list (src/llama.cpp ``llama_model_load``: "add RPC servers at the front"). tensor_split:
    ``-ts``, one share per device in that order (the planner gives layer counts); () = the engine's
    default, by free memory at load time. tensor_overrides: ``-ot PATTERN=BUFFER`` pairs in order
    (``("blk\\.(0|1)\\.", "CUDA0")``: those layers' weights on CUDA0 although ``-ngl`` leaves the
    layers, and so their KV, on the CPU). n_cpu_moe: ``--n-cpu-moe``, the expert weights of the first
    N layers in host RAM. cache_ram_mib: ``--cache-ram``, the server's prompt cache in host RAM (MiB;
    None = auto, sized by the plan: ``AUTO_CACHE_RESERVE_MIB``).
    lora: ``--lora`` adapter files, in order. draft_model: ``-md``, a draft model for speculative
    decoding ("" none), with its own ``-ngld``, ``-ctkd``/``-ctvd`` and ``--spec-draft-n-max``; its
    context is the model's own (docs/domain.md §9).
    mmproj: ``--mmproj``, a vision projector's file ("" none); mmproj_offload False = ``--no-mmproj-offload``
    (the projector on the CPU; app/planner/memory/projector.py).
    """

    n_ctx: int = 4096
    type_k: str = "f16"
    type_v: str = "f16"
    n_parallel: int = 1
    kv_unified: bool = False
    swa_full: bool = False
    n_ubatch: int = 512
    n_batch: int = 2048
    flash_attn: FlashAttn = FlashAttn.ON
    n_gpu_layers: int = ALL_LAYERS
    offload_kqv: bool = True
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[int, ...] = ()
    tensor_overrides: tuple[tuple[str, str], ...] = ()
    n_cpu_moe: int = 0
    cache_ram_mib: int | None = None
    lora: tuple[str, ...] = ()
    draft_model: str = ""
    draft_n_gpu_layers: int = ALL_LAYERS
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    draft_n_max: int = DEFAULT_DRAFT_N_MAX
    mmproj: str = ""
    mmproj_offload: bool = True

    @property
    def flash_attn_off(self) -> bool:
        """Flash attention is off (``-fa off``). ``auto`` is planned as on: llama.cpp turns it on where
        the backend has the kernel (src/llama-context.cpp ``flash_attn_type``), which every backend
        Headroom plans for has; the engine's log says when it did not."""
        return self.flash_attn is FlashAttn.OFF

    def __post_init__(self) -> None:
        for name in ("type_k", "type_v", "draft_type_k", "draft_type_v"):
            if getattr(self, name) not in KV_TYPES:
                raise ValueError(f"{name} must be one of {', '.join(KV_TYPES)}, not {getattr(self, name)!r}")
        if self.flash_attn not in tuple(FlashAttn):
            raise ValueError(f"flash_attn must be on, off or auto, not {self.flash_attn!r}")
        object.__setattr__(self, "flash_attn", FlashAttn(self.flash_attn))  # the word given: its enum
        if self.n_ctx < 1 or self.n_parallel < 1 or self.n_ubatch < 1 or self.n_batch < 1:
            raise ValueError("n_ctx, n_parallel, n_ubatch and n_batch must be positive")
        if self.n_ctx > MAX_CONTEXT:
            raise ValueError(context_problem(self.n_ctx))
        if self.n_gpu_layers < 0:
            raise ValueError("n_gpu_layers must be >= 0")
        if any(t < 0 for t in self.tensor_split) or (self.tensor_split and not any(self.tensor_split)):
            raise ValueError("a tensor split needs shares >= 0, at least one of them above 0")
        if self.cache_ram_mib is not None and self.cache_ram_mib < -1:
            raise ValueError("cache_ram_mib must be -1 (no limit), 0 (off) or a size in MiB")
        if self.n_cpu_moe < 0 or any(not p or not b for p, b in self.tensor_overrides):
            raise ValueError("n_cpu_moe must be >= 0 and every tensor override needs a pattern and a buffer")
        if any(not f or "," in f for f in self.lora):
            raise ValueError("a LoRA adapter needs a file name without a comma (--lora splits on commas)")
        if self.draft_n_gpu_layers < 0 or self.draft_n_max < 0:
            raise ValueError("draft_n_gpu_layers and draft_n_max must be >= 0")
        for ep in self.rpc:
            if not _ENDPOINT.fullmatch(ep):
                raise ValueError(f"not an RPC endpoint (HOST:PORT): {ep!r}")

    @property
    def effective_n_batch(self) -> int:
        """src/llama-context.cpp: with causal attention ``n_batch = min(n_ctx, n_batch)``."""
        return min(self.n_ctx, self.n_batch)

    @property
    def effective_n_ubatch(self) -> int:
        """src/llama-context.cpp: ``n_ubatch = min(n_batch, n_ubatch)``, after the clamp above."""
        return min(self.effective_n_batch, self.n_ubatch)

    @property
    def n_outputs_max(self) -> int:
        """The model context's output rows, as llama-server sets them (tools/server/server-context.cpp
        ``server_output_limits``): ``min(n_batch, n_parallel × (1 + drafted tokens))``."""
        return min(self.n_batch, self.n_parallel * self.n_outputs_max_per_seq)

    @property
    def n_outputs_max_per_seq(self) -> int:
        """One sampled token per sequence, plus the tokens a draft proposes (0 without one)."""
        return min(self.n_batch, 1 + (self.draft_n_max if self.draft_model else 0))

    def draft_settings(self) -> LaunchSettings:
        """The draft model's own context and placement: the model's settings (common/speculative.cpp
        ``common_base_params_to_speculative`` copies them) with the draft's ``-ngld``, cache types and
        no overrides, LoRA or draft of its own; its outputs are one per sequence."""
        return replace(self, n_gpu_layers=self.draft_n_gpu_layers, type_k=self.draft_type_k,
                       type_v=self.draft_type_v, tensor_overrides=(), n_cpu_moe=0, lora=(), draft_model="")

    def flags(self) -> dict[str, str]:
        """Each setting as the llama-server flag a user knows it by: ``{"-c": "4096", ...}``."""
        return {"-c": str(self.n_ctx), "-ctk": self.type_k, "-ctv": self.type_v, "-np": str(self.n_parallel),
                "-kvu": "on" if self.kv_unified else "off", "--swa-full": "on" if self.swa_full else "off",
                "-ub": str(self.n_ubatch), "-b": str(self.n_batch), "-fa": self.flash_attn,
                "-ngl": "all" if self.n_gpu_layers >= ALL_LAYERS else str(self.n_gpu_layers),
                "-nkvo": "off" if self.offload_kqv else "on",
                "--rpc": ",".join(self.rpc) or "none", "-ts": ",".join(map(str, self.tensor_split)) or "none",
                "-ot": self.override_text() or "none", "--n-cpu-moe": str(self.n_cpu_moe),
                "--cache-ram": "auto" if self.cache_ram_mib is None else str(self.cache_ram_mib),
                "--lora": ",".join(self.lora) or "none",
                "-md": self.draft_model or "none", "-ngld": "all" if self.draft_n_gpu_layers >= ALL_LAYERS
                else str(self.draft_n_gpu_layers), "-ctkd": self.draft_type_k, "-ctvd": self.draft_type_v,
                "--spec-draft-n-max": str(self.draft_n_max),
                "--mmproj": self.mmproj or "none",
                "--no-mmproj-offload": "off" if self.mmproj_offload else "on"}

    def override_text(self) -> str:
        """``-ot``'s value: ``PATTERN=BUFFER,PATTERN=BUFFER`` (common/arg.cpp splits on commas)."""
        return ",".join(f"{p}={b}" for p, b in self.tensor_overrides)

    def differences(self, other: LaunchSettings) -> str:
        """Where ``self`` differs from ``other``, in flags: ``'-c 4096 (not 524288), -np 1 (not 4)'``."""
        mine, theirs = self.flags(), other.flags()
        return ", ".join(f"{k} {v} (not {theirs[k]})" for k, v in mine.items() if v != theirs[k])

    def with_(self, **changes: Any) -> LaunchSettings:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (tuples as lists, as they read back from a file)."""
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchSettings:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for name in ("rpc", "tensor_split", "lora"):  # JSON lists back to tuples (absent: the default, ())
            if name in known:
                known[name] = tuple(known[name])
        if "tensor_overrides" in known:
            known["tensor_overrides"] = tuple((str(p), str(b)) for p, b in known["tensor_overrides"])
        return cls(**known)


#: ``--n-cpu-moe`` moves, for each of the first N layers, the tensors this matches (after
#: ``blk\.N``) to the CPU (common/common.h ``LLM_FFN_EXPS_REGEX``, ``llm_add_n_cpu_ffn_overrides``).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def buffer_overrides(settings: LaunchSettings) -> tuple[tuple[str, str], ...]:
    r"""Every tensor-buffer override the engine will apply, in its order (the argv passes
    ``--n-cpu-moe`` before ``-ot``, so the experts stay on the CPU): ``--n-cpu-moe N``'s (one
    ``blk\.i\.ffn_…_exps`` → CPU per layer ``i < N``), then ``-ot`` as given. The first match wins
    (src/llama-model.cpp ``load_tensors``: ``regex_search`` over the list, ``break`` on a match).
    Here, not beside the weights, so that pass 1's child imports no GGUF reader (app.probe.worker)."""
    moe = tuple((f"blk\\.{i}{FFN_EXPS_REGEX}", "CPU") for i in range(settings.n_cpu_moe))
    return moe + settings.tensor_overrides
