"""Searching the Hub for GGUF repos by name (against the fake Hub)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.hub.errors import HubError
from app.hub.search import HubRepo, search_repos
from tests.fixtures.fake_hub import FakeHub


def test_a_search_lists_matching_repos_most_downloaded_first(fake_hub: FakeHub, tiny_model: Path) -> None:
    for name, downloads in (("acme/Tiny-GGUF", 10), ("bob/tiny-chat-GGUF", 500), ("carol/Other-GGUF", 900)):
        fake_hub.add_repo(name, {"m-Q8_0.gguf": tiny_model}).downloads = downloads
    found = search_repos("TINY")
    assert found == [HubRepo("bob/tiny-chat-GGUF", 500, 0, "2026-11-30"), HubRepo("acme/Tiny-GGUF", 10, 0, "2026-11-30")]
    assert search_repos("tiny", limit=1) == found[:1]
    assert search_repos("nothing-like-it") == []
    (_, path, _), *_ = fake_hub.requests
    assert path == "/api/models"


def test_offline_nothing_is_asked(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(HubError) as err:
        search_repos("tiny")
    assert err.value.reason == "unreachable" and "HF_HUB_OFFLINE" in err.value.message
    assert "listed without it" in err.value.hint and fake_hub.requests == []


def test_a_hub_nobody_answers_on_is_unreachable_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(HubError) as err:
        search_repos("tiny")
    assert err.value.reason == "unreachable" and err.value.message.startswith(f"cannot reach http://127.0.0.1:{port}")


@pytest.mark.timeout(30)
def test_a_hub_that_never_answers_times_out(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.hub.search.SEARCH_TIMEOUT", 0.5)
    fake_hub.stall()
    with pytest.raises(HubError) as err:
        search_repos("tiny")
    assert err.value.reason == "unreachable" and err.value.message.startswith(f"timed out talking to {fake_hub.url}")


def test_an_answer_that_is_not_the_hubs_json_is_named(fake_hub: FakeHub) -> None:
    fake_hub.answer_html()
    with pytest.raises(HubError) as err:
        search_repos("tiny")
    assert err.value.message == f"the Hub at {fake_hub.url} did not answer with JSON"


def test_an_empty_search_asks_for_a_name(fake_hub: FakeHub) -> None:
    with pytest.raises(HubError, match="type a name"):
        search_repos("  ")
    assert fake_hub.requests == []
