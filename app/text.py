"""Text that came from a model file (``general.name``, ``general.architecture``: written by strangers),
an engine's log, a server or a file name, made safe to print or show. The one escaping rule for all of
it, used by the CLI and the window alike: ``printable`` (one line), ``printable_lines`` (line breaks
kept), ``printable_text`` (a model's reply: line breaks and tabs kept), ``escape`` (the window's HTML
labels). Imports nothing of Headroom's, so every package can use it."""

from __future__ import annotations

import html


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


def printable_text(text: str) -> str:
    """Text a model generated (or a user typed), safe to print or show: its control characters escaped
    as ``printable`` escapes them (ESC → ``\\x1b``, so a reply cannot recolour or clear a terminal),
    its line breaks and tabs kept. A model with random weights writes any byte."""
    if text.isprintable():
        return text
    return "\n".join("\t".join(printable(cell) for cell in line.split("\t")) for line in text.split("\n"))


def escape(text: str) -> str:
    """``text`` for a Qt rich-text label: ``printable_lines``, then HTML-escaped (quotes included), so
    neither markup nor a control character or a bidirectional override from a file, a log or a server
    reaches the screen as such."""
    return html.escape(printable_lines(text))


def quoted(text: object) -> str:
    """``text`` in single quotes, escaped by ``printable``: a key, tensor name or value read from a file,
    named in a sentence (``repr`` would quote it too, but in Python's own way, not the one every other
    message from a file is escaped in)."""
    return f"'{printable(str(text))}'"
