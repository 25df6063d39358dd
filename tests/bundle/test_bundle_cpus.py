"""The bundle's engine on CPUs older than this one (docs/engines.md, "Which CPUs"): Debian's ``qemu-x86_64``
runs it as a desktop CPU without AVX-512 would (``-cpu Haswell``: AVX2, FMA, F16C) and as an
x86-64-v2 one without AVX (``-cpu Nehalem``). The engine is portable: it loads the CPU variant that
CPU runs (``load_backend: loaded CPU backend from …libggml-cpu-<variant>.so``) and answers a real
quantized model (the doctor's self-test model: Q4_0 matrices, which the AVX2 variant repacks).
QEMU's user mode runs neither AVX-512 nor AMX, so the emulated CPU decides, not this machine's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from app.engine.selftest import selftest_model
from tests.bundle.conftest import Bundle
from tests.fixtures.cpu import tile_instructions
from tests.fixtures.server_proc import running_server

#: Start-up and four tokens of a 1 MiB model under emulation on 2 busy cores: seconds; generous.
READY_S = 240.0


def _qemu() -> str:
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.fail("qemu-x86_64 is missing: ./dev setup installs qemu-user")
    return qemu


def _serve_under(bundle: Bundle, cpu: str, tmp_path: Path) -> tuple[str, str]:
    """The bundle's llama-server under ``qemu-x86_64 -cpu CPU`` on the self-test model: (its reply, its log)."""
    server = bundle.folder / "engine" / "build" / "bin" / "llama-server"
    log = tmp_path / f"{cpu}.log"
    with running_server(server, selftest_model(tmp_path / "model"), log, ("-c", "256", "-np", "1", "-t", "2", "-lv", "4"),
                        deadline_s=READY_S, launcher=(_qemu(), "-cpu", cpu)) as srv:
        reply = srv.post("/completion", {"prompt": "Hello", "n_predict": 4}, timeout=READY_S)
    return str(reply["content"]), log.read_text(errors="replace")


def _variant(log: str) -> str:
    m = re.search(r"loaded CPU backend from \S*libggml-cpu-([\w.]+)\.so", log)
    assert m is not None, log[-3000:]
    return m.group(1)


def test_the_bundles_engine_answers_on_a_desktop_cpu_without_avx512(bundle: Bundle, tmp_path: Path) -> None:
    reply, log = _serve_under(bundle, "Haswell", tmp_path)
    assert _variant(log) == "haswell"
    info = next(ln for ln in log.splitlines() if "system_info:" in ln)
    assert "AVX2 = 1" in info and "AVX512 = 1" not in info and "AMX_INT8" not in info
    assert "CPU_REPACK model buffer size" in log  # the Q4_0 matrices took the AVX2 layout
    assert len(reply) > 0


def test_the_bundles_engine_answers_on_an_x86_64_v2_cpu_without_avx(bundle: Bundle, tmp_path: Path) -> None:
    reply, log = _serve_under(bundle, "Nehalem", tmp_path)
    assert _variant(log) == "x64"
    info = next(ln for ln in log.splitlines() if "system_info:" in ln)
    assert "AVX = 1" not in info and "AVX2 = 1" not in info
    assert len(reply) > 0


def test_no_cpu_variant_in_the_bundle_carries_amx_code(bundle: Bundle) -> None:
    """AMX's tile instructions (``tilezero``, ``tileloadd``, ``tdpbssd``…) are in no library the bundle
    ships: visible on any CPU with objdump, whatever this machine can run."""
    libs = sorted((bundle.folder / "engine" / "build" / "bin").glob("libggml-cpu-*.so"))
    assert {p.name for p in libs} == {f"libggml-cpu-{v}.so" for v in ("x64", "haswell", "alderlake", "skylakex",
                                                                      "icelake", "zen4")}
    for lib in libs:
        assert not tile_instructions(lib), lib.name

