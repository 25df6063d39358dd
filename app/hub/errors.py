"""Hub errors in a user's words, and the one place huggingface_hub / httpx failures become them."""

from __future__ import annotations

import os

from app.planner.errors import PlannerError

#: huggingface_hub's default endpoint (its own constant is frozen at import; HF_ENDPOINT is read per call).
DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str:
    """The Hub to talk to: HF_ENDPOINT now, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class HubError(PlannerError):
    """What went wrong, in a user's words; ``hint`` says what to do about it."""

    def __init__(self, message: str, hint: str = "", *, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        #: "gated" or "auth" when a token would help (the window points at its token field), "unreachable"
        #: when the Hub could not be reached (a listing then falls back to the Hugging Face cache), else "".
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class HubCancelled(HubError):
    """The user cancelled; partial downloads are kept for resuming."""


LOGIN_HINT = "for a private repo, log in with `hf auth login` or set HF_TOKEN"


def translate(exc: BaseException, *, repo: str, revision: str = "main", what: str = "") -> HubError:
    """A huggingface_hub / httpx / OS failure while doing ``what`` on ``repo`` → a HubError. ``reason``:
    "gated" or "auth" when a token would help, "unreachable" when the Hub could not be reached."""
    import httpx2
    from huggingface_hub import errors as hf

    where = endpoint()
    doing = f" ({what})" if what else ""
    cause = exc.__cause__
    if isinstance(exc, FileNotFoundError) and isinstance(cause, hf.HfHubHTTPError | httpx2.HTTPError):
        exc = cause  # HfFileSystem names a repo it cannot open "not found", whatever the Hub said
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, hf.OfflineModeIsEnabled):  # an OSError too: before the disk's branch
        return HubError(f"offline mode is on (HF_HUB_OFFLINE is set): cannot reach {where} for {repo}{doing}",
                        "unset HF_HUB_OFFLINE or set it to 0 to use the Hub; files already downloaded "
                        "are used without it", reason="unreachable")
    if isinstance(exc, hf.GatedRepoError):  # a RepositoryNotFoundError too: first
        return HubError(f"{repo} is a gated repository{doing}",
                        f"accept the licence on the repo page {DEFAULT_ENDPOINT}/{repo}, then log in "
                        "with `hf auth login` or set HF_TOKEN", reason="gated")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return HubError(f"repository {repo} not found on {where} (or it is private)",
                        f"check the name; {LOGIN_HINT}", reason="auth")
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubError(f"revision {revision!r} not found in {repo}", "check the branch, tag or commit")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return HubError(f"file not found in {repo}@{revision}{doing}", "list the repo again: it may have changed")
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status == 401:
            return HubError(f"{where} refused access to {repo}{doing} (HTTP 401)", LOGIN_HINT, reason="auth")
        return HubError(f"the Hub answered HTTP {status} for {repo}{doing}", "try again later")
    if isinstance(exc, httpx2.TimeoutException):
        return HubError(f"timed out talking to {where} for {repo}{doing}",
                        "check the connection or HF_ENDPOINT, then retry", reason="unreachable")
    if isinstance(exc, httpx2.ConnectError):
        return HubError(f"cannot reach {where} for {repo}{doing}: {exc or type(exc).__name__}",
                        "check the connection or HF_ENDPOINT", reason="unreachable")
    if isinstance(exc, httpx2.TransportError):
        return HubError(f"the connection to {where} broke for {repo}{doing}: {exc or type(exc).__name__}",
                        "check the connection, then try again")
    if isinstance(exc, OSError):
        return HubError(f"{what or 'file error'}: {exc.strerror or exc}", "check the disk and its permissions")
    return HubError(f"{type(exc).__name__}: {exc}{doing}")


def is_translatable(exc: BaseException) -> bool:
    """True for the failures :func:`translate` knows (anything else is a bug and propagates)."""
    import httpx2

    return isinstance(exc, OSError | httpx2.HTTPError | httpx2.TransportError | httpx2.TimeoutException)
