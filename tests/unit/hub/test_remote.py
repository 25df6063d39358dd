"""Listing a repo's GGUFs (against the fake Hub), quant names, split sets, and picking one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download

from app.hub.errors import HubError
from app.hub.refs import HubRef, parse_ref
from app.hub.remote import (
    RemoteFile,
    RemoteGguf,
    RepoListing,
    group_parts,
    list_ggufs,
    pick,
    projector_for,
    quant_of,
)
from tests.fixtures.fake_hub import FakeHub


@pytest.mark.parametrize(("name", "quant"), [
    ("Qwen2.5-14B-Instruct-1M-Q8_0.gguf", "Q8_0"),
    ("model-q4_k_m-00001-of-00003.gguf", "Q4_K_M"),
    ("mmproj-F16.gguf", "F16"),
    ("Meta-Llama-3.1-8B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"),
    ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
    ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Q4_K_XL"),
    ("gemma-3-12b-it-bf16.gguf", "BF16"),
    ("sub/dir/phi-4.Q5_K_S.gguf", "Q5_K_S"),
    ("tiny-llama.gguf", ""),
    ("Qwen2-7B.gguf", ""),
])
def test_quant_is_read_from_the_file_name(name: str, quant: str) -> None:
    assert quant_of(name) == quant


def _f(path: str, size: int = 100) -> RemoteFile:
    return RemoteFile(path, size, None)


def test_split_parts_group_in_order_and_incomplete_sets_are_dropped() -> None:
    files = [_f("m-Q8_0-00002-of-00002.gguf", 50), _f("README.md"), _f("m-Q8_0-00001-of-00002.gguf", 70),
             _f("x-Q4_0-00001-of-00003.gguf"), _f("small-Q4_0.gguf", 10)]
    got = group_parts("o/n", "c0ffee", files)
    assert [g.path for g in got] == ["small-Q4_0.gguf", "m-Q8_0-00001-of-00002.gguf"]
    split = got[1]
    assert [p.path for p in split.parts] == ["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
    assert split.size == 120 and split.name == "m-Q8_0.gguf" and split.quant == "Q8_0"


LISTING = RepoListing("o/n", "c0ffee", tuple(RemoteGguf("o/n", "c0ffee", (_f(p),)) for p in (
    "mmproj-F16.gguf", "n-Q4_K_M.gguf", "n-Q8_0.gguf", "a/n-Q8_0.gguf")))


def test_pick_by_quant_path_or_the_only_model() -> None:
    assert pick(LISTING, parse_ref("hf:o/n:q4_k_m")).path == "n-Q4_K_M.gguf"
    assert pick(LISTING, parse_ref("hf:o/n/a/n-Q8_0.gguf")).path == "a/n-Q8_0.gguf"
    single = RepoListing("o/n", "c", (LISTING.ggufs[0], LISTING.ggufs[1]))  # a projector does not count
    assert pick(single, HubRef("o/n")).path == "n-Q4_K_M.gguf"
    assert LISTING.ggufs[0].is_projector and not LISTING.ggufs[1].is_projector


def test_pick_says_which_choices_there_are() -> None:
    with pytest.raises(HubError) as ambiguous:
        pick(LISTING, HubRef("o/n"))
    assert "3 GGUF models" in ambiguous.value.message and "hf:o/n:Q4_K_M" in ambiguous.value.hint
    with pytest.raises(HubError) as two:
        pick(LISTING, HubRef("o/n", quant="Q8_0"))
    assert "hf:o/n/a/n-Q8_0.gguf" in two.value.hint and "hf:o/n/n-Q8_0.gguf" in two.value.hint
    with pytest.raises(HubError) as none:
        pick(LISTING, HubRef("o/n", quant="Q2_K"))
    assert "no Q2_K GGUF" in none.value.message
    with pytest.raises(HubError, match=r"no GGUF 'b\.gguf'"):
        pick(LISTING, HubRef("o/n", path="b.gguf"))


def test_list_resolves_the_commit_and_lfs_shas(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    repo = fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model, "mmproj-F16.gguf": tiny_chat_model,
                                                 "README.md": tiny_chat_model})
    listing = list_ggufs("acme/Tiny-GGUF")
    assert listing.commit == repo.commit
    assert [g.path for g in listing.ggufs] == ["mmproj-F16.gguf", "tiny-F32.gguf"]
    assert listing.ggufs[1].parts[0].sha256 == repo.sha256("tiny-F32.gguf")
    assert listing.ggufs[1].size == tiny_chat_model.stat().st_size


def test_list_errors_say_what_happened_and_what_to_do(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    fake_hub.add_repo("acme/Gated-GGUF", {"m-Q8_0.gguf": tiny_chat_model})
    fake_hub.gate("acme/Gated-GGUF", accept_token="hf_ok")
    fake_hub.add_repo("acme/Docs", {"README.md": tiny_chat_model})
    cases = {
        ("acme/Missing", "main", None): ("repository acme/Missing not found", "hf auth login"),
        ("acme/Gated-GGUF", "main", None): ("gated repository", "accept the licence"),
        ("acme/Docs", "v9", None): ("revision 'v9' not found", "branch"),
        ("acme/Docs", "main", None): ("no GGUF file", "-GGUF"),
    }
    for (repo, rev, token), (message, hint) in cases.items():
        with pytest.raises(HubError) as err:
            list_ggufs(repo, rev, token=token)
        assert message in err.value.message and hint in err.value.hint, (repo, err.value)
    assert list_ggufs("acme/Gated-GGUF", token="hf_ok").ggufs[0].path == "m-Q8_0.gguf"  # with the token: listed


def test_network_down_names_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(HubError) as err:
        list_ggufs("acme/Tiny-GGUF")
    assert err.value.message.startswith(f"cannot reach http://127.0.0.1:{port}")
    assert "HF_ENDPOINT" in err.value.hint


def test_a_file_path_that_would_leave_the_download_folder_is_not_listed(fake_hub: FakeHub,
                                                                        tiny_chat_model: Path) -> None:
    """Local copies live under <root>/<repo>/<commit>/<path>: a listing naming ../ is never used as a path."""
    fake_hub.add_repo("acme/Odd-GGUF", {"ok-Q8_0.gguf": tiny_chat_model, "sub/../../../evil-Q4_0.gguf": tiny_chat_model})
    listing = list_ggufs("acme/Odd-GGUF")
    assert [g.path for g in listing.ggufs] == ["ok-Q8_0.gguf"]


@pytest.mark.timeout(30)
def test_a_hub_that_accepts_and_never_answers_times_out_the_listing(fake_hub: FakeHub,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.hub.remote.TIMEOUT", 0.5)
    fake_hub.stall()
    with pytest.raises(HubError) as err:
        list_ggufs("acme/Tiny-GGUF")
    assert err.value.message.startswith(f"timed out talking to {fake_hub.url}")
    assert "HF_ENDPOINT" in err.value.hint


def test_an_endpoint_answering_html_is_named(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model})
    fake_hub.answer_html()
    with pytest.raises(HubError) as err:
        list_ggufs("acme/Tiny-GGUF")
    assert err.value.message == f"the Hub at {fake_hub.url} did not answer with JSON"
    assert "HF_ENDPOINT" in err.value.hint and "Expecting value" not in str(err.value)


def test_pick_by_path_never_returns_a_projector() -> None:
    with pytest.raises(HubError) as err:
        pick(LISTING, parse_ref("hf:o/n/mmproj-F16.gguf"))
    assert "vision projector" in err.value.message and "hf:o/n:Q4_K_M" in err.value.hint


def test_gated_and_private_errors_say_a_token_would_help(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    fake_hub.add_repo("acme/Gated-GGUF", {"m-Q8_0.gguf": tiny_chat_model})
    fake_hub.gate("acme/Gated-GGUF", accept_token="hf_ok")
    for repo, reason in (("acme/Gated-GGUF", "gated"), ("acme/Private-GGUF", "auth")):
        with pytest.raises(HubError) as err:
            list_ggufs(repo)
        assert err.value.reason == reason


def test_a_paginated_tree_is_listed_whole(fake_hub: FakeHub, tiny_chat_model: Path) -> None:
    fake_hub.add_repo("acme/Many-GGUF", {f"m-{q}.gguf": tiny_chat_model for q in ("Q4_0", "Q5_0", "Q8_0")})
    fake_hub.page_size = 1
    listing = list_ggufs("acme/Many-GGUF")
    assert sorted(g.quant for g in listing.ggufs) == ["Q4_0", "Q5_0", "Q8_0"]
    assert len([p for _, p, _ in fake_hub.requests if "/tree/" in p]) == 3  # one request per page


def _closed_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_or_unreachable_the_listing_is_what_the_hf_cache_holds(
        fake_hub: FakeHub, tiny_chat_model: Path, hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = fake_hub.add_repo("acme/Tiny-GGUF", {"tiny-F32.gguf": tiny_chat_model, "tiny-Q8_0.gguf": tiny_chat_model})
    hf_hub_download("acme/Tiny-GGUF", "tiny-F32.gguf", cache_dir=hf_cache, endpoint=fake_hub.url)  # another tool
    port = _closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    down = list_ggufs("acme/Tiny-GGUF")
    assert [g.path for g in down.ggufs] == ["tiny-F32.gguf"] and down.commit == repo.commit
    assert down.ggufs[0].parts[0].sha256 == repo.sha256("tiny-F32.gguf")  # the blob is named by it
    assert down.note.startswith(f"cannot reach http://127.0.0.1:{port}") and str(hf_cache) in down.note
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    offline = list_ggufs("acme/Tiny-GGUF")
    assert offline.ggufs == down.ggufs and offline.note.startswith("offline mode (HF_HUB_OFFLINE)")
    with pytest.raises(HubError) as err:
        list_ggufs("acme/Other-GGUF")
    assert err.value.message.startswith("offline mode is on") and "HF_HUB_OFFLINE" in err.value.hint


def test_the_projector_offered_with_a_model_is_beside_it_named_like_it_then_f16() -> None:
    names = ["gemma-3-12b-it-Q4_K_M.gguf", "qwen2.5-vl-7b-Q8_0.gguf", "mmproj-gemma-3-12b-f32.gguf",
             "mmproj-gemma-3-12b-f16.gguf", "mmproj-gemma-3-12b-bf16.gguf", "mmproj-qwen2.5-vl-f16.gguf",
             "big/model-Q8_0-00001-of-00002.gguf", "big/model-Q8_0-00002-of-00002.gguf", "text-Q4_0.gguf"]
    ggufs = group_parts("o/n", "c0ffee", [RemoteFile(n, 10, None) for n in names])
    listing = RepoListing("o/n", "c0ffee", tuple(ggufs))
    by_name = {g.name: g for g in ggufs}

    def offered(model: str) -> str | None:
        found = projector_for(listing, by_name[model])
        return found.name if found is not None else None

    assert offered("gemma-3-12b-it-Q4_K_M.gguf") == "mmproj-gemma-3-12b-f16.gguf"  # as like: F16 first
    assert offered("qwen2.5-vl-7b-Q8_0.gguf") == "mmproj-qwen2.5-vl-f16.gguf"
    assert offered("text-Q4_0.gguf") == "mmproj-gemma-3-12b-f16.gguf"  # like none: F16, then by name
    assert offered("model-Q8_0.gguf") is None  # in another folder: the window would not find it beside
    assert offered("mmproj-gemma-3-12b-f16.gguf") is None
