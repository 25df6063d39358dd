"""Simulated GPUs: plan for a card you do not have (``--gpu "RTX 4090"``, ``--gpu "MyCard:20GiB"``).

Each card in the table carries the memory a plan may use on it and where that number comes from.
Only the H200 has a recorded reading (``tests/fixtures/h200/nvml-readings.txt``: NVML total
150754820096 B, free 150109880320 B, the difference being the driver's 615 MiB reservation); the
others use the nominal capacity, as the card's name states it, because their reservation was not
measured. A simulated card is ``kind=DeviceKind.SIMULATED`` and its name ends in "(simulated)".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.planner.units import Bytes, GiB

#: Marks every simulated GPU wherever its name shows.
SIMULATED_SUFFIX = " (simulated)"


@dataclass(frozen=True)
class Card:
    name: str  # the name NVML reports for the real card
    aliases: tuple[str, ...]  # what users type; matched case-, space- and dash-insensitively
    total: int
    free: int
    source: str
    #: CUDA compute capability (major, minor), NVIDIA's specification of the card: which GPU code of an
    #: engine runs on it (app/engine/gpu_reach.py).
    compute: tuple[int, int] | None = None


def _nominal(name: str, aliases: tuple[str, ...], gib: int, compute: tuple[int, int]) -> Card:
    size = gib * GiB
    return Card(name, aliases, size, size, f"simulated: nominal {gib} GiB (reservation not recorded)", compute)


CARDS: tuple[Card, ...] = (
    _nominal("NVIDIA GeForce RTX 3060", ("RTX 3060", "3060"), 12, (8, 6)),
    _nominal("NVIDIA GeForce RTX 3070", ("RTX 3070", "3070"), 8, (8, 6)),
    _nominal("NVIDIA GeForce RTX 3080", ("RTX 3080", "3080"), 10, (8, 6)),
    _nominal("NVIDIA GeForce RTX 4060", ("RTX 4060", "4060"), 8, (8, 9)),
    _nominal("NVIDIA GeForce RTX 4070", ("RTX 4070", "4070"), 12, (8, 9)),
    _nominal("NVIDIA GeForce RTX 4070 Ti SUPER", ("RTX 4070 Ti SUPER", "4070 Ti SUPER", "4070TiS"), 16, (8, 9)),
    _nominal("NVIDIA GeForce RTX 5070", ("RTX 5070", "5070"), 12, (12, 0)),
    _nominal("NVIDIA GeForce RTX 5080", ("RTX 5080", "5080"), 16, (12, 0)),
    _nominal("NVIDIA RTX A4000", ("A4000", "RTX A4000"), 16, (8, 6)),
    _nominal("NVIDIA GeForce RTX 3090", ("RTX 3090", "3090"), 24, (8, 6)),
    _nominal("NVIDIA GeForce RTX 4080", ("RTX 4080", "4080"), 16, (8, 9)),
    _nominal("NVIDIA GeForce RTX 4090", ("RTX 4090", "4090"), 24, (8, 9)),
    _nominal("NVIDIA GeForce RTX 5090", ("RTX 5090", "5090"), 32, (12, 0)),
    _nominal("NVIDIA RTX A6000", ("A6000", "RTX A6000"), 48, (8, 6)),
    _nominal("NVIDIA L40S", ("L40S",), 48, (8, 9)),
    _nominal("NVIDIA A100-SXM4-40GB", ("A100 40GB", "A100-40GB", "A100 40G"), 40, (8, 0)),
    _nominal("NVIDIA A100-SXM4-80GB", ("A100 80GB", "A100-80GB", "A100 80G"), 80, (8, 0)),
    _nominal("NVIDIA H100 80GB HBM3", ("H100", "H100 80GB", "H100 SXM"), 80, (9, 0)),
    Card("NVIDIA H200", ("H200", "H200 SXM"), 150_754_820_096, 150_109_880_320,
         "simulated: recorded H200 reading (NVML v2, driver 580.159.04)", (9, 0)),
    _nominal("NVIDIA RTX PRO 6000 Blackwell", ("RTX PRO 6000", "PRO 6000", "RTX 6000 Pro"), 96, (12, 0)),
)


def _key(text: str) -> str:
    """'NVIDIA GeForce RTX 4090' and 'rtx-4090' both → 'rtx4090'."""
    key = re.sub(r"[\s_\-]+", "", text.lower())
    for prefix in ("nvidia", "geforce"):
        key = key.removeprefix(prefix)
    return key


_BY_KEY: dict[str, Card] = {_key(alias): card for card in CARDS for alias in (card.name, *card.aliases)}


def known_cards() -> list[str]:
    """The names users can type, one per card, for help texts and error messages."""
    return [card.aliases[0] for card in CARDS]


def cards_by_memory() -> list[tuple[str, int]]:
    """(name users type, memory) for every card, smallest first (for a list to pick from)."""
    return sorted(((card.aliases[0], card.total) for card in CARDS), key=lambda c: c[1])


def find_card(name: str) -> Card:
    """The table entry for ``name`` (case/space-insensitive). ValueError lists the known cards."""
    card = _BY_KEY.get(_key(name))
    if card is None:
        raise ValueError(
            f"unknown GPU {name!r}: known cards are {', '.join(known_cards())}; "
            "or give the memory yourself, e.g. 'MyCard:20GiB'"
        )
    return card


@dataclass(frozen=True)
class SimulatedSpec:
    """What a ``--gpu`` spec means: a display name, the memory a plan may use, and its source."""

    name: str
    total: int
    free: int
    reserved: int
    source: str
    compute: tuple[int, int] | None = None


#: The least memory a ``NAME:SIZE`` card may have: anything below is a size typed without a unit.
MIN_SPEC_MEMORY = 64 * 1024 * 1024


def parse_spec(spec: str) -> SimulatedSpec:
    """``'RTX 4090'`` → the table's card; ``'MyCard:20GiB'`` → a card of 20 GiB, all of it free.

    A known name with a size (``'H200:100GiB'``) keeps the card's name and uses the given size.
    """
    text = spec.strip()
    if ":" in text:
        label, _, size_text = text.rpartition(":")
        label = label.strip()
        if not label:
            raise ValueError(f"GPU spec {spec!r} has no name before ':' (try 'MyCard:20GiB')")
        size = int(Bytes.parse(size_text))
        if size <= 0:
            raise ValueError(f"GPU spec {spec!r}: memory must be more than 0")
        if size < MIN_SPEC_MEMORY:  # 'MyCard:24' is 24 bytes to Bytes.parse, never what was meant
            given = size_text.strip()
            if given.isdigit():  # a bare number: the unit was left out
                raise ValueError(f"GPU spec {spec!r}: {Bytes(size)} is not a GPU's memory; give a unit, "
                                 f"e.g. '{label}:{given}GiB'")
            raise ValueError(f"GPU spec {spec!r}: {Bytes(size)} is not a GPU's memory (at least "
                             f"{Bytes(MIN_SPEC_MEMORY)}), e.g. '{label}:24GiB'")
        card = _BY_KEY.get(_key(label))
        name = card.name if card is not None else label
        return SimulatedSpec(name, size, size, 0, f"simulated: {Bytes(size)} as given",
                             card.compute if card is not None else None)
    card = find_card(text)
    return SimulatedSpec(card.name, card.total, card.free, card.total - card.free, card.source, card.compute)
