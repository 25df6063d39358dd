"""Where the engine listens, as a record: what the server panel (app/ui/server_panel.py) shows, the
window remembers and a launch profile holds. No widgets here (a plain record does not live in
a widget module)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from app.engine import apikey

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServerSettings:
    """Where the engine listens and whether it wants a key (``port`` 0: not chosen yet)."""

    host: str = LOOPBACK
    port: int = 0
    require_key: bool = False

    @property
    def needs_key(self) -> bool:
        """A key is required beyond loopback, whatever the box says (app.engine.launch refuses otherwise)."""
        return self.require_key or not apikey.is_loopback(self.host)

    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``/v1``) a client on this machine uses."""
        host = LOOPBACK if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> ServerSettings:
        """What a state file or a profile says; ValueError for what cannot be a server setting."""
        if not isinstance(data, dict):
            raise ValueError("the server settings are not an object")
        host, port, key = data.get("host", LOOPBACK), data.get("port", 0), data.get("require_key", False)
        if not isinstance(host, str) or not host.strip():
            raise ValueError(f"server host {host!r} is not a host name or address")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"server port {port!r} is not a port (1–65535)")
        return cls(host.strip(), port, bool(key))
