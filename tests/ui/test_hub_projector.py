"""A repo's vision projector offered with the model in the Hugging Face picker: "Also download the vision
projector: FILE (SIZE)", checked; downloaded after the model into the same cache snapshot (or its header
fetched beside the model's header-only copy), so the window offers it in the settings and plans it. A
projector that fails leaves the model open and says why; a repo without one shows no such box.

The real dialog and app.hub backend against the local fake Hub (tests/fixtures/fake_hub.py), with the
generated LLaVA-style projector made for the tiny chat model (shapes.TINY_MMPROJ).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from huggingface_hub import try_to_load_from_cache

from app.hub.preview import preview_origin
from app.planner.units import Bytes
from app.ui.hub_dialog import HubDialog
from app.ui.hub_projector import PROGRESS_PREFIX, cancelled_text
from app.ui.main_window import MainWindow
from app.ui.qt import Qt
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.fake_hub import FakeHub, fake_hub, hf_cache  # noqa: F401 (the fixtures)
from tests.fixtures.library import PROJECTOR

LEFT = Qt.MouseButton.LeftButton
REPO = "acme/tiny-vision-GGUF"
MODEL = "tiny-chat-Q8_0.gguf"
PROJ = "mmproj-tiny-chat-f16.gguf"  # named like the model, and F16: the one offered
MiB = 1024 * 1024


@pytest.fixture
def projector_file() -> Path:
    return gguf_factory.ensure(shapes.TINY_MMPROJ)


@pytest.fixture
def hub(fake_hub: FakeHub, tiny_chat_model: Path, tiny_model: Path, projector_file: Path,  # noqa: F811
        hf_cache: Path) -> FakeHub:  # noqa: F811
    fake_hub.add_repo(REPO, {
        MODEL: tiny_chat_model,
        PROJ: projector_file,
        "mmproj-tiny-chat-f32.gguf": projector_file,  # as like the model, but not F16
        "mmproj-other-F16.gguf": gguf_factory.ensure(PROJECTOR),  # F16, named like nothing here
    })
    fake_hub.add_repo("acme/tiny-text-GGUF", {MODEL: tiny_chat_model, "tiny-F32.gguf": tiny_model})
    return fake_hub


def in_cache(home: Path, name: str, repo: str = REPO) -> Path | None:
    found = try_to_load_from_cache(repo, name, cache_dir=home)
    return Path(found) if isinstance(found, str) else None


def listed(window: MainWindow, qtbot, ref: str) -> HubDialog:
    qtbot.mouseClick(window.hub_button, LEFT)
    dialog = window.hub_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.repo.setText(ref)
    with qtbot.waitSignal(dialog.listed, timeout=30_000):
        qtbot.mouseClick(dialog.list_button, LEFT)
    return dialog


def projector_planned(window: MainWindow) -> bool:
    plan = window.plan
    return plan is not None and plan.projector is not None


def offered(window: MainWindow) -> str:
    """What the settings panel offers ('' when it shows no projector)."""
    box = window.settings.mmproj
    return box.text() if box.isVisibleTo(window.settings) and box.isChecked() else ""


def test_download_fetches_the_projector_too_and_the_window_offers_and_plans_it(
        window, hub, tiny_chat_model, projector_file, hf_cache, qtbot):  # noqa: F811
    dialog = listed(window, qtbot, f"hf:{REPO}/{MODEL}")
    box = dialog.projector
    assert box.isVisibleTo(dialog) and box.isChecked() and box.isEnabled()
    assert box.text() == f"Also download the vision projector: {PROJ} ({Bytes(projector_file.stat().st_size)})"
    shown: list[str] = []
    dialog.progressed.connect(shown.append)
    with qtbot.waitSignal(dialog.opened, timeout=60_000) as opened:
        qtbot.mouseClick(dialog.download_button, LEFT)
    model, proj = in_cache(hf_cache, MODEL), in_cache(hf_cache, PROJ)
    assert model is not None and proj is not None and opened.args[0] == model
    assert proj.parent == model.parent and proj.read_bytes() == projector_file.read_bytes()  # beside it
    assert in_cache(hf_cache, "mmproj-tiny-chat-f32.gguf") is None and in_cache(hf_cache, "mmproj-other-F16.gguf") is None
    size = Bytes(projector_file.stat().st_size)
    assert shown[-1].startswith(f"{PROGRESS_PREFIX}{size} of {size}"), shown  # its own progress, after the model's
    assert not dialog.isVisible()
    assert window.model_path == model
    qtbot.waitUntil(lambda: projector_planned(window), timeout=30_000)
    assert offered(window) == f"Vision projector: {PROJ}"
    assert window.settings.settings().mmproj == str(proj)
    plan = window.plan
    assert plan is not None and plan.projector is not None and plan.projector.device == "host"  # no GPU here
    assert plan.host.extras.projector > 3 * MiB  # its weights (3.1 MiB of f16) and its compute
    assert f"host vision projector {Bytes(plan.host.extras.projector)}" in window.budget.host_row.caption.text()
    assert window.launch.launch_button.isEnabled()


def test_plan_from_header_fetches_the_projectors_header_too(window, hub, projector_file, qtbot):
    dialog = listed(window, qtbot, f"hf:{REPO}/{MODEL}")
    with qtbot.waitSignal(dialog.opened, timeout=60_000) as opened:
        qtbot.mouseClick(dialog.header_button, LEFT)
    copy = opened.args[0]
    assert preview_origin(copy) is not None and window.model_path == copy
    proj = copy.parent / PROJ  # the projector's header-only copy, beside the model's
    assert preview_origin(proj) is not None and proj.stat().st_size == projector_file.stat().st_size
    qtbot.waitUntil(lambda: projector_planned(window), timeout=30_000)
    assert offered(window) == f"Vision projector: {PROJ}" and window.settings.settings().mmproj == str(proj)
    assert not window.launch.launch_button.isEnabled()  # a header-only copy is never launched


def test_a_repo_without_a_projector_shows_no_box_and_downloads_the_model_alone(window, hub, hf_cache, qtbot):  # noqa: F811
    dialog = listed(window, qtbot, f"hf:acme/tiny-text-GGUF/{MODEL}")
    assert not dialog.projector.isVisibleTo(dialog)
    with qtbot.waitSignal(dialog.opened, timeout=60_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert window.model_path == in_cache(hf_cache, MODEL, "acme/tiny-text-GGUF")
    assert not [p for _m, p, _r in hub.requests if "mmproj" in p]
    qtbot.waitUntil(lambda: window.plan is not None, timeout=30_000)
    assert offered(window) == "" and window.plan is not None and window.plan.projector is None


def test_an_unchecked_projector_is_not_downloaded(window, hub, hf_cache, qtbot):  # noqa: F811
    dialog = listed(window, qtbot, f"hf:{REPO}/{MODEL}")
    dialog.projector.click()
    assert not dialog.projector.isChecked()
    with qtbot.waitSignal(dialog.opened, timeout=60_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert in_cache(hf_cache, MODEL) is not None and in_cache(hf_cache, PROJ) is None
    assert not [p for m, p, _r in hub.requests if m == "GET" and "mmproj" in p]


def test_a_failed_projector_download_leaves_the_model_open_and_says_why(
        window, hub, projector_file, hf_cache, qtbot):  # noqa: F811
    hub.cut_at(REPO, PROJ, offset=100_000)  # every try breaks off there: huggingface_hub's 5 retries run out
    dialog = listed(window, qtbot, f"hf:{REPO}/{MODEL}")
    with qtbot.waitSignal(dialog.failed, timeout=120_000) as failed:
        qtbot.mouseClick(dialog.download_button, LEFT)
    model = in_cache(hf_cache, MODEL)
    assert model is not None and window.model_path == model  # the model is whole, and open
    message = failed.args[0]
    assert message.startswith(f"{MODEL} is open without its vision projector {PROJ}: the projector's download failed")
    # what broke, and what is kept (httpx hands over a chunk of 10 MiB or the body's end: none of this one)
    assert "connection" in message and "broke" in message
    assert f"0 B of {Bytes(projector_file.stat().st_size)} kept; download again to resume" in message
    assert dialog.isVisible() and dialog.error.text() == message and dialog.status.text() == ""
    assert in_cache(hf_cache, PROJ) is None
    qtbot.waitUntil(lambda: window.plan is not None, timeout=30_000)
    assert offered(window) == "" and window.plan is not None and window.plan.projector is None
    # the link mended: the same button (the model is here now) fetches the projector, then opens the model
    hub.cut_at(REPO, PROJ, offset=None)
    assert dialog.download_button.text() == "&Open downloaded" and dialog.projector.isChecked()
    with qtbot.waitSignal(dialog.opened, timeout=60_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
    proj = in_cache(hf_cache, PROJ)
    assert proj is not None and proj.read_bytes() == projector_file.read_bytes()
    qtbot.waitUntil(lambda: projector_planned(window), timeout=30_000)
    assert offered(window) == f"Vision projector: {PROJ}"


def test_cancel_during_the_projectors_download_keeps_the_model(window, hub, hf_cache, monkeypatch, qtbot):  # noqa: F811
    release = threading.Event()
    count = hub._count  # called just before each chunk is written

    def held(repo: str, path: str, n: int) -> None:  # the projector's second MiB waits for the test
        if path == PROJ and hub.served(repo, path) >= MiB:
            release.wait(30)
        count(repo, path, n)

    monkeypatch.setattr(hub, "_count", held)
    dialog = listed(window, qtbot, f"hf:{REPO}/{MODEL}")
    qtbot.mouseClick(dialog.download_button, LEFT)
    qtbot.waitUntil(lambda: hub.served(REPO, PROJ) >= MiB, timeout=30_000)
    qtbot.waitUntil(lambda: dialog.status.text().startswith(PROGRESS_PREFIX), timeout=10_000)
    assert dialog.cancel_button.isVisible() and not dialog.projector.isEnabled()
    with qtbot.waitSignal(dialog.stopped, timeout=30_000):
        qtbot.mouseClick(dialog.cancel_button, LEFT)
        release.set()
    assert dialog.projector.projector is not None
    assert dialog.status.text() == cancelled_text(dialog.projector.projector) and dialog.error.isHidden()
    assert window.model_path is None and in_cache(hf_cache, MODEL) is not None  # kept, not opened
    assert dialog.download_button.text() == "&Open downloaded"
    with qtbot.waitSignal(dialog.opened, timeout=60_000):
        qtbot.mouseClick(dialog.download_button, LEFT)
    assert in_cache(hf_cache, PROJ) is not None and window.model_path == in_cache(hf_cache, MODEL)
