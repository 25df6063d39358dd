"""Why an engine failed to start, read from its log: a table of known lines → actionable messages.

Every pattern has the line it matches above it (docs/style.md, "Log scraping with the sample in the
comment"); the strings come from the llama.cpp that llama-cpp-python 0.3.36 vendors (file named
next to each). The first pattern that matches, in table order, wins: the specific causes come
before the generic ones ("failed to load model" follows most of them).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from app.llamacpp.llamafile_gpu import gpu_story
from app.llamacpp.logs import SYSTEM_INFO
from app.text import printable_lines

#: How many log lines a failure message carries for the user.
TAIL_LINES = 12


class FailureKind(StrEnum):
    """Why an engine stopped, for code to decide on (``Failure.message`` is for people); the value is
    what JSON and the logs say."""

    RPC_WORKER = "rpc_worker"  # an RPC worker stopped answering or could not be reached
    OOM = "oom"  # a buffer could not be allocated at load
    PORT_IN_USE = "port_in_use"
    UNKNOWN_ARGUMENT = "unknown_argument"  # the engine refused a flag
    MODEL_UNREADABLE = "model_unreadable"  # the file is missing, no GGUF, or one llama.cpp cannot load
    GRAPH_REALLOC = "graph_realloc"  # the k-pool re-reserve abort (docs/engine-patches.md)
    ASSERT = "assert"  # GGML_ASSERT
    CPU_CODE = "cpu_code"  # SIGILL, or an AMX crash at warm-up: the CPU code cannot run here
    KILLED = "killed"  # by a signal the log does not explain
    EXITED = "exited"  # by itself, without a known line
    TIMEOUT = "timeout"  # not ready in time, its log silent
    STOPPED = "stopped"  # Headroom stopped it before it was ready
    MISSING_BINARY = "missing_binary"  # the engine file is not there or cannot run
    GPU_CODE = "gpu_code"  # a llamafile could not load its GPU code (app/llamacpp/llamafile_gpu.py)
    NO_REPLY = "no_reply"  # ready, but no answer to a completion (the doctor's self-test)


@dataclass(frozen=True)
class Failure:
    """A classified start-up failure: ``kind`` for code, ``message`` for people, ``tail`` for context."""

    kind: FailureKind
    message: str
    line: str = ""
    tail: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        """The message and the log's last lines, each escaped (a log line carries the model's token
        texts and key values: an OSC 52 clipboard write, a title change, a screen clear)."""
        text = self.message
        if self.tail:
            text += "\nLast engine log lines:\n" + "\n".join(f"  {t}" for t in self.tail)
        return printable_lines(text)


@dataclass(frozen=True)
class _Rule:
    kind: FailureKind
    pattern: re.Pattern[str]
    template: str  # str.format with the pattern's named groups


def _mib(size: str) -> str:
    """``'103079215104'`` (bytes, as ggml-alloc prints) → ``'98304 MiB'``."""
    try:
        return f"{int(size) / (1024 * 1024):.0f} MiB"
    except ValueError:
        return size


RULES: tuple[_Rule, ...] = (
    # ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_error (CUDA_CHECK), at the first kernel on a card the
    # engine's CUDA code was not built for (tests/fixtures/cuda_logs/sm61-no-kernel-image.log):
    # CUDA error: no kernel image is available for execution on the device
    _Rule(FailureKind.GPU_CODE, re.compile(r"CUDA error: no kernel image is available for execution on the device"),
          "The engine has no GPU code for this card: its CUDA kernels were built for other compute capabilities "
          "(`headroom doctor` says which, under GPU code). Launch on the CPU (-ngl 0 with the card hidden: "
          "CUDA_VISIBLE_DEVICES=-1), or use an engine built for this card (headroom engine build --backend cuda)."),
    # ggml/src/ggml-rpc/ggml-rpc.cpp, RPC_STATUS_ASSERT after a failed send/recv (a worker gone mid-run):
    # /src/ggml/src/ggml-rpc/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response
    _Rule(FailureKind.RPC_WORKER, re.compile(r"Remote RPC server crashed or returned malformed response"),
          "An RPC worker stopped answering, and the engine cannot go on without the layers it held "
          "(ggml-rpc aborts). Start the worker again (headroom rpc-worker) and serve again, or plan without it."),
    # ggml/src/ggml-rpc/ggml-rpc.cpp, ggml_backend_rpc_get_device_count / the dispatcher (at start):
    # /src/ggml/src/ggml-rpc/ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:50052
    _Rule(FailureKind.RPC_WORKER, re.compile(r"Failed to connect to (?P<endpoint>\S+)"),
          "The engine could not reach the RPC worker {endpoint}: is ggml-rpc-server running there (headroom "
          "rpc-worker), and is the address right? Plan again without it, or start it."),
    # ggml/src/ggml-cuda/ggml-cuda.cu, ggml_backend_cuda_buffer_type_alloc_buffer:
    # ggml_backend_cuda_buffer_type_alloc_buffer: allocating 98304.00 MiB on device 0: cudaMalloc failed: out of memory
    _Rule(FailureKind.OOM, re.compile(r"allocating (?P<size>[0-9.]+) MiB on device (?P<dev>\d+): cudaMalloc failed: out of memory"),
          "Out of GPU memory at load: CUDA{dev} could not allocate {size} MiB. Lower the context, use a smaller "
          "KV type, offload fewer layers, or free memory held by other processes."),
    # ggml/src/ggml-alloc.c, ggml_backend_alloc_ctx_tensors_from_buft / ggml_gallocr_reserve_n:
    # alloc_tensor_range: failed to allocate CUDA0 buffer of size 103079215104
    _Rule(FailureKind.OOM, re.compile(r"failed to allocate (?P<buf>\S+) buffer of size (?P<size>\d+)"),
          "Out of memory at load: the {buf} buffer of {size_mib} could not be allocated. Lower the context, "
          "use a smaller KV type, offload fewer layers, or free memory held by other processes."),
    # src/llama-kv-cache.cpp, llama_kv_cache::llama_kv_cache:
    # llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
    _Rule(FailureKind.OOM, re.compile(r"failed to allocate buffer for kv cache"),
          "Out of memory at load: the KV cache buffer could not be allocated. Lower the context or use a "
          "smaller KV type (-ctk/-ctv), or keep part of it on the host."),
    # src/llama-context.cpp, llama_context::llama_context:
    # llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers
    _Rule(FailureKind.OOM, re.compile(r"failed to allocate compute (?:pp |tg )?buffers"),
          "Out of memory at load: the compute buffer could not be allocated. Lower the micro-batch (-ub) "
          "or the context."),
    # src/llama-model.cpp, load_tensors (weights):
    # llama_model_load: error loading model: unable to allocate CUDA0 buffer
    _Rule(FailureKind.OOM, re.compile(r"unable to allocate (?P<buf>\S+) buffer"),
          "Out of memory at load: the {buf} model (weights) buffer could not be allocated. Offload fewer "
          "layers (-ngl) or free GPU memory."),
    # tools/server/server-http.cpp, server_http_context::start:
    # couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080
    _Rule(FailureKind.PORT_IN_USE, re.compile(r"couldn't bind HTTP server socket, hostname: (?P<host>\S+), port: (?P<port>\d+)"),
          "The engine could not listen on {host}:{port}: the port is in use (or the address is not on this "
          "machine). Pick another port, or stop whatever holds it."),
    # common/arg.cpp, common_params_parse_ex:
    # error: invalid argument: --kv-residency-mode
    _Rule(FailureKind.UNKNOWN_ARGUMENT, re.compile(r"error: invalid argument: (?P<arg>\S+)"),
          "This engine does not accept {arg}. Use an engine that has it (Headroom probes each engine's "
          "flags), or change the setting that needs it."),
    # ggml/src/gguf.cpp, gguf_init_from_file:
    # gguf_init_from_file: failed to open GGUF file '/models/x.gguf' (No such file or directory)
    _Rule(FailureKind.MODEL_UNREADABLE, re.compile(r"failed to open GGUF file '(?P<path>.*)' \((?P<why>[^)]*)\)"),
          "The engine could not open the model {path}: {why}. Check the path and its permissions."),
    # ggml/src/gguf.cpp, gguf_init_from_reader (the first complaint is the most specific):
    # gguf_init_from_reader: invalid magic characters: 'junk', expected 'GGUF'
    # gguf_init_from_reader: number of tensors is -1 but must be in [0, 53624256028225440]
    _Rule(FailureKind.MODEL_UNREADABLE, re.compile(r"gguf_init_from_\w+: (?P<why>.+)"),
          "The model file is not a valid GGUF ({why}). It may be truncated or corrupt: download it again."),
    # src/llama.cpp, llama_model_load:
    # llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'x'
    _Rule(FailureKind.MODEL_UNREADABLE, re.compile(r"error loading model: (?P<why>.*)"),
          "The engine could not load the model: {why}."),
    # ggml/src/ggml-backend.cpp, ggml_backend_sched_alloc_graph (an abort, so it comes before GGML_ASSERT):
    # ggml_backend_sched_alloc_graph: unexpected graph reallocation (graph size = 2048, nodes = 1638, ...
    _Rule(FailureKind.GRAPH_REALLOC, re.compile(r"unexpected graph reallocation.*"),
          "The engine aborted on an unexpected graph reallocation: a decode graph outgrew the reserved "
          "compute buffer. This is an engine bug for some architectures with shared sequences "
          "(see Headroom's advisories); update the engine or avoid shared sequences."),
    # ggml/src/ggml.c, ggml_abort via GGML_ASSERT:
    # /src/llama-model.cpp:1234: GGML_ASSERT(!ml.no_alloc) failed
    _Rule(FailureKind.ASSERT, re.compile(r"GGML_ASSERT\((?P<cond>.*)\) failed"),
          "The engine hit an internal assertion: GGML_ASSERT({cond}). This is an engine bug or an "
          "unsupported model/setting combination; the log lines below say where."),
    # tools/server/server-context.cpp, load_model:
    # srv    load_model: failed to load model, '/models/x.gguf'
    _Rule(FailureKind.MODEL_UNREADABLE, re.compile(r"failed to load model, '(?P<path>.*)'"),
          "The engine could not load the model {path}; the log lines below say why."),
)


def classify_line(line: str) -> tuple[_Rule, re.Match[str]] | None:
    for rule in RULES:
        m = rule.pattern.search(line)
        if m:
            return rule, m
    return None


def signal_name(exit_code: int) -> str:
    """``-9`` (subprocess's "killed by signal 9") → ``"SIGKILL"``."""
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


#: What a signal usually means for an engine that did not choose to exit.
_SIGNAL_HINTS = {
    "SIGKILL": "Something outside the engine killed it: a user, or the kernel's out-of-memory killer "
               "(`journalctl -k` or `dmesg` names an out-of-memory kill).",
    "SIGSEGV": "The engine crashed (a segmentation fault): an engine bug, or a damaged model file.",
    "SIGABRT": "The engine aborted itself (a failed check inside llama.cpp).",
    "SIGILL": "The engine ran an instruction this CPU does not execute: it was built for another CPU "
              "(-march=native on the machine that built it). Use an engine built here (headroom engine "
              "build) or the bundle's, which picks its CPU code at run time.",
}

# common/common.cpp common_init_from_params, the empty run before the server is ready:
# common_init_: warming up the model with an empty run - please wait ... (--no-warmup to disable)
_WARMUP = re.compile(r"warming up the model")
# src/llama-model.cpp load_tensors, quantized weights in ggml's AMX buffer (an engine with AMX code):
# load_tensors:          AMX model buffer size =     0.70 MiB
_AMX_BUFFER = re.compile(r"\bAMX model buffer size\b")
# ggml/src/ggml-backend-reg.cpp load_backend (a portable build, GGML_BACKEND_DL: the variant CPUID chose):
# load_backend: loaded CPU backend from /opt/headroom/engine/build/bin/libggml-cpu-haswell.so
_CPU_VARIANT = re.compile(r"loaded CPU backend from \S*libggml-cpu-(?P<variant>[\w.]+)\.so")
#: The instruction sets a ``system_info`` line names that a CPU may lack, newest first.
_ISA_NAMES = ("AMX_INT8", "AVX512_BF16", "AVX512_VNNI", "AVX512_VBMI", "AVX512", "AVX_VNNI", "AVX2", "FMA",
              "F16C", "AVX", "SSE3")


@dataclass(frozen=True)
class EngineCpu:
    """The CPU code an engine log says it runs: the instruction sets in its ``system_info`` line, and
    the variant a portable build loaded (``""`` for a native build)."""

    isas: tuple[str, ...]
    variant: str = ""

    @property
    def amx(self) -> bool:
        return "AMX_INT8" in self.isas

    def __str__(self) -> str:
        sets = ", ".join(self.isas) or "no SIMD extension"
        return f"the {self.variant} variant ({sets})" if self.variant else sets


def is_cpu_line(line: str) -> bool:
    """A line ``engine_cpu`` reads (a supervisor keeps these past its bounded tail)."""
    return any(p.search(line) is not None for p in (SYSTEM_INFO, _CPU_VARIANT, _AMX_BUFFER))


def engine_cpu(lines: Iterable[str]) -> EngineCpu | None:
    """What the log's ``system_info`` (and a portable build's ``load_backend``) line say; None when
    the engine died before printing them."""
    cpu: EngineCpu | None = None
    variant = ""
    for line in lines:
        if m := _CPU_VARIANT.search(line):
            variant = m.group("variant")
        elif m := SYSTEM_INFO.search(line):
            on = set(re.findall(r"(\w+) = 1\b", m.group("cpu") or ""))
            cpu = EngineCpu(tuple(n for n in _ISA_NAMES if n in on))
    return EngineCpu(cpu.isas, variant) if cpu is not None else None


def _cpu_crash(seq: Sequence[str], name: str) -> str | None:
    """The sentence for an engine killed by SIGILL, or by SIGSEGV or SIGILL after loading weights into
    ggml's AMX buffer: which CPU code ran, and what to do. None when the log says nothing about the CPU
    code (and for any other signal: SIGKILL, SIGBUS, SIGABRT keep their own words)."""
    cpu = engine_cpu(seq)
    if cpu is None:
        return None
    warming = any(_WARMUP.search(line) for line in seq)
    when = " while warming up the model" if warming else ""
    # Only where the AMX code ran: weights in its buffer (an engine launched with -nr has none). The log
    # is written by a thread of its own, so one killed at warm-up may not have written that line yet.
    amx_loaded = cpu.amx and any(_AMX_BUFFER.search(line) for line in seq)
    if amx_loaded and name in ("SIGSEGV", "SIGILL"):
        return (f"The engine was killed by {name}{when}, running CPU code with {cpu}, its weights in ggml's AMX "
                "buffer (Intel's tile instructions, 'AMX_INT8 = 1' in its system_info line). Most likely its AMX "
                "matrix product loaded a tile configuration the compiler left partly unwritten (seen with GCC "
                "12; llama.cpp pull request 26954), and the tile instructions faulted. Headroom's own engine is "
                "built without AMX: use it (headroom engine build, or the bundle's), or start this engine with "
                "--no-repack (-nr), which keeps the weights out of its AMX buffer.")
    if name != "SIGILL":
        return None
    fix = ("its portable build did not choose it well: report it, and start the engine with -nr meanwhile"
           if cpu.variant else
           "it was built for another CPU (-march=native on the machine that built it). Build it here "
           "(headroom engine build: native code for this CPU), or use the bundle's engine, which picks its "
           "CPU code at run time")
    return (f"The engine was killed by SIGILL (an instruction this CPU does not execute){when}, running CPU "
            f"code with {cpu}: {fix}.")


def classify(lines: Iterable[str], exit_code: int | None = None, *, serving_at: str | None = None,
             served_for: float | None = None, cpu_lines: Sequence[str] = ()) -> Failure:
    """The most specific known failure in ``lines`` (an engine log), else a generic one.

    All lines are scanned and the rule that comes first in RULES wins, so "cudaMalloc failed" beats
    the "failed to load model" that follows it a few lines later. ``serving_at``: the engine had
    been ready at that URL (for ``served_for`` seconds) when it ended, so it did not fail to start:
    it stopped serving. A negative ``exit_code`` is a signal, said by name (-9: SIGKILL); SIGILL, or
    SIGSEGV at warm-up with AMX code, is said with the CPU code that ran (``cpu_lines``: the log's
    system_info and backend lines when the tail no longer holds them).
    """
    seq: Sequence[str] = list(lines)
    tail = tuple(seq[-TAIL_LINES:])
    story = gpu_story(seq)
    if story.fatal:  # a llamafile that stopped for want of its GPU code: the cause, not the last line
        return Failure(FailureKind.GPU_CODE, story.sentence(), story.line, tail)
    best: tuple[int, _Rule, re.Match[str], str] | None = None
    for line in seq:
        found = classify_line(line)
        if found is None:
            continue
        rank = RULES.index(found[0])
        if best is None or rank < best[0]:
            best = (rank, found[0], found[1], line)
    if best is None:
        kind, how, hint = FailureKind.EXITED, "stopped", ""
        if exit_code is not None and exit_code < 0:
            name = signal_name(exit_code)
            kind, how, hint = FailureKind.KILLED, f"was killed by {name}", _SIGNAL_HINTS.get(name, "")
            cpu_words = _cpu_crash([*cpu_lines, *seq], name) if serving_at is None else None
            if cpu_words is not None:
                return Failure(FailureKind.CPU_CODE, cpu_words, "", tail)
        elif exit_code is not None:
            how = f"exited with code {exit_code}"
        if serving_at is not None:  # it served: the log's last line is traffic, not a cause
            since = f" (ready {served_for:.0f} s before)" if served_for is not None else ""
            message = f"The engine {how} while serving at {serving_at}{since}."
        else:
            last = next((t for t in reversed(seq) if t.strip()), "")
            detail = f": {last.strip()}" if last else " without writing a log"
            message = f"The engine {how} before it was ready{detail}."
        return Failure(kind, message + (f" {hint}" if hint else ""), "", tail)
    _, rule, m, line = best
    groups = {k: (v or "") for k, v in m.groupdict().items()}
    if "size" in groups:
        groups["size_mib"] = _mib(groups["size"])
    return Failure(rule.kind, rule.template.format(**groups), line.strip(), tail)


def foreign_server(host: str, port: int, others: Sequence[str], *, shared: bool,
                   tail: tuple[str, ...] = ()) -> Failure:
    """Another server answers ``/health`` on the engine's port: it is not the engine Headroom started
    (``shared``: both listen there, and a request may reach either)."""
    who = ", ".join(others) or "another process"
    how = (f"the engine listens on {host}:{port}, but so does {who}: a request could reach either"
           if shared else f"{who} already answers there, not the engine Headroom started")
    return Failure(FailureKind.PORT_IN_USE, f"The port is in use: {how}. Pick another port, or stop whatever holds it.",
                   "", tail)


# ---- Pass 1 (a no_alloc load in a child process, app/probe/measure.py) --------------------------------

#: Known llama.cpp failure lines → what the user can do, for pass 1. The first pattern (in this order)
#: that any log line matches decides: the specific causes come before the generic ones.
PASS1_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    # src/llama-context.cpp, llama_context::llama_context (a quantized V cache without flash attention):
    # llama_init_from_model: failed to initialize the context: quantized V cache was requested, but this requires Flash Attention
    (re.compile(r"quantized V cache requires flash_attn|requires Flash Attention"),
     "A quantized V cache needs flash attention: use --fa on, or an f16 V cache (-ctv f16)."),
    # src/llama-context.cpp, llama_init_from_model:
    # llama_init_from_model: V cache type q4_0 with block size 32 does not divide n_embd_head_v=48
    (re.compile(r"cache type (\w+) with block size \d+ does not divide n_embd_head"),
     "This KV cache type does not fit the model's head size: use f16 (-ctk/-ctv f16) or another type."),
    # src/llama-model.cpp, llm_arch_from_string's caller:
    # llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'x'
    (re.compile(r"unknown model architecture: '([^']*)'"),
     "This llama.cpp does not know the model's architecture: update the engine or pick another model."),
    # ggml/src/gguf.cpp, gguf_init_from_reader:
    # gguf_init_from_reader: invalid magic characters: 'junk', expected 'GGUF'
    (re.compile(r"invalid magic|failed to read magic|bad GGUF version|failed to read header|not a GGUF"),
     "The file is not a GGUF model llama.cpp can read: check the path, or re-download it."),
    # src/llama.cpp, llama_model_load:
    # llama_model_load: error loading model: error loading model hyperparameters: invalid n_rot: 48, expected 16
    (re.compile(r"error loading model"),
     "llama.cpp could not load this GGUF: check that it is complete and that this engine supports it."),
    # src/llama-model-loader.cpp / llama-model-loader.h (the tensor table against the architecture):
    # llama_model_load: error loading model: missing tensor 'blk.0.attn_q.weight'
    # tensor 'blk.3.ffn_up.weight' data is not within the file bounds, model is corrupted or incomplete
    (re.compile(r"(?:wrong number of tensors|tensor '[^']*' data is not within the file bounds|"
                r"missing tensor|has wrong shape)"),
     "The GGUF is damaged or incomplete (tensor table does not match): re-download it."),
    # common/arg.cpp, common_params_parse_ex (CAPABILITY_REJECTED below):
    # error: invalid argument: --kv-residency-mode
    (re.compile(r"error: invalid argument: "),
     "The engine rejected a command-line flag: it is an older or different build than this plan needs "
     "(the KV window needs the opencoti engine)."),
    # app/probe/worker.py load_bindings (a checkout whose set-up did not finish; a bundle carries them):
    # ImportError: llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)
    (re.compile(r"llama-cpp-python is not installed"),
     "Pass 1 needs llama-cpp-python, which Headroom's set-up installs: in a checkout run ./dev setup again "
     "(the bundle carries it)."),
    # llama-cpp-python's _ctypes_extensions.load_shared_library:
    # FileNotFoundError: Shared library with base name 'llama' not found
    (re.compile(r"Shared library with base name 'llama' not found"),
     "Pass 1 measures with the llama.cpp library (libllama) an engine build carries, and none was found: "
     "build Headroom's engine (`headroom engine build`; in the window, Build engine…), or give an engine "
     "whose folder holds libllama.so beside llama-server (--engine FILE; in the window, File ▸ Choose "
     "engine…; a llamafile carries none)."),
    # ggml/src/ggml.c, ggml_abort via GGML_ASSERT (REASONS below):
    # /src/llama-model.cpp:1234: GGML_ASSERT(!ml.no_alloc) failed
    (re.compile(r"GGML_ASSERT|Assertion .* failed"),
     "llama.cpp hit an internal assertion with these settings: try other settings or another engine version."),
)


