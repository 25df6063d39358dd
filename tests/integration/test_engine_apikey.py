"""Beyond 127.0.0.1 the engine only listens with Headroom's key (stored 0600) and refuses requests
without it; the key is in no command line (``ps`` shows those to every user) and in no file others
can read."""

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
from app.engine.process import runtime_dir
from app.machine.devices import resolve_gpus
from app.planner.gguf.model import read_shape
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan

pytestmark = pytest.mark.engine


def _post(url: str, key: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    req = urllib.request.Request(url, json.dumps({"prompt": "Hi", "n_predict": 2}).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _world_readable_holding(folder: Path, secret: str) -> list[str]:
    """Files under ``folder`` that other users may read and that contain ``secret``."""
    return [str(f) for f in folder.rglob("*")
            if f.is_file() and f.stat().st_mode & stat.S_IROTH and secret in f.read_text(errors="replace")]


def test_all_interfaces_only_with_the_stored_key(engine_build: object, tiny_model: Path, tmp_path: Path) -> None:
    plan = make_plan(read_shape(tiny_model), resolve_gpus([]), LaunchSettings(n_ctx=512))
    engines = discover_engines()
    local = prepare(plan, tiny_model, engines, key_dir=tmp_path)
    assert local.api_key is None and not key_path(tmp_path).exists()
    spec = prepare(plan, tiny_model, engines, host="0.0.0.0", key_dir=tmp_path)
    assert spec.api_key and stat.S_IMODE(key_path(tmp_path).stat().st_mode) == 0o600
    assert spec.argv[spec.argv.index("--api-key-file") + 1] == str(key_path(tmp_path)) == str(spec.api_key_file)
    assert "--api-key" not in spec.argv
    assert key_path(tmp_path).read_text().strip() == spec.api_key
    assert spec.api_key not in spec.shell_line
    with spec.server() as server:
        server.start()
        server.wait_ready(timeout=60)  # /health is public: no key needed to see it is ready
        assert server.serving_at == (f"http://0.0.0.0:{spec.port} (every address of this machine; "
                                     f"here: http://127.0.0.1:{spec.port})")  # what serve prints
        assert _post(f"{server.base_url}/completion", None) == 401
        assert _post(f"{server.base_url}/completion", spec.api_key) == 200


def test_the_key_is_in_no_command_line_and_no_file_others_can_read(
        engine_build: object, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(read_shape(tiny_model), resolve_gpus([]), LaunchSettings(n_ctx=512))
    engines = discover_engines()
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))  # this engine's PID file and log only
    spec = prepare(plan, tiny_model, engines, host="0.0.0.0", key_dir=tmp_path / "config")
    assert spec.api_key
    with spec.server() as server:
        server.start()
        server.wait_ready(timeout=60)
        assert _post(f"{server.base_url}/completion", spec.api_key) == 200  # it has the key all the same
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode()  # what `ps` shows everyone
        assert spec.api_key not in cmdline
        record = runtime_dir() / f"engine-{server.pid}.json"
        assert record.is_file() and spec.api_key not in record.read_text()
        assert stat.S_IMODE(record.stat().st_mode) == 0o600 and stat.S_IMODE(runtime_dir().stat().st_mode) == 0o700
        assert stat.S_IMODE(server.log_path.stat().st_mode) == 0o600
        assert _world_readable_holding(tmp_path, spec.api_key) == []
