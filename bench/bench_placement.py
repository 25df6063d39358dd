"""The placements a stock plan chooses between, measured: prefill and decode tokens/s of each, beside
the plan's predicted turn (app/planner/solve/speed.py), at one device budget.

    .venv/bin/python -m bench.bench_placement [--ctx 32768] [--budget 160MiB] [--prompt 2048] [--reply 64]
                                              [--repeat 3] [--engine PATH/llama-server]

The device is a loopback ``ggml-rpc-server`` (a real ggml device; on a GPU machine pass ``--gpu``
to use CUDA0 instead). The model is the 8-layer test model (tests/fixtures/shapes.py ``TINY_DEEP``,
16 MiB of KV per layer at 32k). Every alternative the plan priced is launched with exactly its flags
through Headroom's argv (``-ngl``/``-ot``/``-nkvo``/``-c``), plus the fully resident launch without a
budget for reference; each answers one prompt of ``--prompt`` tokens and ``--reply`` more, and the
engine's own ``timings`` give the speeds (the median of ``--repeat`` answers: the machine is shared).
The KV host tail runs a second time with ``--no-op-offload``: its prefill then reads the host KV on the
CPU as its decode does (engine patch 5), where by default a prefill batch streams it to the device.
Target (issue 16): the plan's choice is the fastest measured option at the asked context, or the table
says why not.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from app.engine.argv import build_argv
from app.engine.capabilities import engine_env, free_port
from app.engine.discover import EngineInfo, EngineKind, EngineOrigin
from app.engine.native_build import EngineBuild, build_of, find_build
from app.engine.process import ServerProcess
from app.engine.rpc import add_workers, query_workers, rpc_query_server
from app.machine.devices import resolve_gpus
from app.planner.devices import with_budgets
from app.planner.gguf.model import read_shape
from app.planner.measurement import Measurement
from app.planner.plan_types import Alternative, AlternativeKind, PlanMode
from app.planner.request import PlanRequest
from app.planner.settings import LaunchSettings
from app.planner.solve.speed import HOST_BANDWIDTH, TURN_PROMPT, TURN_REPLY
from app.planner.units import Bytes
from app.probe.measure import measure_cached
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.rpc import rpc_worker


@dataclass(frozen=True)
class Run:
    label: str
    launch: LaunchSettings
    predicted: str
    prefill_tps: float
    decode_tps: float
    chosen: bool
    feasible: bool
    splits: str = "—"
    planned: bool = True  # one of the plan's alternatives (False: a variant the bench adds)


def _prompt(n_tokens: int) -> str:
    # the byte vocabulary: one token per character, give or take the specials
    words = "the quick brown fox jumps over a lazy dog while the night is young and the road is long "
    return (words * (n_tokens // len(words) + 1))[:n_tokens]


#: sched_reserve: graph (pp bs=512, tg bs=1): nodes = 254 / 250, splits = 5 / 9, ...   (src/llama-context.cpp)
_SPLITS = re.compile(r"sched_reserve: graph.*?splits = (?P<pp>\d+)(?: / (?P<tg>\d+))?")


def _timed(build: EngineBuild, model: Path, launch: LaunchSettings, prompt: str,
           reply: int, repeat: int, extra: tuple[str, ...] = ()) -> tuple[float, float, str]:
    """Prefill and decode tokens/s from the engine's ``timings`` (the median of ``repeat`` answers), and
    its graph splits (pp / tg). ``extra``: engine flags after the plan's."""
    info = EngineInfo(EngineKind.LLAMA_SERVER, str(build.server), "bench", build.commit, EngineOrigin.HEADROOM_BUILD)
    port = free_port()
    argv = [*build_argv(info, launch, PlanMode.STOCK, model, "127.0.0.1", port), *extra]
    server = ServerProcess(argv, "127.0.0.1", port, env=engine_env())
    server.start()
    try:
        server.wait_ready(timeout=300)
        body = {"prompt": prompt, "n_predict": reply, "temperature": 0, "cache_prompt": False, "ignore_eos": True}
        prefill, decode = [], []
        for _ in range(repeat):
            req = urllib.request.Request(server.base_url + "/completion",
                                         headers={"Content-Type": "application/json"}, data=json.dumps(body).encode())
            with urllib.request.urlopen(req, timeout=900) as r:
                timings = json.loads(r.read())["timings"]
            prefill.append(float(timings["prompt_per_second"]))
            decode.append(float(timings["predicted_per_second"]))
        found = [m for line in server.log_lines() if (m := _SPLITS.search(line))]
        splits = f"{found[-1]['pp']} / {found[-1]['tg'] or found[-1]['pp']}" if found else "?"
        return statistics.median(prefill), statistics.median(decode), splits
    finally:
        server.stop()


