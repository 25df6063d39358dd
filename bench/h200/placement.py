"""Issue 32's desktop card on the H200: every way the plan lists under a 24 GB budget, launched through
``headroom serve``, its memory beside NVML's reading and its speed beside the plan's prediction.

    python3 bench/h200/placement.py --out DIR --deadline EPOCH_S [--cpu] [--first N]

For each case (a shape model, a context, a KV type) under ``--vram-target 24GiB`` (the H200 standing in
for a 24 GB card): the plan ``headroom serve`` makes (app/commands/serve.py ``serve_plan``, with pass 1,
here in the bench's process from the same caches) lists the ways; the chosen one is launched as a user
launches it (``headroom serve M -c … --vram-target 24GiB``), every other way that fits with
``--alternative LABEL``. While it serves, NVML is read for the engine process (bench/h200/serve_row.py)
and ``/completion`` is asked, one slot, token ids as the prompt, ``REPLY`` tokens each:

1. ``FILLS[0]`` tokens: the decode with the context nearly empty;
2. ``FILLS[1]`` tokens (16k on the GPU): a 16k-token prefill, and the decode after it;
3. the same prompt grown to ``FILLS[2]`` (64k), its first part reused from the slot's cache: the decode
   at 64k, when 2's prefill rate says it ends within the row's time.

Each answer's prediction is that launch's plan (``serve_plan`` with ``--alternative``, made before the
launch) at the fill it ran at: prefill at the middle of its new tokens, decode at the middle of its
reply (bench/bench_placement.py ``at_fill``). ``serve`` learns measured ÷ predicted from its own check
after each launch, for every placement alike; the bench puts the calibration back as it was before the
case's first launch before each way, so every way is predicted from the same figures (each row says the
learned scales they carried).

Results land in ``DIR/placement-<date>.md`` (the table, then each row's commands) and
``DIR/placement.jsonl`` after every row; a second call resumes after the rows done.
``--cpu``: the dry run without a GPU: the 8-layer test model at 8k on a loopback ``headroom rpc-worker``
with a 32 MiB budget and no safety margin (the stand-in of bench/bench_placement.py), fills of 64, 2k and
4k tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.engine.speed_check import Timings  # noqa: E402
from app.machine.calibrate import calibration_path  # noqa: E402
from app.paths import cache_dir  # noqa: E402
from bench.bench_placement import at_fill  # noqa: E402
from bench.h200.matrix import QWEN3_MOE, QWEN_1M, about, judge, model_path  # noqa: E402
from bench.h200.serve_row import Result, Row, serve, step_parser, wait_gpu_idle  # noqa: E402

#: Issue 32's bar for a prediction: within ±20 % of what was measured.
PREDICTION_WITHIN = 0.20
#: Tokens each answer decodes.
REPLY = 32
#: The context fills the answers run at (tokens of prompt): nearly empty, the issue's 16k-token prompt,
#: and 64k; the dry run's at its 8k context.
FILLS = (64, 16384, 65536)
CPU_FILLS = (64, 2048, 4096)
#: The first token id of the prompts (past a vocabulary's control tokens; the weights are random).
FIRST_ID = 256


@dataclass(frozen=True)
class Case:
    """One context of issue 32's desktop card: a shape model at a context and KV type, a budget."""

    model: str
    ctx: str
    kv: str
    budget: str = "24GiB"
    #: more flags for serve (the dry run's ``--safety 0``: its budgets are MiB, as bench_placement's)
    flags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.model}-c{self.ctx}-{self.kv}-{self.budget.replace('=', '_')}"

    def row(self, tag: str, extra: tuple[str, ...]) -> Row:
        return Row(self.model, self.ctx, self.kv, serve_extra=("--vram-target", self.budget, *self.flags, *extra), tag=tag)


def gpu_cases() -> list[Case]:
    """Issue 32's order: the 14B-1M shape at 128k f16 (every way), 512k f16, the MoE at 128k, then q8_0."""
    return [Case(QWEN_1M, "128k", "f16"), Case(QWEN_1M, "512k", "f16"), Case(QWEN3_MOE, "128k", "f16"),
            Case(QWEN_1M, "128k", "q8_0"), Case(QWEN_1M, "512k", "q8_0")]


