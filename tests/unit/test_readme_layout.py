"""docs/architecture.md's "Layout" table says what each app package may not import;
tests/unit/test_import_rules.py enforces it. The two must say the same."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_import_rules import APP, FORBIDDEN

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: | `app/planner/` | what it holds | `app.engine`, `app.probe`, … |
ROW = re.compile(r"^\| `app/(\w+)/` \|.*\| (.+) \|$", re.MULTILINE)


def layout_rules(text: str) -> dict[str, set[str]]:
    layout = text[text.index("## Layout\n"):]
    end = layout.find("\n## ")
    layout = layout if end < 0 else layout[:end]
    return {f"app.{pkg}": set(re.findall(r"`(app\.\w+)`", cell)) for pkg, cell in ROW.findall(layout)}


def test_the_layout_table_and_the_import_rules_agree() -> None:
    rules = layout_rules(ARCHITECTURE.read_text())
    assert {pkg: banned for pkg, banned in rules.items() if banned} == {
        pkg: set(banned) for pkg, banned in FORBIDDEN.items()}


def test_every_app_package_has_a_row() -> None:
    packages = {f"app.{d.name}" for d in APP.iterdir() if (d / "__init__.py").is_file()}
    assert set(layout_rules(ARCHITECTURE.read_text())) == packages
