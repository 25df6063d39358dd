"""Save as llamafile: the engine's program and assets, the model and its projector stored at 64 KiB,
an .args of the plan; checked by Python's zipfile and Debian's unzip (readers that share no code with
Headroom's), and read back by Headroom as the model it holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.llamafile.save import SaveError, save_llamafile
from app.planner.gguf.reader import read_header, read_llamafile
from app.planner.settings import LaunchSettings
from tests.fixtures import llamafile_factory as lf

ROOT = Path(__file__).resolve().parents[3]
CUDA = b"\x7fELF" + bytes(5000)  # an engine's GPU library, as a member to carry over (deflated)


@pytest.fixture(scope="module")
def tiny(tiny_model: Path) -> Path:
    return tiny_model


@pytest.fixture(scope="module")
def projector(tiny_projector: Path) -> Path:
    return tiny_projector


def test_a_plan_saved_from_a_llamafile_keeps_its_program_and_assets_and_holds_the_plan(
        tiny: Path, projector: Path, tmp_path: Path) -> None:
    source = lf.raw_llamafile(tmp_path / "Tiny.llamafile", [
        lf.Item("ggml-cuda.so", CUDA, deflate=True), lf.Item("tiny.gguf", tiny), lf.Item("mmproj-tiny.gguf", projector),
        lf.Item(".args", lf.args_text("-m", "/zip/tiny.gguf", "-c", "1024"))])
    launch = LaunchSettings(n_ctx=8192, type_k="q8_0", type_v="q8_0", n_parallel=2, kv_unified=True,
                            mmproj=str(source / "zip" / "mmproj-tiny.gguf"))
    seen: list[tuple[int, int]] = []
    out = save_llamafile(tmp_path / "Planned.llamafile", source, source, launch, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert os.access(out, os.X_OK)
    first = min(m.header for m in read_llamafile(source).archive.members)
    assert out.read_bytes()[:first] == source.read_bytes()[:first]  # the program, byte for byte
    with zipfile.ZipFile(out) as z:  # Python's own reader: every CRC right, the members as written
        assert z.testzip() is None
        assert [i.filename for i in z.infolist()] == ["ggml-cuda.so", "tiny.gguf", "mmproj-tiny.gguf", ".args"]
        assert z.getinfo("ggml-cuda.so").compress_type == zipfile.ZIP_DEFLATED and z.read("ggml-cuda.so") == CUDA
        assert z.read("tiny.gguf") == tiny.read_bytes()
        args = z.read(".args").decode().split("\n")
    if shutil.which("unzip"):
        assert subprocess.run(["unzip", "-tq", str(out)], capture_output=True, check=False).returncode == 0
    assert args[:4] == ["-m", "/zip/tiny.gguf", "-c", "8192"] and "-kvu" in args and args[-2:] == ["...", ""]
    assert args[args.index("--mmproj") + 1] == "/zip/mmproj-tiny.gguf" and args[args.index("-ctk") + 1] == "q8_0"
    saved = read_llamafile(out)
    assert saved.model is not None and saved.model.start % lf.ALIGN == 0
    assert saved.projector is not None and saved.projector.start % lf.ALIGN == 0
    assert read_header(out).tensors == read_header(tiny).tensors


def test_a_gguf_saved_on_an_engine_only_llamafile(tiny: Path, tmp_path: Path) -> None:
    engine = lf.raw_llamafile(tmp_path / "llamafile-0.10.6", [lf.Item("ggml-cuda.so", CUDA)])
    out = save_llamafile(tmp_path / "Tiny.llamafile", engine, tiny, LaunchSettings(n_ctx=2048))
    found = read_llamafile(out)
    assert found.model is not None and found.model.name == tiny.name
    assert found.args is not None and found.args.args[:4] == ("-m", f"/zip/{tiny.name}", "-c", "2048")


def test_refusals_say_why_and_leave_nothing(tiny: Path, tmp_path: Path) -> None:
    source = lf.raw_llamafile(tmp_path / "Tiny.llamafile", [lf.Item("tiny.gguf", tiny)])
    with pytest.raises(SaveError, match=r"Tiny.llamafile is one of the files it is made from"):
        save_llamafile(source, source, source, LaunchSettings())
    with pytest.raises(SaveError, match=r"no llamafile engine at hand: tiny-llama-\w+\.gguf is not a llamafile"):
        save_llamafile(tmp_path / "x.llamafile", tiny, tiny, LaunchSettings())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Tiny.llamafile"]


def test_plan_save_llamafile_without_an_engine_is_refused_in_a_sentence(tiny: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "plan", str(tiny), "--save-llamafile", str(tmp_path / "x.llamafile")],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 2
    assert "not saved: no llamafile engine at hand: give --engine a llamafile" in done.stderr
    assert not (tmp_path / "x.llamafile").exists()
