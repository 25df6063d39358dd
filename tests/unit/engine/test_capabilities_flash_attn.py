"""Review finding (round 3): the argv always passes ``-fa <value>``, so the value must be probed."""

from __future__ import annotations

from app.engine.capabilities import PROBES, Capabilities, ProbeResult, refusal
from app.planner.plan_types import PlanMode
from app.planner.settings import FlashAttn, LaunchSettings

#: An older engine where ``-fa`` took on/off but not yet ``auto`` (llama.cpp added it in 2025).
OLD = Capabilities({"-fa on": ProbeResult("accepted"), "-fa off": ProbeResult("accepted"),
                    "-fa auto": ProbeResult("rejected", "error: invalid argument: auto"),
                    "-ctk f16": ProbeResult("accepted")})


def test_a_plan_with_flash_attention_auto_is_refused_by_an_engine_without_it() -> None:
    assert refusal(OLD, LaunchSettings(flash_attn=FlashAttn.ON), PlanMode.STOCK) is None
    assert refusal(OLD, LaunchSettings(flash_attn=FlashAttn.OFF), PlanMode.STOCK) is None
    why = refusal(OLD, LaunchSettings(flash_attn=FlashAttn.AUTO), PlanMode.STOCK)
    assert why is not None and "-fa auto" in why and "invalid argument: auto" in why


def test_every_flash_attention_value_the_argv_passes_is_probed() -> None:
    assert {PROBES[f"-fa {v}"] for v in ("on", "off", "auto")} == {("-fa", "on"), ("-fa", "off"), ("-fa", "auto")}
