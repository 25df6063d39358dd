"""Session files: one per engine URL, written whole, names usable as slot-file names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.sessions.store import Session, SessionStore, check_name


def test_sessions_survive_a_restart_of_headroom(tmp_path: Path) -> None:
    store = SessionStore("http://127.0.0.1:8080/", root=tmp_path)
    store.put(Session("a", 2, "doc + reply", 1, True, "fork of 2 (a, b)"),
              Session("b", 0, "doc + cut", 1, False, "fork of 2 (a, b)"))
    again = SessionStore("http://127.0.0.1:8080", root=tmp_path)
    assert again.get("a") == Session("a", 2, "doc + reply", 1, True, "fork of 2 (a, b)")
    b = again.get("b")
    assert b is not None and not b.complete and b.text == "doc + cut"


def test_each_engine_url_has_its_own_sessions(tmp_path: Path) -> None:
    SessionStore("http://127.0.0.1:8080", root=tmp_path).put(Session("a", 0, "x"))
    assert SessionStore("http://127.0.0.1:8081", root=tmp_path).get("a") is None


def test_save_replaces_the_file_atomically_and_leaves_no_temporaries(tmp_path: Path) -> None:
    store = SessionStore("http://h:1", root=tmp_path)
    store.put(Session("a", 0, "one"))
    store.put(Session("a", 0, "one two"))
    files = sorted(store.path.parent.iterdir())
    assert files == [store.path, store.path.with_suffix(".lock")]  # the file and its lock, nothing else
    assert json.loads(store.path.read_text())["sessions"][0]["text"] == "one two"


def test_two_stores_of_one_url_keep_what_the_other_wrote(tmp_path: Path) -> None:
    """The window opens its store when its engine is up; the CLI then makes sessions on that engine.
    The window's next write must not put its stale copy back over them."""
    window = SessionStore("http://127.0.0.1:8080", root=tmp_path)
    cli = SessionStore("http://127.0.0.1:8080", root=tmp_path)
    cli.put(Session("cli1", 0, "made in a terminal"), Session("cli2", 1, "also"))
    window.put(Session("w", 2, "made in the window"))
    assert set(window.sessions) == {"cli1", "cli2", "w"}  # and the window now shows them
    assert set(SessionStore("http://127.0.0.1:8080", root=tmp_path).sessions) == {"cli1", "cli2", "w"}
    cli.remove("cli2")
    window.put(Session("w", 2, "made in the window, continued"))
    stored = SessionStore("http://127.0.0.1:8080", root=tmp_path).sessions
    assert set(stored) == {"cli1", "w"} and stored["w"].text.endswith("continued")  # no removed one comes back
    cli.reload()
    assert cli.get("w") == stored["w"]


def test_a_corrupt_file_is_reported_with_its_path(tmp_path: Path) -> None:
    store = SessionStore("http://h:1", root=tmp_path)
    store.put(Session("a", 0, "x"))
    store.path.write_text("{not json")
    with pytest.raises(ValueError, match=str(store.path.name)):
        SessionStore("http://h:1", root=tmp_path)


@pytest.mark.parametrize("bad", ["", "../etc", "a/b", "x" * 65, "-lead"])
def test_names_that_cannot_be_slot_files_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="bad session name"):
        check_name(bad)
