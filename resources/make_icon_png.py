"""Render resources/headroom.svg to headroom.png (256 px) with Qt's SVG renderer.

Run: ``.venv/bin/python resources/make_icon_png.py``. The PNG is for desktop files and packaging;
the window uses the SVG directly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.ui.qt import QApplication, QIcon

HERE = Path(__file__).resolve().parent


def main(size: int = 256) -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    pixmap = QIcon(str(HERE / "headroom.svg")).pixmap(size, size)
    ok = pixmap.save(str(HERE / "headroom.png"), "PNG")
    del app
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