def cpu_cases() -> list[Case]:
    return [Case("tiny-llama-deep", "8192", "f16", "RPC0=32MiB", ("--safety", "0"))]


@dataclass
class Answer:
    """One ``/completion``: the engine's timings and the plan's prediction at the fill it ran at."""

    measured: Timings
    prefill_pred: float | None = None
    decode_pred: float | None = None
    seconds: float = 0.0

    @property
    def prompt_end(self) -> int:
        """The cells its prompt filled: those reused from the slot and the new ones."""
        return self.measured.cache_n + self.measured.prompt_n


@dataclass
class Way:
    """One way of a case, launched: serve's result and the answers."""

    label: str
    chosen: bool
    n_ctx: int
    result: Result
    answers: list[Answer] = field(default_factory=list)
    scales: str = ""  # the calibration's learned factors the predictions carried

    def decode_at(self, prompt: int) -> Answer | None:
        return next((a for a in self.answers if prompt * 0.9 <= a.prompt_end <= prompt * 1.1 + 64), None)


def token_ids(n: int, n_vocab: int) -> list[int]:
    """``n`` prompt tokens spread over the vocabulary (the same ``n`` gives the same prefix)."""
    span = max(1, n_vocab - FIRST_ID)
    return [FIRST_ID + (i * 7919) % span for i in range(n)]


def ask(address: str, ids: list[int], timeout: float) -> dict[str, Any]:
    """``POST /completion`` with the ids as the prompt; the engine's ``timings``."""
    body = {"prompt": ids, "n_predict": REPLY, "temperature": 0, "cache_prompt": True, "ignore_eos": True}
    req = urllib.request.Request(address.rstrip("/") + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            timings = json.loads(r.read())["timings"]
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:200]}") from exc
    return dict(timings)


def predict(plan: Any, answer: Answer) -> None:
    """The plan's tokens/s at the fill ``answer`` ran at (bench/bench_placement.py ``at_fill``)."""
    m = answer.measured
    if (at := at_fill(plan.speed, plan.launch, m.prompt_n, m.predicted_n, cached=m.cache_n)) is not None:
        answer.prefill_pred, answer.decode_pred = at.prefill, at.decode


def serve_args(case: Case, path: Path, devices: tuple[str, ...], alternative: str | None) -> argparse.Namespace:
    """``headroom serve``'s arguments for the case, as its parser makes them."""
    from app.cli import build_parser

    argv = ["serve", str(path), "-c", case.ctx, "-ctk", case.kv, "-ctv", case.kv, "-fa", "on",
            "--vram-target", case.budget, *case.flags, *devices,
            *((f"--alternative={alternative}",) if alternative else ())]  # (= : a label may start "-c")
    args = build_parser("serve").parse_args(argv)
    args.model = Path(args.model)
    args.n_parallel = args.n_parallel or 1
    return args


def plan_for(case: Case, path: Path, devices: tuple[str, ...], alternative: str | None) -> Any:
    """The plan ``headroom serve`` makes for the case (with ``--alternative``: for that way)."""
    from app.commands.common import settings_from_args
    from app.commands.serve import serve_plan
    from app.engine.discover import discover_engines
    from app.planner.gguf.model import read_shape

    args = serve_args(case, path, devices, alternative)
    plan, _ = serve_plan(args, read_shape(path), settings_from_args(args), discover_engines(None))
    return plan


def asked_ctx(case: Case, path: Path, devices: tuple[str, ...]) -> int:
    """The context the case asks for, in tokens ("128k": 131,072), as serve reads it."""
    from app.commands.common import settings_from_args

    return settings_from_args(serve_args(case, path, devices, None)).n_ctx


