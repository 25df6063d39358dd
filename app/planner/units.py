"""``Bytes``: an int that knows how to print itself. All sizes in Headroom are bytes."""

from __future__ import annotations

import re

MiB = 1024 * 1024
GiB = 1024 * MiB

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MiB, "mb": 1000**2, "mib": MiB,
          "g": GiB, "gb": 1000**3, "gib": GiB, "t": 1024 * GiB, "tb": 1000**4, "tib": 1024 * GiB}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


class Bytes(int):
    """A byte count. ``str(Bytes(15_250_000_000))`` → ``'14.2 GiB'``."""

    def __new__(cls, value: int | float = 0) -> Bytes:
        return super().__new__(cls, int(value))

    @property
    def mib(self) -> float:
        return int(self) / MiB

    @property
    def gib(self) -> float:
        return int(self) / GiB

    def __str__(self) -> str:
        n = int(self)
        sign = "-" if n < 0 else ""
        a = abs(n)
        if a >= 1024 * GiB:
            return f"{sign}{a / (1024 * GiB):.1f} TiB"
        if a >= GiB:
            return f"{sign}{a / GiB:.1f} GiB"
        if a >= MiB:
            return f"{sign}{a / MiB:.0f} MiB"
        if a >= 1024:
            return f"{sign}{a / 1024:.0f} KiB"
        return f"{sign}{a} B"

    def __repr__(self) -> str:
        return f"Bytes({int(self)})"

    def __add__(self, other: int) -> Bytes:  # type: ignore[override]
        return Bytes(int(self) + int(other))

    def __sub__(self, other: int) -> Bytes:  # type: ignore[override]
        return Bytes(int(self) - int(other))

    @classmethod
    def parse(cls, text: str) -> Bytes:
        """``'20GiB'``, ``'24 GB'``, ``'512MiB'``, ``'1234'`` → Bytes. Raises ValueError."""
        m = _SIZE_RE.match(text)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"not a size: {text!r} (try '24GiB' or '512MiB')")
        return cls(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_tokens(text: str) -> int:
    """A context length as users type it: ``'512k'`` → 524288, ``'1M'`` → 1048576, ``'32768'``."""
    t = text.strip().lower().replace("_", "").replace(",", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1024, t[:-1]
    elif t.endswith("m"):
        mult, t = 1024 * 1024, t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        raise ValueError(f"not a token count: {text!r} (try '131072', '128k' or '1M')") from None
    if value <= 0 or value != int(value):
        raise ValueError(f"not a token count: {text!r}")
    return int(value)


def format_tokens(n: int) -> str:
    """A number of tokens (a context, cells, a largest fit) as every message writes it: exact, with
    thousands separators — 8192 → '8,192', 312576 → '312,576', 1048576 → '1,048,576' (docs/style.md,
    "Numbers"). A flag is written as llama-server takes it, digits only (``-c 8192``)."""
    return f"{n:,}"


def round_tokens(n: int) -> str:
    """Where a user types a context (the window's context field) and on the context chart's axis:
    524288 → '512k', 1048576 → '1M'; a size that is not whole k is exact, '335,616'."""
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n:,}"
