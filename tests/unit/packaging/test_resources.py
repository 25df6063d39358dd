"""resources/: a desktop entry desktop-file-validate accepts as it is, the icon at every size the
desktops use, and the GGUF MIME type the entry claims."""

from __future__ import annotations

import configparser
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RES = ROOT / "resources"
#: resources/make_icon_png.py SIZES (that script needs Qt; this test reads the PNG headers only).
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
MIME_NS = "{http://www.freedesktop.org/standards/shared-mime-info}"


def validate(entry: Path) -> subprocess.CompletedProcess[str]:
    """desktop-file-validate (Debian's desktop-file-utils, which ./dev installs)."""
    tool = shutil.which("desktop-file-validate")
    assert tool is not None, "desktop-file-validate is missing: ./dev setup installs desktop-file-utils"
    return subprocess.run([tool, str(entry)], capture_output=True, text=True, timeout=60)


def desktop_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(path)
    return parser["Desktop Entry"]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_desktop_entry_is_valid_without_a_single_hint() -> None:
    result = validate(RES / "headroom.desktop")
    assert result.returncode == 0 and result.stdout + result.stderr == ""


def test_the_entry_opens_gguf_files_and_llamafiles_with_the_window() -> None:
    entry = desktop_entry(RES / "headroom.desktop")
    assert entry["Type"] == "Application" and entry["Exec"] == "headroom gui %f"
    assert entry["Icon"] == "headroom"
    types = ET.parse(RES / "gguf-mime.xml").getroot().findall(f"{MIME_NS}mime-type")
    assert entry["MimeType"] == "".join(f"{t.get('type')};" for t in types)
    globs = {t.get("type"): t.find(f"{MIME_NS}glob").get("pattern") for t in types}  # type: ignore[union-attr]
    assert globs == {"application/x-gguf": "*.gguf", "application/x-llamafile": "*.llamafile"}
    match = types[0].find(f"{MIME_NS}magic/{MIME_NS}match")
    assert match is not None and (match.get("offset"), match.get("value")) == ("0", "GGUF")


def test_the_icon_is_there_at_every_size_desktops_use() -> None:
    for size in SIZES:
        png = RES / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "headroom.png"
        assert png_size(png) == (size, size)
    assert ET.parse(RES / "headroom.svg").getroot().tag == "{http://www.w3.org/2000/svg}svg"
