"""Does an engine serve on this CPU? Run it once on a tiny quantized model (``headroom doctor``).

An engine built for another CPU, or one whose AMX code crashes on this machine, dies when it first runs
its CPU kernels: at warm-up, before it is ready (docs/domain.md §11). Flags and ``--version`` never
reach those kernels, so the only true answer is a real load of a real quantized model: Headroom writes
one of about 1 MiB (``selftest_model``: a 2-layer llama with Q4_0 matrices, the type every CPU code
path repacks or tiles), starts the engine on the CPU only (``-ngl 0``) on a free loopback port, waits
for ``/health``, asks for four tokens and stops it. A failure is classified like any launch's
(app/llamacpp/failures.py), so a SIGILL or an AMX crash is said with the CPU code that was running.
"""

from __future__ import annotations

import http.client
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.engine.capabilities import free_port
from app.engine.discover import EngineInfo
from app.engine.process import EngineFailed, ServerProcess
from app.files import atomic_file
from app.llamacpp.failures import Failure, FailureKind
from app.paths import cache_dir

#: Bump when the model below changes: the file name carries it, so an old one is not reused.
MODEL_VERSION = 1
#: Loading a 1 MiB model takes well under a second; a slow machine or emulator gets plenty more.
READY_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 60.0

# The model: llama, 2 layers of width 256 (4 heads of 64), FFN 512, a byte vocabulary (SentencePiece
# byte fallback: <unk> <s> </s> then <0x00>..<0xFF>), seeded random weights.
_N_LAYER, _N_EMBD, _N_HEAD, _N_FF = 2, 256, 4, 512
_N_VOCAB = 3 + 256


