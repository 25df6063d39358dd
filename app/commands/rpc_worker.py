"""``headroom rpc-worker``: a ``ggml-rpc-server`` from the engine Headroom built, in the foreground.

    headroom rpc-worker [--port 50052] [--host 127.0.0.1] [--threads N] [--device DEV] [--cache]

It binds 127.0.0.1 unless ``--host`` says otherwise, and another address needs ``--allow-remote``
too: the RPC protocol has no authentication (app/engine/rpc.py ``UNAUTHENTICATED``), so the warning
comes first, before anything listens. The worker dies with this command (Ctrl-C, SIGTERM, or
Headroom killed: the kernel's parent-death signal).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from app.commands.common import exit_status, positive_int

DEFAULT_PORT = 50052  # ggml-rpc-server's own default
EXIT_STATUS = exit_status("the worker ran until stopped", "it could not start (no engine build, the port in use)",
                          "bad flags, or a non-local address without --allow-remote")


def register(sub: Any) -> None:
    p = sub.add_parser("rpc-worker", allow_abbrev=False, epilog=EXIT_STATUS,
                       help="run a ggml-rpc-server worker so another machine's engine can use this one's device",
                       description="Start ggml-rpc-server from the engine Headroom built, so `headroom plan/serve "
                                   "--rpc HOST:PORT` on another machine (or this one) can put layers here.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--allow-remote", action="store_true",
                   help="needed to bind anything but loopback: the RPC protocol has no authentication")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N", help="CPU threads for a CPU device")
    p.add_argument("--device", default=None, metavar="DEV[,DEV]", help="which of this machine's devices to offer")
    p.add_argument("--cache", action="store_true", help="cache received weights on disk (ggml-rpc-server -c)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from app.engine.apikey import is_loopback
    from app.engine.native_build import find_build
    from app.engine.process import _pdeathsig_preexec
    from app.engine.rpc import (
        UNAUTHENTICATED,
        WorkerError,
        rpc_server_binary,
        wait_listening,
        worker_argv,
    )

    if not 0 < args.port < 65536:
        print(f"headroom rpc-worker: not a port: {args.port}", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        if not args.allow_remote:
            print(f"headroom rpc-worker: refusing to bind {args.host}: {UNAUTHENTICATED} "
                  "Add --allow-remote if that is what you want.", file=sys.stderr)
            return 2
        print(f"WARNING: binding {args.host}:{args.port}: {UNAUTHENTICATED}", file=sys.stderr, flush=True)
    build = find_build()
    if build is None:
        print("headroom rpc-worker: no engine build: run `headroom engine build` first", file=sys.stderr)
        return 1
    try:
        binary = rpc_server_binary(build.bin_dir)
    except WorkerError as exc:
        print(f"headroom rpc-worker: {exc}", file=sys.stderr)
        return 1
    argv = worker_argv(binary, args.host, args.port, threads=args.threads, devices=args.device, cache=args.cache)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_pdeathsig_preexec(os.getpid()))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            wait_listening(args.host, args.port, proc)
        except WorkerError as exc:
            print(f"headroom rpc-worker: {exc} (is the port in use?)", file=sys.stderr)
            return 1
        where = f"{args.host}:{args.port}"
        print(f"rpc-worker: listening on {where} (pid {proc.pid}); use it with "
              f"`headroom serve MODEL --rpc {where}` — Ctrl-C to stop", flush=True)
        proc.wait()
        print(f"headroom rpc-worker: ggml-rpc-server exited with status {proc.returncode}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