def _price(a: Alternative) -> str:
    return f"{a.decode_s:.3f} s + {a.prefill_s:.3f} s" if a.feasible else "does not fit"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ctx", type=int, default=32768)
    p.add_argument("--budget", default="160MiB")
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--reply", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="answers per launch; the table shows their median")
    p.add_argument("--engine", type=Path, help="the llama-server of another Headroom build (an earlier patch "
                   "series) to launch instead of the current one; the plan is the same")
    args = p.parse_args(argv)
    build = build_of(args.engine) if args.engine else find_build()
    if build is None:
        print(f"not a Headroom build: {args.engine}" if args.engine else "no engine build: run `headroom engine build`",
              file=sys.stderr)
        return 1
    model = gguf_factory.ensure(shapes.TINY_DEEP)
    shape = read_shape(model)
    prompt = _prompt(args.prompt)
    settings = LaunchSettings(n_ctx=args.ctx)
    runs: list[Run] = []
    started = time.monotonic()
    with rpc_worker() as (worker, _):
        base = add_workers(resolve_gpus([]), query_workers(rpc_query_server(), [worker]))

        def lookup(launch: LaunchSettings) -> Measurement:
            return measure_cached(model, launch)[0]

        full = PlanRequest(shape, base, safety=0, lookup=lookup).plan(settings).plan
        budget = int(Bytes.parse(args.budget))
        tight = PlanRequest(shape, with_budgets(base, {"RPC0": budget}), safety=0, lookup=lookup).plan(settings).plan
        pre, dec, splits = _timed(build, model, full.launch, prompt, args.reply, args.repeat)
        runs.append(Run("fully resident (no budget)", full.launch, "0 (nothing on the host)", pre, dec, False, True,
                        splits))
        for alt in tight.alternatives:
            if not alt.feasible:
                runs.append(Run(alt.label, alt.launch, _price(alt), 0.0, 0.0, alt.chosen, False))
                continue
            pre, dec, splits = _timed(build, model, alt.launch, prompt, args.reply, args.repeat)
            runs.append(Run(alt.label, alt.launch, _price(alt), pre, dec, alt.chosen, True, splits))
            if alt.kind is AlternativeKind.KV_HOST_LAYERS:  # its prefill both ways (not a plan's option)
                pre, dec, splits = _timed(build, model, alt.launch, prompt, args.reply, args.repeat,
                                          ("--no-op-offload",))
                runs.append(Run(f"{alt.label}, --no-op-offload", alt.launch, "(not planned)", pre, dec, False, True,
                                splits, planned=False))
    same_ctx = [r for r in runs[1:] if r.feasible and r.planned and r.launch.n_ctx == args.ctx]
    chosen = next((r for r in runs if r.chosen), None)
    # the measured price of a turn like the plan's: TURN_PROMPT tokens of prefill and TURN_REPLY of decode
    def measured_turn(r: Run) -> float:
        return TURN_PROMPT / r.prefill_tps + TURN_REPLY / r.decode_tps

    fastest = min(same_ctx, key=measured_turn) if same_ctx else None
    head = ("option", "plan's price (decode + prefill)", "prefill tok/s", "decode tok/s", "graph splits pp / tg",
            "turn s (measured)", "")
    rows = [head] + [(r.label, r.predicted, f"{r.prefill_tps:,.0f}" if r.feasible else "—",
                      f"{r.decode_tps:,.1f}" if r.feasible else "—", r.splits,
                      f"{measured_turn(r):.2f}" if r.feasible else "—",
                      ("chosen" if r.chosen else "") + (" fastest" if r is fastest else "")) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    print(f"placement at -c {args.ctx} on a loopback RPC device with a {args.budget} budget "
          f"({shape.name}, {args.prompt}-token prompt, {args.reply} tokens, median of {args.repeat}; "
          f"{time.monotonic() - started:.0f} s; engine {build.label})")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if chosen is None or fastest is None:
        print("target: the plan's choice is the fastest at the asked context — no choice to compare")
        return 1
    verdict = "met" if chosen is fastest else "MISSED"
    print(f"target: the plan's choice is the fastest measured option at the asked context ... {verdict}")
    if chosen is not fastest:
        print(f"why not: {chosen.label} measured {measured_turn(chosen):.2f} s a turn, {fastest.label} "
              f"{measured_turn(fastest):.2f} s (prefill {chosen.prefill_tps:,.0f} vs {fastest.prefill_tps:,.0f} tok/s, "
              f"decode {chosen.decode_tps:,.1f} vs {fastest.decode_tps:,.1f}; graph splits {chosen.splits} vs "
              f"{fastest.splits}). The price assumes a GPU on its own bus (host bytes at {HOST_BANDWIDTH / 1e9:g} GB/s, "
              "the bus at PCIe 4.0 x16); here the device is a one-thread CPU worker on loopback and every graph "
              "split is a round trip over TCP. A GPU run is the check that counts (bench/h200/).")
    return 0 if chosen is fastest else 1


if __name__ == "__main__":
    sys.exit(main())