def selftest_model(folder: Path | None = None, *, head_dim: int = _N_EMBD // _N_HEAD) -> Path:
    """The self-test model, written once (atomically) under the cache. ``head_dim``: another width of its
    4 heads (the model ``_N_HEAD`` times as wide, its FFN twice that), for timing a CPU's attention at a
    model's head size (app/engine/cpu_attention.py)."""
    n_embd = _N_HEAD * head_dim
    width = "" if n_embd == _N_EMBD else f"-h{head_dim}"
    return _written(folder, f"headroom-selftest-q4_0{width}-v{MODEL_VERSION}.gguf",
                    lambda tmp: _write_model(tmp, n_embd, _N_FF * n_embd // _N_EMBD))


#: The deep model's width and FFN (``deep_attention_model``): its matrices stay small however many and
#: wide its heads (their size is the GGUF's key length, not the width over the heads).
_DEEP_N_EMBD = 64
_DEEP_N_FF = 64


def deep_attention_model(head_dim: int, n_layer: int, folder: Path | None = None, *, n_head: int = _N_HEAD,
                         n_head_kv: int | None = None) -> Path:
    """A model for timing a CPU's attention over more KV than its caches hold
    (bench/bench_attention_footprint.py): ``n_head`` query heads of ``head_dim`` over ``n_head_kv`` KV
    heads (default: as many), ``n_layer`` layers of width ``_DEEP_N_EMBD``. A few MiB, written once like
    ``selftest_model``."""
    kv = n_head_kv or n_head
    return _written(folder, f"headroom-attention-q4_0-h{head_dim}-q{n_head}-kv{kv}-l{n_layer}-v{MODEL_VERSION}.gguf",
                    lambda tmp: _write_model(tmp, _DEEP_N_EMBD, _DEEP_N_FF, n_layer=n_layer, head_dim=head_dim,
                                             n_head=n_head, n_head_kv=kv))


def _written(folder: Path | None, name: str, write: Callable[[Path], None]) -> Path:
    """The model ``name`` under ``folder`` (default: the cache's), written by ``write`` when it is not
    there yet: to a temporary name beside it, then renamed (a reader never sees half a file)."""
    folder = folder or cache_dir() / "selftest"
    path = folder / name
    if path.is_file():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a full or read-only cache: written to a private temp folder instead
        folder = Path(tempfile.mkdtemp(prefix="headroom-selftest-"))
        path = folder / name
    with atomic_file(path) as tmp:
        write(tmp)
    return path


def _write_model(path: Path, n_embd: int = _N_EMBD, n_ff: int = _N_FF, *, n_layer: int = _N_LAYER,
                 head_dim: int | None = None, n_head: int = _N_HEAD, n_head_kv: int | None = None) -> None:
    """The llama model above; ``head_dim``: heads of that size whatever the width (the GGUF's key and
    value length; None: the width over the heads); ``n_head_kv`` KV heads under ``n_head`` query heads."""
    n_head_kv = n_head_kv or n_head
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.quants import quantize

    rng = np.random.default_rng(27)
    w = GGUFWriter(path, "llama")
    w.add_name("headroom-selftest")
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    head = head_dim or n_embd // n_head
    if head_dim is not None:
        w.add_key_length(head)
        w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(LlamaFileType.MOSTLY_Q4_0)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_key_value("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
    w.add_key_value("tokenizer.ggml.scores", [0.0] * _N_VOCAB, GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT32)
    w.add_key_value("tokenizer.ggml.token_type", [2, 3, 3] + [6] * 256, GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.INT32)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)

    def f32(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.08, size=shape).astype(np.float32)

    def q4_0(name: str, rows: int, cols: int) -> None:
        # the quantized rows' bytes: gguf-py turns that byte shape back into (rows, cols) elements
        w.add_tensor(name, quantize(f32(rows, cols), GGMLQuantizationType.Q4_0), raw_dtype=GGMLQuantizationType.Q4_0)

    w.add_tensor("token_embd.weight", f32(_N_VOCAB, n_embd))
    q_width, kv_width = head * n_head, head * n_head_kv
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        q4_0(p + "attn_q.weight", q_width, n_embd)
        q4_0(p + "attn_k.weight", kv_width, n_embd)
        q4_0(p + "attn_v.weight", kv_width, n_embd)
        q4_0(p + "attn_output.weight", n_embd, q_width)
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        q4_0(p + "ffn_gate.weight", n_ff, n_embd)
        q4_0(p + "ffn_up.weight", n_ff, n_embd)
        q4_0(p + "ffn_down.weight", n_embd, n_ff)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", f32(_N_VOCAB, n_embd))  # 259 rows: f32, as a small vocab's output often is
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@dataclass(frozen=True)
class SelfTest:
    """What the self-test saw: the engine served (``reply``) or ``failure`` says why not."""

    engine: str
    seconds: float
    reply: str = ""
    failure: Failure | None = None
    cpu_line: str = ""  # the engine's system_info line, when it printed one

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        if self.ok:
            return f"serves on this CPU: loaded a Q4_0 model and answered in {self.seconds:.1f} s"
        assert self.failure is not None
        return f"cannot serve on this CPU: {self.failure.message}"


def selftest_argv(engine: EngineInfo, model: Path, port: int) -> list[str]:
    """The command line: the CPU only, a 256-token context, one slot, on loopback."""
    argv = [*engine.server_prefix, *(["--gpu", "disable"] if engine.is_llamafile else [])]
    argv += ["-m", str(model), "-c", "256", "-np", "1", "-ngl", "0", "--host", "127.0.0.1", "--port", str(port)]
    caps = engine.capabilities
    if engine.uses_amx and (caps is None or caps.accepts("-nr")):  # as Headroom launches it (app/engine/argv.py)
        argv.append("-nr")
    if caps is None or caps.accepts("-lv"):
        argv += ["-lv", "4"]  # the system_info line, for the words of a crash
    return argv


def run_selftest(engine: EngineInfo, *, model: Path | None = None) -> SelfTest:
    """Start ``engine`` on the self-test model, ask for four tokens, stop it."""
    model = model or selftest_model()
    port = free_port()
    started = time.monotonic()
    server = ServerProcess(selftest_argv(engine, model, port), "127.0.0.1", port)  # its log: with the others
    try:
        with server:
            server.start()
            server.wait_ready(timeout=READY_TIMEOUT_S, stall=READY_TIMEOUT_S)
            reply = _complete(port)
            server.check_alive()
    except EngineFailed as exc:
        return SelfTest(engine.path, time.monotonic() - started, failure=exc.failure,
                        cpu_line=_cpu_line(server))
    except (OSError, ValueError, http.client.HTTPException) as exc:
        failure = Failure(FailureKind.NO_REPLY, f"the engine was ready but did not answer a completion: {exc}")
        return SelfTest(engine.path, time.monotonic() - started, failure=failure, cpu_line=_cpu_line(server))
    return SelfTest(engine.path, time.monotonic() - started, reply=reply, cpu_line=_cpu_line(server))


def _cpu_line(server: ServerProcess) -> str:
    return next((ln.strip() for ln in server.log_lines() if "system_info:" in ln), "")


def _complete(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_TIMEOUT_S)
    try:
        body = json.dumps({"prompt": "Hello", "n_predict": 4, "temperature": 0}).encode()
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read(1 << 20)
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}: {data[:200].decode('utf-8', 'replace')}")
        answer = json.loads(data)
        if not isinstance(answer, dict) or not isinstance(answer.get("content"), str):
            raise ValueError("the answer has no text")
        return str(answer["content"])
    finally:
        conn.close()
