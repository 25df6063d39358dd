"""Reading a GGUF: the bounded header reader (its only file access), llama.cpp's loader rules, and
the model shape the planner computes with.

gguf-py's ``gguf.constants`` (llama.cpp's tables: value types, architectures, tensor names, quant
block sizes) is loaded here on its own: the ``gguf`` package's ``__init__`` imports its writer,
reader, metadata and vocabulary code, and yaml (a tenth of a second on a busy machine, which
``headroom measure`` waits for), and the planner reads none of it. The modules below then find
``gguf.constants`` loaded; an ``import gguf`` elsewhere (a test's writer) runs the package as usual,
with this same ``gguf.constants`` as its ``constants``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

_PACKAGE, _CONSTANTS = "gguf", "gguf.constants"


class _ConstantsFirst:
    """A ``sys.meta_path`` finder for the ``gguf`` package alone, once: the spec the other finders give,
    its loader wrapped so that the package has its ``constants`` attribute (the import system sets it
    only when it loads a submodule after its package)."""

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname != _PACKAGE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("Loader", _WithConstants(spec.loader))
        return spec


class _WithConstants:
    """The package's own loader, which first sets the package's ``constants``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.constants = sys.modules[_CONSTANTS]  # type: ignore[attr-defined]
        self._loader.exec_module(module)


def _load_constants() -> None:
    if _CONSTANTS in sys.modules or _PACKAGE in sys.modules:
        return
    package = importlib.util.find_spec(_PACKAGE)  # found, not run
    where = package.submodule_search_locations if package is not None else None
    spec = importlib.machinery.PathFinder.find_spec(_CONSTANTS, where) if where else None
    if spec is None or spec.loader is None:
        return  # the plain import below finds it, or says what is missing
    module = importlib.util.module_from_spec(spec)
    sys.modules[_CONSTANTS] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_CONSTANTS]
        raise
    sys.meta_path.insert(0, _ConstantsFirst())


_load_constants()
