"""The API key an engine needs before Headroom lets it listen beyond 127.0.0.1.

Generated once with ``secrets``, stored in the config directory with mode 0600 (created with that
mode, never chmod-ed after the fact), reused afterwards. A key file readable by others is refused.
The engine reads the key from that same file (``--api-key-file``), never from its command line.
"""

from __future__ import annotations

import ipaddress
import secrets
import stat
from pathlib import Path

from app.files import atomic_text
from app.paths import config_dir

KEY_FILE = "api_key"




def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiKeyError(Exception):
    """The stored key cannot be trusted (e.g. readable by other users)."""


def key_path(directory: Path | None = None) -> Path:
    return (directory or config_dir()) / KEY_FILE


def load_or_create(directory: Path | None = None) -> str:
    """The stored key, generated (and written 0600) on first use. Raises ApiKeyError for a key file
    others may read (it is refused, not fixed: someone may have read it already) or cannot be read.

    The file is what the engine reads with ``--api-key-file`` (tools/server: one key per line, ``#``
    starts a comment); Headroom's key is its first such line."""
    path = key_path(directory)
    if path.exists():
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                raise ApiKeyError(f"the API key file {path} is readable by other users (mode {mode:o}): "
                                  f"run `chmod 600 {path}` if nobody else could have read it, or delete it "
                                  "to get a new key")
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ApiKeyError(f"the API key file {path} cannot be read: {exc}") from None
        key = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
        if key:
            return key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(32)
    atomic_text(path, key + "\n", mode=0o600)  # (0600 from its creation: no moment another user can read it)
    return key


def key_for_host(host: str, directory: Path | None = None) -> str | None:
    """None on loopback; the stored (or new) key for any other address."""
    return None if is_loopback(host) else load_or_create(directory)
