"""The packages' import rules (README, "Layout"), read from the modules' own import statements.

Every ``import`` and ``from … import`` counts, the ones inside functions too: a rule that holds only
at module level would let a lazy import carry the engine into the planner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

#: package → the app packages it must not import (README, "Layout").
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "app.planner": ("app.engine", "app.probe", "app.hub", "app.sessions", "app.ui", "app.commands"),
    "app.engine": ("app.ui", "app.hub", "app.sessions", "app.probe", "app.commands"),
    "app.probe": ("app.ui", "app.hub", "app.sessions", "app.commands"),
    "app.hub": ("app.ui", "app.engine", "app.probe", "app.sessions", "app.commands"),
    "app.sessions": ("app.ui", "app.hub", "app.probe", "app.commands"),
    "app.ui": ("app.commands",),
}


def _module_name(path: Path, root: Path = APP) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = APP) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(package: str) -> list[str]:
    root = APP / package.removeprefix("app.").replace(".", "/")
    bad = []
    for path in sorted(root.rglob("*.py")):
        for line, mod in imports_of(path):
            hit = next((f for f in FORBIDDEN[package] if _under(mod, f)), None)
            if hit:
                bad.append(f"{path.relative_to(APP.parent)}:{line} imports {mod} ({package} may not import {hit})")
    return sorted(set(bad))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_follow_the_layout_rules(package: str) -> None:
    assert violations(package) == []


def test_the_planner_has_no_qt_no_network_no_processes() -> None:
    """``app/planner`` is pure: no PySide6, no HTTP, no child processes (README, "Layout")."""
    banned = ("PySide6", "subprocess", "socket", "http", "urllib", "requests", "huggingface_hub",
              "multiprocessing", "llama_cpp")
    bad = [f"{p.relative_to(APP.parent)}:{line} imports {mod}"
           for p in sorted((APP / "planner").rglob("*.py")) for line, mod in imports_of(p)
           if any(_under(mod, b) for b in banned)]
    assert bad == []


def test_the_rule_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function and a relative import are both found."""
    pkg = tmp_path / "app" / "planner"
    pkg.mkdir(parents=True)
    src = pkg / "m.py"
    src.write_text("import os\n\ndef f():\n    from app.engine import launch\n    from ..ui import qt\n")
    found = imports_of(src, root=tmp_path / "app")
    assert (4, "app.engine.launch") in found
    assert (5, "app.ui.qt") in found
    assert (1, "os") in found
