"""Text that came from a model file (``general.name``, ``general.architecture``: written by strangers),
made safe to print. Imports nothing, so every package can use it: the planner's errors, an engine's
log lines (app/llamacpp/failures.py, app/probe/measure.py), the CLI."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` safe to print on a terminal or in a log: every character that is not printable
    (ESC and the other C0/C1 controls, DEL, bidirectional overrides and other format characters,
    unpaired surrogates) as its Python escape (``\\x1b``, ``\\u202e``); printable text unchanged.
    A model's ``general.name`` can carry ANSI sequences that would otherwise recolour, retitle or
    clear the user's terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    """``printable`` line by line: the line breaks kept, everything else that could steer a terminal
    (ESC, C1 controls, bidirectional overrides, a carriage return) escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


def quoted(text: object) -> str:
    """``text`` in single quotes, escaped by ``printable``: a key, tensor name or value read from a file,
    named in a sentence (``repr`` would quote it too, but in Python's own way, not the one every other
    message from a file is escaped in)."""
    return f"'{printable(str(text))}'"
