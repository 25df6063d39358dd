"""Where the engine listens: host, a port that stays the same from launch to launch (remembered),
the API key (generated once, kept 0600 by app.engine.apikey, shown masked with a copy button) and
the OpenAI-compatible base URL a frontend is pointed at.

The panel only presents these; ``ServerSettings`` (app/ui/server_settings.py) is what it says, and the launch panel hands it to
``app.engine.launch.prepare`` as the host, the port and whether a key is required.
"""

from __future__ import annotations

from pathlib import Path

from app.engine import apikey
from app.engine.capabilities import free_port
from app.ui.qt import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QGuiApplication,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    Qt,
    QWidget,
    Signal,
)
from app.ui.server_settings import LOOPBACK, ServerSettings

#: The hosts offered in the list (any other can be typed).
HOSTS = (LOOPBACK, "0.0.0.0")
TIPS = {
    "host": "--host: the address the engine listens on. 127.0.0.1: only this machine can reach it; "
            "0.0.0.0: every network this machine is on (an API key is then required).",
    "port": "--port: the same port every launch, so a frontend set to it keeps working",
    "key": "--api-key: clients send it as 'Authorization: Bearer KEY'. Generated once and kept, readable "
           "only by you, in the file named here.",
    "url": "What an OpenAI-compatible client (a chat frontend, an SDK) is pointed at",
}


class ServerPanel(QGroupBox):
    """Host, port, the API key and the base URL; ``changed`` on any edit."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None, *, key_dir: Path | None = None) -> None:
        """``key_dir``: where the API key file lives (None: the config directory)."""
        super().__init__("Server", parent)
        self.key_dir = key_dir
        self.host = QComboBox()
        self.host.setEditable(True)
        self.host.addItems(list(HOSTS))
        self.host.setAccessibleName("Host")
        self.host.setToolTip(TIPS["host"])
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setAccessibleName("Port")
        self.port.setToolTip(TIPS["port"])
        self.require_key = QCheckBox("require an API key")
        self.require_key.setToolTip(TIPS["key"])
        self.key = QLineEdit()
        self.key.setReadOnly(True)
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setAccessibleName("API key")
        self.key.setPlaceholderText("not needed")
        self.show_key = QPushButton("Show")
        self.show_key.setCheckable(True)
        self.show_key.toggled.connect(self._show_key)
        self.copy_key = QPushButton("Copy key")
        self.copy_key.clicked.connect(lambda: self._copy(self.key.text()))
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setAccessibleName("OpenAI base URL")
        self.url.setToolTip(TIPS["url"])
        self.copy_url = QPushButton("Copy URL")
        self.copy_url.clicked.connect(lambda: self._copy(self.url.text()))
        self.note = QLabel()
        self.note.setObjectName("serverNote")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        form = QFormLayout(self)
        where = QWidget()
        row = QHBoxLayout(where)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.host, 1)
        row.addWidget(QLabel("port"))
        row.addWidget(self.port)
        where.setFocusProxy(self.host)
        form.addRow("Host", where)  # (no Alt letter: every one of H, o, s, t is taken)
        form.addRow("", self.require_key)
        key_row = QWidget()
        krow = QHBoxLayout(key_row)
        krow.setContentsMargins(0, 0, 0, 0)
        krow.addWidget(self.key, 1)
        krow.addWidget(self.show_key)
        krow.addWidget(self.copy_key)
        form.addRow("API key", key_row)
        url_row = QWidget()
        urow = QHBoxLayout(url_row)
        urow.setContentsMargins(0, 0, 0, 0)
        urow.addWidget(self.url, 1)
        urow.addWidget(self.copy_url)
        form.addRow("Base URL", url_row)
        form.addRow(self.note)
        line = self.host.lineEdit()
        if line is not None:
            line.editingFinished.connect(self._edited)
        self.host.activated.connect(lambda _i: self._edited())
        self.port.valueChanged.connect(lambda _v: self._edited())
        self.require_key.toggled.connect(lambda _b: self._edited())
        self.set_settings(ServerSettings())

    # ---- values --------------------------------------------------------------------------------
    def settings(self) -> ServerSettings:
        return ServerSettings(self.host.currentText().strip() or LOOPBACK, self.port.value(),
                              self.require_key.isChecked())

    def set_settings(self, s: ServerSettings) -> None:
        """Show ``s``; a port not chosen yet (0) becomes a free one now, kept from then on."""
        port = s.port or free_port()
        for w in (self.host, self.port, self.require_key):
            w.blockSignals(True)
        self.host.setCurrentText(s.host)
        self.port.setValue(port)
        self.require_key.setChecked(s.require_key)
        for w in (self.host, self.port, self.require_key):
            w.blockSignals(False)
        self._refresh()

    def key_folder(self) -> Path | None:
        """Where the API key file is kept (None: the config directory)."""
        return self.key_dir

    def api_key(self) -> str | None:
        """The key a launch with these settings uses (generated and stored on first need), or None.
        Raises apikey.ApiKeyError when the stored key cannot be trusted."""
        return apikey.load_or_create(self.key_dir) if self.settings().needs_key else None

    # ---- presenting ----------------------------------------------------------------------------
    def _edited(self) -> None:
        self._refresh()
        self.changed.emit()

    def _refresh(self) -> None:
        s = self.settings()
        forced = not apikey.is_loopback(s.host)
        self.require_key.blockSignals(True)
        if forced:
            self.require_key.setChecked(True)
        self.require_key.setEnabled(not forced)
        self.require_key.blockSignals(False)
        key, problem = "", ""
        if s.needs_key:
            try:
                key = self.api_key() or ""
            except (apikey.ApiKeyError, OSError) as exc:
                problem = str(exc)
        self.key.setText(key)
        for w in (self.key, self.show_key, self.copy_key):
            w.setEnabled(bool(key))
        self.url.setText(s.base_url())
        self.url.setCursorPosition(0)
        if problem:
            self.note.setText(f"The API key cannot be used: {problem}")
            self.note.setStyleSheet("color: #d62728;")
        else:
            self.note.setText(self._where(s, key))
            self.note.setStyleSheet("")

    def _where(self, s: ServerSettings, key: str) -> str:
        path = apikey.key_path(self.key_dir)
        if apikey.is_loopback(s.host):
            reach = "Only this machine can reach the engine"
        else:
            reach = f"Every network this machine is on can reach the engine at port {s.port}"
        return reach + (f"; clients need the key (kept in {path}, readable only by you)." if key else ".")

    def _show_key(self, on: bool) -> None:
        self.key.setEchoMode(QLineEdit.EchoMode.Normal if on else QLineEdit.EchoMode.Password)
        self.show_key.setText("Hide" if on else "Show")

    @staticmethod
    def _copy(text: str) -> None:
        if text:
            QGuiApplication.clipboard().setText(text)
