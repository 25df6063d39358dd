"""The one module that imports PySide6 (docs/style.md "One import module for Qt").

Everything in ``app/ui`` imports Qt names from here, so a binding change or a compatibility shim
happens in one place and ``app/planner`` / ``app/engine`` can be checked to stay Qt-free.
"""

from __future__ import annotations

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
    QResizeEvent,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
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
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

__all__ = [
    "QAbstractItemView", "QAction", "QApplication", "QBrush", "QByteArray", "QCheckBox", "QCloseEvent", "QColor", "QComboBox", "QDialog",
    "QDragEnterEvent", "QDropEvent", "QElapsedTimer", "QEvent", "QFileDialog", "QFont",
    "QFontMetrics", "QFormLayout", "QFrame", "QGridLayout", "QGroupBox", "QGuiApplication",
    "QHBoxLayout", "QHeaderView", "QHelpEvent", "QIcon", "QImage", "QKeySequence", "QLabel", "QLineEdit", "QMainWindow",
    "QMenu", "QMessageBox", "QMimeData", "QMouseEvent", "QObject", "QPaintEvent", "QPainter",
    "QPalette", "QPen", "QPixmap", "QPlainTextEdit", "QPoint", "QPointF", "QProgressBar",
    "QPushButton", "QRectF", "QResizeEvent", "QScrollArea", "QSize", "QSizePolicy", "QSlider", "QSpinBox",
    "QSplitter", "QStandardItemModel", "QStatusBar", "QTableWidget", "QTableWidgetItem", "QThread", "QTimer", "QToolButton", "QToolTip", "QUrl",
    "QVBoxLayout", "QWidget", "Qt", "Signal", "Slot",
]



# ---- compatibility shim: PySide6 6.12 returns None/True/False without a reference ---------------

