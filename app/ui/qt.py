"""The one module that imports PySide6 (STYLE.md "One import module for Qt").

Everything in ``app/ui`` imports Qt names from here, so a binding change or a compatibility shim
happens in one place and ``app/planner`` / ``app/engine`` can be checked to stay Qt-free.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import (
    QByteArray,
    QElapsedTimer,
    QEvent,
    QMimeData,
    QObject,
    QPoint,
    QPointF,
    QRectF,
    QSize,
    Qt,
    QThread,
    QTimer,
    QUrl,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QAction,
    QBrush,
    QCloseEvent,
    QColor,
    QDragEnterEvent,
    QDropEvent,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QHelpEvent,
    QIcon,
    QImage,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
)
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QSplitter,
    QStatusBar,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

__all__ = [
    "QAction", "QApplication", "QBrush", "QByteArray", "QCheckBox", "QCloseEvent", "QColor", "QComboBox",
    "QDragEnterEvent", "QDropEvent", "QElapsedTimer", "QEvent", "QFileDialog", "QFont",
    "QFontMetrics", "QFormLayout", "QFrame", "QGridLayout", "QGroupBox", "QGuiApplication",
    "QHBoxLayout", "QHelpEvent", "QIcon", "QImage", "QKeySequence", "QLabel", "QLineEdit", "QMainWindow",
    "QMenu", "QMessageBox", "QMimeData", "QMouseEvent", "QObject", "QPaintEvent", "QPainter",
    "QPalette", "QPen", "QPixmap", "QPlainTextEdit", "QPoint", "QPointF", "QProgressBar",
    "QPushButton", "QRectF", "QScrollArea", "QSize", "QSizePolicy", "QSlider", "QSpinBox",
    "QSplitter", "QStatusBar", "QThread", "QTimer", "QToolButton", "QToolTip", "QUrl",
    "QVBoxLayout", "QWidget", "Qt", "Signal", "Slot",
]



# ---- compatibility shim: PySide6 6.12 returns None/True/False without a reference ---------------
# On Python 3.11, PySide6 6.12.0 hands back None from every void method (setText, setValue,
# setVisible, QTimer.start, ...) and True from ``SignalInstance.emit`` without the reference the
# caller then drops: each call lowers the singleton's reference count by one (measured: 100 calls of
# QLabel.setText, -100 on None). After enough calls the interpreter aborts with "Fatal Python
# error: none_dealloc" / "bool_dealloc" (seen at the end of bench/bench_gui.py; reproduced with
# 20,000 signal emits from a QThread: tests/ui/test_qt_shim.py). Python 3.12 made these objects
# immortal (PEP 683), which is why the binding gets away with it there. On 3.11 we do the same:
# raise their counts by 2**60 once, at import, so no run of the window can ever bring one to zero.
# (ob_refcnt is the first field of every CPython object.) Remove when PySide6 is fixed or Python
# 3.12 is the minimum.
IMMORTAL_REFS = 1 << 60


def _immortalize_singletons() -> bool:
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    for obj in (None, True, False):
        refcnt = ctypes.c_ssize_t.from_address(id(obj))
        if refcnt.value < IMMORTAL_REFS:
            refcnt.value += IMMORTAL_REFS
    return True


SINGLETONS_PINNED = _immortalize_singletons()
