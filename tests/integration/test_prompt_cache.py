"""llama-server's prompt cache (``--cache-ram``) takes host RAM over hours: planned, passed, checked.

The plan holds the limit back from host RAM, the engine gets it explicitly (so its default never
decides), and plan vs actual reads the limit the engine logged."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from tests.fixtures.server_proc import headroom_serving

pytestmark = pytest.mark.engine


# auto: one full context's KV, at least 64 MiB (the tiny model's 4k context holds far less)
@pytest.mark.parametrize(("flag", "shown"), [((), "64 MiB"), (("--cache-ram", "512"), "512 MiB"),
                                             (("-cram", "0"), "0 MiB")])
def test_the_prompt_cache_limit_is_planned_passed_and_checked(engine_build: EngineBuild, tiny_model: Path,
                                                              flag: tuple[str, ...], shown: str) -> None:
    with headroom_serving([str(tiny_model), "-c", "4096", *flag]) as (_, lines):
        pass
    out = "".join(lines)
    command = next(ln for ln in lines if ln.startswith("command: "))
    value = flag[1] if flag else "64"
    assert f" --cache-ram {value} " in command, command
    row = next(ln for ln in lines if ln.split()[:3] == ["host", "prompt", "cache"])
    assert row.split()[-1] == "ok" and row.count(shown) == 2, row
    assert "every buffer within 1 MiB" in out, out
