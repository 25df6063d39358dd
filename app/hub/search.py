"""Search the Hugging Face Hub for GGUF repos by name, for the library's search box.

The request is the one huggingface_hub's ``HfApi.list_models(search=…, filter="gguf", sort="downloads",
limit=…)`` makes (``GET /api/models``, the first page: it holds ``limit`` repos), sent once through the
same library's session with a timeout: ``list_models`` takes none (its client waits forever on a Hub that
accepts and never answers) and retries a refused connection for 23 s. Offline (HF_HUB_OFFLINE=1)
nothing is sent: a HubError says so (``reason`` "unreachable").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.hub.errors import HubError, endpoint, is_translatable, translate

#: The most repos one search lists (the Hub sorts them by downloads).
SEARCH_LIMIT = 50
#: Seconds the search request may go unanswered.
SEARCH_TIMEOUT = 10.0
OFFLINE = ("offline mode is on (HF_HUB_OFFLINE is set): the Hub cannot be searched",
           "unset HF_HUB_OFFLINE or set it to 0 to search; the models already here are listed without it")


@dataclass(frozen=True)
class HubRepo:
    repo: str  # owner/name
    downloads: int = 0
    likes: int = 0
    updated: str = ""  # the Hub's lastModified, as YYYY-MM-DD
    gated: bool = False


def search_repos(query: str, *, token: str | None = None, limit: int = SEARCH_LIMIT) -> list[HubRepo]:
    """GGUF repos whose name contains ``query``, most downloaded first. HubError when offline, when the
    Hub cannot be reached or answers something else than its JSON."""
    from huggingface_hub import get_session, hf_raise_for_status, is_offline_mode
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # public: lazily exported

    text = query.strip()
    if not text:
        raise HubError("type a name to search for (for example: qwen2.5 7b)")
    if is_offline_mode():
        raise HubError(*OFFLINE, reason="unreachable")
    params: dict[str, Any] = {"search": text, "filter": ["gguf"], "sort": "downloads", "limit": limit}
    try:
        answer = get_session().get(f"{endpoint()}/api/models", params=params,
                                   headers=build_hf_headers(token=token), timeout=SEARCH_TIMEOUT)
        hf_raise_for_status(answer)
        items = answer.json()
        if not isinstance(items, list):
            raise ValueError("not a list")
    except ValueError as exc:  # an answer that is not JSON (a captive portal's page)
        raise HubError(f"the Hub at {endpoint()} did not answer with JSON",
                       "check HF_ENDPOINT: it should be the Hugging Face Hub or a mirror of it") from exc
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise translate(exc, repo=f"a search for {text!r}") from None
    return [_repo(item) for item in items[:limit] if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _repo(item: dict[str, Any]) -> HubRepo:
    def count(key: str) -> int:
        value = item.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    modified = item.get("lastModified")
    return HubRepo(str(item["id"]), count("downloads"), count("likes"),
                   modified[:10] if isinstance(modified, str) else "", bool(item.get("gated")))
