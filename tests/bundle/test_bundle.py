"""The bundle as a desktop user gets it: no Python, no checkout, an empty home. It reports its own
engine, measures pass 1 and serves through it, opens its window under Xvfb, installs from the
tarball into the user's directories, and never writes beside itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bundle.conftest import Bundle, user_env
from tests.unit.packaging.test_resources import desktop_entry, validate

TIMEOUT_S = 300  # one command of the bundle on 2 busy cores, generously


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.fixture(autouse=True)
def nothing_written_beside_the_bundle(bundle: Bundle) -> Iterator[None]:
    before = _files(bundle.folder)
    yield
    assert _files(bundle.folder) == before


def _run(bundle: Bundle, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bundle.exe), *args], cwd=home, env=user_env(home, **env), capture_output=True,
                          text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def _line(text: str, label: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(label))


def test_doctor_inside_the_bundle_reports_its_engine(bundle: Bundle, tmp_path: Path) -> None:
    proc = _run(bundle, tmp_path, "doctor")
    assert proc.returncode == 0, proc.stderr
    bin_dir = bundle.folder / "engine" / "build" / "bin"
    engine = _line(proc.stdout, "Engine")
    assert engine.endswith(f"(llama.cpp 0c1e57098 + 5 Headroom patches) at {bin_dir}/llama-server (bundle)")
    assert _line(proc.stdout, "  CPU code").endswith("portable: the CPU code is chosen at run time, without AMX")
    selftest = _line(proc.stdout, "Engine self-test")  # the bundle's engine, really started on this CPU
    assert f"{bin_dir}/llama-server serves on this CPU: loaded a Q4_0 model and answered in" in selftest
    assert f"library from {bin_dir}" in _line(proc.stdout, "llama-cpp-python")  # pass 1 loads that same build
    assert _line(proc.stdout, "Python").endswith(f"({bundle.exe})")  # no interpreter of the machine's
    assert str(bundle.folder) in _line(proc.stdout, "Bundle")
    assert _line(proc.stdout, "Cache").endswith(str(tmp_path / ".cache" / "headroom"))
    attention = [ln for ln in proc.stdout.splitlines() if ln.startswith("CPU attention")]
    # the bundle carries a llama-batched-bench to time this CPU's attention with (on a busy machine the
    # run waits for a quieter one, and says so), so a bundle's CPU speeds can be calibrated too
    assert attention and not any("no llama-batched-bench" in ln for ln in attention), "\n".join(attention)


def test_the_bundle_says_once_what_its_gpu_code_runs_on_here(bundle: Bundle, tmp_path: Path,
                                                             tiny_model: Path) -> None:
    """What the bundle's engine carries for NVIDIA cards, and why a plan for one does not launch on it here
    (app/engine/gpu_reach.py): the CPU bundle has no GPU code; the CUDA bundle (``./dev bundle --cuda``) has
    sm_75–sm_120 with NVIDIA's run-time libraries beside it, and these machines have no driver."""
    stamp = json.loads((bundle.folder / "engine" / "build.json").read_text())
    bin_dir = bundle.folder / "engine" / "build" / "bin"
    doctor = _run(bundle, tmp_path, "doctor", "--no-selftest")
    plan = _run(bundle, tmp_path, "plan", str(tiny_model), "--ctx", "4096", "--gpu", "RTX 4090")
    serve = _run(bundle, tmp_path, "serve", str(tiny_model), "--ctx", "4096", "--smoke")
    assert doctor.returncode == 0 and plan.returncode == 0 and serve.returncode == 0, serve.stdout + serve.stderr
    card = "NVIDIA GeForce RTX 4090 (simulated)"
    if stamp["backend"] == "cpu":
        assert _line(doctor.stdout, "  GPU code").endswith("none: a CPU build")
        assert f"GPU: {card}: this engine has no GPU code (a CPU build), so it runs on the CPU" in plan.stdout
        # no GPU here, no GPU code: no GPU sentence (the host's "warning: no GPU: no NVIDIA driver found" stays)
        assert [ln for ln in serve.stdout.splitlines() if ln.startswith("GPU:")] == []
        return
    assert stamp["backend"] == "cuda" and stamp["cuda_archs"] == "75-virtual;86-real;89-real;120a-real"
    assert _line(doctor.stdout, "  GPU code").endswith(
        "CUDA 13 code for sm_75–sm_120 (machine code for sm_86, sm_89, sm_120a; PTX for sm_75 and newer cards)")
    assert (f"GPU: {card} is not on this machine: a launch here runs on the CPU (this engine has CUDA code for "
            f"sm_75–sm_120; it would run on the {card} (sm_89))." in plan.stdout)
    said = [ln for ln in serve.stdout.splitlines() if ln.startswith("GPU:")]
    assert said == ["GPU: This engine has CUDA code for sm_75–sm_120; no NVIDIA driver was found, so it runs on the "
                    "CPU (install the NVIDIA driver 580.65.06 or newer: nvidia-smi must work). The plan is for the CPU."]
    assert "no NVIDIA driver found" not in serve.stdout  # said once, not again as a warning
    for lib in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "NVIDIA-CUDA-LICENSE.txt"):
        assert (bin_dir / lib).is_file(), lib
    ldd = subprocess.run(["ldd", str(bin_dir / "libggml-cuda.so")], capture_output=True, text=True, check=True).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.MULTILINE))
    for lib in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libggml-base.so.0"):
        assert resolved[lib] == str(bin_dir / lib), (lib, ldd)
    assert "libcuda.so.1 => not found" in ldd and not (bin_dir / "libcuda.so.1").exists()  # the driver's, never ours


