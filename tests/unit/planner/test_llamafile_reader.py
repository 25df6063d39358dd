"""A GGUF inside a llamafile, read where it lies: the same header and shape as the GGUF on its own,
from archives written by three writers that share no code with the reader, and one sentence for each
kind of bad archive."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from app.planner.errors import PlannerError
from app.planner.gguf.dotargs import parse_dotargs
from app.planner.gguf.model import model_parts, read_shape
from app.planner.gguf.reader import (
    gguf_files_in,
    in_archive,
    member_path,
    missing_files,
    read_archive,
    read_header,
    read_llamafile,
    shown_name,
)
from tests.fixtures import llamafile_factory as lf
from tests.fixtures import shapes
from tests.fixtures.fake_hub import write_split

WRITERS = {"python-zipfile": lf.python_llamafile, "debian-zip": lf.zip_llamafile, "zipalign-like": lf.raw_llamafile}


@pytest.fixture(scope="module")
def tiny(tiny_model: Path) -> Path:
    return tiny_model


@pytest.fixture(scope="module")
def projector(tiny_projector: Path) -> Path:
    return tiny_projector


def _same_header(inside: Path, alone: Path) -> None:
    a, b = read_header(inside), read_header(alone)
    assert (a.version, a.file_size, a.alignment, a.data_offset) == (b.version, b.file_size, b.alignment, b.data_offset)
    assert a.fields == b.fields and a.field_types == b.field_types
    assert a.tensors == b.tensors


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_llamafile_reads_as_the_gguf_it_holds(writer: str, tiny: Path, tmp_path: Path) -> None:
    out = WRITERS[writer](tmp_path / "Tiny.llamafile",
                          lf.items(("tiny.gguf", tiny), (".args", lf.args_text("-m", "/zip/tiny.gguf", "-c", "2048"))))
    header = read_header(out)
    # the GGUF lies where Python's own zipfile says, at the 64 KiB boundary the writer aimed for
    assert header.start == lf.data_start(out, "tiny.gguf") and header.start % lf.ALIGN == 0
    assert header.path == member_path(out, "tiny.gguf") == out / "zip" / "tiny.gguf"
    _same_header(out, tiny)
    shape, alone = read_shape(out), read_shape(tiny)
    assert (shape.arch, shape.n_layer, shape.n_embd, shape.tensors, shape.file_size) == \
        (alone.arch, alone.n_layer, alone.n_embd, alone.tensors, alone.file_size)
    assert shown_name(shape.path) == "Tiny.llamafile: tiny.gguf"
    assert in_archive(out) and in_archive(shape.path) and not in_archive(tiny)


def test_offsets_past_4_gib_come_from_the_zip64_records(tiny: Path, tmp_path: Path) -> None:
    """A sparse 5 GiB gap before the archive: every offset needs ZIP64 (Python's zipfile writes them)."""
    out = lf.python_llamafile(tmp_path / "far.llamafile", lf.items(("tiny.gguf", tiny)), gap=5 << 30)
    assert out.stat().st_size > 5 << 30 and out.stat().st_blocks * 512 < 64 << 20  # (sparse)
    header = read_header(out)
    assert header.start > 1 << 32 and header.start == lf.data_start(out, "tiny.gguf")
    _same_header(out, tiny)


def test_the_last_of_two_directories_is_the_archive(tiny: Path, projector: Path, tmp_path: Path) -> None:
    """zipalign appends: a second directory after the first, naming a new .args; the first stays inside."""
    out = lf.raw_llamafile(tmp_path / "edited.llamafile",
                           lf.items(("tiny.gguf", tiny), (".args", lf.args_text("-m", "/zip/tiny.gguf", "-c", "1024"))))
    lf.append_directory(out, lf.items(("mmproj-tiny.gguf", projector),
                                      (".args", lf.args_text("-m", "/zip/tiny.gguf", "-c", "4096", "..."))))
    archive = read_archive(out)
    assert archive.directories == 2
    assert sorted(m.name for m in archive.members) == [".args", "mmproj-tiny.gguf", "tiny.gguf"]
    found = read_llamafile(out)
    assert found.args is not None and found.args.args == ("-m", "/zip/tiny.gguf", "-c", "4096")
    assert found.projector is not None and found.projector.name == "mmproj-tiny.gguf"
    _same_header(out, tiny)
    _same_header(member_path(out, "mmproj-tiny.gguf"), projector)


def test_a_split_model_inside_finds_its_parts_by_their_member_names(tmp_path: Path) -> None:
    parts = write_split(shapes.TINY, tmp_path / "parts", "tiny", max_tensors=8)
    assert len(parts) >= 2
    out = lf.raw_llamafile(tmp_path / "split.llamafile", lf.items(*((p.name, p) for p in parts)))
    inside = model_parts(out)
    assert [p.name for p in inside] == [p.name for p in parts]
    assert missing_files(inside) == []
    assert read_shape(out).tensors == read_shape(parts[0]).tensors


def test_the_projector_is_listed_beside_the_model_as_a_folder_would_list_it(tiny: Path, projector: Path,
                                                                           tmp_path: Path) -> None:
    out = lf.zip_llamafile(tmp_path / "vision.llamafile", lf.items(("tiny.gguf", tiny), ("mmproj-tiny.gguf", projector)))
    found = read_llamafile(out)
    assert found.model is not None and found.model.name == "tiny.gguf"
    assert found.projector is not None and found.projector.name == "mmproj-tiny.gguf"
    assert gguf_files_in(read_shape(out).path.parent, "mmproj") == [member_path(out, "mmproj-tiny.gguf")]


def test_args_name_the_model_among_several(tiny: Path, tmp_path: Path) -> None:
    two = lf.items(("a.gguf", tiny), ("b.gguf", tiny))
    out = lf.raw_llamafile(tmp_path / "two.llamafile", [*two, lf.Item(".args", lf.args_text("-m", "/zip/b.gguf"))])
    assert read_header(out).path.name == "b.gguf"
    bare = lf.raw_llamafile(tmp_path / "bare.llamafile", two)
    with pytest.raises(PlannerError, match=r"holds 2 models \(a.gguf, b.gguf\) and its .args names none: give one as "
                                           r"bare.llamafile/zip/NAME"):
        read_header(bare)
    assert read_header(member_path(bare, "a.gguf")).path.name == "a.gguf"


# ---- bad archives: a sentence each ----

def test_a_compressed_gguf_is_refused_with_what_to_do(tiny: Path, tmp_path: Path) -> None:
    out = lf.raw_llamafile(tmp_path / "packed.llamafile", [lf.Item("tiny.gguf", tiny, deflate=True)])
    with pytest.raises(PlannerError, match=r"packed.llamafile: tiny.gguf is packed with deflate: a llamafile's weights "
                                           r"are stored uncompressed.*zipalign, or zip -0"):
        read_header(out)


def test_a_member_running_past_the_end_is_said(tiny: Path, tmp_path: Path) -> None:
    out = lf.python_llamafile(tmp_path / "long.llamafile", lf.items(("tiny.gguf", tiny)), force_zip64=False)
    data = bytearray(out.read_bytes())
    entry = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, entry + 20, tiny.stat().st_size * 4)  # the central entry's compressed size
    out.write_bytes(bytes(data))
    with pytest.raises(PlannerError, match=r"long.llamafile: the archive's member tiny.gguf \(\d+ bytes from byte "
                                           r"\d+\) runs \d+ bytes past the end of the file: it is cut short"):
        read_header(out)


