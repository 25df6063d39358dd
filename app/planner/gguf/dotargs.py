"""llamafile's ``.args``: the arguments a llamafile starts with, parsed as the engine parses them.

llamafile 0.9.x and 0.10.x read the ``/zip/.args`` member with cosmopolitan's ``cosmo_args()``
(libc/cosmo/args.c): arguments are separated by white space; ``#`` starts a comment to the end of the
line; ``'…'`` is literal, ``"…"`` takes C escapes (``\\n``, ``\\x7f``, ``\\177``); a backslash escapes
the next character (and joins lines); ``$VAR`` and ``${VAR}`` are the environment's (one argument,
never split); a ``...`` on its own puts the user's command-line arguments there, and without one they
come after the last. Later flags win where llama.cpp takes the last value (docs/llamafiles.md). An
older loader (``LoadZipArgs``, llamafile 0.8.x) ignored ``.args`` whenever any argument was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The C escapes of cosmo_args' ``esc()`` (a backslash then one of these).
_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r", "e": "\x1b"}
_SPACE = " \t\r\n\f\v"
_HEX = "0123456789abcdefABCDEF"


@dataclass(frozen=True)
class DotArgs:
    """A parsed ``.args``: its arguments in order, where ``...`` puts the user's (None: after all), and
    the environment variables it reads."""

    args: tuple[str, ...]
    insert: int | None = None
    env: tuple[str, ...] = ()

    def merged(self, given: Sequence[str]) -> list[str]:
        """The argument list llamafile 0.9/0.10 runs with when started with ``given`` (the program name
        left out)."""
        at = len(self.args) if self.insert is None else self.insert
        return [*self.args[:at], *given, *self.args[at:]]

    @property
    def before_user(self) -> tuple[str, ...]:
        """The arguments that come before the user's (every one, without ``...``)."""
        return self.args if self.insert is None else self.args[:self.insert]

    @property
    def after_user(self) -> tuple[str, ...]:
        """The arguments after the user's: these win over the command line where llama.cpp takes the last."""
        return () if self.insert is None else self.args[self.insert:]


def parse_dotargs(text: str, env: Mapping[str, str] | None = None) -> DotArgs:
    """``text`` (an ``.args`` member) parsed as ``cosmo_args`` parses it; ``$VAR`` from ``env`` (none
    given: the empty string, which is what the engine reads for a variable that is not set)."""
    return _Parser(env or {}).run(text)