def test_pass_1_runs_in_a_child_of_the_bundle(bundle: Bundle, tmp_path: Path, tiny_model: Path) -> None:
    proc = _run(bundle, tmp_path, "measure", str(tiny_model), "--ctx", "4096")
    assert proc.returncode == 0, proc.stderr
    assert "measured by llama-cpp-python 0.3.36 no_alloc probe (CPU, llama.cpp 0c1e57098)" in proc.stdout
    assert "llama_kv_cache: size =    1.00 MiB (  4096 cells" in proc.stdout
    assert list((tmp_path / ".cache" / "headroom" / "measurements").glob("*.json"))  # cached in the user's cache


def test_the_bundle_serves_with_its_engine_and_the_plan_holds(bundle: Bundle, tmp_path: Path, tiny_model: Path) -> None:
    """``serve MODEL --smoke`` as a newcomer types it: it takes the two slots in one pool the smoke test
    needs, checks the plan, prints the verdict, stops the engine and exits 0 (a script can wait for it)."""
    proc = _run(bundle, tmp_path, "serve", str(tiny_model), "--ctx", "4096", "--smoke")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"({bundle.folder}/engine/build/bin/llama-server)" in out
    assert "-np 2 -kvu" in out
    assert "The engine allocated what the plan said" in out
    assert "smoke: ok — both shared sequences produced tokens" in out
    assert "serving at" not in out and "engine stopped" in out


