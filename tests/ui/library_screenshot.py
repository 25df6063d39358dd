"""The README's picture of the model library: ``python -m tests.ui.library_screenshot OUT.png WORK_DIR``
under a display (the test runs it under Xvfb with xcb).

It fills a Hugging Face cache (HF_HUB_CACHE must point into WORK_DIR before this starts) and a folder of
the user's with generated GGUFs (shape-only copies of real models, a vision projector, a truncated
download), starts the fake Hub (tests/fixtures/fake_hub.py) with a few GGUF repos, opens the real
LibraryDialog, searches the Hub, and saves the dialog as it is drawn. Prints one line: what it shows.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.fixtures import gguf_factory, shapes
from tests.fixtures import llamafile_factory as lf
from tests.fixtures.fake_hub import running_hub
from tests.fixtures.library import PROJECTOR, hf_snapshot

#: The dialog's size in the picture (width, height).
SIZE = (1100, 720)
QUERY = "qwen2.5-7b"


def fill(work: Path, cache: Path) -> Path:
    """The cache's two repos and the user's folder; returns the folder."""
    llama = gguf_factory.ensure(shapes.LLAMA31_8B)
    gemma = gguf_factory.ensure(shapes.GEMMA3_12B)
    qwen = gguf_factory.ensure(shapes.QWEN25_14B_1M)
    moe = gguf_factory.ensure(shapes.QWEN3_30B_A3B)
    projector = gguf_factory.ensure(PROJECTOR)
    hf_snapshot(cache, "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", {"Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf": llama})
    hf_snapshot(cache, "ggml-org/gemma-3-12b-it-GGUF", {"gemma-3-12b-it-Q4_K_M.gguf": gemma,
                                                         "mmproj-model-f16.gguf": projector})
    folder = work / "models"
    (folder / "qwen").mkdir(parents=True, exist_ok=True)
    for name, source in (("qwen/Qwen2.5-14B-Instruct-1M-Q8_0.gguf", qwen), ("Qwen3-30B-A3B-Q4_K_M.gguf", moe)):
        link = folder / name
        if not link.exists():
            link.symlink_to(source)
    (folder / "Mistral-7B-Instruct-v0.3-Q4_K_M.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")  # a cut download
    llamafile = folder / "TinyChat-F32.llamafile"  # a llamafile with its projector, listed by the GGUF inside
    if not llamafile.exists():
        lf.raw_llamafile(llamafile, lf.items(("tiny-chat-F32.gguf", gguf_factory.ensure(shapes.TINY_CHAT)),
                                             ("mmproj-tiny-F16.gguf", projector)))
    return folder


def wait(app: object, done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"library screenshot: no {what} within {timeout:.0f} s")
        app.processEvents()  # type: ignore[attr-defined]
        time.sleep(0.01)


def main(out: Path, work: Path) -> int:
    from huggingface_hub import constants

    from app.ui.library_dialog import LibraryDialog
    from app.ui.qt import QApplication
    from app.ui.state import UiState

    folder = fill(work, Path(constants.HF_HUB_CACHE))
    tiny = gguf_factory.ensure(shapes.TINY)
    app = QApplication.instance() or QApplication([])
    with running_hub() as hub:
        import os

        os.environ["HF_ENDPOINT"] = hub.url
        for repo, downloads in (("bartowski/Qwen2.5-7B-Instruct-GGUF", 182_345),
                                ("Qwen/Qwen2.5-7B-Instruct-GGUF", 95_112),
                                ("lmstudio-community/Qwen2.5-7B-Instruct-1M-GGUF", 12_804)):
            hub.add_repo(repo, {"model-Q4_K_M.gguf": tiny}).downloads = downloads
        dialog = LibraryDialog(UiState(library_folders=[str(folder)]))
        dialog.resize(*SIZE)
        dialog.show()
        wait(app, lambda: dialog.scan is not None and not dialog.working("scan"), "scan")
        dialog.query.setText(QUERY)
        dialog.search()
        wait(app, lambda: not dialog.working("search") and bool(dialog.repos), "search answer")
        dialog.table.selectRow(0)
        for _ in range(20):  # layouts and painting settle
            app.processEvents()
            time.sleep(0.02)
        if not dialog.grab().save(str(out)):
            return 1
        assert dialog.scan is not None
        print(f"library screenshot: {out}: {len(dialog.scan.entries)} files, {len(dialog.scan.models)} models, "
              f"{len(dialog.repos)} Hub repos", flush=True)
        dialog.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
