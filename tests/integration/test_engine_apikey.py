"""Beyond 127.0.0.1 the engine only listens with Headroom's key (stored 0600) and refuses requests without it."""

from __future__ import annotations

import json
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from app.engine.apikey import key_path
from app.engine.discover import discover_engines
from app.engine.launch import prepare
from app.planner.devices import resolve_gpus
from app.planner.gguf_model import read_shape
from app.planner.plan import make_plan
from app.planner.settings import LaunchSettings

pytestmark = pytest.mark.engine


def _post(url: str, key: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    req = urllib.request.Request(url, json.dumps({"prompt": "Hi", "n_predict": 2}).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_all_interfaces_only_with_the_stored_key(engine_build: object, tiny_model: Path, tmp_path: Path) -> None:
    plan = make_plan(read_shape(tiny_model), resolve_gpus([]), LaunchSettings(n_ctx=512))
    engines = discover_engines()
    local = prepare(plan, tiny_model, engines, key_dir=tmp_path)
    assert local.api_key is None and not key_path(tmp_path).exists()
    spec = prepare(plan, tiny_model, engines, host="0.0.0.0", key_dir=tmp_path)
    assert spec.api_key and spec.argv[spec.argv.index("--api-key") + 1] == spec.api_key
    assert stat.S_IMODE(key_path(tmp_path).stat().st_mode) == 0o600
    assert key_path(tmp_path).read_text().strip() == spec.api_key
    assert spec.api_key not in spec.shell_line
    with spec.server() as server:
        server.start()
        server.wait_ready(timeout=60)  # /health is public: no key needed to see it is ready
        assert _post(f"{server.base_url}/completion", None) == 401
        assert _post(f"{server.base_url}/completion", spec.api_key) == 200
