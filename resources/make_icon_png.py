"""Render resources/headroom.svg to PNGs at the sizes desktops use, with Qt's SVG renderer:
``resources/icons/hicolor/<N>x<N>/apps/headroom.png`` (the freedesktop icon theme layout, which
packaging/install-desktop.sh copies as it is; the scalable SVG goes beside them).

Run after changing the SVG: ``.venv/bin/python resources/make_icon_png.py`` (the PNGs are committed;
tests/unit/packaging/test_resources.py checks that each is there at its size).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.ui.qt import QApplication, QIcon

HERE = Path(__file__).resolve().parent
#: Menus 16-24, panels and docks 32-64, app grids and switchers 128-512.
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def icon_path(size: int, root: Path = HERE) -> Path:
    return root / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "headroom.png"


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    icon = QIcon(str(HERE / "headroom.svg"))
    ok = True
    for size in SIZES:
        out = icon_path(size)
        out.parent.mkdir(parents=True, exist_ok=True)
        ok = icon.pixmap(size, size).save(str(out), "PNG") and ok
    del app
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