def test_args_naming_a_member_that_is_not_there(tiny: Path, tmp_path: Path) -> None:
    out = lf.zip_llamafile(tmp_path / "typo.llamafile",
                           lf.items(("tiny.gguf", tiny), (".args", lf.args_text("-m", "/zip/tiny-q8.gguf"))))
    with pytest.raises(PlannerError, match=r"typo.llamafile: its .args gives -m /zip/tiny-q8.gguf, which its archive "
                                           r"does not hold \(it holds tiny.gguf\): llamafile would fail to start"):
        read_header(out)


def test_an_engine_only_llamafile_is_offered_as_an_engine(tmp_path: Path) -> None:
    out = lf.raw_llamafile(tmp_path / "llamafile-0.10.6", lf.items(("ggml-cuda.so", b"\x7fELF" + bytes(100)),
                                                                   (".args", lf.args_text("--server"))))
    with pytest.raises(PlannerError, match=r"llamafile-0.10.6: a llamafile with no model inside, only the engine: use "
                                           r"it as the engine \(--engine llamafile-0.10.6"):
        read_header(out)


def test_a_cut_download_is_said_as_one(tiny: Path, tmp_path: Path) -> None:
    out = lf.raw_llamafile(tmp_path / "cut.llamafile", lf.items(("tiny.gguf", tiny)))
    with out.open("r+b") as f:
        f.truncate(out.stat().st_size * 2 // 3)
    with pytest.raises(PlannerError, match=r"cut.llamafile: not a GGUF file, and no ZIP archive ends it: .* cut short "
                                           r"\(an unfinished download\?\)"):
        read_header(out)


def test_a_plain_zip_is_not_a_llamafile(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "model.zip"
    with zipfile.ZipFile(out, "w") as z:
        z.write(tiny, "tiny.gguf")
    with pytest.raises(PlannerError, match=r"model.zip: a plain ZIP archive, not a llamafile \(no program before its "
                                           r"archive\): unpack it and open the GGUF inside"):
        read_header(out)


def test_a_damaged_directory_is_said_and_nothing_huge_is_read(tiny: Path, tmp_path: Path) -> None:
    """An end record claiming a directory of gigabytes is refused before a byte of it is read."""
    out = lf.python_llamafile(tmp_path / "huge.llamafile", lf.items(("tiny.gguf", tiny)), force_zip64=False)
    data = bytearray(out.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, eocd + 12, 3 << 30)
    out.write_bytes(bytes(data))
    with pytest.raises(PlannerError, match=r"huge.llamafile: the archive's end record is damaged"):
        read_header(out)


# ---- .args as cosmopolitan's cosmo_args reads it ----

def test_dotargs_splits_quotes_comments_and_places_the_users_arguments() -> None:
    text = ("-m\n/zip/Qwen3-0.6B-Q8_0.gguf\n# a comment\n--mmproj /zip/mm.gguf  # trailing\n"
            "-c 8192 'two words' \"tab\\there\" $MODEL_DIR/x ${HOME}\n...\n--host 0.0.0.0\n")
    found = parse_dotargs(text, {"MODEL_DIR": "/models", "HOME": "/home/u"})
    assert found.args == ("-m", "/zip/Qwen3-0.6B-Q8_0.gguf", "--mmproj", "/zip/mm.gguf", "-c", "8192", "two words",
                          "tab\there", "/models/x", "/home/u", "--host", "0.0.0.0")
    assert found.env == ("MODEL_DIR", "HOME")
    assert found.merged(["-c", "4096"]) == [*found.args[:10], "-c", "4096", "--host", "0.0.0.0"]
    assert found.after_user == ("--host", "0.0.0.0")


def test_dotargs_without_dots_puts_the_users_arguments_last_and_keeps_dotted_words() -> None:
    found = parse_dotargs("-m /zip/a.gguf ./rel ..x\n")
    assert found.args == ("-m", "/zip/a.gguf", "./rel", "..x") and found.insert is None
    assert found.merged(["--port", "1"]) == ["-m", "/zip/a.gguf", "./rel", "..x", "--port", "1"]
    assert parse_dotargs("a ...").insert == 1  # (a ... at the very end counts too)
