"""packaging/install-desktop.sh puts a working menu entry in place, and takes it away again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.unit.packaging.test_resources import SIZES, desktop_entry, png_size, validate

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "packaging" / "install-desktop.sh"


def _run(tmp_path: Path, *args: str, bin_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), HEADROOM_BIN=str(bin_path))
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def _fake_bin(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    fake = folder / "headroom"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    return fake


def test_install_puts_an_entry_that_runs_this_headroom(tmp_path: Path) -> None:
    fake_bin = _fake_bin(tmp_path)
    result = _run(tmp_path, bin_path=fake_bin)
    assert result.returncode == 0, result.stderr
    data = tmp_path / "data"
    entry = data / "applications" / "headroom.desktop"
    section = desktop_entry(entry)
    assert section["Exec"] == f"{fake_bin} gui %f"
    assert section["Icon"] == "headroom"
    assert "application/x-gguf" in section["MimeType"]
    assert validate(entry).returncode == 0
    assert (data / "icons" / "hicolor" / "scalable" / "apps" / "headroom.svg").is_file()
    for size in SIZES:
        assert png_size(data / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "headroom.png") == (size, size)
    assert (data / "mime" / "packages" / "headroom-gguf.xml").is_file()

    removed = _run(tmp_path, "--uninstall", bin_path=fake_bin)
    assert removed.returncode == 0
    assert not entry.exists()
    assert not list((data / "icons").rglob("headroom.*"))
    assert not (data / "mime" / "packages" / "headroom-gguf.xml").exists()


def test_a_path_with_a_space_is_quoted_as_the_spec_asks(tmp_path: Path) -> None:
    fake_bin = _fake_bin(tmp_path / "My Apps")
    assert _run(tmp_path, bin_path=fake_bin).returncode == 0
    entry = tmp_path / "data" / "applications" / "headroom.desktop"
    assert desktop_entry(entry)["Exec"] == f'"{fake_bin}" gui %f'
    result = validate(entry)
    assert result.returncode == 0, result.stdout


def test_install_without_a_set_up_checkout_says_what_to_do(tmp_path: Path) -> None:
    result = _run(tmp_path, bin_path=tmp_path / "missing" / "headroom")
    assert result.returncode == 1
    assert "run ./dev setup first" in result.stderr
    assert not (tmp_path / "data" / "applications" / "headroom.desktop").exists()
