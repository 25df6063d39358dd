"""The one parser for llama.cpp's buffer and KV-cache log lines.

Used for the pass-1 probe's captured log (app.probe.measure) and for the engine's own log
(llama-server at ``-lv 4``, the opencoti llamafile). Every regex has the line it matches above it.
Lines may carry llama-server's prefix (``0.03.595.713 I ``); patterns search, not match.

Blocks: an engine may log its buffers more than once (the opencoti two-pass reserve re-creates the
context as it converges; docs/domain.md §4). A later block of a kind REPLACES the earlier one. A block
ends when a line of another kind is seen, when a device repeats within a compute/output block,
or at a ``loading model tensors`` / ``constructing llama_context`` marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

# common/common.cpp common_params_get_system_info, logged by common_init() at trace level (``-lv 4``)
# before the model is opened; a portable build's line is the CPU variant it loaded (docs/domain.md §11):
# system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | REPACK = 1 |
SYSTEM_INFO = re.compile(r"system_info: (?:.*?\bCPU : (?P<cpu>.*)|.*)")


def system_info_line(output: str) -> str:
    """The ``system_info: …`` line of an engine's output, or ``""``."""
    m = SYSTEM_INFO.search(output)
    return m.group(0).strip() if m else ""


#: llama.cpp prints sizes in MiB (ggml-backend.cpp: ``size / 1024.0 / 1024.0``).
MiB = 1024 * 1024

# --- the lines (formats from llama.cpp 0c1e57098, file:line of the printf in each comment) ----

# load_tensors:   CPU_Mapped model buffer size =   788.91 MiB          (src/llama-model.cpp:1930)
_MODEL_RE = re.compile(r"load_tensors:\s+(?P<dev>\S+) model buffer size =\s*(?P<mib>[0-9.]+) MiB")
# llama_kv_cache:      CUDA0 KV buffer size = 98304.00 MiB             (src/llama-kv-cache.cpp:291)
_KV_BUF_RE = re.compile(r"llama_kv_cache(?:_\w+)?:\s+(?P<dev>\S+) KV buffer size =\s*(?P<mib>[0-9.]+) MiB")
# llama_kv_cache: size = 98304.00 MiB (524288 cells,  48 layers,  4/1 seqs), K (f16): 49152.00 MiB, V (f16): 49152.00 MiB
#                                                                     (src/llama-kv-cache.cpp:301)
_KV_SIZE_RE = re.compile(
    r"llama_kv_cache(?:_\w+)?: size =\s*(?P<mib>[0-9.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,"
    r"\s*(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<tk>\w+)\):\s*(?P<k>[0-9.]+) MiB, "
    r"V \((?P<tv>\w+)\):\s*(?P<v>[0-9.]+) MiB"
)
# llama_kv_cache: layer   0: dev = CUDA0     (src/llama-kv-cache.cpp:223, DEBUG: the probe passes these on)
_KV_LAYER_RE = re.compile(r"llama_kv_cache: layer\s+(?P<il>\d+): dev = (?P<dev>\S+)")
# llama_memory_recurrent, layer   1: dev = CPU       (src/llama-memory-recurrent.cpp:94, DEBUG; a comma, not a colon)
_RS_LAYER_RE = re.compile(r"llama_memory_recurrent, layer\s+(?P<il>\d+): dev = (?P<dev>\S+)")
# sched_reserve: reserve took 3.05 ms, sched copies = 4      (src/llama-context.cpp:770; > 1: pipeline parallelism)
_SCHED_COPIES_RE = re.compile(r"sched_reserve: reserve took [0-9.]+ ms, sched copies = (?P<n>\d+)")
# print_info: n_embd                = 128                    (src/llama-model.cpp print_info)
_N_EMBD_RE = re.compile(r"print_info: n_embd\s+=\s*(?P<n>\d+)$")
# llama_prepare_model_devices: using device RPC0 (127.0.0.1:50052) (unknown id) - 24105 MiB free
#                                                                     (src/llama.cpp:306)
_USING_DEVICE_RE = re.compile(r"llama_prepare_model_devices: using device (?P<dev>\S+) \((?P<desc>.*?)\) \(")
# srv    load_model: prompt cache is enabled, size limit: 8192 MiB     (tools/server/server-context.cpp:1336)
# srv    load_model: prompt cache is enabled, size limit: no limit      (:1334)
# srv    load_model: prompt cache is disabled - use `--cache-ram N` to enable it   (:1342)
_PROMPT_CACHE_RE = re.compile(r"prompt cache is (?:enabled, size limit: (?:(?P<mib>\d+) MiB|(?P<none>no limit))"
                              r"|(?P<off>disabled))")
