"""Which CPU code Headroom's engine is built with, and how a build is found again (docs/engines.md, "Which CPUs";
app/engine/native_build.py): native for this CPU but never AMX, or portable with the variant chosen at
run time; a native build is keyed by the CPU it was made for. Decided from the compiler and recorded
``/proc/cpuinfo`` texts, so every machine runs the same tests, whatever its own CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from app.engine import native_build
from app.engine.engine_patches import patch_series
from app.engine.native_build import NO_AMX_FLAGS, PORTABLE, PORTABLE_CPU_VARIANTS, EngineBuild
from app.planner.devices import Backend

COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
#: /proc/cpuinfo of the machines CI lands on (the first processor's lines that matter), recorded 2026-12-01.
AMD_EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni

processor\t: 1
"""
INTEL_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni amx_bf16 amx_tile amx_int8
"""


def _macros(compiler: str, *flags: str) -> set[str]:
    """The ISA macros ``compiler`` defines with ``flags`` (what ggml's ``#if defined(__AMX_INT8__)`` sees)."""
    if shutil.which(compiler) is None:
        pytest.fail(f"this test needs {compiler} (./dev installs g++)")
    lang = "c++" if compiler.endswith("++") else "c"
    out = subprocess.run([compiler, *flags, "-dM", "-E", "-x", lang, "/dev/null"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("#define __AMX") or "__AVX512F__" in line}


@pytest.mark.parametrize("compiler", ["gcc", "g++"])
def test_a_native_build_on_an_amx_cpu_compiles_no_amx_code(compiler: str) -> None:
    """``-march=native`` on a Sapphire Rapids is ``-march=sapphirerapids``; CMake puts the C/C++ flags
    Headroom gives before ggml's ``-march=native``, and GCC's explicit ``-mno-amx-*`` wins all the same."""
    assert {"__AMX_INT8__", "__AMX_TILE__"} <= _macros(compiler, "-march=sapphirerapids")  # what ggml would compile
    kept = _macros(compiler, *NO_AMX_FLAGS, "-march=sapphirerapids")
    assert "__AVX512F__" in kept and not any(m.startswith("__AMX") for m in kept)


def test_native_and_portable_builds_ask_cmake_for_their_cpu_code() -> None:
    native = native_build.cpu_args(portable=False, x86=True)
    assert native[0] == "-DGGML_NATIVE=ON"
    assert f"-DCMAKE_C_FLAGS={' '.join(NO_AMX_FLAGS)}" in native and f"-DCMAKE_CXX_FLAGS={' '.join(NO_AMX_FLAGS)}" in native
    portable = native_build.cpu_args(portable=True, x86=True)
    assert {"-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"} <= set(portable)
    variants = next(a for a in portable if a.startswith("-DGGML_CPU_VARIANTS=")).split("=", 1)[1].split(";")
    assert variants[0] == "x64" and "haswell" in variants and "sapphirerapids" not in variants
    assert not any("NATIVE=ON" in a for a in portable)
    assert native_build.cpu_args(portable=False, x86=False) == ["-DGGML_NATIVE=ON"]  # ARM: no x86 flags


def test_every_portable_variant_is_one_ggml_knows_without_amx() -> None:
    """Patch 0004's list names tags of ggml's x86 list; a typo would silently build nothing for it."""
    tree = native_build.source_tree() / "vendor" / "llama.cpp"
    text = (tree / "ggml" / "src" / "CMakeLists.txt").read_text()
    for tag in PORTABLE_CPU_VARIANTS:
        line = next((ln for ln in text.splitlines() if f"ggml_add_cpu_backend_variant({tag} " in ln
                     or f"ggml_add_cpu_backend_variant({tag})" in ln), None)
        assert line is not None, tag
        assert "AMX" not in line


def test_a_native_build_is_keyed_by_the_cpu_it_was_built_for() -> None:
    amd, intel = native_build.cpu_key(AMD_EPYC), native_build.cpu_key(INTEL_AMX)
    assert amd.startswith("native-") and len(amd) == len("native-") + 8
    assert amd != intel and amd == native_build.cpu_key(AMD_EPYC + "\nprocessor\t: 2\nflags\t\t: other\n")
    series = patch_series()
    assert native_build.build_dir(COMMIT, Backend.CPU, series, amd).name == f"llama.cpp-0c1e57098-cpu-{amd}-p{series.digest}"
    assert native_build.build_dir(COMMIT, Backend.CPU, series, PORTABLE).name == f"llama.cpp-0c1e57098-cpu-portable-p{series.digest}"


def _stamp(cache: Path, cpu: str) -> EngineBuild:
    series = patch_series()
    out = native_build.build_dir(COMMIT, Backend.CPU, series, cpu)
    assert out.is_relative_to(cache)
    (out / "build" / "bin").mkdir(parents=True)
    (out / "build" / "bin" / "llama-server").write_text("")
    build = EngineBuild(COMMIT, Backend.CPU, "test", str(out / "build" / "bin"), 1.0, series.names, series.digest,
                        series.fixes, cpu)
    (out / "build.json").write_text(json.dumps(build.__dict__))
    return native_build._read_stamp(out / "build.json") or build


def test_a_cache_moved_from_another_machine_is_not_used_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native build made on the AMX machine would trap here (or its AVX-512 on a desktop): only a build
    for this CPU, or a portable one, is found; native first, since it is this CPU's own code."""
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    here = native_build.cpu_key()
    other = native_build.cpu_key(INTEL_AMX if native_build.cpu_key(AMD_EPYC) == here else AMD_EPYC)
    _stamp(tmp_path, other)
    assert native_build.find_build(bundled=False) is None
    portable = _stamp(tmp_path, PORTABLE)
    assert native_build.find_build(bundled=False) == portable and portable.portable
    native = _stamp(tmp_path, here)
    assert native_build.find_build(bundled=False) == native
    assert native_build.find_build(bundled=False, portable=True) == portable
    legacy = tmp_path / "engines" / "llama.cpp-0c1e57098-cpu-old"  # a stamp from before the CPU was recorded
    (legacy / "build" / "bin").mkdir(parents=True)
    (legacy / "build" / "bin" / "llama-server").write_text("")
    data = dict(native.__dict__, bin_dir=str(legacy / "build" / "bin"))
    data.pop("cpu")
    (legacy / "build.json").write_text(json.dumps(data))
    assert native_build._read_stamp(legacy / "build.json") is not None
    assert native_build.find_build(bundled=False) == native
