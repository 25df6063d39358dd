"""Small things with one home each (issue 47): a file takes its final place through one ``os.replace``
(app/files.py ``publish``), and llama.cpp's log words are matched only under app/llamacpp."""

from __future__ import annotations

import ast
import re
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def _calls(tree: ast.AST, module: str, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name and isinstance(n.func.value, ast.Name) and n.func.value.id == module]


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are not docstrings."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_os_replace_is_called_in_one_module() -> None:
    found = {str(p.relative_to(APP.parent)): lines for p in sorted(APP.rglob("*.py"))
             if (lines := _calls(ast.parse(p.read_text()), "os", "replace"))}
    assert list(found) == ["app/files.py"], found


def test_llama_cpps_abort_words_are_matched_only_under_app_llamacpp() -> None:
    found = [f"{p.relative_to(APP.parent)}:{line}" for p in sorted(APP.rglob("*.py"))
             if "llamacpp" not in p.parts
             for line, text in _strings(ast.parse(p.read_text())) if "GGML_ASSERT" in text or "GGML_ABORT" in text]
    assert found == [], found


def test_the_code_says_what_it_does_not_what_happened() -> None:
    """Docstrings and comments are in the present tense: history (which issue, what an older version did on
    which day) lives in git and CHANGELOG.md."""
    history = re.compile(r"\(issue \d+|issue \d+\)|\bbefore 20\d\d-\d\d-\d\d")
    found = [f"{p.relative_to(APP.parent)}:{i}: {line.strip()}" for p in sorted(APP.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if history.search(line)]
    assert found == [], found
