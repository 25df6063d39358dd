"""The engine command line is a pure function of the plan: exact argv for each engine kind and mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.argv import ArgvError, build_argv, shell_line
from app.engine.capabilities import Capabilities, ProbeResult
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings
from app.planner.units import GiB

MODEL = Path("/models/qwen2-14b-1m.gguf")
STOCK = EngineInfo(EngineKind.LLAMA_SERVER, "/opt/llama/llama-server", "0.5.0-dev", "0c1e570", EngineOrigin.HEADROOM_BUILD)
LLAMAFILE = EngineInfo(EngineKind.LLAMAFILE, "/home/u/.llamafile/llamafile", "0.10.5", "unknown", EngineOrigin.LLAMAFILE_DIR)
OPENCOTI = EngineInfo(EngineKind.OPENCOTI, "/home/u/.llamafile/opencoti.llamafile", "0.10.5", "unknown", EngineOrigin.LLAMAFILE_DIR,
                      via_sh=True)
H200 = LaunchSettings(n_ctx=524288, n_parallel=4, kv_unified=True, cache_ram_mib=8192)


def test_stock_launch_carries_every_planned_flag_and_fit_off() -> None:
    argv = build_argv(STOCK, H200, PlanMode.STOCK, MODEL, "127.0.0.1", 18080)
    assert argv == [
        "/opt/llama/llama-server", "-m", "/models/qwen2-14b-1m.gguf", "-c", "524288", "-ngl", "999",
        "-fa", "on", "-ctk", "f16", "-ctv", "f16", "-ub", "512", "-b", "2048", "-np", "4", "-kvu",
        "--cache-ram", "8192", "--fit", "off", "-lv", "4", "--metrics", "--host", "127.0.0.1", "--port", "18080",
    ]


def test_stock_host_kv_and_quantized_cache_and_partial_offload() -> None:
    s = LaunchSettings(n_ctx=131072, type_k="q8_0", type_v="q8_0", n_gpu_layers=40, offload_kqv=False,
                       n_ubatch=256, n_batch=1024, swa_full=True, cache_ram_mib=8192)
    argv = build_argv(STOCK, s, PlanMode.STOCK, MODEL, "127.0.0.1", 9000)
    assert argv[1:] == [
        "-m", str(MODEL), "-c", "131072", "-ngl", "40", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0",
        "-ub", "256", "-b", "1024", "-np", "1", "--swa-full", "-nkvo",
        "--cache-ram", "8192", "--fit", "off", "-lv", "4", "--metrics", "--host", "127.0.0.1", "--port", "9000",
    ]


def test_llamafile_needs_server_first_and_a_gpu_choice() -> None:
    argv = build_argv(LLAMAFILE, LaunchSettings(n_ctx=8192), PlanMode.STOCK, MODEL, "127.0.0.1", 8081)
    assert argv[:4] == ["/home/u/.llamafile/llamafile", "--server", "--gpu", "nvidia"]
    cpu = build_argv(LLAMAFILE, LaunchSettings(n_ctx=8192), PlanMode.CPU, MODEL, "127.0.0.1", 8081)
    assert cpu[:4] == ["/home/u/.llamafile/llamafile", "--server", "--gpu", "disable"]
    assert cpu[cpu.index("-ngl") + 1] == "0"


def test_opencoti_window_mode_sets_residency_and_vram_target_in_mib_never_kvu() -> None:
    s = LaunchSettings(n_ctx=524288, n_parallel=1, kv_unified=False)
    argv = build_argv(OPENCOTI, s, PlanMode.WINDOW, MODEL, "127.0.0.1", 8082, vram_target=130 * GiB)
    assert argv[:5] == ["sh", "/home/u/.llamafile/opencoti.llamafile", "--server", "--gpu", "nvidia"]
    i = argv.index("--kv-residency-mode")
    assert argv[i:i + 4] == ["--kv-residency-mode", "window", "--vram-target", "133120"]
    assert "-kvu" not in argv


def test_window_with_a_unified_cache_or_a_stock_engine_is_refused() -> None:
    with pytest.raises(ArgvError, match="unified"):
        build_argv(OPENCOTI, H200, PlanMode.WINDOW, MODEL, "127.0.0.1", 1)
    with pytest.raises(ArgvError, match="opencoti"):
        build_argv(STOCK, LaunchSettings(), PlanMode.WINDOW, MODEL, "127.0.0.1", 1)


def test_flags_a_probed_engine_lacks_are_left_out_only_when_optional() -> None:
    caps = Capabilities({"--fit": ProbeResult("rejected", "error: invalid argument: --fit"),
                         "--metrics": ProbeResult("accepted"), "-lv": ProbeResult("accepted")})
    old = EngineInfo(EngineKind.LLAMAFILE, "/lf", "0.9.3", "unknown", EngineOrigin.PATH, capabilities=caps)
    argv = build_argv(old, LaunchSettings(), PlanMode.STOCK, MODEL, "127.0.0.1", 1)
    assert "--fit" not in argv
    assert "--metrics" in argv and argv[argv.index("-lv") + 1] == "4"


def test_the_key_file_and_extra_args_come_last_and_the_shell_line_hides_a_given_key() -> None:
    argv = build_argv(STOCK, LaunchSettings(), PlanMode.STOCK, Path("/m/my model.gguf"), "0.0.0.0", 8080,
                      api_key_file=Path("/home/u/.config/headroom/api_key"),
                      extra=("--slot-save-path", "/tmp/slots", "--api-key", "s3cret"))
    assert argv[argv.index("--api-key-file") + 1] == "/home/u/.config/headroom/api_key"
    assert argv[-4:] == ["--slot-save-path", "/tmp/slots", "--api-key", "s3cret"]
    line = shell_line(argv)
    assert "s3cret" not in line
    assert "'/m/my model.gguf'" in line
    assert '--api-key "$HEADROOM_API_KEY"' in line


def test_a_lora_and_a_draft_model_are_passed_with_every_draft_setting_explicit() -> None:
    settings = LaunchSettings(n_ctx=8192, lora=("/m/a.gguf", "/m/b.gguf"), draft_model="/m/draft.gguf",
                              draft_n_gpu_layers=10, draft_type_k="q8_0", draft_type_v="q8_0", draft_n_max=5)
    argv = build_argv(STOCK, settings, PlanMode.STOCK, MODEL, "127.0.0.1", 18080)
    i = argv.index("--lora")
    assert argv[i:i + 2] == ["--lora", "/m/a.gguf,/m/b.gguf"]
    j = argv.index("-md")  # the engine's own defaults (-ngld auto, --spec-type none) never decide
    assert argv[j:j + 12] == ["-md", "/m/draft.gguf", "-ngld", "10", "-ctkd", "q8_0", "-ctvd", "q8_0",
                              "--spec-type", "draft-simple", "--spec-draft-n-max", "5"]
    cpu = build_argv(STOCK, settings, PlanMode.CPU, MODEL, "127.0.0.1", 18080)
    assert cpu[cpu.index("-ngld") + 1] == "0"
    assert "-md" not in build_argv(STOCK, LaunchSettings(), PlanMode.STOCK, MODEL, "127.0.0.1", 18080)


def test_a_lora_file_with_a_comma_is_refused_before_the_engine_splits_it() -> None:
    with pytest.raises(ValueError, match="comma"):
        LaunchSettings(lora=("/m/a,b.gguf",))
