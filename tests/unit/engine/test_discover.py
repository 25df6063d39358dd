"""Discovery finds llamafiles where users keep them, tells opencoti from Mozilla's by probing, caches."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app.engine.argv import build_argv
from app.engine.discover import EngineKind, EngineOrigin, choose, discover_engines, identify, parse_version
from app.planner.plan_types import PlanMode
from app.planner.settings import LaunchSettings

FAKE = Path(__file__).with_name("fake_llamafile.py")


def _install(folder: Path, name: str, opencoti: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(FAKE.parent)!r})\n"
                   f"from fake_llamafile import main\nsys.exit(main(sys.argv[1:], {opencoti}))\n")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HEADROOM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setenv("FAKE_LLAMAFILE_CALLS", str(tmp_path / "calls.txt"))
    return tmp_path / "home"


def test_parse_version_of_stock_and_llamafile() -> None:
    assert parse_version("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0", "llama-server") \
        == ("llama-server", "0.5.0-dev", "0c1e570")
    assert parse_version("llamafile v0.10.5\n", "x")[:2] == ("llamafile", "0.10.5")
    assert parse_version("garbage", "my.llamafile") == ("llamafile", "unknown", "unknown")


def test_llamafiles_in_home_and_data_dir_are_found_and_opencoti_is_told_apart(home: Path, tmp_path: Path) -> None:
    mozilla = _install(home / ".llamafile", "llamafile-0.10.5", opencoti=False)
    coti = _install(tmp_path / "data" / "engines", "opencoti.llamafile", opencoti=True)
    engines = discover_engines()
    kinds = {Path(e.path): (e.kind, e.source) for e in engines}
    assert kinds == {mozilla: ("llamafile", "~/.llamafile"), coti: ("opencoti", "data dir")}
    window = choose(engines, PlanMode.WINDOW)
    assert window is not None and window.path == str(coti)
    assert window.capabilities is not None and not window.capabilities.accepts("--fit")
    argv = build_argv(window, LaunchSettings(n_ctx=65536), PlanMode.WINDOW, Path("/m.gguf"), "127.0.0.1", 5000)
    assert argv[:4] == [str(coti), "--server", "--gpu", "nvidia"] and "--fit" not in argv


def test_probes_are_cached_per_binary_until_it_changes(home: Path, tmp_path: Path) -> None:
    exe = _install(tmp_path / "bin", "llamafile", opencoti=False)
    calls = tmp_path / "calls.txt"
    first = discover_engines(probe=True)
    assert [e.source for e in first] == ["PATH"]
    probes = len(calls.read_text().splitlines())
    discover_engines(probe=True)
    assert len(calls.read_text().splitlines()) == probes + 1  # only --version again, no probes
    exe.write_text(exe.read_text() + "\n# changed\n")
    discover_engines(probe=True)
    assert len(calls.read_text().splitlines()) > 2 * probes  # re-probed after the binary changed


def test_the_engine_chosen_in_settings_comes_first(home: Path, tmp_path: Path) -> None:
    _install(home / ".llamafile", "llamafile", opencoti=False)
    mine = _install(tmp_path / "elsewhere", "my-engine.llamafile", opencoti=True)
    engines = discover_engines(mine)
    assert engines[0].path == str(mine) and engines[0].source == "settings"


def test_only_an_ape_llamafile_is_run_through_sh(home: Path, tmp_path: Path) -> None:
    # A non-executable file is tried with `sh FILE --version` only when it starts like an APE
    # llamafile; anything else would be run as a shell script.
    script = tmp_path / "notes.txt"
    script.write_text(f"touch {tmp_path / 'ran'}\necho 'llamafile v0.10.5'\n")
    ape = tmp_path / "model.llamafile"
    ape.write_text("MZqFpD='\n'\necho 'llamafile v0.10.5'\n")
    assert identify(script, EngineOrigin.SETTINGS, probe=False) is None
    assert not (tmp_path / "ran").exists()
    info = identify(ape, EngineOrigin.SETTINGS, probe=False)
    assert info is not None and info.via_sh and info.kind == EngineKind.LLAMAFILE and info.version == "0.10.5"