# llama_memory_recurrent:        CPU RS buffer size =    55.37 MiB    (src/llama-memory-recurrent.cpp:124)
_RS_BUF_RE = re.compile(r"llama_memory_recurrent:\s+(?P<dev>\S+) RS buffer size =\s*(?P<mib>[0-9.]+) MiB")
# llama_memory_recurrent: size =   55.37 MiB (     1 cells,  40 layers,  1 seqs  0 rs_seq), R (f32):    1.37 MiB, S (f32):   54.00 MiB, P (f32):    0.00 MiB
_RS_SIZE_RE = re.compile(r"llama_memory_recurrent: size =\s*(?P<mib>[0-9.]+) MiB \(")
# (its "layers" is the model's; the layers that hold a state are the per-layer lines'. A cell's rows are
# 1 + rs_seq: the rollback snapshots)
_RS_PARTS_RE = re.compile(r"\(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*\d+ seqs\s+(?P<rs_seq>\d+) rs_seq\)"
                          r", R \(\w+\):\s*(?P<r>[0-9.]+) MiB, S \(\w+\):\s*(?P<s>[0-9.]+) MiB")
# llama_context:  CUDA_Host  output buffer size =     2.32 MiB        (src/llama-context.cpp:381)
_OUTPUT_RE = re.compile(r"llama_context:\s+(?P<dev>\S+)\s+output buffer size =\s*(?P<mib>[0-9.]+) MiB")
# sched_reserve:      CUDA0 compute buffer size =   623.01 MiB          (src/llama-context.cpp:740)
_COMPUTE_RE = re.compile(r"sched_reserve:\s+(?P<dev>\S+) compute buffer size =\s*(?P<mib>[0-9.]+) MiB")
# llama_adapter_lora_init_impl: CPU_Mapped LoRA buffer size =     0.01 MiB   (src/llama-adapter.cpp:392)
_LORA_RE = re.compile(r"llama_adapter_lora_init_impl:\s+(?P<dev>\S+) LoRA buffer size =\s*(?P<mib>[0-9.]+) MiB")
# common_speculative_init_result: loading draft model '/models/draft.gguf'   (common/speculative.cpp:2537)
# Everything after it is the draft model's (llama-server loads it after the model's context).
_DRAFT_START_RE = re.compile(r"common_speculative_init_result: loading draft model ")
# srv    load_model: loading model '/models/m.gguf'   (tools/server/server-context.cpp:1022): the model
# again, after a draft (a server resuming from sleep loads both again)
_SERVER_LOAD_RE = re.compile(r"load_model: loading model '")
# spec common_specu: adding speculative implementation 'draft-simple'   (common/speculative.cpp): the
# draft is loaded; what follows is the server's again
_DRAFT_END_RE = re.compile(r"adding speculative implementation|speculative decoding context initialized"
                           r"|failed to load draft model")
