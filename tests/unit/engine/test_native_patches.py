"""Headroom's patch series for the vendored llama.cpp (native/patches, docs/engine-patches.md): what
each patch says it is, that it applies to the pinned tree, and that the series keys the build."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from app.engine import engine_patches, native_build
from app.engine.engine_patches import UNPATCHED, PatchSeries, patch_series
from app.engine.native_build import EngineBuild
from app.planner.devices import Backend

COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
PORTS = ("0001-kpool-one-graph-shape.patch", "0002-kpool-one-scatter-row-per-rep.patch")
FIXES = (*PORTS, "0003-fork-children-free-their-cells.patch")
#: A build option, not a fix: it names no Headroom-Fix.
BUILD = "0004-cpu-variants-list.patch"
#: Headroom's own speed fix: a host-KV layer's attention on the CPU for decode.
HOST_KV = "0005-host-kv-attention-on-the-cpu.patch"
NAMES = (*FIXES, BUILD, HOST_KV)


def test_the_series_is_the_kpool_ports_the_fork_fix_the_cpu_variants_option_then_host_kv_attention() -> None:
    series = patch_series()
    assert series.names == NAMES
    assert series.fixes == ("b11412", "43fe9c642", "fork-in-a-full-pool", "host-kv-attention")
    assert re.fullmatch(r"[0-9a-f]{8}", series.digest)
    assert engine_patches.engine_label(COMMIT, series.names) == "llama.cpp 0c1e57098 + 5 Headroom patches"
    assert engine_patches.engine_label(COMMIT, ()) == "llama.cpp 0c1e57098"


@pytest.mark.parametrize("name", NAMES)
def test_each_patch_opens_with_what_it_changes_why_and_the_fix_it_ports(name: str) -> None:
    text = (engine_patches.PATCH_DIR / name).read_text()
    head = text[: text.index("diff --git")]
    assert "What it changes" in head and "\nWhy\n" in head
    assert head.startswith(f"Headroom patch {NAMES.index(name) + 1} of {len(NAMES)} for llama.cpp 0c1e57098")
    if name in PORTS:
        assert re.search(r"^Ports: llama\.cpp (b11412|43fe9c642), .+ \(#\d+, 2026-10-06\)$", head, re.MULTILINE)
    elif name == BUILD:  # no engine code: a CMake list, and why the bundle needs it
        assert re.search(r"^Ports: nothing; Headroom's own build option", head, re.MULTILINE)
        assert "Headroom-Fix" not in head and "sapphirerapids" in head and "AMX" in head
    elif name == HOST_KV:  # Headroom's own, the line its build records, and what it moves where
        assert re.search(r"^Ports: nothing; Headroom's own fix \(0c1e57098 copies .+\)$", head, re.MULTILINE)
        assert re.search(r"^Headroom-Fix: host-kv-attention$", head, re.MULTILINE)
        assert "FLASH_ATTN_EXT" in head and "--no-op-offload" in head
    else:  # Headroom's own: it says so, and that upstream has the bug too
        assert re.search(r"^Ports: nothing; Headroom's own fix \(0c1e57098 has both bugs, .+\)$", head, re.MULTILINE)


def test_the_series_applies_to_the_pinned_tree_as_it_is(tmp_path: Path) -> None:
    tree = native_build.source_tree() / "vendor" / "llama.cpp"
    root = tmp_path / "llama.cpp"  # the files the series touches, copied
    for rel in ("src/models/glm5-next.cpp", "src/llama-memory-hybrid-idx.cpp", "src/llama-memory-hybrid-idx.h",
                "ggml/src/ggml-cuda/ggml-cuda.cu", "tools/server/server-context.cpp", "ggml/CMakeLists.txt",
                "ggml/src/CMakeLists.txt", "src/llama-graph.cpp", "src/llama-context.cpp"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / rel, root / rel)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
    for patch in patch_series().patches:  # in order: 0002 sits on 0001
        proc = subprocess.run(["git", "apply", str(patch)], cwd=root, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, f"{patch.name}: {proc.stderr}"
    hybrid = (root / "src" / "llama-memory-hybrid-idx.cpp").read_text()
    assert "cache_safe" not in hybrid and "rep_gen" in hybrid and "partial seq_cp is not supported" in hybrid
    assert "cache_safe" not in (root / "src" / "models" / "glm5-next.cpp").read_text()
    server = (root / "tools" / "server" / "server-context.cpp").read_text()
    assert "cached tokens for the child of task" in server and "&& prompt_decoded" in server
    assert "GGML_CPU_VARIANTS" in (root / "ggml" / "src" / "CMakeLists.txt").read_text()
    assert "llama_headroom_kv_on_host(k)" in (root / "src" / "llama-graph.cpp").read_text()
    assert "host-KV attention" in (root / "src" / "llama-context.cpp").read_text()
    assert "cache_safe" in (tree / "src" / "llama-memory-hybrid-idx.cpp").read_text(), "the cached tree is pristine"


def _tree(root: Path) -> Path:
    (root / "ggml").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\n")
    (root / "src").mkdir()
    (root / "src" / "a.cpp").write_text("int a = 1;\n")
    return root


def _patch(folder: Path, name: str, old: str, new: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"What it changes: a.\nHeadroom-Fix: demo\n\ndiff --git a/src/a.cpp b/src/a.cpp\n"
                    f"--- a/src/a.cpp\n+++ b/src/a.cpp\n@@ -1 +1 @@\n-{old}\n+{new}\n")
    return path


def test_a_changed_patch_changes_the_build_key(tmp_path: Path) -> None:
    _patch(tmp_path / "p", "0001-demo.patch", "int a = 1;", "int a = 2;")
    one = patch_series(tmp_path / "p")
    key = native_build.build_dir(COMMIT, Backend.CPU, one).name
    assert key == f"llama.cpp-0c1e57098-cpu-p{one.digest}" and one.fixes == ("demo",)
    _patch(tmp_path / "p", "0001-demo.patch", "int a = 1;", "int a = 3;")  # the same patch, edited
    two = patch_series(tmp_path / "p")
    assert two.names == ("0001-demo.patch",) and native_build.build_dir(COMMIT, Backend.CPU, two).name != key
    assert native_build.build_dir(COMMIT, Backend.CPU, UNPATCHED).name == "llama.cpp-0c1e57098-cpu"
    assert patch_series(tmp_path / "none") == UNPATCHED and UNPATCHED.digest == ""


def test_patches_apply_to_a_copy_and_the_tree_stays_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    tree = _tree(tmp_path / "llama.cpp")
    series = PatchSeries((_patch(tmp_path / "p", "0001-demo.patch", "int a = 1;", "int a = 2;"),))
    copy = engine_patches.patched_source(tree, COMMIT, series)
    assert copy == tmp_path / "cache" / "src" / f"llama.cpp-0c1e57098-p{series.digest}"
    assert (copy / "src" / "a.cpp").read_text() == "int a = 2;\n"
    assert (tree / "src" / "a.cpp").read_text() == "int a = 1;\n"
    assert (copy / engine_patches.PATCHED_STAMP).read_text() == "0001-demo.patch\n"
    assert engine_patches.patched_source(tree, COMMIT, series) == copy  # made once


def test_without_git_the_posix_patch_tool_applies_the_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare GPU machine may have no git: ``patch -p1`` reads the same files."""
    if shutil.which("patch") is None:
        pytest.fail("this test needs the patch tool (Debian: patch)")
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "git" else which(name))
    tree = _tree(tmp_path / "llama.cpp")
    series = PatchSeries((_patch(tmp_path / "p", "0001-demo.patch", "int a = 1;", "int a = 2;"),))
    assert (engine_patches.patched_source(tree, COMMIT, series) / "src" / "a.cpp").read_text() == "int a = 2;\n"


