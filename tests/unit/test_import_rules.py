"""The packages' import rules (docs/architecture.md, "Layout"), read from the modules' own import statements.

Every ``import`` and ``from … import`` counts, the ones inside functions too: a rule that holds only
at module level would let a lazy import carry the engine into the planner.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

#: package → the app packages it must not import (docs/architecture.md, "Layout").
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "app.planner": ("app.machine", "app.engine", "app.probe", "app.hub", "app.sessions", "app.ui", "app.commands"),
    "app.machine": ("app.engine", "app.probe", "app.hub", "app.sessions", "app.ui", "app.commands"),
    "app.llamacpp": ("app.planner", "app.machine", "app.engine", "app.probe", "app.hub", "app.sessions", "app.ui",
                     "app.commands"),
    "app.llamafile": ("app.machine", "app.engine", "app.probe", "app.hub", "app.sessions", "app.ui", "app.commands"),
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


#: What reads the machine or runs beside the arithmetic: app/machine's business, never the planner's.
PLANNER_BANNED = ("PySide6", "subprocess", "socket", "http", "urllib", "requests", "huggingface_hub",
                  "multiprocessing", "llama_cpp", "pynvml", "psutil", "threading", "concurrent", "asyncio",
                  "app.paths")
#: Calls that open, read, write or stat a file (a path's method or the builtin).
FILE_CALLS = frozenset({"open", "read_text", "read_bytes", "write_text", "write_bytes", "stat", "lstat",
                        "exists", "is_file", "is_dir", "iterdir", "glob", "rglob", "mkdir", "unlink",
                        "replace", "rename", "touch", "resolve", "getsize", "isfile", "listdir", "scandir"})
#: The one module that opens files: the GGUF reader the planner is given a path for.
GGUF_READER = "app/planner/gguf/reader.py"


def file_calls(path: Path) -> list[tuple[int, str]]:
    """(line, name) for every call in ``path`` of a function or method named in FILE_CALLS (``str.replace``
    has the same name as ``Path.replace``: a string's is written ``.replace(a, b)`` with two arguments and
    is let through; a path's takes one)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if name == "replace" and len(node.args) != 1:
            continue
        if name in FILE_CALLS and (isinstance(node.func, ast.Attribute) or name == "open"):
            found.append((node.lineno, name))
    return sorted(found)


def planner_violations(root: Path = APP) -> list[str]:
    bad = [f"{p.relative_to(root.parent)}:{line} imports {mod}"
           for p in sorted((root / "planner").rglob("*.py")) for line, mod in sorted(imports_of(p, root))
           if any(_under(mod, b) for b in PLANNER_BANNED)]
    bad += [f"{p.relative_to(root.parent)}:{line} calls {name}()"
            for p in sorted((root / "planner").rglob("*.py")) if str(p.relative_to(root.parent)) != GGUF_READER
            for line, name in file_calls(p)]
    return bad


def test_the_planner_only_computes() -> None:
    """``app/planner`` is pure: no PySide6, no HTTP, no child processes, no NVML, psutil or threads, no
    file but the GGUF it is given (docs/architecture.md, "Layout"); app/machine reads the machine."""
    assert planner_violations() == []


#: The functions that read a file (through the GGUF reader): the boundary's, never the solver's.
READERS = ("app.planner.gguf.reader.read_header", "app.planner.gguf.reader.file_stamp",
           "app.planner.gguf.reader.gguf_files_in", "app.planner.gguf.reader.read_archive",
           "app.planner.gguf.reader.read_llamafile", "app.planner.gguf.model.read_shape",
           "app.planner.gguf.beside.read_beside", "app.planner.gguf.beside.read_lora",
           "app.planner.gguf.beside.read_projector", "app.planner.gguf.beside.draft_shape",
           "app.planner.gguf.beside.check_lora", "app.planner.gguf.beside.check_draft",
           "app.planner.gguf.beside.projector_beside")


def test_the_solver_prices_shapes_and_reads_no_file() -> None:
    """``app/planner/solve`` and ``memory`` are handed shapes (the model's, and the files beside it read
    at the plan request's boundary, app/planner/gguf/beside.py): none imports a function that reads."""
    bad = [f"{p.relative_to(APP.parent)}:{line} imports {mod}"
           for sub in ("solve", "memory") for p in sorted((APP / "planner" / sub).rglob("*.py"))
           for line, mod in imports_of(p) if mod in READERS]
    assert bad == []


def test_the_purity_rule_catches_nvml_psutil_threads_and_file_reads(tmp_path: Path) -> None:
    pkg = tmp_path / "app" / "planner"
    pkg.mkdir(parents=True)
    (pkg / "ok.py").write_text("def f(s: str) -> str:\n    return s.replace('a', 'b')\n")
    (pkg / "bad.py").write_text("import threading\nimport pynvml\nfrom psutil import virtual_memory\n"
                                "from pathlib import Path\n\ndef f(p: Path) -> str:\n"
                                "    with open(p) as fh:\n        fh.read()\n    p.stat()\n"
                                "    return p.read_text()\n")
    bad = planner_violations(tmp_path / "app")
    assert bad == ["app/planner/bad.py:1 imports threading", "app/planner/bad.py:2 imports pynvml",
                   "app/planner/bad.py:3 imports psutil", "app/planner/bad.py:3 imports psutil.virtual_memory",
                   "app/planner/bad.py:7 calls open()", "app/planner/bad.py:9 calls stat()",
                   "app/planner/bad.py:10 calls read_text()"]


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


def _runtime_imports(path: Path) -> list[str]:
    """The modules ``path`` imports when it runs (an ``if TYPE_CHECKING:`` block's are for mypy only)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {n.lineno for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node) if hasattr(n, "lineno")}
    return [mod for line, mod in imports_of(path) if line not in typing_only]


def _planner_module(mod: str) -> str | None:
    """``app.planner.memory.kv.kv_layout`` → ``app.planner.memory.kv`` (the module it names)."""
    while mod.startswith("app.planner"):
        rel = mod.replace(".", "/")
        if (APP.parent / f"{rel}.py").is_file() or (APP.parent / rel / "__init__.py").is_file():
            return mod
        mod = mod.rsplit(".", 1)[0]
    return None


def test_the_planners_modules_import_each_other_without_a_circle() -> None:
    """gguf/ → memory/ → solve/ → the request: a newcomer reads them in that order (docs/architecture.md, "Layout")."""
    graph = {_module_name(p): {m for mod in _runtime_imports(p) if (m := _planner_module(mod)) and m != _module_name(p)}
             for p in sorted((APP / "planner").rglob("*.py"))}
    done: set[str] = set()

    def visit(mod: str, path: tuple[str, ...]) -> None:
        assert mod not in path, " -> ".join((*path[path.index(mod):], mod))
        if mod in done:
            return
        for dep in sorted(graph.get(mod, ())):
            visit(dep, (*path, mod))
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, ())