# The vision projector (tools/mtmd/clip.cpp; app/planner/memory/projector.py):
# clip_ctx: CLIP using CUDA0 backend                                    (clip.cpp:202; "CLIP using CPU backend" :207)
_CLIP_BACKEND_RE = re.compile(r"clip_ctx: CLIP using (?P<dev>\S+) backend")
# load_hparams: model size:         3.11 MiB      (clip.cpp:2125: every tensor's ggml_nbytes, unaligned)
_CLIP_MODEL_RE = re.compile(r"load_hparams: model size:\s+(?P<mib>[0-9.]+) MiB")
# reserve_compute_meta:        CPU compute buffer size =     3.41 MiB  (clip.cpp:3815; the warm-up image's reserve)
_CLIP_COMPUTE_RE = re.compile(r"reserve_compute_meta:\s+(?P<dev>\S+) compute buffer size =\s*(?P<mib>[0-9.]+) MiB")
# load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
_MODEL_START_RE = re.compile(r"load_tensors: loading model tensors")
# llama_context: constructing llama_context
_CONTEXT_START_RE = re.compile(r"llama_context: constructing llama_context")
# common_memory_breakdown_print: |   - CUDA0 (H200)       | 143155 = 29447 + (113106 = 14179 +   98304 +     623) +         602 |
#                                                                     (common/fit.cpp:923, template_gpu)
_BREAKDOWN_GPU_RE = re.compile(
    r"memory_breakdown_print: \|\s+- (?P<name>\S+)(?: \((?P<desc>[^)]*)\))?\s*\|\s*(?P<total>\d+)\s*=\s*(?P<free>\d+)"
    r"\s*\+\s*\((?P<self>\d+)\s*=\s*(?P<model>\d+)\s*\+\s*(?P<context>\d+)\s*\+\s*(?P<compute>\d+)\)\s*\+"
    r"\s*(?P<unacc>-?\d+)\s*\|"
)
# common_memory_breakdown_print: |   - Host               |                     1320 =   788 +       0 +     532                |
#                                                                     (common/fit.cpp:924, template_other)
_BREAKDOWN_OTHER_RE = re.compile(
    r"memory_breakdown_print: \|\s+- (?P<name>\S+)\s*\|\s*(?P<self>\d+)\s*=\s*(?P<model>\d+)\s*\+\s*(?P<context>\d+)"
    r"\s*\+\s*(?P<compute>\d+)\s*\|"
)
# common_memory_breakdown_print: | memory breakdown [MiB] |  total    free      self   model   context   compute    unaccounted |
_BREAKDOWN_HEADER_RE = re.compile(r"memory_breakdown_print: \| memory breakdown \[MiB\]")

# opencoti-llamafile (docs/domain.md §4; tests/fixtures/opencoti/ replays these):
# rolling-kv POSITION_WINDOW mode ON (--kv-residency-mode auto) — window 256 / 32768 cells, host tail 32512
_OC_WINDOW_RE = re.compile(
    r"rolling-kv (?P<tactic>\w+) mode ON \(--kv-residency-mode (?P<mode>\w+)\)\s*(?:—|--?)\s*window (?P<window>\d+)"
    r"\s*/\s*(?P<cells>\d+) cells, host tail (?P<tail>\d+)"
)
# two-pass — measured GPU compute buffer = 635 MiB; re-sizing (iter 0)
_OC_TWO_PASS_RE = re.compile(
    r"two-pass\s*(?:—|--?)\s*measured GPU compute buffer =\s*(?P<mib>[0-9.]+) MiB(?:; re-sizing \(iter (?P<iter>\d+)\))?"
)
# tactic table: GPU_RESIDENT=36     POSITION_WINDOW=0
_OC_TACTIC_RE = re.compile(r"tactic table:(?P<rest>(?:\s+\w+=\d+)+)")
_OC_TACTIC_ITEM_RE = re.compile(r"(\w+)=(\d+)")

# llama-fit-params -fitp on, stdout (common/fit.cpp common_fit_print: "%s %zu %zu %zu \n", MiB rounded down):
# CUDA0 14179 98304 623
# Host 788 0 532
_FIT_ROW_RE = re.compile(r"^(?P<name>\S+) (?P<model>\d+) (?P<context>\d+) (?P<compute>\d+)\s*$")

#: The warning when a log that should hold buffer lines matched none.
NO_BUFFER_LINES = ("no llama.cpp buffer lines matched in this log: the engine's log format may have changed, "
                   "or it ran below verbosity 4 (llama-server needs -lv 4)")


def is_host_device(name: str) -> bool:
    """``CUDA_Host`` (pinned), ``CPU_Mapped`` (mmap), ``CPU``/``CPU_REPACK``, the breakdown's ``Host``."""
    return name.endswith(("_Host", "_Mapped")) or name.startswith("CPU") or name == "Host"


