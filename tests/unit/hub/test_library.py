"""The model library: the GGUFs of the Hugging Face cache and of the user's folders, from their headers."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.hub.library import HF_SOURCE, MAX_DEPTH, LibraryEntry, LibraryScan, scan_library
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_hub import write_split
from tests.fixtures.library import PROJECTOR, hf_snapshot

LLAMA_8B = "Llama-3.1-8B-Instruct-Q4_K_M.gguf"


@pytest.fixture(scope="session")
def projector() -> Path:
    return gguf_factory.ensure(PROJECTOR)


def by_name(scan: LibraryScan) -> dict[str, LibraryEntry]:
    return {e.name: e for e in scan.entries}


def test_a_folder_lists_each_model_with_its_header_facts(tmp_path: Path, tiny_model: Path,
                                                         shape_model: Callable[[str], Path], projector: Path) -> None:
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    (models / "llama" / LLAMA_8B).symlink_to(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    (models / "llama" / "mmproj-llama-f16.gguf").symlink_to(projector)
    (models / "tiny.gguf").symlink_to(tiny_model)
    (models / "notes.txt").write_text("not a model")

    scan = scan_library([models], hf=False)
    found = by_name(scan)
    assert set(found) == {LLAMA_8B, "mmproj-llama-f16.gguf", "tiny.gguf"}
    big = found[LLAMA_8B]
    assert (big.arch, big.quant, big.n_ctx_train, big.title) == ("llama", "Q4_K_M", 131072, "Meta Llama 3.1 8B Instruct")
    assert big.size == shape_model("llama-3.1-8b-instruct-q4_k_m").stat().st_size > 4 << 30
    assert big.projector == models / "llama" / "mmproj-llama-f16.gguf" and big.openable
    assert big.source == str(models) and big.where == str(models / "llama")
    tiny = found["tiny.gguf"]
    assert (tiny.arch, tiny.quant, tiny.n_ctx_train, tiny.projector) == ("llama", "F32", 4096, None)  # another folder
    proj = found["mmproj-llama-f16.gguf"]
    assert proj.is_projector and not proj.openable and (proj.arch, proj.quant) == ("clip", "F16")
    assert [e.name for e in scan.models] == ["tiny.gguf", LLAMA_8B]  # the folder itself, then its subfolders


def test_the_projector_is_known_by_its_header_not_only_its_name(tmp_path: Path, tiny_model: Path,
                                                                projector: Path) -> None:
    (tmp_path / "vision.gguf").symlink_to(projector)  # general.type mmproj, arch clip
    (tmp_path / "model.gguf").symlink_to(tiny_model)
    found = by_name(scan_library([tmp_path], hf=False))
    assert found["vision.gguf"].is_projector
    assert found["model.gguf"].projector == tmp_path / "vision.gguf"


def test_of_several_projectors_the_one_named_like_the_model(tmp_path: Path, tiny_model: Path,
                                                            projector: Path) -> None:
    for name in ("mmproj-gemma-3-12b-f16.gguf", "mmproj-qwen2.5-vl-f16.gguf"):
        shutil.copyfile(projector, tmp_path / name)  # copies: links to one file are that file, listed once
    for name in ("gemma-3-12b-it-Q4_K_M.gguf", "qwen2.5-vl-7b-Q8_0.gguf"):
        shutil.copyfile(tiny_model, tmp_path / name)
    found = by_name(scan_library([tmp_path], hf=False))
    assert found["gemma-3-12b-it-Q4_K_M.gguf"].projector == tmp_path / "mmproj-gemma-3-12b-f16.gguf"
    assert found["qwen2.5-vl-7b-Q8_0.gguf"].projector == tmp_path / "mmproj-qwen2.5-vl-f16.gguf"


@pytest.mark.timeout(60)
def test_broken_files_are_listed_with_their_error_and_a_fifo_is_never_opened(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "good.gguf").symlink_to(tiny_model)
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    (tmp_path / "text.gguf").write_text("this is not a model at all, just text")
    (tmp_path / "gone.gguf").symlink_to(tmp_path / "nowhere.gguf")
    os.mkfifo(tmp_path / "pipe.gguf")  # opening it for reading would wait for a writer forever
    (tmp_path / "folder.gguf").mkdir()
    found = by_name(scan_library([tmp_path], hf=False))
    assert set(found) == {"good.gguf", "short.gguf", "text.gguf", "gone.gguf"}
    assert found["good.gguf"].openable
    assert found["short.gguf"].error == "not a GGUF file: only 4 bytes"
    assert found["text.gguf"].error.startswith("not a GGUF file: it is text (it begins 'this")
    assert found["gone.gguf"].error == "cannot read: No such file or directory"
    assert not any(found[n].openable for n in ("short.gguf", "text.gguf", "gone.gguf"))


def test_a_split_set_is_one_model_and_a_missing_part_is_said(tmp_path: Path) -> None:
    parts = write_split(shapes.TINY, tmp_path / "split", "tiny-Q8_0", max_tensors=8)
    assert len(parts) > 1
    (entry,) = scan_library([tmp_path / "split"], hf=False).entries
    assert (entry.path, entry.parts, entry.name) == (parts[0], len(parts), "tiny-Q8_0.gguf")
    assert entry.size == sum(p.stat().st_size for p in parts) and entry.openable
    parts[-1].unlink()
    (entry,) = scan_library([tmp_path / "split"], hf=False).entries
    assert entry.error == f"split model is missing {parts[-1].name}" and not entry.openable


def test_the_hf_cache_lists_each_snapshot_with_its_repo(hf_cache: Path, tiny_model: Path, tiny_chat_model: Path,
                                                         projector: Path) -> None:
    snap = hf_snapshot(hf_cache, "acme/tiny-GGUF", {"tiny-F32.gguf": tiny_model, "mmproj-tiny-F16.gguf": projector,
                                                     "sub/tiny-chat-F32.gguf": tiny_chat_model})
    hf_snapshot(hf_cache, "other/plain-GGUF", {"plain-F32.gguf": tiny_model})
    scan = scan_library([])
    found = by_name(scan)
    assert set(found) == {"tiny-F32.gguf", "mmproj-tiny-F16.gguf", "tiny-chat-F32.gguf", "plain-F32.gguf"}
    tiny = found["tiny-F32.gguf"]
    assert (tiny.source, tiny.repo, tiny.where, tiny.path) == (HF_SOURCE, "acme/tiny-GGUF", "acme/tiny-GGUF",
                                                               snap / "tiny-F32.gguf")
    # The projector is beside every model of its snapshot (a subfolder too), not beside another repo's.
    assert found["tiny-chat-F32.gguf"].projector == tiny.projector == snap / "mmproj-tiny-F16.gguf"
    assert found["plain-F32.gguf"].projector is None


def test_a_file_reachable_twice_is_listed_once(hf_cache: Path, tiny_model: Path) -> None:
    hf_snapshot(hf_cache, "acme/tiny-GGUF", {"tiny-F32.gguf": tiny_model}, ref="main")
    hf_snapshot(hf_cache, "acme/tiny-GGUF", {"tiny-F32.gguf": tiny_model}, ref="v1")  # the same blob
    scan = scan_library([hf_cache])  # and the cache added as a folder too
    assert [e.name for e in scan.entries] == ["tiny-F32.gguf"]


def test_a_rescan_reads_only_what_changed(tmp_path: Path, tiny_model: Path, projector: Path) -> None:
    own = tmp_path / "own.gguf"
    own.write_bytes(tiny_model.read_bytes())
    (tmp_path / "mmproj.gguf").symlink_to(projector)
    first = scan_library([tmp_path], hf=False)
    again = scan_library([tmp_path], hf=False)
    assert again.entries == first.entries and again.files_read == 0
    os.utime(own, ns=(own.stat().st_atime_ns, own.stat().st_mtime_ns + 1_000_000_000))  # re-downloaded
    assert scan_library([tmp_path], hf=False).files_read == 1


def test_missing_folders_are_noted_and_the_rest_is_listed(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "m.gguf").symlink_to(tiny_model)
    (tmp_path / "file.txt").write_text("x")
    scan = scan_library([tmp_path / "gone", tmp_path / "file.txt", tmp_path / "here"], hf=False)
    assert scan.notes == (f"{tmp_path / 'gone'}: not found", f"{tmp_path / 'file.txt'}: not a folder")
    assert [e.name for e in scan.entries] == ["m.gguf"]


def test_folders_are_walked_a_few_levels_deep_and_hidden_ones_left_out(tmp_path: Path, tiny_model: Path) -> None:
    deep = tmp_path.joinpath(*(f"d{i}" for i in range(MAX_DEPTH)))
    deeper = deep / "too-deep"
    for folder in (deep, deeper, tmp_path / ".git"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{folder.name}.gguf").symlink_to(tiny_model)
    (tmp_path / "loop").symlink_to(tmp_path)  # a link to a folder is not followed
    scan = scan_library([tmp_path], hf=False)
    assert [e.path for e in scan.entries] == [deep / f"{deep.name}.gguf"]


def test_a_cancelled_scan_stops(tmp_path: Path, tiny_model: Path) -> None:
    (tmp_path / "m.gguf").symlink_to(tiny_model)
    cancel = threading.Event()
    cancel.set()
    assert scan_library([tmp_path], hf=False, cancel=cancel).entries == ()


def test_an_empty_or_absent_hf_cache_is_an_empty_library(hf_cache: Path) -> None:
    assert not hf_cache.exists()
    assert scan_library([]) == LibraryScan((), (), 0, ())


def test_a_projector_is_paired_only_with_the_models_it_fits(tmp_path: Path, tiny_chat_model: Path,
                                                            shape_model: Callable[[str], Path]) -> None:
    """The tiny projector outputs 64 values a token (the tiny llama's n_embd): it is no projector of an
    8B (4096) or a 30B shape in the same folder, which llama.cpp would refuse ("mismatch between text
    model (n_embd = …) and mmproj")."""
    (tmp_path / "mmproj-tiny.gguf").symlink_to(gguf_factory.ensure(shapes.TINY_MMPROJ))
    (tmp_path / "tiny-chat.gguf").symlink_to(tiny_chat_model)
    (tmp_path / LLAMA_8B).symlink_to(shape_model("llama-3.1-8b-instruct-q4_k_m"))
    (tmp_path / "qwen3-30b.gguf").symlink_to(shape_model("qwen3-30b-a3b-q4_k_m"))
    found = by_name(scan_library([tmp_path], hf=False))
    assert found["mmproj-tiny.gguf"].is_projector and found["mmproj-tiny.gguf"].width == 64
    assert found["tiny-chat.gguf"].projector == tmp_path / "mmproj-tiny.gguf"
    assert found[LLAMA_8B].projector is None and found["qwen3-30b.gguf"].projector is None
    assert found[LLAMA_8B].width == 4096
