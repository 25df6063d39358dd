"""`headroom gui` (also plain `headroom`): the window. ``--demo`` opens the built-in demo;
``--screenshot PATH`` renders the window after the first plan (or the error that took its place),
saves it and exits."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from app.commands.common import exit_status


def register(sub: Any) -> None:
    p = sub.add_parser("gui", allow_abbrev=False, help="open the window (the default when no command is given)",
                       epilog=exit_status("the window closed (with --screenshot: a picture of a plan)",
                                          "with --screenshot: no plan could be made",
                                          "the model, the context or a flag cannot be used"))
    p.add_argument("model", nargs="?", help="a GGUF model or a llamafile to open, or hf:owner/name[:QUANT] (its "
                                            "header only: download it in the window to launch)")
    p.add_argument("--demo", action="store_true", help="open the built-in demo (a simulated 24 GB GPU)")
    p.add_argument("--ctx", type=_ctx, default=None, help="context length to start with, e.g. 512k")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PATH",
                   help="save a PNG of the window after the first plan (or the error shown instead), then "
                        "exit: 0 for a picture of a plan, 1 when no plan could be made")
    p.add_argument("--size", type=_size, default=None, metavar="WxH",
                   help="with --screenshot: the window's size in pixels (default 1400x900)")
    p.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    """``--size 1280x800``: a window size, checked before Qt starts."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not (320 <= int(w) <= 8192 and 240 <= int(h) <= 8192):
        raise argparse.ArgumentTypeError(f"not a window size: {text!r} (try 1280x800)")
    return int(w), int(h)


def _ctx(text: str) -> str:
    """``--ctx`` checked before Qt starts (a bad value would otherwise abort the window)."""
    from app.planner.settings import context_problem
    from app.planner.units import parse_tokens

    try:
        problem = context_problem(parse_tokens(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def no_display() -> bool:
    """Linux without X11/Wayland and no explicit Qt platform: Qt would abort, so say it first."""
    return (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace) -> int:
    if no_display():
        print("headroom gui: no display (neither DISPLAY nor WAYLAND_DISPLAY is set). Use "
              "`headroom plan MODEL.gguf` on a terminal, or run the window under Xvfb "
              "(xvfb-run headroom gui) or with QT_QPA_PLATFORM=offscreen.", file=sys.stderr)
        return 2
    model: Path | None = None
    if args.model is not None:
        from app.commands.common import hub_model
        from app.planner.errors import PlannerError

        try:
            model = Path(hub_model(args.model, download=False))  # hf:…: the header-only copy, before Qt
        except PlannerError as exc:
            print(f"headroom gui: {exc}", file=sys.stderr)
            return 2
        if not model.is_file():
            what = "is a directory, not a file" if model.is_dir() else "not found"
            print(f"headroom gui: model {what}: {model}", file=sys.stderr)
            return 2
    from app.ui.application import run_gui  # Qt only when the window is wanted

    if args.size is not None and args.screenshot is None:
        print("headroom gui: --size is for --screenshot (the window itself opens at its remembered size)",
              file=sys.stderr)
        return 2
    return run_gui(model=model, demo=args.demo, ctx=args.ctx, screenshot=args.screenshot, size=args.size)