def run_way(case: Case, path: Path, devices: tuple[str, ...], label: str, chosen: bool, n_vocab: int,
            fills: tuple[int, ...], *, deadline: float, running_dir: Path, expected: Any = None) -> Way:
    """One way: its plan, ``headroom serve`` (the chosen way without ``--alternative``), the answers.
    ``expected``: the launch the case's plan listed for it (a row says when serve's plan differs)."""
    plan = plan_for(case, path, devices, None if chosen else label)
    fig = plan.speed_figures
    scales = "" if fig is None else (f"decode ×{fig.decode_scale.value:.3g}, prefill ×{fig.prefill_scale.value:.3g}"
                                     " (learned)")
    extra = (*devices, *(() if chosen else (f"--alternative={label}",)))
    result = Result(case.row(label, extra).key)
    if expected is not None and plan.launch != expected:  # (pass 1 can move a way: serve launches its plan)
        result.note += f"serve's plan with pass 1 is another launch: {plan.reason}; "
    way = Way(label, chosen, plan.launch.n_ctx, result, scales=scales)
    cells = plan.kv.n_ctx_seq if plan.kv is not None else plan.launch.n_ctx

    def answers(address: str) -> None:
        cached = 0
        for fill in fills:
            if fill + REPLY + 8 > cells:
                break
            left = deadline - time.monotonic() - 15
            if way.answers and fill > cached:  # (will its prefill end in time? at the last rate, with room)
                rate = way.answers[-1].measured.prompt_per_second
                if rate <= 0 or (fill - cached) / rate * 1.5 > left:
                    result.note += f"the {fill:,}-token answer not asked ({left:.0f} s left); "
                    break
            started = time.monotonic()
            t = Timings.from_json(ask(address, token_ids(fill, n_vocab), timeout=max(10.0, left)))
            a = Answer(t, seconds=round(time.monotonic() - started, 2))
            predict(plan, a)
            way.answers.append(a)
            cached = a.prompt_end + t.predicted_n
            print(f"    answer: {t.prompt_n} new + {t.cache_n} cached tokens, prefill {t.prompt_per_second:,.0f} tok/s "
                  f"(predicted {_num(a.prefill_pred)}), decode {t.predicted_per_second:,.1f} (predicted "
                  f"{_num(a.decode_pred)}) in {a.seconds} s", flush=True)

    row = case.row(label, extra)
    started = time.monotonic()
    serve(row, path, result, deadline=deadline, running_dir=running_dir, while_serving=answers)
    result.seconds = round(time.monotonic() - started, 1)
    return way


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def _speed_cell(a: Answer | None, side: str) -> str:
    if a is None:
        return ""
    m = a.measured
    meas, pred = (m.prompt_per_second, a.prefill_pred) if side == "prefill" else (m.predicted_per_second, a.decode_pred)
    ratio = f" ×{meas / pred:.2f}" if pred and meas > 0 else ""
    return f"{_num(meas)} / {_num(pred)}{ratio}"


