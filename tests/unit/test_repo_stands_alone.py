"""A clone on its own has every fact the code cites and every file the tests read.

The domain facts, the house style and the upstream seeds are in docs/ (docs/domain.md §N,
docs/style.md, docs/seeds/); the recorded H200 output is in tests/fixtures/h200/. Nothing tracked may
point outside the repo again: not at a ``shared`` folder beside the checkout, nor at the old upper-case
file names of the two documents.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What a citation of the old outside folder looks like (written so this file does not match itself).
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(fixtures|seeds|DOMAIN|STYLE)\b|\b(DOMAIN|STYLE)\.md\b")

#: Folders a working tree has that are not the repo's (the walk used when git is not there).
_NOT_TRACKED = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
                ".device", ".device-cache", "artifacts"}


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The repo's files: ``git ls-files``, or every file outside the build and cache folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in root.rglob("*")
                      if p.is_file() and not _NOT_TRACKED & set(p.relative_to(root).parts))
    return [root / name for name in out.decode().split("\0") if name]


def outside_citations(files: list[Path], root: Path = ROOT) -> list[str]:
    bad = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # a binary file (the screenshot), or one deleted but not yet staged
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return bad


def test_no_tracked_file_cites_anything_outside_the_repo() -> None:
    files = tracked_files()
    assert ROOT / "README.md" in files
    assert outside_citations(files) == []


def test_what_the_citations_name_is_in_the_repo() -> None:
    docs = ROOT / "docs"
    domain = (docs / "domain.md").read_text()
    for section in range(1, 7):  # the numbers the code cites as docs/domain.md §N
        assert re.search(rf"^## {section}\. ", domain, re.MULTILINE), section
    assert (docs / "style.md").read_text().startswith("# House style")
    seeds = sorted(p.name for p in (docs / "seeds").glob("*.txt"))
    assert seeds == ["000-b11412-kpool-graph-shape.txt", "001-43fe9c642-kpool-scatter-race.txt",
                     "004-opencoti-two-pass-reserve.txt"]
    assert all(name in (docs / "seeds" / "README.md").read_text() for name in seeds)
    h200 = ROOT / "tests" / "fixtures" / "h200"
    assert (h200 / "llama-server-qwen2-14b-1m-c524288-fa-ub512-f16.log").is_file()
    assert (h200 / "nvml-readings.txt").is_file()


def test_the_check_sees_each_old_form(tmp_path: Path) -> None:
    """The pattern itself: each way the old citations were written is caught; the new ones are not."""
    old = ["see ../sha" + "red/fixtures/", "(DOMAIN" + ".md §2)", "(STYLE" + ".md: prepare)",
           "shared/" + "fixtures/h200/nvml-readings.txt", "`shared/DOM" + "AIN.md` §4", "../sha" + "red/seeds/"]
    new = ["(docs/domain.md §2)", "docs/style.md", "tests/fixtures/h200/nvml-readings.txt", "docs/seeds/",
           "a shared-sequence session", "the shared/ folder the device tool copies"]
    path = tmp_path / "a.md"
    path.write_text("\n".join(old + new) + "\n")
    assert [b.split(": ", 1)[1] for b in outside_citations([path], tmp_path)] == old
