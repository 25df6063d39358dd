"""``headroom engine build``: build the stock engine from llama-cpp-python's vendored llama.cpp, then time
this CPU's flash attention with it for 64- and 128-wide heads (once per machine: app/engine/attention_runs.py)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from app import paths
from app.commands.common import exit_status, positive_int
from app.engine import native_build

EXIT_STATUS = exit_status("built (or found)", "the build failed, or no engine is built or chosen yet (where)", "bad flags")


def register(sub: Any) -> None:
    p = sub.add_parser("engine", allow_abbrev=False, help="build or locate the stock llama-server", epilog=EXIT_STATUS)
    esub = p.add_subparsers(dest="engine_command", metavar="ACTION", required=True)
    b = esub.add_parser("build", allow_abbrev=False, epilog=EXIT_STATUS,
                        help="build llama-server from source with Headroom's patches (cached by commit, backend "
                        "and patch series)")
    b.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="parallel compile jobs (default: one per CPU core)")
    b.add_argument("--bindings", action="store_true", help="also install llama-cpp-python without compiling")
    b.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cuda: GPU code for NVIDIA cards (sm_75 to sm_120), built on this machine without a GPU "
                        "too: NVIDIA's compiler and libraries come from PyPI if this machine lacks them (about 0.5 GB, "
                        "once; the build takes hours on 2 cores: docs/engines.md, \"The CUDA engine\"); auto: CUDA "
                        "when this machine has nvcc and cuBLAS, else CPU")
    b.add_argument("--portable", action="store_true",
                   help="CPU code for any x86-64 CPU, chosen at run time (what a bundle ships)")
    b.set_defaults(func=run_build)
    a = esub.add_parser("attention", allow_abbrev=False, epilog=EXIT_STATUS,
                        help="time this CPU's attention with the engine's llama-batched-bench and keep it for the "
                             "speed predictions (what plan and serve start in the background; about a minute)")
    a.add_argument("--head-dims", default="64,128", metavar="N,N", help="head sizes to time (default 64,128)")
    a.add_argument("--engine", type=Path, default=None, metavar="FILE", help="the engine whose bench times it")
    a.set_defaults(func=run_attention)
    w = esub.add_parser("where", allow_abbrev=False, epilog=EXIT_STATUS, help="print the folder of the engine Headroom launches: the one chosen in the "
                             "window (File ▸ Choose engine…), else the cached build's bin directory")
    w.set_defaults(func=run_where)


def pip_python() -> str:
    """The interpreter whose pip fetches the llama.cpp source (once): this one; in a bundle, which
    has neither Python nor pip of its own, the system's ``python3``."""
    if paths.bundle_dir() is None:
        return sys.executable
    return shutil.which("python3") or "python3"


def run_build(args: argparse.Namespace) -> int:
    if args.bindings and paths.bundle_dir() is not None:
        print("headroom engine build: --bindings installs llama-cpp-python into a Python; the bundle "
              "carries its own", file=sys.stderr)
        return 2
    argv = ["--python", pip_python()]
    if args.jobs:
        argv += ["--jobs", str(args.jobs)]
    if args.bindings:
        argv.append("--bindings")
    if args.backend != "auto":
        argv += ["--backend", args.backend]
    if args.portable:
        argv.append("--portable")
    rc = native_build.main(argv)
    if rc == 0:  # the speed model's CPU-attention figures, once per machine (app/engine/attention_runs.py)
        from app.engine.attention_runs import host_runs

        def say(line: str) -> None:
            print(f"[engine-build] {line}", flush=True)

        for line in host_runs(measure_missing=True, say=say):
            say(line)
    return rc


def run_attention(args: argparse.Namespace) -> int:
    from app.engine.attention_runs import run_in_foreground
    from app.engine.discover import discover_engines

    try:
        heads = tuple(int(h) for h in str(args.head_dims).split(",") if h.strip())
    except ValueError:
        print(f"headroom engine attention: --head-dims {args.head_dims}: give head sizes, e.g. 64,128", file=sys.stderr)
        return 2
    engines = discover_engines(args.engine, probe=False)
    for line in run_in_foreground(heads, engines[0] if engines else None):
        print(f"[attention] {line}", flush=True)
    return 0


def run_where(args: argparse.Namespace) -> int:
    """The folder of the engine Headroom launches: the chosen one (app/engine/chosen.py), else its build."""
    from app.engine.chosen import chosen_engine

    chosen = chosen_engine()
    if chosen is not None and chosen.is_file():
        print(chosen.resolve().parent)
        return 0
    if chosen is not None:
        print(f"the chosen engine is gone: {chosen} (choose another in the window, File ▸ Choose engine…)",
              file=sys.stderr)
    build = native_build.find_build()
    if build is None:
        print("no engine yet: run `headroom engine build`, or choose one in the window (File ▸ Choose engine…)",
              file=sys.stderr)
        return 1
    print(build.bin_dir)
    return 0