class _Parser:
    """cosmo_args' state machine, one character at a time (its state names)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.args: list[str] = []
        self.arg: list[str] = []
        self.var: list[str] = []
        self.used: list[str] = []
        self.insert: int | None = None
        self.state = "NORMAL"
        self.number = 0

    def run(self, text: str) -> DotArgs:
        for c in text:
            self.feed(c)
        self.finish()
        return DotArgs(tuple(self.args), self.insert, tuple(dict.fromkeys(self.used)))

    def value(self) -> str:
        name = "".join(self.var)
        self.var = []
        self.used.append(name)
        return self.env.get(name, "")

    def end_arg(self) -> None:
        self.args.append("".join(self.arg))
        self.arg = []

    def users_here(self) -> None:
        if self.insert is None:  # (the first ``...`` takes every user argument; a later one none)
            self.insert = len(self.args)

    def feed(self, c: str) -> None:
        """One character, in the state the last left (a branch a state, as in args.c)."""
        s = self.state
        if s == "NORMAL":
            if c in _SPACE:
                return
            self.state = {"#": "COMMENT", "'": "QUOTE", '"': "DQUOTE", "$": "DOLLAR", ".": "DOT",
                          "\\": "BACKSLASH"}.get(c, "ARGUMENT")
            if self.state == "ARGUMENT":
                self.arg.append(c)
        elif s == "ARGUMENT":
            self.argument(c)
        elif s == "BACKSLASH":
            if c == "\r":
                return
            if c == "\n":
                self.state = "NORMAL"
                return
            self.arg.append(_ESCAPES.get(c, c))
            self.state = "ARGUMENT"
        elif s == "COMMENT":
            if c == "\n":
                self.state = "NORMAL"
        elif s in ("DOLLAR", "DQUOTE_DOLLAR"):
            back = "ARGUMENT" if s == "DOLLAR" else "DQUOTE"
            if c.isalnum() or c == "_":
                self.var.append(c)
                self.state = s + "_VAR"
            elif c == "{":
                self.state = s + "_LCB"
            else:
                self.arg.append("$")
                if c != "$":
                    self.state = back
                    self.feed(c)
        elif s in ("DOLLAR_VAR", "DQUOTE_DOLLAR_VAR"):
            if c.isalnum() or c == "_":
                self.var.append(c)
            else:
                self.arg.append(self.value())
                self.state = "ARGUMENT" if s == "DOLLAR_VAR" else "DQUOTE"
                self.feed(c)
        elif s in ("DOLLAR_LCB", "DQUOTE_DOLLAR_LCB"):
            if c == "}":
                self.arg.append(self.value())
                self.state = "ARGUMENT" if s == "DOLLAR_LCB" else "DQUOTE"
            else:
                self.var.append(c)
        elif s == "QUOTE":
            if c == "'":
                self.state = "ARGUMENT"
            else:
                self.arg.append(c)
        elif s == "DQUOTE":
            self.dquote(c)
        elif s.startswith("DQUOTE_BACKSLASH"):
            self.dquote_escape(s, c)
        elif s in ("DOT", "DOT_DOT"):
            if c == ".":
                self.state = "DOT_DOT" if s == "DOT" else "DOT_DOT_DOT"
            else:
                self.arg.append("." * (1 if s == "DOT" else 2))
                self.state = "ARGUMENT"
                self.argument(c)
        elif s == "DOT_DOT_DOT":
            if c.isspace():
                self.users_here()
                self.state = "NORMAL"
            else:
                self.arg.append("...")
                self.state = "ARGUMENT"
                self.argument(c)

    def argument(self, c: str) -> None:
        if c in _SPACE:
            self.end_arg()
            self.state = "NORMAL"
        elif c in "'\"$\\":
            self.state = {"'": "QUOTE", '"': "DQUOTE", "$": "DOLLAR", "\\": "BACKSLASH"}[c]
        else:
            self.arg.append(c)

    def dquote(self, c: str) -> None:
        if c == '"':
            self.state = "ARGUMENT"
        elif c == "$":
            self.state = "DQUOTE_DOLLAR"
        elif c == "\\":
            self.state = "DQUOTE_BACKSLASH"
        else:
            self.arg.append(c)

    def dquote_escape(self, s: str, c: str) -> None:
        if s == "DQUOTE_BACKSLASH":
            if c.isdigit():
                self.number, self.state = int(c), "DQUOTE_BACKSLASH_DIGIT"
            elif c == "x":
                self.state = "DQUOTE_BACKSLASH_X"
            elif c in _ESCAPES:
                self.arg.append(_ESCAPES[c])
                self.state = "DQUOTE"
            elif c == "\r":
                pass
            else:
                if c != "\n":
                    self.arg.append(c)
                self.state = "DQUOTE"
        elif s in ("DQUOTE_BACKSLASH_DIGIT", "DQUOTE_BACKSLASH_DIGIT_DIGIT"):
            if c.isdigit():
                self.number = (self.number << 3) + int(c)
                if s == "DQUOTE_BACKSLASH_DIGIT":
                    self.state = "DQUOTE_BACKSLASH_DIGIT_DIGIT"
                else:
                    self.arg.append(chr(self.number & 0xFF))
                    self.state = "DQUOTE"
            else:
                self.arg.append(chr(self.number & 0xFF))
                self.state = "DQUOTE"
                self.dquote(c)
        elif s == "DQUOTE_BACKSLASH_X":
            if c in _HEX:
                self.number, self.state = int(c, 16), "DQUOTE_BACKSLASH_X_XDIGIT"
            else:
                self.arg.append("x")
                self.state = "DQUOTE"
                self.dquote(c)
        else:  # DQUOTE_BACKSLASH_X_XDIGIT
            if c in _HEX:
                self.arg.append(chr(((self.number << 4) + int(c, 16)) & 0xFF))
                self.state = "DQUOTE"
            else:
                self.arg.append(chr(self.number & 0xFF))
                self.state = "DQUOTE"
                self.dquote(c)

    def finish(self) -> None:
        """args.c's "clean up dirty state", then the last argument."""
        s = self.state
        if s == "DOT":
            self.arg.append(".")
        elif s == "DOT_DOT":
            self.arg.append("..")
        elif s == "DOT_DOT_DOT":
            self.users_here()
        elif s == "DOLLAR":
            self.arg.append("$")
        elif s in ("DOLLAR_VAR", "DQUOTE_DOLLAR_VAR"):
            self.arg.append(self.value())
        elif s in ("DOLLAR_LCB", "DQUOTE_DOLLAR_LCB"):
            self.arg.append("${" + "".join(self.var))
        if self.arg:
            self.end_arg()
