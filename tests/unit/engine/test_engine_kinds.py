"""Engine kinds, where an engine was found and how much an advisory matters are typed, and still
print (and serialize) as today's words."""

from __future__ import annotations

import json
from dataclasses import asdict

from app.engine.advisories import Severity, advisories_for
from app.engine.discover import KINDS, EngineInfo, EngineKind, EngineOrigin, candidates, parse_version


def test_the_kinds_and_origins_are_the_words_shown_for_an_engine() -> None:
    assert KINDS == ("llama-server", "llamafile", "opencoti")
    assert [o.value for o in EngineOrigin] == ["settings", "PATH", "~/.llamafile", "data dir", "headroom build", "bundle"]
    info = EngineInfo(EngineKind.OPENCOTI, "/x/opencoti.llamafile", "0.10.5", "abc", EngineOrigin.LLAMAFILE_DIR)
    assert f"{info.kind} {info.version} ({info.commit}) — {info.source}" == \
        "opencoti 0.10.5 (abc) — ~/.llamafile"
    data = info.to_json()
    assert (data["kind"], data["source"]) == ("opencoti", "~/.llamafile")
    assert type(data["kind"]) is str and type(data["source"]) is str
    assert info.is_llamafile and info.server_prefix == ["/x/opencoti.llamafile", "--server"]


def test_version_output_names_a_kind() -> None:
    parsed = parse_version("version: 0.5.0-dev (build 1, commit 0c1e570)", "llama-server")
    assert parsed.kind is EngineKind.LLAMA_SERVER and parsed.version == "0.5.0-dev" and parsed.commit == "0c1e570"
    assert parse_version("llamafile v0.10.5", "x").kind is EngineKind.LLAMAFILE


def test_the_engine_the_user_chose_comes_first_as_settings(tmp_path) -> None:
    chosen = tmp_path / "my-server"
    first = candidates(chosen)[0]
    assert first.path == chosen and first.origin is EngineOrigin.SETTINGS


def test_an_advisorys_severity_prints_and_serializes_as_its_word() -> None:
    (adv, *_) = advisories_for("qwen2", None, None, n_parallel=2, kv_unified=True, window_mode=True)
    assert adv.severity is Severity.ERROR and str(adv).startswith("[error] the rolling-KV window excludes")
    assert json.loads(json.dumps(asdict(adv)))["severity"] == "error"
    assert [s.value for s in Severity] == ["error", "warning", "info"]
