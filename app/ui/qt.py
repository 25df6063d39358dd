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
    QDesktopServices,
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
    QShowEvent,
    QStandardItemModel,
    QTextDocument,
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
    QLayout,
    QLineEdit,
    QListWidget,
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
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

__all__ = [
    "QAbstractItemView",
    "QAction",
    "QApplication",
    "QBrush",
    "QByteArray",
    "QCheckBox",
    "QCloseEvent",
    "QColor",
    "QComboBox",
    "QDesktopServices",
    "QDialog",
    "QDragEnterEvent",
    "QDropEvent",
    "QElapsedTimer",
    "QEvent",
    "QFileDialog",
    "QFont",
    "QFontMetrics",
    "QFormLayout",
    "QFrame",
    "QGridLayout",
    "QGroupBox",
    "QGuiApplication",
    "QHBoxLayout",
    "QHeaderView",
    "QHelpEvent",
    "QIcon",
    "QImage",
    "QKeySequence",
    "QLabel",
    "QLineEdit",
    "QListWidget",
    "QMainWindow",
    "QMenu",
    "QMessageBox",
    "QMimeData",
    "QMouseEvent",
    "QObject",
    "QPaintEvent",
    "QPainter",
    "QPalette",
    "QPen",
    "QPixmap",
    "QPlainTextEdit",
    "QPoint",
    "QPointF",
    "QProgressBar",
    "QPushButton",
    "QRectF",
    "QResizeEvent",
    "QScrollArea",
    "QShowEvent",
    "QSize",
    "QSizePolicy",
    "QSlider",
    "QSpinBox",
    "QSplitter",
    "QStandardItemModel",
    "QStatusBar",
    "QTabWidget",
    "QTableWidget",
    "QTableWidgetItem",
    "QTextBrowser",
    "QTextDocument",
    "QThread",
    "QTimer",
    "QToolButton",
    "QToolTip",
    "QUrl",
    "QVBoxLayout",
    "QWidget",
    "Qt",
    "Signal",
    "Slot",
    "clear_layout",
    "prompt_line",
]


#: The most a prompt box takes: as much as Qt allows. Its default, 32,767 characters, cut a pasted
#: document without a word.
PROMPT_MAX_CHARS = 2**31 - 1


def prompt_line() -> QLineEdit:
    """A one-line box for prompts and chat messages that takes a whole pasted document."""
    line = QLineEdit()
    line.setMaxLength(PROMPT_MAX_CHARS)
    return line


def clear_layout(layout: QLayout) -> None:
    """Take every widget out of ``layout`` and delete it (a grid rebuilt on each reading)."""
    while layout.count():
        item = layout.takeAt(0)
        widget = item.widget() if item is not None else None
        if widget is not None:
            widget.setParent(None)
            widget.deleteLater()



# ---- compatibility shim: PySide6 6.12 returns None/True/False without a reference ---------------

