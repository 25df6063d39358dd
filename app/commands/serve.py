"""`headroom serve` (not written yet)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="(not available yet)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("headroom serve: not available yet")
    return 2
