"""A llamafile with its weights inside, as users download one: planned as the GGUF it holds, measured
without a copy, served on Headroom's engine from a copy made once (with plan vs actual), and the copy's
faults (a full disk, a read-only one, a cut) said in a sentence with nothing half-made left.

The archives come from two writers that share no code with Headroom's reader (Python's zipfile and
Debian's zip -0); the program part is a stand-in (tests/fixtures/llamafile_factory.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.llamafile.extract import ExtractCancelled, ExtractError, extract, pending, target_of
from app.planner.gguf.reader import member_path
from tests.fixtures import gguf_factory, shapes
from tests.fixtures import llamafile_factory as lf
from tests.fixtures.tmpfs import tmpfs

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
WRITERS = {"python-zipfile": lf.python_llamafile, "debian-zip": lf.zip_llamafile}


def _headroom(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def chat_model(tiny_chat_model: Path) -> Path:
    return tiny_chat_model


def _llamafile(writer: str, folder: Path, model: Path, *extra: tuple[str, Path | bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return WRITERS[writer](folder / "TinyChat.llamafile", lf.items(("tiny-chat.gguf", model), *extra,
                                                                   (".args", lf.args_text("-m", "/zip/tiny-chat.gguf"))))


def _parts(plan: dict[str, object]) -> dict[str, object]:
    """What the plan puts where (the devices' parts, the host's but its free RAM, which moves)."""
    host = {k: v for k, v in dict(plan["host"]).items() if k not in ("available", "free", "total")}  # type: ignore[call-overload]
    return {"gpus": plan["gpus"], "host": host, "kv": plan.get("kv"), "launch": plan["launch"],
            "feasible": plan["feasible"]}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_plan_json_of_a_llamafile_is_the_plan_of_the_gguf_inside(writer: str, chat_model: Path, tmp_path: Path) -> None:
    out = _llamafile(writer, tmp_path, chat_model)
    common = ("-c", "4096", "--gpu", "RTX 4090", "--json")
    inside, alone = _headroom("plan", str(out), *common), _headroom("plan", str(chat_model), *common)
    assert inside.returncode == alone.returncode == 0, inside.stderr + alone.stderr
    a, b = json.loads(inside.stdout), json.loads(alone.stdout)
    assert _parts(a) == _parts(b)
    assert a["model"] == str(member_path(out, "tiny-chat.gguf"))
    assert a["llamafile"]["model"] == "tiny-chat.gguf" and a["llamafile"]["args"] == ["-m", "/zip/tiny-chat.gguf"]


def _allocated(folder: Path) -> int:
    """Bytes the files under ``folder`` take on the disk (a sparse file counts what it holds)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def test_measure_of_a_llamafile_matches_the_gguf_and_copies_no_weights(tmp_path: Path,
                                                                         engine_build: EngineBuild) -> None:
    model = gguf_factory.ensure(shapes.TINY_DEEP)  # 6 MiB of weights: a copy of them would show
    out = lf.zip_llamafile(tmp_path / "Deep.llamafile", lf.items(("deep.gguf", model)))
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    env = {"HEADROOM_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}
    before = _allocated(cache) + _allocated(tmp)
    inside = _headroom("measure", str(out), "-c", "8192", "--json", env=env)
    grown = _allocated(cache) + _allocated(tmp) - before
    alone = _headroom("measure", str(model), "-c", "8192", "--json", env=env)
    assert inside.returncode == alone.returncode == 0, inside.stderr + alone.stderr
    a, b = json.loads(inside.stdout)["measurement"], json.loads(alone.stdout)["measurement"]
    assert a["kv_total"] == b["kv_total"] and a["kv_lines"] == b["kv_lines"]
    for da, db in zip(a["devices"], b["devices"], strict=True):
        assert da["name"] == db["name"]
        assert abs(da["compute"] - db["compute"]) <= 1 << 20 and abs(da["kv"] - db["kv"]) <= 1 << 20
    assert grown < 1 << 20, f"measuring the llamafile wrote {grown} bytes"
    assert model.stat().st_size > 4 << 20  # (so a copy of its weights would have shown)


def test_serve_on_headrooms_engine_copies_the_gguf_once_and_checks_the_plan(
        chat_model: Path, tiny_projector: Path, tmp_path: Path, engine_build: EngineBuild) -> None:
    out = _llamafile("python-zipfile", tmp_path / "lf", chat_model, ("mmproj-tiny.gguf", tiny_projector))
    env = {"HEADROOM_CACHE_DIR": str(tmp_path / "cache")}
    first = _headroom("serve", str(out), "--engine", str(engine_build.server), "--smoke", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    said = first.stdout
    assert "llamafile: TinyChat.llamafile holds tiny-chat.gguf, mmproj-tiny.gguf" in said
    assert "cannot read the GGUF inside the llamafile: copying" in said and "copying: " in said
    assert "The engine allocated what the plan said (every buffer within 1 MiB)." in said
    assert "projector weights" in said and "smoke: ok" in said
    again = _headroom("serve", str(out), "--engine", str(engine_build.server), "--smoke", env=env)
    assert again.returncode == 0 and "using the copy made before" in again.stdout
    assert "copying: " not in again.stdout


# ---- the copy's faults ----

def test_a_disk_without_room_is_refused_before_a_byte_is_written(chat_model: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    out = _llamafile("debian-zip", tmp_path / "lf", chat_model)
    with tmpfs(tmp_path / "small", "size=2m") as small:
        monkeypatch.setenv("HEADROOM_CACHE_DIR", str(small))
        items = pending([member_path(out, "tiny-chat.gguf")])
        with pytest.raises(ExtractError, match=r"copying the GGUF out of the llamafile needs .* which has .* free: "
                                               r"free some space, or set HEADROOM_CACHE_DIR"):
            extract(items)
        assert list(small.rglob("*")) == []


def test_a_read_only_disk_is_said_and_the_serve_refused(chat_model: Path, tmp_path: Path,
                                                        engine_build: EngineBuild) -> None:
    out = _llamafile("debian-zip", tmp_path / "lf", chat_model)
    with tmpfs(tmp_path / "ro", "size=1g,ro") as ro:
        done = _headroom("serve", str(out), "--engine", str(engine_build.server), env={"HEADROOM_CACHE_DIR": str(ro)})
    assert done.returncode == 2
    assert "headroom serve: refused: cannot copy the GGUF out of the llamafile into" in done.stderr
    assert "cannot be written (a read-only disk?)" in done.stderr and "Traceback" not in done.stderr


def test_a_cancelled_copy_keeps_its_part_and_the_next_one_goes_on_from_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("app.llamafile.extract.CHUNK", 1 << 20)
    model = gguf_factory.ensure(shapes.TINY_DEEP)
    out = lf.zip_llamafile(tmp_path / "Deep.llamafile", lf.items(("deep.gguf", model)))
    member = member_path(out, "deep.gguf")
    cancel = threading.Event()
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        if done >= 2 << 20:
            cancel.set()

    with pytest.raises(ExtractCancelled, match=r"was cancelled \(2 MiB of .* kept for the next time\)"):
        extract(pending([member]), progress=progress, cancel=cancel)
    target = target_of(member)
    assert not target.exists() and target.with_name(target.name + ".partial").stat().st_size == 2 << 20
    left = pending([member])
    assert left[0].left == model.stat().st_size - (2 << 20)
    assert extract(left) == [target]
    assert target.read_bytes() == model.read_bytes()
    assert pending([member]) == []


# ---- the llamafile as its own engine (its program part replays recordings: none runs here) ----

@pytest.fixture
def replaying(tmp_path: Path) -> dict[str, str]:
    """The stand-in's program: tests/fixtures/llamafile_replay.py, answering as llamafile 0.10.6."""
    runner = tmp_path / "replay-llamafile"
    runner.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fixtures' / 'llamafile_replay.py'} \"$@\"\n")
    runner.chmod(0o755)
    return {"HEADROOM_FAKE_LLAMAFILE": str(runner), "HEADROOM_LLAMAFILE_CALLS": str(tmp_path / "calls")}


def test_serve_launches_the_llamafile_on_its_own_weights_in_place_with_the_planned_flags_winning(
        chat_model: Path, tmp_path: Path, replaying: dict[str, str]) -> None:
    out = lf.raw_llamafile(tmp_path / "TinyChat.llamafile", lf.items(
        ("tiny-chat.gguf", chat_model), (".args", lf.args_text("-m", "/zip/tiny-chat.gguf", "-c", "2048", "--temp", "0.7"))))
    recording = ROOT / "tests" / "fixtures" / "llamafile_logs" / "0.10.6-gpu-nvidia-no-library.log"
    done = _headroom("serve", str(out), "-c", "4096", env={**replaying, "HEADROOM_LLAMAFILE_RECORDING": str(recording)})
    said = done.stdout + done.stderr
    assert "llamafile: the llamafile's .args asks -c 2048; planned -c 4096 because you asked for it" in said
    assert "llamafile: kept from its .args: --temp 0.7" in said
    assert "launched as its own engine, its weights read in place (-m /zip/tiny-chat.gguf)" in said
    launch = [c.split("\0") for c in Path(replaying["HEADROOM_LLAMAFILE_CALLS"]).read_text().splitlines()
              if "/nonexistent-headroom-probe.gguf" not in c][-1]
    # .args first, the command line after it (llamafile 0.10's cosmo_args): the planned -c is the last one
    assert launch[:6] == ["-m", "/zip/tiny-chat.gguf", "-c", "2048", "--temp", "0.7"]
    assert launch[6:8] == ["--server", "--gpu"]
    assert [launch[i + 1] for i, a in enumerate(launch) if a == "-c"][-1] == "4096"
    assert [launch[i + 1] for i, a in enumerate(launch) if a == "-m"][-1] == "/zip/tiny-chat.gguf"
    # the engine stopped for want of its GPU library: said with the cause and the way out (a recording)
    assert done.returncode == 1
    assert "The llamafile could not load its GPU code and stopped" in said and "llamafile-thin" in said


def test_a_llamafile_that_cannot_run_here_points_at_another_engine(chat_model: Path, tmp_path: Path) -> None:
    out = lf.raw_llamafile(tmp_path / "TinyChat.llamafile", lf.items(("tiny-chat.gguf", chat_model)))
    done = _headroom("serve", str(out))
    assert done.returncode == 2
    assert ("TinyChat.llamafile did not start as an engine here" in done.stderr
            and "give --engine FILE" in done.stderr and "copies the GGUF out once" in done.stderr)