#: Pass 1's errors in Python's words rather than llama.cpp's, said as what is missing.
PASS1_PLAIN: tuple[tuple[re.Pattern[str], str], ...] = (
    # llama-cpp-python's _ctypes_extensions.load_shared_library (PASS1_HINTS says what to do):
    (re.compile(r"FileNotFoundError: Shared library with base name 'llama' not found"),
     "there is no llama.cpp library (libllama) to measure with"),
)


def plain_error(error: str) -> str:
    """Pass 1's ``error`` in plain words where PASS1_PLAIN knows it, else as it is."""
    return next((words for regex, words in PASS1_PLAIN if regex.search(error)), error)


def failure_hint(lines: Sequence[str]) -> str:
    """What the user can do about a pass-1 failure whose log is ``lines`` (PASS1_HINTS), or ``""``."""
    for regex, hint in PASS1_HINTS:
        if any(regex.search(line) for line in lines):
            return hint
    return ""


def last_lines(lines: Sequence[str], n: int = TAIL_LINES) -> list[str]:
    """The last ``n`` non-blank lines, right-stripped (what a failure message carries)."""
    keep = [ln.rstrip() for ln in lines if ln.strip()]
    return keep[-n:]


#: The lines that say why llama.cpp gave up, most telling first. The first pattern any line
#: matches decides (its first such line); what follows an abort is its backtrace, not the cause.
REASONS: tuple[re.Pattern[str], ...] = (
    # ggml/src/ggml.c, ggml_abort via GGML_ASSERT:
    # /src/llama-model.cpp:1420: GGML_ASSERT(hparams.rope_scaling_type_train != LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED) failed
    re.compile(r"GGML_ASSERT\(.*\) failed"),
    # a C assert(): python3: /src/llama.cpp:12: int f(): Assertion `x > 0' failed.
    re.compile(r"Assertion .* failed"),
    # ggml/src/ggml.c, ggml_abort (GGML_ABORT): "<file>:<line>: <message>", then the backtrace
    # /src/llama-graph.cpp:123: fatal error
    re.compile(r"^\S+\.(?:c|cc|cpp|cu|h|hpp):\d+: \S"),
    # src/llama.cpp, llama_model_load:
    # llama_model_load: error loading model: error loading model hyperparameters: invalid n_rot: 48, expected 16
    re.compile(r"error loading model: .*"),
    # src/llama-context.cpp / llama.cpp, llama_init_from_model:
    # llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers
    re.compile(r"failed to initialize the context: .*"),
)


