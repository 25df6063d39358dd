"""The bundle's entry point (packaging/headroom.spec): ``headroom`` as one executable, no Python.

A bundle has no ``python`` to start Headroom's own child processes with, so ``sys.executable`` is the
bundle's ``headroom`` and ``main`` accepts the two ``-m`` forms Headroom runs it with:
``-m app.probe.worker`` (pass 1's child, app/probe/measure.py) and ``-m app …`` (the window's
Build engine…, app/ui/engine_builder.py, runs ``-m app engine build``). Any other ``-m`` is refused.

PyInstaller's bootloader puts the bundle's library folder first in ``LD_LIBRARY_PATH`` (keeping the
user's value in ``LD_LIBRARY_PATH_ORIG``). ``main`` restores the user's value before anything runs,
so the engine, CMake and the compilers Headroom starts load the system's libraries, not the bundle's
copies. The bundle itself keeps its own: the dynamic loader read the path once, at start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

#: The modules ``headroom -m MODULE`` runs inside a bundle.
MODULES = ("app.probe.worker", "app")


def restore_library_path(env: MutableMapping[str, str], bundle_libs: str | None) -> None:
    """``LD_LIBRARY_PATH`` as the user had it: ``LD_LIBRARY_PATH_ORIG`` when the bootloader saved
    one, else the value without ``bundle_libs`` (the bundle's folder; unset when nothing is left)."""
    saved = env.pop("LD_LIBRARY_PATH_ORIG", None)
    if saved is not None:
        env["LD_LIBRARY_PATH"] = saved
        return
    kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != bundle_libs]
    if kept:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    else:
        env.pop("LD_LIBRARY_PATH", None)


def run_module(args: list[str]) -> int:
    """``-m MODULE ARGS…``: one of MODULES, with ``sys.argv`` as ``python -m`` would set it."""
    if not args or args[0] not in MODULES:
        print(f"headroom: -m runs only Headroom's own child processes ({', '.join(MODULES)}), not "
              f"{args[0] if args else 'nothing'}", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    sys.argv = [sys.executable, *rest]
    if name == "app.probe.worker":
        from app.probe import worker

        return worker.main()
    from app.cli import main as cli_main

    return cli_main(rest)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if getattr(sys, "frozen", False):
        restore_library_path(os.environ, getattr(sys, "_MEIPASS", None))
    if args[:1] == ["-m"]:
        return run_module(args[1:])
    from app.cli import main as cli_main

    return cli_main(args)
