"""``headroom serve`` before anything starts: the advisories for the model on the engine it would use,
and a model the planner does not model is refused after them (nothing is launched); so is a model
whose pass 1 failed, and a key file others can read."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from app import cli
from app.commands.common import PASS1_PROGRESS
from app.commands.serve import chosen_alternative, unplanned
from app.engine.native_build import EngineBuild
from app.planner.plan_types import Alternative, AlternativeKind
from app.planner.settings import LaunchSettings
from app.probe import cache as measure_cache
from tests.fixtures import gguf_factory, shapes


def test_glm5_next_with_shared_sessions_is_told_fixed_in_this_build_then_served(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serve", str(tiny_glm5_next_model), "-c", "4096", "-np", "2", "-kvu", "--smoke"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    advisories = [line for line in out.splitlines() if line.startswith("advisory:")]
    assert advisories == [next(line for line in advisories if "fixed in this build" in line)]
    assert advisories[0].startswith("advisory: [info] glm5-next with shared sessions: fixed in this build")
    assert "b11412 (llama.cpp #29958)" in advisories[0] and "43fe9c642 (llama.cpp #29994)" in advisories[0]
    assert "llama.cpp 0c1e57098" in advisories[0]  # the engine Headroom built, placed by its commit
    assert "not modelled" not in err and "every buffer within 1 MiB" in out and "smoke: ok" in out


def test_the_same_engine_without_headroom_s_patches_gets_both_kpool_warnings(
        engine_build: EngineBuild, tiny_glm5_next_model: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the very binary, copied out of Headroom's build: nothing says it carries the patches
    copy = tmp_path / "llama-server"
    shutil.copy2(engine_build.server, copy)
    rc = cli.main(["serve", str(tiny_glm5_next_model), "-c", "4096", "-np", "2", "-kvu", "--engine", str(copy), "--smoke"])
    out, _ = capsys.readouterr()
    assert rc in (0, 1)  # (on one backend the unpatched engine re-reserves silently: the smoke test may pass)
    advisories = [line for line in out.splitlines() if line.startswith("advisory: [warning]")]
    assert len(advisories) == 2
    assert "without b11412" in advisories[0] and "#29958" in advisories[0]
    assert "without 43fe9c642" in advisories[1] and "#29994" in advisories[1]


def test_glm5_next_alone_has_no_advisory_on_the_patched_engine(engine_build: EngineBuild, tiny_glm5_next_model: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(tiny_glm5_next_model), "-np", "1"]) == 0
    out, _ = capsys.readouterr()
    assert "advisories: none known" in out and "advisory:" not in out


def test_serve_refuses_a_simulated_card_before_it_plans_anything(engine_build: EngineBuild, tiny_model: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # serve plans for what runs here (app/engine/gpu_reach.py): a card this machine does not have is a
    # usage error, said before any plan; `headroom plan` plans for it (1: too small for the settings)
    rc = cli.main(["serve", str(tiny_model), "-c", "4096", "--gpu", "Tiny:256MiB", "--no-measure"])
    out, err = capsys.readouterr()
    assert rc == 2 and "--gpu Tiny:256MiB plans for a card this machine does not have" in err
    assert "plan:" not in out and "engine: starting" not in out
    assert cli.main(["plan", str(tiny_model), "-c", "4096", "--gpu", "Tiny:256MiB"]) == 1
    assert "does not fit" in capsys.readouterr().out


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(tiny_model: Path, port: str, capsys: pytest.CaptureFixture[str]) -> None:
    # llama-server would wrap 99999 silently and Headroom would then claim to serve on it
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", str(tiny_model), "--port", port])
    assert exit_.value.code == 2 and "argument --port:" in capsys.readouterr().err


def _engine_file(tmp_path: Path, kind: str) -> Path:
    if kind == "directory":
        return tmp_path
    path = tmp_path / "llama-server"
    if kind == "text":  # a text file that sh would happily run as a script
        path.write_text(f"touch {tmp_path / 'ran'}\n")
    else:  # a real engine binary that lost its execute bit (copied off a USB stick)
        path.write_bytes(b"\x7fELF" + b"\0" * 60)
    path.chmod(0o644)
    return path


@pytest.mark.parametrize(("kind", "says"), [
    ("directory", "engine is a directory, not a file: "),
    ("text", "the engine is not executable: "),
    ("binary", "the engine is not executable: "),
])
def test_an_engine_that_cannot_run_is_named_and_nothing_else_is_launched(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path, kind: str, says: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    engine = _engine_file(tmp_path, kind)
    rc = cli.main(["serve", str(tiny_model), "--no-measure", "--engine", str(engine)])
    out, err = capsys.readouterr()
    assert rc == 2 and err == f"headroom serve: {says}{engine}" + (" (chmod +x it)\n" if kind != "directory" else "\n")
    assert "engine: starting" not in out  # not the engine Headroom built instead of the one asked for
    assert not (tmp_path / "ran").exists()  # the text file was never run as a shell script


def test_a_model_that_is_a_directory_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"headroom serve: model is a directory, not a file: {tmp_path}\n"


def test_a_host_that_is_not_this_machine_is_refused_before_launching(tiny_model: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.1: TEST-NET-1 (RFC 5737), never a machine's own address
    assert cli.main(["serve", str(tiny_model), "--no-measure", "--host", "192.0.2.1"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("headroom serve: refused: cannot listen on 192.0.2.1 (") and err.count("\n") == 1, err
    assert "pass an address of this machine to --host" in err
    assert "command:" not in out and "engine:" not in out


def test_smoke_with_one_slot_is_refused_before_launching(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", str(tiny_model), "--smoke", "--no-measure", "-np", "1"]) == 2
    out, err = capsys.readouterr()
    assert "--smoke forks two shared sessions: it needs -np 2 or more" in err and "not -np 1" in err
    assert "engine: starting" not in out


def test_a_model_whose_pass_1_failed_is_refused_with_the_failing_assertion(
        engine_build: EngineBuild, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(measure_cache, "measurements_dir", lambda: tmp_path / "measurements")
    model = gguf_factory.ensure(shapes.TINY_BAD_ROPE_SCALING)  # the probe aborts on a GGML_ASSERT
    rc = cli.main(["serve", str(model), "-c", "4096"])
    out, err = capsys.readouterr()
    assert rc == 1, err
    assert "headroom serve: refused: pass 1 failed" in err
    lines = err.splitlines()
    assert lines[0] == "headroom: pass 1: " + PASS1_PROGRESS.removeprefix("pass 1: ")  # (said before it ran)
    assert ("GGML_ASSERT(hparams.rope_scaling_type_train != LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED) failed"
            in lines[1])  # pass 1's reason, on the refusal's first line
    assert "No such file or directory" not in err and "#0 " not in err  # not the backtrace after it
    assert "command:" not in out and "engine: starting" not in out  # nothing launched


def test_an_api_key_file_others_can_read_is_refused_in_words(
        engine_build: EngineBuild, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_CONFIG_DIR", str(tmp_path))
    key = tmp_path / "api_key"
    key.write_text("a-key-the-user-wrote\n")
    key.chmod(0o644)
    rc = cli.main(["serve", str(tiny_model), "--no-measure", "-c", "4096", "--host", "0.0.0.0"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith("headroom serve: refused: the API key file ") and "readable by other users" in err
    assert f"chmod 600 {key}" in err and len(err.splitlines()) == 1
    assert "engine: starting" not in out and "a-key-the-user-wrote" not in out + err



def test_alternative_names_a_whole_label_even_when_another_label_holds_it() -> None:
    def alt(label: str) -> Alternative:
        return Alternative(kind=AlternativeKind.KV_HOST_LAYERS, label=label, launch=LaunchSettings(n_ctx=4096),
                           feasible=True, host_bytes_per_token=0, note="")

    two, twelve = alt("KV of 2 layers on host"), alt("KV of 12 layers on host")
    args = cli.build_parser("serve").parse_args(["serve", "m.gguf"])
    plan = replace(unplanned(LaunchSettings(n_ctx=4096), args, "a test"), alternatives=(twelve, two))
    assert chosen_alternative(plan, "KV of 2 layers on host") is two  # (also part of "KV of 12 …")
    assert chosen_alternative(plan, "12 layers") is twelve
    with pytest.raises(ValueError, match="matches 2 of the ways that fit"):
        chosen_alternative(plan, "layers on host")