def reason_index(lines: Sequence[str]) -> int | None:
    """Where in ``lines`` llama.cpp said why it failed (see ``REASONS``), or None."""
    for regex in REASONS:
        for i, line in enumerate(lines):
            if regex.search(line):
                return i
    return None


def up_to_reason(lines: Sequence[str]) -> tuple[str, list[str]]:
    """``(the reason line or "", the last log lines ending with it)``: an abort's backtrace (gdb's
    frames, "No such file or directory" for each source it lacks) is dropped."""
    i = reason_index(lines)
    if i is None:
        return "", last_lines(lines)
    return lines[i].strip(), last_lines(lines[: i + 1])


# ---- Capability probes (``<engine> <flag> [value] -m /nonexistent.gguf``, app/engine/capabilities.py) ----

# common/arg.cpp, common_params_parse_ex:
# error: invalid argument: --kv-residency-mode
CAPABILITY_REJECTED = re.compile(r"error: invalid argument: (\S+)")
# common/arg.cpp, a value the option's handler throws on:
# error while handling argument "-ctk": Unsupported cache type: q9
CAPABILITY_BAD_VALUE = re.compile(r'error while handling argument "([^"]+)"')
# ggml/src/gguf.cpp, gguf_init_from_file / src/llama.cpp / tools/server (the model stage, so the
# flags were all parsed):
# gguf_init_from_file: failed to open GGUF file '/nonexistent.gguf' (No such file or directory)
# srv    load_model: failed to load model, '/nonexistent.gguf'
# ggml/src/ggml-rpc/ggml-rpc.cpp (``--rpc`` connects while parsing, so this also means accepted):
# .../ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:1
CAPABILITY_ACCEPTED = re.compile(r"failed to open GGUF file|failed to load model|error loading model|Failed to connect to")

