"""Text that came from a model file (``general.name``, ``general.architecture``: written by strangers),
made safe to print. Imports nothing, so the errors the planner raises can use it (app/planner/errors.py)."""

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