def header(fills: tuple[int, ...]) -> str:
    """The table's head: the decode columns named by the fills the answers ran at."""
    def k(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 else "empty"

    cols = ["case", "way", "chosen", "-c", "plan GPU MiB", "NVML engine MiB", "error", "verdict",
            f"prefill {k(fills[1])} meas / pred", *(f"decode {k(f)}" for f in fills), "load s", "notes"]
    return "| " + " | ".join(cols) + " |\n" + "|---" * len(cols) + "|\n"


def table_line(case: Case, way: Way, verdict: dict[str, Any], fills: tuple[int, ...]) -> str:
    v: dict[str, Any] = next(iter(verdict.values()), {})
    r = way.result
    at = [way.decode_at(f) for f in fills]
    cells = [f"{case.model} {case.ctx} {case.kv}", way.label, "chosen" if way.chosen else "", f"{way.n_ctx:,}",
             _fmt(v.get("planned_mib")), _fmt(v.get("nvml_mib")), _fmt(v.get("error_mib"), "+"), r.status,
             _speed_cell(at[1] if len(at) > 1 else None, "prefill"),
             *(_speed_cell(a, "decode") for a in at),
             "" if r.load_s is None else f"{r.load_s:.0f}",
             (way.scales + "; " + r.note).strip("; ").replace("|", "/").replace("\n", " ")[:300]]
    return "| " + " | ".join(cells) + " |"


def _fmt(v: float | None, sign: str = "") -> str:
    return "" if v is None else f"{v:{sign},.0f}"


def verdict_lines(case: Case, ways: list[Way], fills: tuple[int, ...], asked: int) -> list[str]:
    """Issue 32's two bars for one case: the chosen way the fastest measured on decode (at the 16k fill,
    among the ways that keep the asked context; issue 30's rule) and every prediction within ±20 %. When
    no way keeps ``asked``, the plan offers both ends (the fastest shorter context, chosen, and the
    longest with a host tail): their decode is said beside each other."""
    decode = {w.label: a.measured.predicted_per_second for w in ways if (a := w.decode_at(fills[1])) is not None}
    chosen = next((w.label for w in ways if w.chosen), None)
    keep = {w.label: decode[w.label] for w in ways if w.n_ctx >= asked and w.label in decode}
    lines = []
    if keep:
        fastest = max(keep, key=lambda label: keep[label])
        said = ("met" if chosen == fastest else "no chosen way measured at that fill" if chosen not in keep else
                f"MISSED ({chosen} {keep[chosen]:,.1f} tok/s, {fastest} {keep[fastest]:,.1f})")
        lines.append(f"- {case.key}: the chosen way the fastest measured on decode at {fills[1]:,} tokens among "
                     f"those that keep {asked:,} ... {said}")
    elif decode:
        ends = sorted(((w.n_ctx, w.label) for w in ways if w.label in decode), reverse=True)
        lines.append(f"- {case.key}: no way keeps {asked:,}; decode at {fills[1]:,} tokens: "
                     + ", ".join(f"{label} (-c {n:,}{', chosen' if label == chosen else ''}) {decode[label]:,.1f} tok/s"
                                 for n, label in ends))
    pairs = [(w.label, side, m, p) for w in ways for a in w.answers
             for side, m, p in (("prefill", a.measured.prompt_per_second, a.prefill_pred),
                                ("decode", a.measured.predicted_per_second, a.decode_pred))
             if p and m > 0 and (side == "decode" or a.measured.prompt_n >= 512)]
    off = [f"{label} {side} ×{m / p:.2f}" for label, side, m, p in pairs if abs(m / p - 1) > PREDICTION_WITHIN]
    lines.append(f"- {case.key}: {len(pairs) - len(off)} of {len(pairs)} predictions within "
                 f"±{PREDICTION_WITHIN:.0%}" + (": off " + "; ".join(off) if off else ""))
    return lines


class Report:
    """``placement-<date>.md`` + ``placement.jsonl`` in the cache, mirrored to ``--out`` after every row."""

    def __init__(self, state: Path, out: Path, fills: tuple[int, ...]) -> None:
        self.state, self.out = state, out
        self.md = state / f"placement-{state.name}.md"
        self.jsonl = state / "placement.jsonl"
        for d in (state, out):
            d.mkdir(parents=True, exist_ok=True)
        if not self.md.exists():
            self.md.write_text("# Issue 32: the desktop card's placements on an H200 — memory and speed\n\n"
                               f"{about()}- speed: the engine's `timings` of one `/completion` each (token ids, "
                               f"{REPLY} tokens after), beside `headroom serve`'s plan at that fill (the calibration put back "
                               f"before each way: nothing learned between them); bar "
                               f"±{PREDICTION_WITHIN:.0%}\n\n{header(fills)}")
        self.mirror()

    def done(self) -> set[str]:
        if not self.jsonl.exists():
            return set()
        return {json.loads(line)["key"] for line in self.jsonl.read_text().splitlines() if line.strip()}

    def add(self, case: Case, way: Way, verdict: dict[str, Any], fills: tuple[int, ...]) -> None:
        with self.jsonl.open("a") as f:
            f.write(json.dumps({"key": way.result.key, "case": asdict(case), "label": way.label, "chosen": way.chosen,
                                "n_ctx": way.n_ctx, "scales": way.scales, "answers": [asdict(a) for a in way.answers],
                                "verdict": verdict, "result": way.result.to_json()}) + "\n")
        lines = self.md.read_text().split("\n")
        cut = next((i for i, x in enumerate(lines) if x.startswith("## ")), len(lines))
        table, rest = lines[:cut], lines[cut:] or []
        while table and not table[-1].strip():
            table.pop()
        if not any(x.startswith("## Commands") for x in rest):
            rest = ["## Commands", "", *rest]
        rest += [f"### {way.result.key} — {way.result.status}", "```", *way.result.commands,
                 f"# engine: {way.result.engine_command}", "```", ""]
        self.md.write_text("\n".join([*table, table_line(case, way, verdict, fills), "", *rest]))
        self.mirror()

    def close_case(self, lines: list[str]) -> None:
        text = self.md.read_text()
        head, sep, tail = text.partition("\n## Commands")
        verdicts = "## Verdicts\n\n" if "## Verdicts" not in head else ""
        self.md.write_text(head.rstrip("\n") + "\n\n" + verdicts + "\n".join(lines) + "\n" + (sep + tail if sep else ""))
        self.mirror()

    def mirror(self) -> None:
        for f in (self.md, self.jsonl):
            if f.exists():
                shutil.copy(f, self.out / f.name)


@contextlib.contextmanager
def stand_in(cpu: bool) -> Iterator[tuple[str, ...]]:
    """The devices' flags: none on the GPU machine; the dry run's loopback worker (``--rpc``)."""
    if not cpu:
        yield ()
        return
    from tests.fixtures.rpc import rpc_worker

    with rpc_worker() as (endpoint, _):
        yield ("--rpc", endpoint)


def main(argv: list[str] | None = None) -> int:
    p = step_parser(__doc__.splitlines()[0], unit="way", row_cap=150.0,
                    dry_run="the 8-layer model on a loopback worker (--first: the case to start at)")
    args = p.parse_args(argv)
    from app.planner.gguf.model import read_shape

    cases, fills = (cpu_cases(), CPU_FILLS) if args.cpu else (gpu_cases(), FILLS)
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    report = Report(cache_dir() / "bench-h200-placement" / (date + ("-cpu" if args.cpu else "")), args.out, fills)
    done = report.done()
    running = cache_dir() / "running"
    with stand_in(args.cpu) as devices:
        for n, case in enumerate(cases, 1):
            if n < args.first:
                continue
            if args.deadline - time.time() < args.min_row:
                print(f"[placement] stopping before case {n} ({case.key}): "
                      f"{', '.join(c.key for c in cases[n - 1:])} not run", flush=True)
                break
            path = model_path(case.model)
            n_vocab = read_shape(path).n_vocab
            try:
                overview = plan_for(case, path, devices, None)
            except Exception as exc:  # (a case that cannot be planned says so and the next one runs)
                report.close_case([f"- {case.key}: not planned: {type(exc).__name__}: {exc}"])
                continue
            listed = [a for a in overview.alternatives if a.feasible]
            # every way is predicted from the figures as they are now (calibrated, nothing learned from
            # this case): serve learns measured ÷ predicted after each launch, for every placement alike,
            # and one way's miss would move the next way's prediction
            snapshot = report.state / f"speed-calibration-{case.key}.json"
            if calibration_path().is_file():
                shutil.copy(calibration_path(), snapshot)
            print(f"[placement] case {n}/{len(cases)} {case.key}: {overview.reason}; ways: "
                  + "; ".join(f"{a.label}{' (chosen)' if a.chosen else ''}" for a in listed), flush=True)
            ways: list[Way] = []
            for alt in sorted(listed, key=lambda a: not a.chosen):
                left = args.deadline - time.time()
                if case.row(alt.label, ()).key in done:  # (a second call resumes after the ways done)
                    continue
                if left < args.min_row:
                    print(f"[placement] {left:.0f} s left: {alt.label} of {case.key} not run", flush=True)
                    break
                wait_gpu_idle(timeout=min(30.0, left / 3))
                if snapshot.is_file():
                    shutil.copy(snapshot, calibration_path())
                left = args.deadline - time.time() - 5
                print(f"[placement] {case.key}: {alt.label} ({left:.0f} s left)", flush=True)
                try:
                    way = run_way(case, path, devices, alt.label, alt.chosen, n_vocab, fills,
                                  deadline=time.monotonic() + min(left, args.row_cap), running_dir=running,
                                  expected=alt.launch)
                except Exception as exc:  # (its plan failed here, pass 1 say: the row says so, the next way runs)
                    failed = Result(case.row(alt.label, ()).key, status="failed",
                                    note=f"not planned: {type(exc).__name__}: {exc}"[:400])
                    way = Way(alt.label, alt.chosen, alt.launch.n_ctx, failed)
                verdict = judge(way.result)
                report.add(case, way, verdict, fills)
                ways.append(way)
                print(f"[placement] {alt.label}: {way.result.status} in {way.result.seconds:.0f} s "
                      f"{json.dumps(verdict)}", flush=True)
            if ways:
                lines = verdict_lines(case, ways, fills, asked_ctx(case, path, devices))
                print("\n".join(lines), flush=True)
                report.close_case(lines)
    print(f"[placement] results: {report.md}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