# ggml/src/ggml-backend.cpp, ggml_backend_sched_alloc_splits (with GGML_SCHED_DEBUG_REALLOC=1):
# /.../ggml-backend.cpp:1638: ggml_backend_sched_alloc_splits: unexpected graph reallocation (graph size = 1234, nodes = 1200, leafs = 30), debug_realloc = 1
REALLOC_MARK = "unexpected graph reallocation"
# ggml/src/ggml.c, ggml_abort: /.../llama-kv-cache.cpp:123: GGML_ASSERT(...) failed
ASSERT_MARK = "GGML_ASSERT"
# native/patches/0002, set_input_kpool (with HEADROOM_KPOOL_SCATTER_CHECK=1):
# /.../llama-memory-hybrid-idx.cpp:1228: k-pool scatter race: entries 0 and 32 of this ubatch (64 entries) both write pooled row 3 (HEADROOM_KPOOL_SCATTER_CHECK)
SCATTER_MARK = "k-pool scatter race"


def abort_line(lines: Sequence[str]) -> str:
    """The line that says why the engine aborted during shared decoding (the smoke test's verdict): a
    graph re-reserve or the k-pool scatter race first, else the last assertion or abort; ``""``: none."""
    for line in reversed(lines):
        if REALLOC_MARK in line or SCATTER_MARK in line:
            return line.strip()
    for line in reversed(lines):
        if ASSERT_MARK in line or "GGML_ABORT" in line:
            return line.strip()
    return ""
