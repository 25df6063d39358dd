"""Known engine issues before launching shared sessions (docs/domain.md §5)."""

from __future__ import annotations

import pytest

from app.engine.advisories import (
    RACE_FIX,
    SCATTER_FIX,
    Placement,
    Severity,
    advisories_for,
    parse_engine_version,
    place,
)

#: What Headroom's own engine says: `llama-server --version` and /props build_info (recorded here).
HEADROOM_ENGINE_VERSION = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64"


def test_any_other_engine_at_headroom_s_commit_with_a_kpool_model_and_shared_sessions_gets_both_warnings() -> None:
    """A llama-server or llamafile built from the same 0c1e57098 without Headroom's patches."""
    build, commit = parse_engine_version(HEADROOM_ENGINE_VERSION)
    assert (build, commit) == (1, "0c1e570")
    for arch in ("qwen4exp", "glm5-next"):
        adv = advisories_for(arch, commit, build, n_parallel=4, kv_unified=True, window_mode=False)
        keys = {a.key for a in adv}
        assert keys == {"kpool-b11412", "kpool-43fe9c642"}
        text = " ".join(str(a) for a in adv)
        assert "0c1e57098" in text and "predates" in text and "-np 1" in text


def test_the_full_commit_from_the_build_stamp_places_the_engine_too() -> None:
    full = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert place(SCATTER_FIX, full, 0) is Placement.LACKS
    assert place(RACE_FIX, full, 0) is Placement.LACKS


def test_one_session_gets_no_sharing_warning_but_is_told_of_the_decode_time_re_reserve() -> None:
    adv = advisories_for("qwen4exp", "0c1e570", 1, n_parallel=1, kv_unified=False, window_mode=False)
    assert [(a.key, a.severity) for a in adv] == [("kpool-single-rereserve", "info")]
    assert "compute buffer can grow past what pass 1 measured" in adv[0].detail
    # an engine with the fix: nothing at all for one session
    assert advisories_for("qwen4exp", "43fe9c642aa", None, 1, False, False) == []


def test_an_unplaceable_engine_says_so_and_suggests_the_diagnostic_smoke_test() -> None:
    adv = advisories_for("glm5-next", None, 0, n_parallel=2, kv_unified=True, window_mode=False)
    assert [a.key for a in adv] == ["kpool-b11412-unplaced", "kpool-43fe9c642-unplaced"]
    assert all("cannot be placed" in a.detail and "GGML_SCHED_DEBUG_REALLOC=1" in a.action for a in adv)


@pytest.mark.parametrize(("build", "scatter", "race"), [
    (11000, Placement.LACKS, Placement.LACKS),  # before b11412, so before 43fe9c642 too
    (11412, Placement.HAS, Placement.UNKNOWN),  # has the first fix; the second is known only by commit
    (12000, Placement.HAS, Placement.UNKNOWN),
])
def test_a_real_build_number_places_the_engine_where_it_can(build: int, scatter: Placement, race: Placement) -> None:
    assert place(SCATTER_FIX, "deadbeef1", build) is scatter
    assert place(RACE_FIX, "deadbeef1", build) is race


def test_an_engine_at_the_race_fix_has_both_fixes() -> None:
    assert advisories_for("qwen4exp", "43fe9c642aa", None, 4, True, False) == []


def test_single_sequence_reserve_archs_get_a_by_design_note_not_a_bug_warning() -> None:
    for arch in ("kimi-linear", "minimax-01"):
        adv = advisories_for(arch, "0c1e570", 1, n_parallel=4, kv_unified=True, window_mode=False)
        assert [(a.key, a.severity) for a in adv] == [("rereserve-by-design", "info")]
        assert "by design" in adv[0].detail


def test_the_opencoti_window_with_a_unified_pool_is_an_error() -> None:
    adv = advisories_for("llama", None, None, n_parallel=4, kv_unified=True, window_mode=True)
    assert adv[0].key == "window-excludes-kvu" and adv[0].severity == Severity.ERROR
    assert "drop -kvu" in adv[0].action


def test_a_plain_llama_on_the_stock_engine_has_nothing_to_report() -> None:
    assert advisories_for("llama", "0c1e570", 1, n_parallel=4, kv_unified=True, window_mode=False) == []


def test_props_build_info_parses_like_the_version_line() -> None:
    assert parse_engine_version("b1-0c1e570") == (1, "0c1e570")
    assert parse_engine_version("version: 0 (build 0, commit unknown)") == (0, None)
    assert parse_engine_version("llamafile v0.10.5") == (None, None)


#: What the engine Headroom builds carries (its build.json ``fixes``, from the patches' Headroom-Fix lines).
PATCHED = ("b11412", "43fe9c642", "fork-in-a-full-pool", "host-kv-attention")


def test_headroom_patched_engine_says_fixed_in_this_build_instead_of_warning() -> None:
    build, commit = parse_engine_version(HEADROOM_ENGINE_VERSION)
    for arch in ("qwen4exp", "glm5-next"):
        adv = advisories_for(arch, commit, build, n_parallel=4, kv_unified=True, window_mode=False, patched=PATCHED)
        assert [(a.key, a.severity) for a in adv] == [("kpool-fixed-in-build", "info")]
        text = str(adv[0])
        assert f"{arch} with shared sessions: fixed in this build" in text
        assert "0c1e57098" in text and "b11412" in text and "#29958" in text and "43fe9c642" in text
    # one session: nothing to say either, the decode graph no longer re-reserves
    assert advisories_for("glm5-next", commit, build, 1, False, False, patched=PATCHED) == []


def test_an_engine_with_only_the_first_patch_is_still_warned_of_the_race() -> None:
    adv = advisories_for("glm5-next", "0c1e570", 1, 2, True, False, patched=("b11412",))
    assert [a.key for a in adv] == ["kpool-fixed-in-build", "kpool-43fe9c642"]
    assert "fixed in this build" in adv[0].title and "43fe9c642" not in adv[0].detail
    assert "predates the fix" in adv[1].detail


def test_a_patch_fixes_nothing_for_a_model_without_a_k_pool() -> None:
    assert advisories_for("llama", "0c1e570", 1, 4, True, False, patched=PATCHED) == []


def test_a_kv_host_tail_on_an_engine_without_patch_5_is_warned_that_its_attention_copies_the_kv() -> None:
    """The plan says "their attention on the CPU": true on Headroom's engine (patch 5, build.json
    ``host-kv-attention``), and any other engine is told what it does instead."""
    before_patch_5 = PATCHED[:3]
    adv = advisories_for("llama", "0c1e570", 1, 1, False, False, patched=before_patch_5, host_kv=True)
    assert [(a.key, a.severity) for a in adv] == [("host-kv-attention", "warning")]
    assert "on the GPU, copying their whole used KV over the bus for every decoded token" in adv[0].detail
    assert "headroom engine build" in adv[0].action
    fixed = advisories_for("llama", "0c1e570", 1, 1, False, False, patched=PATCHED, host_kv=True)
    assert [(a.key, a.severity) for a in fixed] == [("host-kv-attention-in-build", "info")]
    assert "read it on the CPU for each decoded token" in fixed[0].detail
    # nothing in host RAM: nothing to say
    assert advisories_for("llama", "0c1e570", 1, 1, False, False, patched=PATCHED) == []
