"""Beyond 127.0.0.1 only with a key Headroom generated and stored 0600."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from app.engine.apikey import ApiKeyError, is_loopback, key_for_host, key_path, load_or_create


def test_loopback_needs_no_key_other_hosts_get_one_stored_0600(tmp_path: Path) -> None:
    assert key_for_host("127.0.0.1", tmp_path) is None
    assert key_for_host("::1", tmp_path) is None
    key = key_for_host("0.0.0.0", tmp_path)
    assert key is not None and len(key) >= 32
    assert stat.S_IMODE(key_path(tmp_path).stat().st_mode) == 0o600
    assert key_for_host("192.168.1.20", tmp_path) == key  # reused, not regenerated


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    load_or_create(tmp_path)
    key_path(tmp_path).chmod(0o644)
    with pytest.raises(ApiKeyError, match="chmod 600"):
        load_or_create(tmp_path)


def test_loopback_names() -> None:
    assert is_loopback("localhost") and is_loopback("127.0.0.5")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