def recurrent_parts(line: str) -> tuple[int, int, int, int] | None:
    """(rows: cells × (1 + rs_seq), the model's layers, R bytes, S bytes) of a ``llama_memory_recurrent:
    size =`` line, or None."""
    m = _RS_PARTS_RE.search(line)
    if m is None:
        return None
    return (int(m.group("cells")) * (1 + int(m.group("rs_seq"))), int(m.group("layers")),
            mib_to_bytes(float(m.group("r"))), mib_to_bytes(float(m.group("s"))))


def mib_to_bytes(mib: float) -> int:
    """llama.cpp prints ``%8.2f MiB``; back to bytes (to within 0.005 MiB)."""
    return round(mib * MiB)


@dataclass(frozen=True)
class KvCacheLine:
    """One ``llama_kv_cache: size = ...`` line: one cache (an iSWA model prints two)."""

    size: int
    cells: int
    layers: int
    n_seq_max: int
    n_stream: int
    type_k: str
    k: int
    type_v: str
    v: int
    line: str
    #: How many of this cache's layers each device holds (from the per-layer DEBUG lines, when seen).
    layer_devices: tuple[tuple[str, int], ...] = ()
    #: The model layers it holds, in order (from the same lines; () when they were not logged).
    layer_ids: tuple[int, ...] = ()

    def on_device(self, device: str) -> int:
        """This cache's bytes on ``device``, split by layer count (equal-sized layers within one
        cache, as llama.cpp allocates one K and one V tensor per layer of the same cells)."""
        held = dict(self.layer_devices)
        total = sum(held.values())
        return self.size * held.get(device, 0) // total if total else 0


@dataclass(frozen=True)
class BreakdownRow:
    """A ``common_memory_breakdown_print`` row, in MiB as printed (host rows: total/free/unaccounted None)."""

    name: str
    self: int
    model: int
    context: int
    compute: int
    total: int | None = None
    free: int | None = None
    unaccounted: int | None = None
    description: str = ""

    @property
    def host(self) -> bool:
        return is_host_device(self.name)


@dataclass(frozen=True)
class FitRow:
    """One ``llama-fit-params -fitp on`` row, whole MiB as printed (``Host`` is host memory)."""

    name: str
    model: int
    context: int
    compute: int


def parse_fit_print(text: str) -> tuple[FitRow, ...]:
    """The per-device rows ``llama-fit-params -fitp on`` prints on stdout."""
    rows = []
    for line in text.splitlines():
        m = _FIT_ROW_RE.match(line.strip() + " ")
        if m:
            rows.append(FitRow(m.group("name"), int(m.group("model")), int(m.group("context")),
                               int(m.group("compute"))))
    return tuple(rows)


