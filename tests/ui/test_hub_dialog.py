"""Picking a model from a Hugging Face repo in the window: list, plan from the header, download.

The real app.hub backend talks to a local fake Hub (tests/fixtures/fake_hub.py, via HF_ENDPOINT) and
downloads into a Hugging Face cache of the test's own (HF_HUB_CACHE).
Where a test needs a slow network, the fake server is slowed or held before it sends a chunk; the
dialog and the backend are the real ones.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType, LlamaFileType
from huggingface_hub import hf_hub_download, try_to_load_from_cache

from app.hub.download import UNVERIFIED, download
from app.hub.preview import preview_origin
from app.hub.remote import RemoteGguf
from app.planner.units import Bytes
from app.ui.hub_button import PREVIEW_LAUNCH
from app.ui.hub_dialog import CANCELLED, FINISHED_FIRST, HubDialog
from app.ui.hub_progress import TOKEN_HINT, duration_text, transfer_text
from app.ui.hub_projector import PROGRESS_PREFIX
from app.ui.main_window import MainWindow
from app.ui.qt import QLabel, QLineEdit, QPalette, Qt, QTableWidgetItem, QTimer
from app.ui.state import UiState
from app.ui.workers import ABANDONED
from tests.fixtures import gguf_factory, shapes, tables
from tests.fixtures.fake_hub import FakeHub, fake_hub, hf_cache  # noqa: F401 (the fixtures)
from tests.fixtures.quant import uniform
from tests.fixtures.spec import ModelSpec
from tests.ui.windows import gpus_read

LEFT = Qt.MouseButton.LeftButton
REPO = "acme/tiny-GGUF"
CHAT = "tiny-Q8_0.gguf"
MiB = 1024 * 1024
WIDE = "wide-F32.gguf"
#: The tiny llama made wider: ~33 MiB of real (seeded random) weights, so a download takes many chunks.
WIDE_SPEC = ModelSpec(
    name="hub-wide-llama", arch="llama", n_vocab=shapes.TINY.n_vocab,
    metadata=(("general.name", "headroom-wide"),
              *((f"llama.{k}", v) for k, v in {
                  "context_length": 4096, "embedding_length": 512, "block_count": 2,
                  "feed_forward_length": 2048, "attention.head_count": 8, "attention.head_count_kv": 4,
                  "rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5,
                  "rope.dimension_count": 64}.items()),
              ("general.file_type", LlamaFileType.ALL_F32)),
    tensors=tables.llama_like(uniform(GGMLQuantizationType.F32), n_layer=2, n_embd=512, n_head=8,
                              n_head_kv=4, n_ff=2048, n_vocab=shapes.TINY.n_vocab),
    loadable=True, seed=99, source="synthetic: the tiny llama at n_embd 512, n_ff 2048",
)
SECRET = "hf_s3cretTokenValue42"


@pytest.fixture(scope="session")
def wide_model() -> Path:
    return gguf_factory.ensure(WIDE_SPEC)


@pytest.fixture
def models_home(hf_cache: Path) -> Path:  # noqa: F811
    """Downloads land in a Hugging Face cache of this test's own (never the user's)."""
    return hf_cache


def in_cache(home: Path, name: str) -> Path:
    """Where ``hf``, llama.cpp's -hf and every huggingface_hub user find REPO's ``name`` in the cache."""
    found = try_to_load_from_cache(REPO, name, cache_dir=home)
    assert isinstance(found, str), found
    return Path(found)


@pytest.fixture
def hub(fake_hub: FakeHub, tiny_chat_model: Path, tiny_model: Path,  # noqa: F811
        wide_model: Path, models_home: Path) -> FakeHub:
    fake_hub.add_repo(REPO, {
        CHAT: tiny_chat_model,
        "tiny-F32.gguf": tiny_model,
        "mmproj-tiny-F16.gguf": tiny_model,
        "split/tiny-Q4_K_M-00001-of-00002.gguf": tiny_model,
        "split/tiny-Q4_K_M-00002-of-00002.gguf": tiny_model,
        WIDE: wide_model,
    })
    return fake_hub


def slow_down(hub: FakeHub, monkeypatch: pytest.MonkeyPatch, *, per_chunk_s: float,
              hold_after: int | None = None) -> threading.Event:
    """A slow link: the fake Hub waits ``per_chunk_s`` before each 1 MiB it sends, and once it has
    sent ``hold_after`` bytes of a file it holds the next chunk until the returned event is set."""
    release = threading.Event()
    count = hub._count  # called just before each chunk is written

    def slow(repo: str, path: str, n: int) -> None:
        if hold_after is not None and hub.served(repo, path) >= hold_after:
            release.wait(30)
        time.sleep(per_chunk_s)
        count(repo, path, n)

    monkeypatch.setattr(hub, "_count", slow)
    return release


def open_dialog(window: MainWindow, qtbot, text: str = REPO) -> HubDialog:
    qtbot.mouseClick(window.hub_button, LEFT)
    dialog = window.hub_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.repo.setText(text)
    return dialog


def list_repo(dialog: HubDialog, qtbot) -> None:
    with qtbot.waitSignal(dialog.listed, timeout=30_000):
        qtbot.mouseClick(dialog.list_button, LEFT)


def cell(dialog: HubDialog, row: int, col: int = 0) -> QTableWidgetItem:
    item = dialog.table.item(row, col)
    assert item is not None
    return item


def names(dialog: HubDialog) -> list[str]:
    return [cell(dialog, r).text() for r in range(dialog.table.rowCount())]


def row_of(dialog: HubDialog, name: str) -> int:
    return names(dialog).index(name)


def chosen(dialog: HubDialog) -> RemoteGguf:
    picked = dialog.selected()
    assert picked is not None
    return picked


def model_progress(dialog: HubDialog) -> list[str]:
    """The progress lines of the model itself, as the dialog shows them: REPO's mmproj file is fetched after
    it (checked by default; tests/ui/test_hub_projector.py tests that), and its lines are left out here."""
    shown: list[str] = []
    dialog.progressed.connect(lambda t: None if t.startswith(PROGRESS_PREFIX) or "projector" in t else shown.append(t))
    return shown


def select(dialog: HubDialog, name: str) -> None:
    dialog.table.selectRow(row_of(dialog, name))
    assert chosen(dialog).name == name


# ---- text ------------------------------------------------------------------------------------------

def test_progress_reads_bytes_speed_and_time_left():
    assert transfer_text(0, 4 * MiB, 0.0) == "0 B of 4 MiB"
    assert transfer_text(2 * MiB, 4 * MiB, 1.0) == "2 MiB of 4 MiB — 2 MiB/s, 1 s left"
    # a resumed download: the 3 MiB already kept do not count towards the speed
    assert transfer_text(4 * MiB, 10 * MiB, 1.0, since=3 * MiB) == "4 MiB of 10 MiB — 1 MiB/s, 6 s left"
    assert duration_text(185) == "3 min 05 s" and duration_text(3720) == "1 h 02 min"


def test_the_repo_field_explains_what_it_accepts(window, qtbot):
    qtbot.mouseClick(window.hub_button, LEFT)
    dialog = window.hub_dialog
    assert dialog is not None and dialog.isVisible()
    assert not dialog.list_button.isEnabled()  # nothing typed yet
    dialog.repo.setText("not a repo")
    assert not dialog.ref_message.isHidden()
    assert "not a Hugging Face repo reference" in dialog.ref_message.text()
    assert "huggingface.co" in dialog.ref_message.text()  # the accepted forms
    assert not dialog.list_button.isEnabled()
    for text in ("acme/tiny-GGUF", "hf:acme/tiny-GGUF:q8_0", "https://huggingface.co/acme/tiny-GGUF",
                 "https://huggingface.co/acme/tiny-GGUF/blob/main/tiny-Q8_0.gguf"):
        dialog.repo.setText(text)
        assert dialog.ref_message.isHidden(), text
        assert dialog.list_button.isEnabled(), text


def test_the_menu_entry_opens_the_same_picker(window):
    hub = next(a for a in window.menuBar().actions()[0].menu().actions() if "Hugging Face" in a.text())
    assert hub.isEnabled() and "later" not in hub.text()
    hub.trigger()
    assert window.hub_dialog is not None and window.hub_dialog.isVisible()
    assert window.hub_button.accessibleName() == "Open from a Hugging Face repo"


# ---- list ------------------------------------------------------------------------------------------

def test_list_shows_the_repos_ggufs_and_greys_the_projector(window, hub, tiny_model, qtbot):
    dialog = open_dialog(window, qtbot)
    list_repo(dialog, qtbot)
    assert sorted(names(dialog)) == sorted(["tiny-Q8_0.gguf", "tiny-F32.gguf", "mmproj-tiny-F16.gguf",
                                    "tiny-Q4_K_M.gguf", WIDE])
    split = row_of(dialog, "tiny-Q4_K_M.gguf")
    cells = [cell(dialog, split, c).text() for c in range(4)]
    assert cells == ["tiny-Q4_K_M.gguf", "Q4_K_M", str(Bytes(2 * tiny_model.stat().st_size)), "2"]
    proj = row_of(dialog, "mmproj-tiny-F16.gguf")
    assert not cell(dialog, proj).flags() & Qt.ItemFlag.ItemIsEnabled  # greyed
    dialog.table.selectRow(proj)
    assert dialog.selected() is None  # not selectable: nothing to plan
    assert not dialog.header_button.isEnabled() and not dialog.download_button.isEnabled()
    assert "projector" in cell(dialog, proj).toolTip()
    assert "5 GGUF models" not in dialog.status.text() and "4 GGUF models" in dialog.status.text()
    assert not dialog.progress.isVisible() and dialog.list_button.isEnabled()


def test_a_ref_naming_a_quant_preselects_it(window, hub, qtbot):
    dialog = open_dialog(window, qtbot, "hf:acme/tiny-GGUF:q4_k_m")
    list_repo(dialog, qtbot)
    assert chosen(dialog).name == "tiny-Q4_K_M.gguf"
    assert dialog.header_button.isEnabled() and dialog.download_button.text() == "&Download"


# ---- plan from the header --------------------------------------------------------------------------

def test_plan_from_header_opens_a_preview_that_plans_and_measures_but_does_not_launch(
        window, hub, tiny_chat_model, engine_build, qtbot):
    dialog = open_dialog(window, qtbot, f"https://huggingface.co/{REPO}/blob/main/{CHAT}")
    list_repo(dialog, qtbot)
    assert chosen(dialog).path == CHAT  # the link named it
    shown = model_progress(dialog)
    with qtbot.waitSignal(window.planned, timeout=30_000) as planned:
        qtbot.mouseClick(dialog.header_button, LEFT)
        assert not dialog.header_button.isEnabled()  # busy until it is back
    assert not dialog.isVisible()  # done: the dialog closed
    size = tiny_chat_model.stat().st_size  # under the first 2 MiB asked for: all of it comes
    assert shown[-1] == f"Fetching the header: {Bytes(size)} fetched"
    path = window.model_path
    assert path is not None and preview_origin(path) is not None and path.stat().st_size == size
    assert planned.args[0].feasible and window.plan is planned.args[0]  # it plans like any file
    assert window.budget.verdict.text().startswith("<b>Fits</b>")
    assert f"{REPO}/{CHAT} — header only" in window.model_label.text()
    assert PREVIEW_LAUNCH in window.model_label.text()
    assert not window.launch.launch_button.isEnabled()
    assert window.launch.launch_button.toolTip() == PREVIEW_LAUNCH
    with qtbot.waitSignal(window.measured, timeout=120_000):  # pass 1 never reads the weights
        qtbot.mouseClick(window.measure.button, LEFT)
    assert "measured by pass 1" in window.measure.status_text()
    assert not window.launch.launch_button.isEnabled()  # re-planned with the measurement: still no


# ---- download --------------------------------------------------------------------------------------

def test_download_shows_progress_then_the_real_file_opens_and_launches(
        window, hub, tiny_chat_model, models_home, monkeypatch, qtbot):
    slow_down(hub, monkeypatch, per_chunk_s=0.3)  # one chunk: the tiny model arrives after 0.3 s
    dialog = open_dialog(window, qtbot, f"hf:{REPO}/{CHAT}")
    list_repo(dialog, qtbot)
    shown = model_progress(dialog)
    with qtbot.waitSignal(window.planned, timeout=30_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
        assert dialog.progress.isVisible() and dialog.cancel_button.isVisible()
    size = Bytes(tiny_chat_model.stat().st_size)
    assert shown[0] == f"0 B of {size}"
    assert re.fullmatch(rf"{size} of {size} — \S+ \S+/s, 0 s left", shown[-1]), shown
    target = in_cache(models_home, CHAT)
    assert window.model_path == target
    assert target.read_bytes() == tiny_chat_model.read_bytes()
    assert not list(models_home.rglob("*.incomplete"))
    assert "header only" not in window.model_label.text()
    assert window.launch.launch_button.isEnabled()
    window.open_hub()  # again: the same file now opens without a download
    select(dialog, CHAT)
    assert dialog.download_button.text() == "&Open downloaded"
    served = hub.served(REPO, CHAT)
    with qtbot.waitSignal(dialog.opened) as opened:
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert opened.args[0] == target and hub.served(REPO, CHAT) == served


def test_cancel_keeps_the_partial_file_and_the_next_download_resumes(
        window, hub, wide_model, models_home, monkeypatch, qtbot):
    # held after 20 MiB: two of huggingface_hub's 10 MiB download chunks have arrived
    release = slow_down(hub, monkeypatch, per_chunk_s=0.03, hold_after=20 * MiB)
    dialog = open_dialog(window, qtbot, f"hf:{REPO}/{WIDE}")
    list_repo(dialog, qtbot)
    ticks: list[int] = []
    heartbeat = QTimer()
    heartbeat.timeout.connect(lambda: ticks.append(1))
    heartbeat.start(20)
    qtbot.mouseClick(dialog.download_button, LEFT)
    # the fake Hub now holds the rest of the file: the GUI thread keeps running meanwhile
    qtbot.waitUntil(lambda: hub.served(REPO, WIDE) >= 20 * MiB, timeout=30_000)
    qtbot.waitUntil(lambda: "/s" in dialog.status.text(), timeout=10_000)
    before = len(ticks)
    qtbot.waitUntil(lambda: len(ticks) >= before + 5, timeout=5_000)
    assert dialog.task is not None and dialog.task.isRunning()
    heartbeat.stop()
    total = wide_model.stat().st_size
    assert re.match(rf"\S+ \S+ of {re.escape(str(Bytes(total)))} — .+/s, .+ left", dialog.status.text())
    assert 0 < dialog.progress.value() < dialog.progress.maximum()
    with qtbot.waitSignal(dialog.stopped, timeout=30_000):
        qtbot.mouseClick(dialog.cancel_button, LEFT)
        release.set()  # the next chunk arrives, the worker sees Cancel and stops
    assert dialog.status.text() == CANCELLED
    assert dialog.error.isHidden()  # a cancel is no error
    [part] = models_home.rglob("*.incomplete")  # the cache's own name for an interrupted download
    kept = part.stat().st_size
    assert 0 < kept < total
    assert window.model_path is None and dialog.download_button.isEnabled()
    shown = model_progress(dialog)
    with qtbot.waitSignal(dialog.opened, timeout=60_000) as opened:
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert opened.args[0].read_bytes() == wide_model.read_bytes()
    asked = [r for m, p, r in hub.requests if m == "GET" and p.endswith(f"/{WIDE}")]
    assert asked[-1] == f"bytes={kept}-", asked  # resumed where the kept bytes end, not restarted
    # the kept bytes are verified first (said so), then the speed counts only what moved after them
    verifying = [t for t in shown if t.startswith("Verifying the kept part: ")]
    assert verifying and verifying[-1] == f"Verifying the kept part: {Bytes(kept)} of {Bytes(kept)}…"
    assert f"{Bytes(kept)} of {Bytes(total)}" in shown
    assert not part.exists() and window.model_path == opened.args[0]
    assert window.launch.launch_button.isEnabled()


def test_a_file_without_sha256_is_said_unverified_in_the_table_the_download_and_the_window(
        window, hub, tiny_chat_model, models_home, qtbot):
    hub.outside_lfs(REPO, CHAT)  # listed without an LFS sha256: only its size can be checked
    dialog = open_dialog(window, qtbot, f"hf:{REPO}/{CHAT}")
    list_repo(dialog, qtbot)
    row = row_of(dialog, CHAT)
    assert cell(dialog, row, 4).text() == "size only" and UNVERIFIED in cell(dialog, row, 4).toolTip()
    assert cell(dialog, row_of(dialog, "tiny-F32.gguf"), 4).text() == "sha256"
    shown = model_progress(dialog)
    with qtbot.waitSignal(window.planned, timeout=30_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert shown and all(t.endswith(f" — {UNVERIFIED}") for t in shown), shown
    assert window.model_path == in_cache(models_home, CHAT)
    assert window.model_path.read_bytes() == tiny_chat_model.read_bytes()
    assert f"Downloaded {UNVERIFIED}" in window.model_label.text()


def test_a_model_already_in_the_hf_cache_opens_without_a_download_even_offline(
        window, hub, tiny_chat_model, models_home, monkeypatch, qtbot):
    theirs = Path(hf_hub_download(REPO, CHAT, cache_dir=models_home, endpoint=hub.url))  # `hf download`, say
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 at start
    asked = len(hub.requests)
    dialog = open_dialog(window, qtbot, REPO)
    list_repo(dialog, qtbot)
    assert names(dialog) == [CHAT]  # what the cache holds of the repo
    assert "offline mode" in dialog.status.text() and str(models_home) in dialog.status.text()
    select(dialog, CHAT)
    assert dialog.download_button.text() == "&Open downloaded"
    with qtbot.waitSignal(dialog.opened) as opened:
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert opened.args[0] == theirs and window.model_path == theirs
    assert "unverified" not in window.model_label.text() and window.launch.launch_button.isEnabled()
    assert len(hub.requests) == asked  # not one request reached the Hub


# ---- errors ----------------------------------------------------------------------------------------

def test_a_missing_repo_is_said_in_the_dialog_which_stays_usable(window, hub, qtbot):
    dialog = open_dialog(window, qtbot, "acme/no-such-repo")
    with qtbot.waitSignal(dialog.failed, timeout=30_000) as failed:
        qtbot.mouseClick(dialog.list_button, LEFT)
    message = failed.args[0]
    assert dialog.error.text() == message and not dialog.error.isHidden()
    assert "acme/no-such-repo not found" in message
    assert "Check the name" in message  # the hint, on its own line
    assert "Traceback" not in message and dialog.table.rowCount() == 0
    assert dialog.list_button.isEnabled() and not dialog.progress.isVisible()
    dialog.repo.setText(REPO)  # usable: the right name lists
    list_repo(dialog, qtbot)
    assert dialog.error.isHidden() and dialog.table.rowCount() == 5


def test_a_missing_revision_is_said_in_the_dialog(window, hub, qtbot):
    dialog = open_dialog(window, qtbot)
    dialog.revision.setText("v9")
    with qtbot.waitSignal(dialog.failed, timeout=30_000) as failed:
        qtbot.mouseClick(dialog.list_button, LEFT)
    assert f"revision 'v9' not found in {REPO}" in failed.args[0]
    dialog.revision.clear()  # empty: main
    list_repo(dialog, qtbot)
    assert dialog.table.rowCount() == 5


def test_an_unreachable_hub_is_said_in_the_dialog(window, models_home, monkeypatch, qtbot):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    dialog = open_dialog(window, qtbot)
    with qtbot.waitSignal(dialog.failed, timeout=60_000) as failed:
        qtbot.mouseClick(dialog.list_button, LEFT)
    assert f"cannot reach http://127.0.0.1:{port}" in failed.args[0]
    assert "HF_ENDPOINT" in dialog.error.text()
    assert dialog.list_button.isEnabled()


def test_cancel_listing_frees_the_dialog_at_once(window, hub, monkeypatch, qtbot):
    gate = threading.Event()
    real = hub.server.RequestHandlerClass._route  # type: ignore[attr-defined]

    def held(self, *, body: bool) -> None:  # the API answers only once the test lets it
        gate.wait(30)
        real(self, body=body)

    monkeypatch.setattr(hub.server.RequestHandlerClass, "_route", held)
    dialog = open_dialog(window, qtbot)
    qtbot.mouseClick(dialog.list_button, LEFT)
    assert dialog.progress.isVisible() and not dialog.list_button.isEnabled()
    qtbot.mouseClick(dialog.cancel_button, LEFT)
    assert dialog.list_button.isEnabled() and not dialog.progress.isVisible()
    assert dialog.status.text() == "Listing cancelled"
    gate.set()
    qtbot.waitUntil(lambda: not dialog.stopping, timeout=30_000)
    assert dialog.table.rowCount() == 0  # the late answer was dropped


# ---- a Hub that never answers, a late Cancel ---------------------------------------------------------

@pytest.mark.timeout(60)
def test_closing_the_window_while_the_hub_never_answers_does_not_hang(window, hub, monkeypatch, qtbot):
    monkeypatch.setattr("app.hub.remote.TIMEOUT", 3.0)
    hub.stall()
    dialog = open_dialog(window, qtbot)
    qtbot.mouseClick(dialog.list_button, LEFT)
    qtbot.waitUntil(lambda: any(p.startswith("/api/") for _, p, _ in hub.requests), timeout=10_000)
    window.close()  # waits a little, then leaves the listing to time out on its own
    assert not window.isVisible() and not dialog.isVisible()
    qtbot.waitUntil(lambda: all(t.isFinished() for t in ABANDONED), timeout=20_000)


def test_a_cancel_that_lands_after_the_download_finished_says_it_is_complete(
        window, hub, tiny_chat_model, models_home, monkeypatch, qtbot):
    finished, go_on = threading.Event(), threading.Event()
    real = download

    def download_then_wait(*args, **kwargs):  # the real download; the user's Cancel arrives just after
        path = real(*args, **kwargs)
        finished.set()
        go_on.wait(30)
        return path

    monkeypatch.setattr("app.ui.hub_dialog.download", download_then_wait)
    dialog = open_dialog(window, qtbot, f"hf:{REPO}/{CHAT}")
    list_repo(dialog, qtbot)
    qtbot.mouseClick(dialog.download_button, LEFT)
    qtbot.waitUntil(finished.is_set, timeout=30_000)
    with qtbot.waitSignal(dialog.stopped, timeout=30_000):
        qtbot.mouseClick(dialog.cancel_button, LEFT)
        go_on.set()
    assert dialog.status.text() == FINISHED_FIRST  # not "the partial file is kept": it is complete
    assert dialog.download_button.text() == "&Open downloaded"
    assert in_cache(models_home, CHAT).read_bytes() == tiny_chat_model.read_bytes()


# ---- the token field -----------------------------------------------------------------------------


def test_the_token_field_says_where_a_token_comes_from_without_showing_it(monkeypatch, qtbot):
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    bare = HubDialog()
    qtbot.addWidget(bare)
    assert bare.token.echoMode() == QLineEdit.EchoMode.Password
    assert bare.token.placeholderText() == "hf_… for gated or private repos"
    monkeypatch.setattr("huggingface_hub.get_token", lambda: SECRET)
    logged_in = HubDialog()
    qtbot.addWidget(logged_in)
    assert "from your hf login" in logged_in.token.placeholderText()
    monkeypatch.setenv("HF_TOKEN", SECRET)
    from_env = HubDialog()
    qtbot.addWidget(from_env)
    assert "from HF_TOKEN" in from_env.token.placeholderText()
    for d in (logged_in, from_env):
        assert SECRET not in d.token.placeholderText() and d.token.text() == ""


def test_a_gated_repo_points_at_the_token_field_and_the_token_is_never_shown(
        hub, tiny_chat_model, models_home, tmp_path, qtbot):
    hub.gate(REPO, accept_token=SECRET)
    state_file = tmp_path / "gui-state.json"
    window = MainWindow(state=UiState(), persist=True, state_file=state_file, read_host=lambda: None)
    gpus_read(qtbot, window)
    qtbot.addWidget(window)
    window.show()
    dialog = open_dialog(window, qtbot, f"hf:{REPO}/{CHAT}")
    with qtbot.waitSignal(dialog.failed, timeout=30_000) as failed:
        qtbot.mouseClick(dialog.list_button, LEFT)
    assert f"{REPO} is a gated repository" in failed.args[0]
    assert TOKEN_HINT in failed.args[0] and "Token field" in dialog.error.text()
    dialog.token.setText(SECRET)
    list_repo(dialog, qtbot)  # with the token: listed
    assert dialog.error.isHidden() and chosen(dialog).path == CHAT
    with qtbot.waitSignal(window.planned, timeout=30_000):  # the download is gated too
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert window.model_path == in_cache(models_home, CHAT)
    window.open_hub()  # the token is still there for this session
    assert dialog.token.text() == SECRET
    select(dialog, "tiny-F32.gguf")
    with qtbot.waitSignal(window.planned, timeout=30_000):  # and so is the header fetch
        qtbot.mouseClick(dialog.header_button, LEFT)
    assert window.model_path is not None and preview_origin(window.model_path) is not None
    texts = [w.text() for w in dialog.findChildren(QLabel)]
    texts += [w.text() for w in dialog.findChildren(QLineEdit) if w is not dialog.token]
    texts += [w.toolTip() for w in dialog.findChildren(QLineEdit)]
    texts += [w.text() for w in window.findChildren(QLabel)]
    texts += [window.statusBar().currentMessage(), window.windowTitle()]
    assert not [t for t in texts if SECRET in t]
    window.close()
    assert state_file.is_file() and SECRET not in state_file.read_text()


def test_hugging_face_entry_is_live_and_reachable_by_keyboard(window, qtbot):
    hub = window.hub_button
    assert hub.isVisible() and hub.isEnabled() and hub.text() == "Hugging Face repo…"
    assert "later" not in hub.toolTip() and "plan one from its header" in hub.toolTip()
    grey = hub.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText)
    assert hub.palette().color(QPalette.ColorGroup.Active, QPalette.ColorRole.ButtonText) != grey
    window.open_button.setFocus()
    qtbot.waitUntil(window.open_button.hasFocus, timeout=2_000)
    qtbot.keyClick(window.open_button, Qt.Key.Key_Tab)
    qtbot.waitUntil(hub.hasFocus, timeout=2_000)  # Tab from "Open model…" lands on it
    qtbot.keyClick(hub, Qt.Key.Key_Space)
    dialog = window.hub_dialog
    assert dialog is not None and dialog.isVisible()  # the repo picker opens
    assert window.model_path is None  # nothing opened, nothing fetched yet
