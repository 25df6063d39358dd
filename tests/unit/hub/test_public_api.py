"""Headroom talks to the Hub only through huggingface_hub's public API: no module of app imports one of
its private modules (``huggingface_hub.utils._http`` and the like) or private names, which can change in
any release."""

from __future__ import annotations

from tests.unit.test_import_rules import APP, imports_of


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def test_no_app_module_imports_a_private_huggingface_hub_module() -> None:
    private = [f"{path.relative_to(APP.parent)}:{line} imports {mod}"
               for path in sorted(APP.rglob("*.py")) for line, mod in imports_of(path)
               if mod.split(".")[0] == "huggingface_hub" and any(map(_private, mod.split(".")[1:]))]
    assert private == []