@dataclass(frozen=True)
class OpencotiState:
    """What the opencoti engine said about its window (the latest of each)."""

    measured_compute: int | None = None  # bytes, from "two-pass — measured GPU compute buffer"
    iterations: int = 0  # how many two-pass lines were seen
    tactic: str = ""
    residency_mode: str = ""
    window_cells: int | None = None
    n_cells: int | None = None
    host_tail_cells: int | None = None
    tactic_table: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class LogBuffers:
    """Sizes in bytes per device name as llama.cpp printed it. The latest block of each kind."""

    model: dict[str, int] = field(default_factory=dict)
    kv: dict[str, int] = field(default_factory=dict)
    output: dict[str, int] = field(default_factory=dict)
    compute: dict[str, int] = field(default_factory=dict)
    kv_caches: tuple[KvCacheLine, ...] = ()
    #: Recurrent state (Mamba/SSM layers of hybrid models): RS buffers per device, ``size =`` lines.
    recurrent: dict[str, int] = field(default_factory=dict)
    recurrent_lines: tuple[str, ...] = ()
    recurrent_total: int = 0
    #: The layers the recurrent state holds (its per-layer DEBUG lines; () when not logged).
    recurrent_layer_ids: tuple[int, ...] = ()
    #: The scheduler's copies of its inputs (> 1: pipeline parallelism over several devices) and the
    #: model's width, as the log says them (0: not said).
    sched_copies: int = 0
    n_embd: int = 0
    breakdown: tuple[BreakdownRow, ...] = ()
    opencoti: OpencotiState = field(default_factory=OpencotiState)
    matched: int = 0
    warnings: tuple[str, ...] = ()
    #: The devices the engine used, in order: (device name, description) — ``("RPC0", "127.0.0.1:50052")``.
    devices: tuple[tuple[str, str], ...] = ()
    #: llama-server's prompt-cache limit as it logged it, MiB (-1 no limit, 0 off; None: not logged).
    prompt_cache_mib: int | None = None
    #: LoRA adapter buffers per buffer name, every adapter's added up (``--lora``).
    lora: dict[str, int] = field(default_factory=dict)
    #: The draft model's own lines (``-md``), parsed apart: everything after the draft marker.
    draft: LogBuffers | None = None
    #: The vision projector: its CLIP backend ("" none logged), its weights as "model size" sums them
    #: (unaligned), its compute reserve per buffer (the latest reserve).
    projector_backend: str = ""
    projector_weights: int | None = None
    projector_compute: dict[str, int] = field(default_factory=dict)

    def buffer_name(self, device: str) -> str:
        """The buffer name of a device named in a per-device line (``RPC1`` → ``RPC0[host:port]``):
        ggml-rpc names a worker's buffers by the device's index on that worker and its endpoint
        (the description), local devices by their own name (``CUDA0``)."""
        seen: dict[str, int] = {}
        for name, desc in self.devices:
            index = seen.get(desc, 0)
            seen[desc] = index + 1
            if name == device:
                return f"RPC{index}[{desc}]" if name.startswith("RPC") else name
        return device

    @property
    def kv_total(self) -> int:
        """All KV caches together (K + V of every cache), from the ``size =`` lines."""
        return sum(c.size for c in self.kv_caches)

    @property
    def has_buffers(self) -> bool:
        return bool(self.model or self.kv or self.output or self.compute or self.kv_caches or self.recurrent
                    or self.breakdown)


