"""One set of launch flags for ``plan``, ``measure`` and ``serve``: llama-server's spelling and
Headroom's long one give the same launch, in all three commands."""

from __future__ import annotations

import pytest

from app.cli import build_parser
from app.commands.common import settings_from_args
from app.planner.settings import ALL_LAYERS, LaunchSettings

LLAMA_SERVER = ["-c", "128k", "-ctk", "q8_0", "-ctv", "q4_0", "-np", "4", "-kvu", "-fa", "auto", "-ub", "1024",
                "-b", "4096", "-ngl", "20", "-nkvo", "--swa-full"]
HEADROOM = ["--ctx", "128k", "--ctk", "q8_0", "--ctv", "q4_0", "--np", "4", "--kvu", "--fa", "auto", "--ub",
            "1024", "--batch", "4096", "--ngl", "20", "--nkvo", "--swa-full"]
LLAMA_SERVER_LONG = ["--ctx-size", "128k", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--parallel", "4",
                     "--kv-unified", "--flash-attn", "auto", "--ubatch-size", "1024", "--batch-size", "4096",
                     "--gpu-layers", "20", "--no-kv-offload", "--swa-full"]
EXPECTED = LaunchSettings(n_ctx=131072, type_k="q8_0", type_v="q4_0", n_parallel=4, kv_unified=True, swa_full=True,
                          n_ubatch=1024, n_batch=4096, flash_attn="auto", n_gpu_layers=20, offload_kqv=False)


def _settings(command: str, flags: list[str]) -> LaunchSettings:
    return settings_from_args(build_parser().parse_args([command, "m.gguf", *flags]))


@pytest.mark.parametrize("command", ["plan", "measure", "serve"])
@pytest.mark.parametrize("flags", [LLAMA_SERVER, HEADROOM, LLAMA_SERVER_LONG], ids=["short", "headroom", "long"])
def test_every_spelling_gives_the_same_launch_in_every_command(command: str, flags: list[str]) -> None:
    assert _settings(command, flags) == EXPECTED


@pytest.mark.parametrize("command", ["plan", "measure", "serve"])
def test_defaults_are_the_same_everywhere(command: str) -> None:
    s = _settings(command, [])
    assert s == LaunchSettings(n_ctx=4096, n_gpu_layers=ALL_LAYERS)
    assert _settings(command, ["-ctk", "q8_0"]).type_v == "q8_0"  # V follows K unless given


@pytest.mark.parametrize("value", ["all", "auto", "ALL"])
def test_gpu_layers_take_llama_servers_words(value: str) -> None:
    assert _settings("serve", ["-ngl", value]).n_gpu_layers == ALL_LAYERS


def test_a_bad_layer_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "m.gguf", "-ngl", "most"])
    assert "not a layer count: 'most'" in capsys.readouterr().err


def test_serve_takes_the_gpu_flags_too() -> None:
    args = build_parser().parse_args(["serve", "m.gguf", "--gpu", "H200", "--gpu", "Small:8GiB", "--window",
                                      "--vram-target", "80GiB", "--safety", "512MiB"])
    assert args.gpu == ["H200", "Small:8GiB"] and args.window
    assert int(args.vram_target) == 80 << 30 and int(args.safety) == 512 << 20
