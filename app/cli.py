"""``headroom``: the GUI by default (``headroom MODEL.gguf`` opens the window on that model); ``plan``,
``measure``, ``serve``, ``doctor``, ``engine``, ``sessions`` for headless use. Each subcommand lives in ``app/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from app import __version__

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = ("plan", "measure", "serve", "chat", "sessions", "rpc_worker", "doctor", "engine", "gui")

#: Each subcommand's word on the command line → its module (``rpc-worker`` → ``rpc_worker``).
_COMMAND_MODULES = {name.replace("_", "-"): name for name in COMMANDS}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``only`` (a module of ``COMMANDS``) that one's alone, which parses
    its own command line exactly as the whole parser does without importing the others (``headroom
    measure`` starts its probe sooner)."""
    parser = argparse.ArgumentParser(
        prog="headroom",
        allow_abbrev=False,  # `measure --gpu H200` must not be taken for --gpu-layers
        description="See how a GGUF model and its context fit your GPUs, then serve it.",
    )
    parser.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"app.commands.{name}")
        module.register(sub)
    return parser


def command_names(parser: argparse.ArgumentParser) -> set[str]:
    """The subcommands ``parser`` knows (``plan``, ``rpc-worker``, …)."""
    return {name for action in parser._subparsers._group_actions  # type: ignore[union-attr]
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    first = args_list[0] if args_list else ""
    parser = build_parser(_COMMAND_MODULES.get(first))
    if first and first not in command_names(parser) and (
            first.lower().endswith(".gguf") or first.startswith("hf:") or os.path.isfile(first)):
        # ``headroom MODEL.gguf`` (a file manager opening a model, a user typing it): the window on it
        args_list = ["gui", *args_list]
    elif first.startswith("-") and first not in ("-h", "--help", "--version"):
        # ``headroom --demo --ctx 4k`` (``./dev app --demo``): the window's options, the GUI being the default
        args_list = ["gui", *args_list]
    args = parser.parse_args(args_list)
    if args.command is None:
        args_list = ["gui", *args_list]
        args = parser.parse_args(args_list)
    from app.commands.common import typed_options

    args.typed = typed_options(parser, args_list)  # (a llamafile's .args fills in the rest)
    if args.command != "gui":  # (the window says it in its status bar)
        from app.paths import storage_problem

        problem = storage_problem()
        if problem:
            print(f"headroom: {problem}", file=sys.stderr)
    try:
        rc: int = args.func(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``headroom doctor --json | head``): not an error worth a traceback.
        # Point stdout at /dev/null so the interpreter's own flush at exit does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command cut off the same way
    return rc
