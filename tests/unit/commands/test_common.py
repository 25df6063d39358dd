"""One set of launch flags for ``plan``, ``measure`` and ``serve``: llama-server's spelling and
Headroom's long one give the same launch, in all three commands."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from app.cli import build_parser
from app.commands.common import settings_from_args
from app.planner.errors import PlannerError
from app.planner.gguf.model import read_shape
from app.planner.gguf.reader import read_header
from app.planner.settings import ALL_LAYERS, FlashAttn, LaunchSettings

LLAMA_SERVER = ["-c", "128k", "-ctk", "q8_0", "-ctv", "q4_0", "-np", "4", "-kvu", "-fa", "auto", "-ub", "1024",
                "-b", "4096", "-ngl", "20", "-nkvo", "--swa-full"]
HEADROOM = ["--ctx", "128k", "--ctk", "q8_0", "--ctv", "q4_0", "--np", "4", "--kvu", "--fa", "auto", "--ub",
            "1024", "--batch", "4096", "--ngl", "20", "--nkvo", "--swa-full"]
LLAMA_SERVER_LONG = ["--ctx-size", "128k", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--parallel", "4",
                     "--kv-unified", "--flash-attn", "auto", "--ubatch-size", "1024", "--batch-size", "4096",
                     "--gpu-layers", "20", "--no-kv-offload", "--swa-full"]
EXPECTED = LaunchSettings(n_ctx=131072, type_k="q8_0", type_v="q4_0", n_parallel=4, kv_unified=True, swa_full=True,
                          n_ubatch=1024, n_batch=4096, flash_attn=FlashAttn.AUTO, n_gpu_layers=20, offload_kqv=False)


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


@pytest.mark.parametrize(("flags", "says"), [
    (["-np", "0"], "argument -np/--np/--parallel: must be at least 1, not 0"),
    (["-ub", "many"], "argument -ub/--ub/--ubatch-size: not a whole number: 'many'"),
    (["-b", "-1"], "argument -b/--batch/--batch-size: must be at least 1, not -1"),
    (["--vram-target", "lots"], "argument --vram-target: not a size: 'lots' (try '24GiB' or '512MiB')"),
])
def test_a_bad_count_or_size_names_the_flag(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "m.gguf", *flags])
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plan", "measure", "serve"])
def test_ctx_0_is_the_models_training_context_as_in_llama_server(command: str, shape_model: Callable[[str], Path],
                                                                 tiny_glm5_next_model: Path) -> None:
    llama = shape_model("llama-3.1-8b-instruct-q4_k_m")
    args = build_parser().parse_args([command, str(llama), "-c", "0"])
    assert settings_from_args(args).n_ctx == read_shape(llama).n_ctx_train == 131072
    # a model the planner does not model has a training context too (pass 1 of it still works)
    args = build_parser().parse_args([command, str(tiny_glm5_next_model), "-c", "0"])
    assert settings_from_args(args).n_ctx == read_header(tiny_glm5_next_model).fields["glm5-next.context_length"]


def test_ctx_0_of_a_missing_model_says_which_file(tmp_path: Path) -> None:
    args = build_parser().parse_args(["plan", str(tmp_path / "gone.gguf"), "-c", "0"])
    with pytest.raises(PlannerError, match=r"gone\.gguf: cannot read: No such file"):
        settings_from_args(args)


def test_output_cut_off_by_a_closed_pipe_is_not_a_traceback(shape_model: Callable[[str], Path]) -> None:
    # `headroom plan MODEL --json | head -1`: the reader goes away before Headroom has printed it all.
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run([sys.executable, "-m", "app", "plan", str(shape_model("llama-3.1-8b-instruct-q4_k_m")),
                           "--gpu", "H200", "--json"], stdout=write, stderr=subprocess.PIPE, text=True,
                          timeout=120, check=False)
    os.close(write)
    assert proc.returncode == 141 and proc.stderr == ""


def test_model_text_escapes_control_characters_and_keeps_lines_and_tabs() -> None:
    from app.planner.words import plural
    from app.text import printable_text as model_text

    # what the tiny models with random weights write: STX, ETX, BS, ETB, SUB, ESC, a CR that would
    # overwrite the line, a bidirectional override; a line break and a tab stay what they are
    reply = "a\x02\x03\x08\x17\x1a\x1b[2Jb\r\u202e\nnext\tcell \ufffd"
    shown = model_text(reply)
    assert shown == "a\\x02\\x03\\x08\\x17\\x1a\\x1b[2Jb\\r\\u202e\nnext\tcell \ufffd"
    assert all(c.isprintable() or c in "\n\t" for c in shown)
    assert model_text("plain text\n") == "plain text\n"
    assert [plural(n, "slot") for n in (0, 1, 2)] == ["0 slots", "1 slot", "2 slots"]
