"""Does the engine serve on this CPU? ``headroom doctor`` starts it once on a tiny quantized model it
writes (app/engine/selftest.py) and exits 1 when it cannot. An engine built for another CPU is made
real with Debian's qemu-user: Headroom's native build (made on this machine, which has AVX2 like every
machine this project runs on) started as a Nehalem (x86-64-v2, no AVX) would start it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.capabilities import probe_all
from app.engine.discover import EngineOrigin, identify
from app.engine.native_build import EngineBuild
from app.engine.selftest import run_selftest, selftest_model

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def _older_cpu_engine(engine_build: EngineBuild, folder: Path) -> Path:
    """A ``llama-server`` that runs Headroom's native build as a CPU without AVX would."""
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.fail("qemu-x86_64 is missing: ./dev setup installs qemu-user")
    folder.mkdir()
    wrapper = folder / "llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec {qemu} -cpu Nehalem "{engine_build.server}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_the_selftest_model_loads_repacked_and_answers(engine_build: EngineBuild, tmp_path: Path) -> None:
    engine = identify(engine_build.server, EngineOrigin.HEADROOM_BUILD)
    assert engine is not None
    result = run_selftest(engine, model=selftest_model(tmp_path))
    assert result.ok, result.failure
    assert str(result).startswith("serves on this CPU: loaded a Q4_0 model and answered in")
    assert "REPACK = 1" in result.cpu_line and "AMX_INT8" not in result.cpu_line
    assert selftest_model(tmp_path).stat().st_size < 2 * 1024 * 1024


def test_the_probe_keeps_the_engines_own_system_info_line(engine_build: EngineBuild) -> None:
    caps = probe_all([str(engine_build.server)], ["-lv", "-nr"])
    assert caps.accepts("-lv") and caps.accepts("-nr")
    assert caps.system_info.startswith("system_info: n_threads") and "REPACK = 1" in caps.system_info
    assert "AMX_INT8" not in caps.system_info  # Headroom's build never has AMX, whatever this CPU


def test_doctor_exits_1_and_says_why_when_the_engine_cannot_run_on_this_cpu(engine_build: EngineBuild,
                                                                            tmp_path: Path) -> None:
    wrapper = _older_cpu_engine(engine_build, tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    env |= {"PATH": f"{wrapper.parent}{os.pathsep}{env.get('PATH', '')}", "HEADROOM_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "app", "doctor"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("Engine self-test"))
    assert f"{wrapper} cannot serve on this CPU: The engine was killed by SIGILL before it was ready" in line
    assert "built for another CPU" in line and "headroom engine build" in line
    data = json.loads(subprocess.run([sys.executable, "-m", "app", "doctor", "--json"], cwd=ROOT, env=env,
                                     capture_output=True, text=True, timeout=300).stdout)
    assert data["selftest"]["ok"] is False and data["selftest"]["kind"] == "killed"
    report_only = subprocess.run([sys.executable, "-m", "app", "doctor", "--no-selftest"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
    assert report_only.returncode == 0 and "Engine self-test" not in report_only.stdout


def test_doctor_tests_the_engine_given_with_engine_and_no_other(engine_build: EngineBuild, tmp_path: Path) -> None:
    """``doctor --engine FILE`` reports and self-tests that file, as ``serve --engine`` would launch it: the
    engine that cannot run here fails though a good one is found beside it; a file that is no engine is
    refused (exit 2), not replaced by another."""
    wrapper = _older_cpu_engine(engine_build, tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"} | {"HEADROOM_CACHE_DIR": str(tmp_path / "c"),
                                                                              "HEADROOM_CONFIG_DIR": str(tmp_path / "k")}

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app", "doctor", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)

    bad = doctor("--engine", str(wrapper))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    engines = [ln for ln in bad.stdout.splitlines() if ln.startswith("Engine  ")]
    assert len(engines) == 1 and f"at {wrapper} " in engines[0], bad.stdout  # that one, not the build beside it
    assert f"{wrapper} cannot serve on this CPU: The engine was killed by SIGILL" in bad.stdout
    good = doctor("--engine", str(engine_build.server))
    assert good.returncode == 0 and f"{engine_build.server} serves on this CPU" in good.stdout, good.stdout
    (tmp_path / "notes.txt").write_text("not an engine\n")
    (tmp_path / "notes.txt").chmod(0o755)
    refused = doctor("--engine", str(tmp_path / "notes.txt"))
    assert refused.returncode == 2 and "is not an engine Headroom can run" in refused.stderr
    assert "Engine self-test" not in refused.stdout
    as_json = doctor("--engine", str(tmp_path / "notes.txt"), "--json")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {"ok": False, "error": f"{tmp_path / 'notes.txt'} is not an engine Headroom "
                                                                 f"can run: `{tmp_path / 'notes.txt'} --version` failed"}


def test_probes_started_together_never_race_for_a_port(engine_build: EngineBuild) -> None:
    """Issue 31: 50 cold `headroom plan`s showed a capability as "unknown" when two probes got the same
    released port; each engine now binds a free port itself (--port 0). Eight probe rounds at once."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        rounds = list(pool.map(lambda _i: probe_all([str(engine_build.server)], ["-kvu", "-nkvo", "--metrics"],
                                                    workers=3), range(8)))
    verdicts = {(name, r.verdict) for caps in rounds for name, r in caps.results.items()}
    assert verdicts == {("-kvu", "accepted"), ("-nkvo", "accepted"), ("--metrics", "accepted")}, verdicts