def test_what_the_bundle_starts_gets_the_users_library_path(bundle: Bundle, tmp_path: Path) -> None:
    """PyInstaller puts the bundle's libraries first in LD_LIBRARY_PATH; an engine (here a tiny script
    on PATH that notes what it got) must run with the user's value instead."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    spy = bin_dir / "llama-server"
    spy.write_text(f'#!/bin/sh\necho "${{LD_LIBRARY_PATH-unset}}" >> {seen}\n'
                   'echo "version: 1 (build 1, commit 0c1e570)"\n')
    spy.chmod(0o755)
    proc = _run(bundle, tmp_path, "doctor", "--no-selftest", PATH=f"{bin_dir}:/usr/bin:/bin",
                LD_LIBRARY_PATH="/opt/user-libs")
    assert proc.returncode == 0, proc.stderr
    assert f"at {spy} (PATH)" in proc.stdout
    assert set(seen.read_text().split()) == {"/opt/user-libs"}


def test_only_headrooms_own_children_run_through_minus_m(bundle: Bundle, tmp_path: Path) -> None:
    proc = _run(bundle, tmp_path, "-m", "os")
    assert proc.returncode == 2 and "runs only Headroom's own child processes" in proc.stderr


def test_the_window_starts_under_xvfb(bundle: Bundle, tmp_path: Path) -> None:
    xvfb_run = shutil.which("xvfb-run")
    assert xvfb_run is not None, "xvfb-run is missing: ./dev setup installs xvfb"
    shot = tmp_path / "window.png"
    proc = subprocess.run([xvfb_run, "-a", "-s", "-screen 0 1600x1000x24", str(bundle.exe), "gui", "--demo",
                           "--screenshot", str(shot)], cwd=tmp_path, env=user_env(tmp_path), capture_output=True,
                          text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    # the demo's plan, on the xcb platform: the stock engine (no opencoti here), so no rolling window
    assert "mode=stock" in proc.stdout and "feasible=True" in proc.stdout, proc.stdout
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_first_start_with_nothing_configured_opens_the_guide(bundle: Bundle, tmp_path: Path) -> None:
    """Plain `headroom` (what the menu entry runs) in an empty home, on a virtual display: the window
    and the first-run guide over it, as the X server lists its windows (xwininfo)."""
    xvfb_run = shutil.which("xvfb-run")
    assert xvfb_run is not None and shutil.which("xwininfo"), "./dev setup installs xvfb and x11-utils"
    windows = tmp_path / "windows.txt"
    script = (f'"{bundle.exe}" & app=$!\n'
              'for _ in $(seq 120); do\n'  # up to 2 minutes for the window and the guide to be mapped
              f'  xwininfo -root -tree > "{windows}"\n'
              f'  grep -q \'"Welcome to Headroom"\' "{windows}" && break\n'
              '  sleep 1\n'
              'done\n'
              'kill $app; wait $app\n')
    proc = subprocess.run([xvfb_run, "-a", "-s", "-screen 0 1600x1000x24", "bash", "-c", script], cwd=tmp_path,
                          env=user_env(tmp_path), capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    listed = windows.read_text()
    assert '"Welcome to Headroom"' in listed, proc.stderr[-2000:]
    assert '"Headroom"' in listed  # the main window behind it


def test_the_tarball_installs_for_the_user_and_uninstalls(bundle: Bundle, tmp_path: Path) -> None:
    assert bundle.tarball is not None and bundle.tarball.is_file()
    with tarfile.open(bundle.tarball) as tf:
        tf.extractall(tmp_path / "unpacked", filter="tar")
    home = tmp_path / "home"
    home.mkdir()
    env = user_env(home)
    installed = subprocess.run(["bash", str(tmp_path / "unpacked" / "headroom" / "install.sh")], env=env,
                               capture_output=True, text=True, timeout=TIMEOUT_S)
    assert installed.returncode == 0, installed.stderr
    app_dir = home / ".local" / "share" / "headroom" / "app"
    link = home / ".local" / "bin" / "headroom"
    assert link.resolve() == app_dir / "headroom"
    entry = home / ".local" / "share" / "applications" / "headroom.desktop"
    assert desktop_entry(entry)["Exec"] == f"{app_dir}/headroom gui %f"
    assert validate(entry).returncode == 0
    assert (home / ".local" / "share" / "icons" / "hicolor" / "256x256" / "apps" / "headroom.png").is_file()
    assert (home / ".local" / "share" / "mime" / "packages" / "headroom-gguf.xml").is_file()
    shutil.rmtree(tmp_path / "unpacked")  # the installed copy stands alone
    doctor = subprocess.run([str(link), "doctor"], cwd=home, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    assert doctor.returncode == 0, doctor.stderr
    assert f"at {app_dir}/engine/build/bin/llama-server (bundle)" in _line(doctor.stdout, "Engine")

    removed = subprocess.run(["bash", str(app_dir / "install.sh"), "--uninstall"], env=env, capture_output=True,
                             text=True, timeout=TIMEOUT_S)
    assert removed.returncode == 0, removed.stderr
    assert not app_dir.exists() and not os.path.lexists(link) and not entry.exists()
    assert (home / ".cache" / "headroom").is_dir()  # the user's caches are theirs to keep
