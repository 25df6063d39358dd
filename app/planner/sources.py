"""Where a number in a plan came from: a kind, and for some kinds a detail, with their own words.

``str(source)`` is the phrase the CLI prints beside a part and the window puts in its tooltip; the
plan's JSON carries the same string (``PLAN_JSON_VERSION`` 1: ``"sources": {part: str}``), and
:meth:`Source.from_json` reads it back. Code asks ``source.kind``, never the words::

    Source(SourceKind.MEASURED)                                  measured by pass 1
    Source(SourceKind.MEASURED_ELSEWHERE, "-c 4096 (not 8192)")  measured by pass 1 for other settings at -c 4096 (not 8192)
    Source(SourceKind.MEASURED_HERE, "NVML, pid 42")             measured on this GPU and driver (NVML, pid 42)
    Source(SourceKind.FROM_NVML, "2 processes hold …")         from NVML: 2 processes hold …
    Source(SourceKind.DEFAULT, "~590 MiB measured on an H200")   default: ~590 MiB measured on an H200
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SourceKind(Enum):
    """What a number rests on. The value is its words without a detail."""

    #: Pass 1 (app/probe) measured it for exactly this launch.
    MEASURED = "measured by pass 1"
    #: Pass-1 numbers reused for a launch they were not measured for (detail: the flags they were for).
    MEASURED_ELSEWHERE = "measured by pass 1 for other settings"
    #: Measured with NVML on this GPU and driver (the per-process overhead; detail: how).
    MEASURED_HERE = "measured on this GPU and driver"
    #: Measured on this machine by the speed calibration (app/machine/calibrate.py; detail: how).
    CALIBRATED = "calibrated on this machine"
    #: Read from the model file's header (tensor sizes, KV shapes; detail: what it adds).
    FROM_GGUF = "from the GGUF"
    #: Follows from what pass 1 measured of a model the estimate does not know (app/planner/law.py;
    #: detail: at which settings): its KV caches' rows, at this launch's context and placement.
    FROM_LAW = "from the law pass 1 measured"
    #: Read from the GPU driver through NVML (detail: who holds what).
    FROM_NVML = "from NVML"
    #: What an RPC worker reported through ggml (its device's memory; none of this engine's overhead).
    FROM_RPC = "from the RPC worker"
    #: The operating system's memory figures.
    FROM_OS = "from the OS"
    #: psutil's reading of host memory (the window's "Other apps" on the host bar).
    FROM_PSUTIL = "from psutil"
    #: The planner's estimate (app/planner/memory/compute.py).
    ESTIMATED = "estimated"
    #: A setting the user gave (the safety margin, ``--overhead``).
    GIVEN = "given"
    #: A built-in default (detail: where it comes from).
    DEFAULT = "default"
    #: A simulated card's figure.
    SIMULATED = "simulated"
    #: What the other parts leave (a bar's free part).
    LEFT_OVER = "what is left"


#: How a detail follows its kind's words; ``"{kind} ({detail})"`` for a kind not listed.
_DETAIL = {
    SourceKind.MEASURED_ELSEWHERE: " at {}",
    SourceKind.FROM_NVML: ": {}",
    SourceKind.DEFAULT: ": {}",
}
_PAREN = " ({})"


@dataclass(frozen=True)
class Source:
    """Where one number came from: ``kind``, and an optional ``detail`` in words (never parsed)."""

    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        if not self.detail:
            return self.kind.value
        return self.kind.value + _DETAIL.get(self.kind, _PAREN).format(self.detail)

    def to_json(self) -> str:
        return str(self)

    @classmethod
    def from_json(cls, text: str) -> Source:
        """The source a plan's JSON names (the inverse of :meth:`to_json`); ValueError for words that
        are no kind's."""
        for kind in sorted(SourceKind, key=lambda k: len(k.value), reverse=True):
            if text == kind.value:
                return cls(kind)
            before, after = _DETAIL.get(kind, _PAREN).split("{}")
            head = kind.value + before
            if text.startswith(head) and text.endswith(after) and len(text) > len(head) + len(after):
                return cls(kind, text[len(head):len(text) - len(after)])
        raise ValueError(f"not a source a plan names: {text!r}")


class Sourced(int):
    """A byte count that carries where it came from, through signatures that take an ``int``
    (the per-process overhead: given by the user, or measured on this GPU and driver)."""

    source: Source

    def __new__(cls, value: int, source: Source) -> Sourced:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj
