"""packaging/install-desktop.sh puts a working menu entry in place, and takes it away again."""

from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "packaging" / "install-desktop.sh"


def _run(tmp_path: Path, *args: str, bin_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), HEADROOM_BIN=str(bin_path))
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_install_puts_an_entry_that_runs_this_headroom(tmp_path: Path) -> None:
    fake_bin = tmp_path / "headroom"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    result = _run(tmp_path, bin_path=fake_bin)
    assert result.returncode == 0, result.stderr
    entry = tmp_path / "data" / "applications" / "headroom.desktop"
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(entry)
    section = parser["Desktop Entry"]
    assert section["Exec"] == f"{fake_bin} gui %f"
    assert section["Icon"] == "headroom"
    assert "application/x-gguf" in section["MimeType"]
    assert (tmp_path / "data" / "icons" / "hicolor" / "scalable" / "apps" / "headroom.svg").is_file()
    assert (tmp_path / "data" / "mime" / "packages" / "headroom-gguf.xml").is_file()

    removed = _run(tmp_path, "--uninstall", bin_path=fake_bin)
    assert removed.returncode == 0
    assert not entry.exists()


def test_install_without_a_set_up_checkout_says_what_to_do(tmp_path: Path) -> None:
    result = _run(tmp_path, bin_path=tmp_path / "missing" / "headroom")
    assert result.returncode == 1
    assert "run ./dev setup first" in result.stderr
    assert not (tmp_path / "data" / "applications" / "headroom.desktop").exists()
