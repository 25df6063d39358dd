"""What every benchmark prints: an aligned table, each timed row against its target with the
ratio, and a verdict line; ``exit_code`` is 1 when any target was missed.

A ratio is ``measured / target``: below 1.00 meets the target, 0.25 is four times faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """A limit from an issue: ``what`` must take less than ``limit`` ``unit``."""

    what: str
    limit: float
    unit: str
    source: str

    def ratio(self, value: float) -> float:
        return value / self.limit

    def met(self, value: float) -> bool:
        return value < self.limit


@dataclass
class Verdicts:
    """Collects (target, row label, value) checks and prints them last."""

    checks: list[tuple[Target, str, float]] = field(default_factory=list)

    def check(self, target: Target, label: str, value: float) -> str:
        """Record a check; returns the cell to print: ``ok`` or ``MISSED``."""
        self.checks.append((target, label, value))
        return "ok" if target.met(value) else "MISSED"

    def print(self) -> None:
        for target in dict.fromkeys(t for t, _, _ in self.checks):
            rows = [(label, v) for t, label, v in self.checks if t == target]
            worst_label, worst = max(rows, key=lambda r: r[1])
            missed = [label for label, v in rows if not target.met(v)]
            state = f"MISSED by {len(missed)}: {', '.join(missed)}" if missed else "met"
            print(f"target {target.what} < {target.limit:g} {target.unit} ({target.source}): {state}; "
                  f"worst {worst:.4g} {target.unit} = {target.ratio(worst):.2f}x the target ({worst_label})")

    def exit_code(self) -> int:
        return 0 if all(t.met(v) for t, _, v in self.checks) else 1


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns right-aligned except the first; floats as given (format them before)."""
    cells = [[str(c) for c in headers], *([str(c) for c in r] for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    """``repeat`` wall-clock timings of ``fn``, in seconds."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out
