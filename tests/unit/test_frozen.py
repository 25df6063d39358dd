"""The bundle's entry point (app/frozen.py): Headroom's own child processes run through it, nothing
else does, and what Headroom starts gets the user's library path, not the bundle's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__
from app.frozen import main, restore_library_path
from app.planner.settings import LaunchSettings

ROOT = Path(__file__).resolve().parents[2]


def test_the_users_library_path_comes_back_for_child_processes() -> None:
    saved = {"LD_LIBRARY_PATH": "/b/_internal:/opt/cuda/lib64", "LD_LIBRARY_PATH_ORIG": "/opt/cuda/lib64"}
    restore_library_path(saved, "/b/_internal")
    assert saved == {"LD_LIBRARY_PATH": "/opt/cuda/lib64"}
    unset = {"LD_LIBRARY_PATH": "/b/_internal", "HOME": "/home/u"}  # the user had none
    restore_library_path(unset, "/b/_internal")
    assert unset == {"HOME": "/home/u"}
    mixed = {"LD_LIBRARY_PATH": "/b/_internal:/x"}  # no saved copy: only the bundle's entry goes
    restore_library_path(mixed, "/b/_internal")
    assert mixed == {"LD_LIBRARY_PATH": "/x"}


def test_minus_m_runs_only_headrooms_own_children(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "os"]) == 2
    assert "runs only Headroom's own child processes (app.probe.worker, app), not os" in capsys.readouterr().err
    assert main(["-m"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["-m", "app", "--version"])  # `-m app ARGS`: the CLI itself (Build engine… runs `-m app engine build`)
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"headroom {__version__}\n"


def test_pass_1s_child_runs_through_the_entry_point(tiny_model: Path, engine_build: object) -> None:
    """What a bundle runs as `headroom -m app.probe.worker` (app/probe/measure.py WORKER)."""
    request = json.dumps({"model": str(tiny_model), "settings": LaunchSettings(n_ctx=4096).to_json()})
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    proc = subprocess.run([sys.executable, "-c", "import sys; from app.frozen import main; sys.exit(main())",
                           "-m", "app.probe.worker"], input=request, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["ok"] and result["bindings"] == "llama-cpp-python 0.3.36"
    assert "llama_kv_cache: size =" in proc.stderr


def test_a_bundle_builds_its_engine_with_the_systems_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A bundle has no pip: Build engine… fetches the llama.cpp source with the system's python3, and
    refuses --bindings (the bundle carries its own)."""
    from app.cli import main as cli_main
    from app.commands import engine

    assert engine.pip_python() == sys.executable  # a checkout: its own venv
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "headroom"))
    assert engine.pip_python().endswith("python3")
    assert cli_main(["engine", "build", "--bindings"]) == 2
    assert "the bundle carries its own" in capsys.readouterr().err
