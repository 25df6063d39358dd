"""Probe verdicts from the engine's own answers, and the refusal a plan gets from an engine lacking a flag."""

from __future__ import annotations

from app.engine.capabilities import Capabilities, ProbeResult, refusal, required, verdict
from app.planner.plan_types import PlanMode
from app.planner.settings import FlashAttn, LaunchSettings

# Lines the real llama-server (llama.cpp 0c1e57098, CPU build) printed for probes on this machine.
ACCEPTED = ("0.00.005.347 E gguf_init_from_file: failed to open GGUF file '/nonexistent.gguf' "
            "(No such file or directory)\n0.00.006.096 E srv  llama_server: exiting due to model loading error\n")
REJECTED = "error: invalid argument: --kv-residency-mode\n"
BAD_VALUE = ('error while handling argument "-ctk": Unsupported cache type: q9\n\nusage:\n'
             "-ctk,  --cache-type-k TYPE              KV cache data type for K\n")
RPC = "/src/ggml/src/ggml-rpc/ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:1\n"


def test_verdicts_read_the_engine_answer() -> None:
    assert verdict(ACCEPTED).verdict == "accepted"
    assert verdict(REJECTED) == ProbeResult("rejected", "error: invalid argument: --kv-residency-mode")
    assert verdict(BAD_VALUE).verdict == "rejected"
    assert verdict(RPC).verdict == "accepted"
    assert verdict("Segmentation fault\n").verdict == "unknown"
    assert verdict("", timed_out=True).detail.startswith("no answer within")



def test_a_plan_needing_a_flag_the_engine_lacks_is_refused_with_the_reason() -> None:
    stock = Capabilities({n: ProbeResult("accepted") for n in ("-kvu", "-fa on", "-ctk f16", "-nkvo")}
                         | {"--kv-residency-mode": ProbeResult("rejected", "error: invalid argument: --kv-residency-mode"),
                            "--vram-target": ProbeResult("rejected", "error: invalid argument: --vram-target")})
    assert refusal(stock, LaunchSettings(n_parallel=4, kv_unified=True), PlanMode.STOCK) is None
    why = refusal(stock, LaunchSettings(), PlanMode.WINDOW)
    assert why is not None
    assert "--kv-residency-mode" in why and "error: invalid argument: --kv-residency-mode" in why
    q8 = refusal(stock, LaunchSettings(type_k="q8_0", type_v="q8_0"), PlanMode.STOCK)
    assert q8 is not None and "-ctk q8_0" in q8


def test_window_never_requires_kvu_and_host_kv_requires_nkvo() -> None:
    assert "-kvu" not in required(LaunchSettings(kv_unified=True), PlanMode.WINDOW)
    assert "-nkvo" in required(LaunchSettings(offload_kqv=False), PlanMode.STOCK)
    assert "-fa on" not in required(LaunchSettings(flash_attn=FlashAttn.OFF), PlanMode.STOCK)