def test_a_patch_that_does_not_apply_is_named_and_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    tree = _tree(tmp_path / "llama.cpp")
    series = PatchSeries((_patch(tmp_path / "p", "0001-stale.patch", "int a = 9;", "int a = 2;"),))
    with pytest.raises(RuntimeError, match=r"0001-stale\.patch does not apply to llama\.cpp 0c1e57098"):
        engine_patches.patched_source(tree, COMMIT, series)
    assert list((tmp_path / "cache" / "src").iterdir()) == []


def _stamp(cache: Path, name: str, series: PatchSeries) -> EngineBuild:
    out = cache / "engines" / name
    (out / "build" / "bin").mkdir(parents=True)
    (out / "build" / "bin" / "llama-server").write_text("")
    build = EngineBuild(COMMIT, Backend.CPU, "test", str(out / "build" / "bin"), 1.0, series.names, series.digest,
                        series.fixes, native_build.cpu_key())
    data = json.loads(json.dumps(build.__dict__))
    if not series.patches:  # a stamp written before the series existed
        for key in ("patches", "series", "fixes"):
            data.pop(key)
    (out / "build.json").write_text(json.dumps(data))
    return build


def test_find_build_returns_the_build_of_the_series_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    series = PatchSeries((_patch(tmp_path / "p", "0001-demo.patch", "int a = 1;", "int a = 2;"),))
    old = _stamp(tmp_path, "llama.cpp-0c1e57098-cpu", UNPATCHED)
    new = _stamp(tmp_path, f"llama.cpp-0c1e57098-cpu-p{series.digest}", series)
    assert native_build.find_build(series=series) == new
    assert native_build.find_build(series=UNPATCHED) == old
    assert native_build.build_of(new.server) == new and native_build.build_of(old.server) == old
    assert new.label == "llama.cpp 0c1e57098 + 1 Headroom patch" and old.label == "llama.cpp 0c1e57098"
    assert native_build.build_of(tmp_path / "p" / "0001-demo.patch") is None
