"""Help ▸ About, Help ▸ Glossary (app/glossary.py: the words the window shows, explained), Help ▸ Open the log
folder (where each engine's log is kept while and after it runs)."""

from __future__ import annotations

from app import __version__
from app.glossary import TERMS
from app.text import escape
from app.ui.qt import (
    QAction,
    QDesktopServices,
    QDialog,
    QMainWindow,
    QMessageBox,
    QTextBrowser,
    QUrl,
    QVBoxLayout,
    QWidget,
)

ABOUT = (f"<b>Headroom {escape(__version__)}</b><p>How a model and its context fit your GPU, measured before "
         "anything loads, and a server started with exactly the flags shown.</p><p>Every number says where it "
         "comes from; Help ▸ Glossary explains the words.</p>")


def glossary_html() -> str:
    return "<h3>Glossary</h3><dl>" + "".join(f"<dt><b>{escape(name)}</b></dt><dd>{escape(text)}</dd>"
                                             for name, text in TERMS) + "</dl>"


class GlossaryDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Headroom — Glossary")
        self.text = QTextBrowser()
        self.text.setHtml(glossary_html())
        lay = QVBoxLayout(self)
        lay.addWidget(self.text)
        self.resize(640, 560)


def log_folder() -> str:
    """The folder the engines' logs are in (app/engine/process.py ``runtime_dir``), made when missing."""
    from app.engine.process import private_dir, runtime_dir

    try:
        return str(private_dir(runtime_dir()))
    except OSError:
        return str(runtime_dir())


def add_help_menu(window: QMainWindow) -> QDialog:
    """The Help menu on ``window``'s menu bar; returns the glossary dialog it shows."""
    menu = window.menuBar().addMenu("&Help")
    glossary = GlossaryDialog(window)
    act = QAction("&Glossary…", window)
    act.triggered.connect(glossary.show)
    menu.addAction(act)
    logs = QAction("Open the &log folder", window)
    logs.setToolTip("Where each engine's log is kept (the console shows the one running)")
    logs.triggered.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(log_folder())))
    menu.addAction(logs)
    menu.addSeparator()
    about = QAction("&About Headroom", window)
    about.triggered.connect(lambda: QMessageBox.about(window, "About Headroom", ABOUT))
    menu.addAction(about)
    return glossary