class LogParser:
    """Feed lines as they arrive (the engine's log), read ``result()`` at any time."""

    def __init__(self) -> None:
        self._blocks: dict[str, dict[str, int]] = {k: {} for k in ("model", "kv", "output", "compute")}
        self._caches: list[KvCacheLine] = []
        self._rs: dict[str, int] = {}
        self._layer_devs: dict[str, int] = {}
        self._layer_ids: list[int] = []
        self._rs_layer_ids: list[int] = []
        self._sched_copies = self._n_embd = 0
        self._rs_lines: list[tuple[str, int]] = []
        self._breakdown: list[BreakdownRow] = []
        self._last_kind = ""
        self._closed: set[str] = set()  # kinds whose current block has ended
        self._opencoti = OpencotiState()
        self._matched = 0
        self._partial = ""
        self._devices: list[tuple[str, str]] = []
        self._prompt_cache: int | None = None
        self._lora: dict[str, int] = {}
        self._draft: LogParser | None = None
        self._in_draft = False
        self._clip: tuple[str, int | None, dict[str, int]] = ("", None, {})

    def feed_text(self, text: str) -> None:
        """Feed a chunk of log text that may end mid-line (the probe's log callback)."""
        data = self._partial + text
        lines = data.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.feed(line)

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if self._in_draft and (_SERVER_LOAD_RE.search(line) or _DRAFT_END_RE.search(line)):
            self._in_draft = False
        if _DRAFT_START_RE.search(line):
            self._draft, self._in_draft = LogParser(), True  # a draft loaded again (the server woke up): anew
            return
        if self._in_draft and self._draft is not None:
            self._draft.feed(line)
            return
        if _MODEL_START_RE.search(line):
            self._closed.add("model")
            self._lora = {}
            return
        m = _LORA_RE.search(line)
        if m:
            self._lora[m.group("dev")] = self._lora.get(m.group("dev"), 0) + mib_to_bytes(float(m.group("mib")))
            self._matched += 1
            return
        m = _PROMPT_CACHE_RE.search(line)
        if m:
            self._prompt_cache = int(m.group("mib")) if m.group("mib") else (-1 if m.group("none") else 0)
            return
        m = _USING_DEVICE_RE.search(line)
        if m:
            if (m.group("dev"), m.group("desc")) in self._devices:  # a model loaded again: start over
                self._devices = []
            self._devices.append((m.group("dev"), m.group("desc")))
            return
        if _CONTEXT_START_RE.search(line):
            self._closed.update(("kv", "output", "compute"))
            return
        if self._feed_clip(line):
            self._matched += 1
            return
        if self._feed_buffers(line) or self._feed_breakdown(line) or self._feed_opencoti(line) or self._feed_sched(line):
            self._matched += 1

    def _start(self, kind: str, device: str | None) -> None:
        """Open a new block of ``kind`` when its last one ended: a marker, another kind since, or a
        compute/output device printed twice. Model and KV lines may repeat a device within one
        block (a split GGUF maps each file: one ``CPU_Mapped`` line per file; iSWA: one KV buffer
        line per cache), so they add up."""
        repeat = device is not None and kind in ("compute", "output") and device in self._blocks[kind]
        if kind in self._closed or self._last_kind != kind or repeat:
            if kind == "breakdown":
                self._breakdown = []
            else:
                self._blocks[kind] = {}
                if kind == "kv":  # the context's memory: KV caches and recurrent state together
                    self._caches, self._rs, self._rs_lines, self._layer_devs = [], {}, [], {}
                    self._layer_ids, self._rs_layer_ids = [], []
            self._closed.discard(kind)
        self._last_kind = kind

    def _feed_sched(self, line: str) -> bool:
        if m := _SCHED_COPIES_RE.search(line):
            self._sched_copies = int(m.group("n"))
            return True
        if m := _N_EMBD_RE.search(line.rstrip()):
            self._n_embd = self._n_embd or int(m.group("n"))  # (the model's: a draft's comes after)
            return True
        return False

    def _feed_buffers(self, line: str) -> bool:
        for kind, regex in (("model", _MODEL_RE), ("kv", _KV_BUF_RE), ("output", _OUTPUT_RE), ("compute", _COMPUTE_RE)):
            m = regex.search(line)
            if m:
                dev = m.group("dev")
                self._start(kind, dev)
                block = self._blocks[kind]
                block[dev] = block.get(dev, 0) + mib_to_bytes(float(m.group("mib")))
                return True
        m = _KV_LAYER_RE.search(line)
        if m:
            self._start("kv", None)
            dev = m.group("dev")
            self._layer_devs[dev] = self._layer_devs.get(dev, 0) + 1
            self._layer_ids.append(int(m.group("il")))
            return True
        m = _RS_LAYER_RE.search(line)
        if m:
            self._start("kv", None)
            self._rs_layer_ids.append(int(m.group("il")))
            return True
        m = _RS_BUF_RE.search(line)
        if m:
            self._start("kv", None)
            dev = m.group("dev")
            self._rs[dev] = self._rs.get(dev, 0) + mib_to_bytes(float(m.group("mib")))
            return True
        m = _RS_SIZE_RE.search(line)
        if m:
            self._start("kv", None)
            self._rs_lines.append((line[m.start():].strip(), mib_to_bytes(float(m.group("mib")))))
            return True
        m = _KV_SIZE_RE.search(line)
        if m:
            self._start("kv", None)
            self._caches.append(KvCacheLine(
                mib_to_bytes(float(m.group("mib"))), int(m.group("cells")), int(m.group("layers")),
                int(m.group("seqs")), int(m.group("streams")), m.group("tk"), mib_to_bytes(float(m.group("k"))),
                m.group("tv"), mib_to_bytes(float(m.group("v"))), line[m.start():].strip(),
                tuple(sorted(self._layer_devs.items())), tuple(self._layer_ids)))
            self._layer_devs, self._layer_ids = {}, []
            return True
        return False

    def _feed_clip(self, line: str) -> bool:
        """The projector's lines; a new CLIP context starts over, a device repeated a new reserve."""
        backend, weights, compute = self._clip
        if m := _CLIP_BACKEND_RE.search(line):
            self._clip = (m.group("dev"), None, {})
        elif m := _CLIP_MODEL_RE.search(line):
            self._clip = (backend, mib_to_bytes(float(m.group("mib"))), compute)
        elif m := _CLIP_COMPUTE_RE.search(line):
            dev = m.group("dev")
            self._clip = (backend, weights, ({} if dev in compute else compute) | {dev: mib_to_bytes(float(m.group("mib")))})
        else:
            return False
        return True

    def _feed_breakdown(self, line: str) -> bool:
        if _BREAKDOWN_HEADER_RE.search(line):
            self._closed.add("breakdown")
            self._start("breakdown", None)
            return True
        m = _BREAKDOWN_GPU_RE.search(line)
        if m:
            self._start("breakdown", None)
            self._breakdown.append(BreakdownRow(
                m.group("name"), int(m.group("self")), int(m.group("model")), int(m.group("context")),
                int(m.group("compute")), int(m.group("total")), int(m.group("free")), int(m.group("unacc")),
                m.group("desc") or ""))
            return True
        m = _BREAKDOWN_OTHER_RE.search(line)
        if m:
            self._start("breakdown", None)
            self._breakdown.append(BreakdownRow(
                m.group("name"), int(m.group("self")), int(m.group("model")), int(m.group("context")),
                int(m.group("compute"))))
            return True
        return False

    def _feed_opencoti(self, line: str) -> bool:
        oc = self._opencoti
        m = _OC_TWO_PASS_RE.search(line)
        if m:
            self._opencoti = replace(oc, measured_compute=mib_to_bytes(float(m.group("mib"))),
                                     iterations=oc.iterations + 1)
            return True
        m = _OC_WINDOW_RE.search(line)
        if m:
            self._opencoti = replace(oc, tactic=m.group("tactic"), residency_mode=m.group("mode"),
                                     window_cells=int(m.group("window")), n_cells=int(m.group("cells")),
                                     host_tail_cells=int(m.group("tail")))
            return True
        m = _OC_TACTIC_RE.search(line)
        if m:
            table = tuple((k, int(v)) for k, v in _OC_TACTIC_ITEM_RE.findall(m.group("rest")))
            self._opencoti = replace(oc, tactic_table=table)
            return True
        return False

    def result(self, *, expect_buffers: bool = False) -> LogBuffers:
        """The latest blocks. ``expect_buffers``: warn (NO_BUFFER_LINES) when none matched."""
        if self._partial:
            self.feed(self._partial)
            self._partial = ""
        out = LogBuffers(
            model=dict(self._blocks["model"]), kv=dict(self._blocks["kv"]), output=dict(self._blocks["output"]),
            compute=dict(self._blocks["compute"]), kv_caches=tuple(self._caches),
            recurrent=dict(self._rs), recurrent_lines=tuple(t for t, _ in self._rs_lines),
            recurrent_total=sum(b for _, b in self._rs_lines), breakdown=tuple(self._breakdown),
            recurrent_layer_ids=tuple(self._rs_layer_ids), sched_copies=self._sched_copies, n_embd=self._n_embd,
            opencoti=self._opencoti, matched=self._matched, devices=tuple(self._devices),
            prompt_cache_mib=self._prompt_cache, lora=dict(self._lora),
            draft=self._draft.result() if self._draft is not None else None,
            projector_backend=self._clip[0],
            projector_weights=self._clip[1], projector_compute=dict(self._clip[2]),
        )
        if expect_buffers and not out.has_buffers:
            out = replace(out, warnings=(NO_BUFFER_LINES,))
        return out


def parse_log(text: str, *, expect_buffers: bool = True) -> LogBuffers:
    """Parse a whole log. A log that should hold buffer lines but matched none carries a warning."""
    parser = LogParser()
    parser.feed_text(text)
    return parser.result(expect_buffers=expect_buffers)
