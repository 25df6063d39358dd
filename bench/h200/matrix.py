"""Issue 9's matrix on the H200: for each row, plan → measure → serve through the ``headroom`` CLI,
then plan vs NVML's per-process reading, appended to ``h200-<date>.md`` as it goes.

    python3 bench/h200/matrix.py --out DIR --deadline EPOCH_S [--cpu]

Rows run in priority order (the must-show 512k Qwen2.5-14B-1M fork first, then one row per model,
then the rest); a row starts only when ``--min-row`` seconds are left before the deadline. Results
are kept in ``<cache>/bench-h200/<date>/`` and copied to ``--out`` after every row, so a timeout
still returns them and a second call on the same (warm) machine resumes where the first stopped.
``--cpu`` is the dry run for a machine without a GPU: the tiny loadable model, two small rows.
``--rows extras`` runs issue 32's projector and draft rows instead (tiny models: on the CPU too).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.paths import cache_dir  # noqa: E402
from bench.h200.serve_row import MiB, Result, Row, run_row, step_parser, wait_gpu_idle  # noqa: E402

#: Issue 9's bar: the plan within 1 % or 64 MiB (whichever is larger) of NVML's engine process.
TOLERANCE_SHARE = 0.01
TOLERANCE_FLOOR_MIB = 64.0

QWEN_1M, LLAMA_8B, GEMMA_12B, QWEN3_MOE = (
    "qwen2.5-14b-instruct-1m-q8_0", "llama-3.1-8b-instruct-q4_k_m", "gemma-3-12b-it-q4_k_m",
    "qwen3-30b-a3b-q4_k_m")


def h200_rows() -> list[Row]:
    """Every combination of issue 9, most informative first."""
    first = [
        Row(QWEN_1M, "512k", "f16", 4, True, smoke=True),  # must show: 512k launches and forks
        Row(QWEN_1M, "128k", "f16"), Row(LLAMA_8B, "128k", "f16"), Row(GEMMA_12B, "128k", "f16"),
        Row(QWEN3_MOE, "128k", "f16"),
        Row(QWEN_1M, "512k", "q8_0"),  # q8_0 at 512k: the dequantization scratch (docs/domain.md §2)
        Row(QWEN_1M, "128k", "q8_0"), Row(LLAMA_8B, "128k", "q8_0"), Row(GEMMA_12B, "128k", "q8_0"),
        Row(QWEN3_MOE, "128k", "q8_0"),
    ]
    rest = [Row(m, c, kv, np_, np_ > 1)
            for m in (QWEN_1M, LLAMA_8B, GEMMA_12B, QWEN3_MOE)
            for c in ("128k", "512k") for np_ in (4, 1) for kv in ("f16", "q8_0")]
    keys = {r.key for r in first}
    return first + [r for r in rest if r.key not in keys and (r.key + "-smoke") not in keys]


def cpu_rows() -> list[Row]:
    """The dry run: the tiny chat model, one plain row and one forked unified row."""
    return [Row("tiny-llama-chat", "4096", "f16"), Row("tiny-llama-chat", "4096", "f16", 2, True, smoke=True)]


def extras_rows() -> list[Row]:
    """Issue 32's step 3: a vision projector and a draft model on CUDA (the test fixtures' tiny ones, as
    tests/integration/test_mmproj.py and test_extras.py launch them on the CPU), planned vs NVML."""
    from tests.fixtures import adapters, gguf_factory, shapes

    mmproj = str(gguf_factory.ensure(shapes.TINY_MMPROJ))
    draft = str(adapters.draft_model())
    return [Row(shapes.TINY_CHAT.name, "4096", "f16", extra=("--mmproj", mmproj), tag="mmproj"),
            Row(shapes.TINY_DEEP.name, "32768", "f16", extra=("-md", draft, "-ctkd", "q8_0"), tag="draft")]


def model_path(name: str) -> Path:
    """The generated GGUF (sparse for shape-only models), written on first use."""
    from tests.fixtures import gguf_factory, shapes

    tiny = {s.name: s for s in (shapes.TINY_CHAT, shapes.TINY_DEEP)}
    return gguf_factory.ensure(tiny[name] if name in tiny else shapes.BY_NAME[name])


def _planned_gpu_mib(result: Result, device: str) -> float | None:
    """The plan's GPU total when serve printed no process row (NVML did not attribute the engine):
    its weights + KV + compute rows for ``device`` plus the overhead ``headroom plan`` counts."""
    parts = [c["planned_mib"] for c in result.check if c["device"] == device and c["part"] != "process"]
    gpus = (result.plan_estimated or {}).get("gpus") or []
    if not parts or any(p is None for p in parts) or not gpus:
        return None
    return round(float(sum(parts)) + int(gpus[0].get("overhead", 0)) / MiB, 1)


def judge(result: Result) -> dict[str, Any]:
    """Plan vs NVML for the engine process on each GPU; fills ``status`` and returns the numbers."""
    pid = result.nvml.get("engine_pid")
    verdict: dict[str, Any] = {}
    for gpu in result.nvml.get("gpus", []):
        device = f"CUDA{gpu['index']}"
        row = next((c for c in result.check if c["device"] == device and c["part"] == "process"), None)
        procs = gpu.get("processes", [])
        used = next((p["used"] for p in procs if p["pid"] == pid), None)
        if used is None and len(procs) == 1:  # another PID namespace: the only process is the engine
            used = procs[0]["used"]
        actual = used / MiB if isinstance(used, int) else (row or {}).get("actual_mib")
        planned = row["planned_mib"] if row else _planned_gpu_mib(result, device)
        if planned is None or actual is None:
            continue
        tol = max(TOLERANCE_SHARE * actual, TOLERANCE_FLOOR_MIB)
        verdict[device] = {"planned_mib": planned, "nvml_mib": round(actual, 1),
                           "error_mib": round(actual - planned, 1), "tolerance_mib": round(tol, 1),
                           "ok": abs(actual - planned) <= tol,
                           "nvml_source": "pynvml per-process" if used is not None else "serve's table",
                           "planned_source": "serve's process row" if row else "serve's buffers + plan overhead"}
    if result.status != "not run":  # no fit, failed, timeout: already said
        return verdict
    buffers_ok = all(c["verdict"] != "OFF" for c in result.check if c["part"] != "process")
    if verdict:
        result.status = "ok" if all(v["ok"] for v in verdict.values()) else "off"
        if not any(c["part"] == "process" for c in result.check):
            result.note += "serve's check had no NVML process row (judged from pynvml here); "
    elif not result.nvml.get("gpus"):
        result.status = "ok (no GPU)" if buffers_ok and result.check else "off (no GPU)"
    else:
        result.status, result.note = "off", result.note + "NVML did not report the engine process; "
    return verdict


def _estimated_total_mib(result: Result) -> float | None:
    gpus = (result.plan_estimated or {}).get("gpus") or []
    if not gpus:
        return None
    g = gpus[0]
    return round(sum(int(g.get(k, 0)) for k in ("weights", "kv_resident", "compute", "overhead")) / MiB, 1)


def table_line(n: int, row: Row, result: Result, verdict: dict[str, Any]) -> str:
    v: dict[str, Any] = next(iter(verdict.values()), {})
    off = [f"{c['device']} {c['part']} {c['error_mib']:+.0f}" for c in result.check
           if c["verdict"] == "OFF" and c["error_mib"] is not None]
    cells = [str(n), row.model, row.ctx, row.kv, f"{row.n_parallel}{' -kvu' if row.kv_unified else ''}",
             _fmt(v.get("planned_mib")), _fmt(v.get("nvml_mib")), _fmt(v.get("error_mib"), "+"),
             _fmt(v.get("tolerance_mib")), result.status, _fmt(_estimated_total_mib(result)),
             "" if result.load_s is None else f"{result.load_s:.0f}", "; ".join(off),
             (result.smoke + " " + result.note).strip().replace("|", "/").replace("\n", " ")[:300]]
    return "| " + " | ".join(cells) + " |"


def _fmt(v: float | None, sign: str = "") -> str:
    return "" if v is None else f"{v:{sign},.0f}"


HEADER = ("| # | model | ctx | KV | -np | plan GPU MiB | NVML engine MiB | error | tol | verdict | "
          "plan w/o pass 1 | load s | parts off (MiB) | notes |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def about() -> str:
    """The machine, the engine and the Headroom the table was made with, and the bar it is held to."""
    lines = [f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"]
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        lines.append(f"- GPU: {name.decode() if isinstance(name, bytes) else name}, "
                     f"{pynvml.nvmlDeviceGetMemoryInfo(h).total / MiB:,.0f} MiB, driver "
                     f"{pynvml.nvmlSystemGetDriverVersion()}")
        pynvml.nvmlShutdown()
    except Exception as exc:  # the CPU dry run
        lines.append(f"- GPU: none ({type(exc).__name__})")
    from app.engine.native_build import find_build

    build = find_build()
    if build is not None:
        lines.append(f"- engine: llama.cpp {build.commit[:9]} ({build.backend.slug}), built in {build.seconds:.0f} s: "
                     f"`{build.backend_reason}`")
    git = ROOT / ".device" / "HEADROOM_GIT"
    if git.is_file():
        lines.append(f"- Headroom: {' — '.join(git.read_text().split(chr(10))[:2])}")
    lines.append(f"- bar (issue 9): the plan's GPU total (weights + KV + compute + overhead) within "
                 f"{TOLERANCE_SHARE:.0%} or {TOLERANCE_FLOOR_MIB:.0f} MiB, whichever is larger, of NVML's "
                 "used memory for the engine process")
    lines.append("- 'plan w/o pass 1': `headroom plan` (compute estimated); every other number is `headroom "
                 "serve`'s plan with pass 1. Engine logs and full output: logs.tar.gz, rows.jsonl")
    return "\n".join(lines) + "\n\n"


class Report:
    """``h200-<date>.md`` + ``rows.jsonl`` + the engine logs, kept in the cache and mirrored to --out."""

    def __init__(self, state: Path, out: Path, title: str) -> None:
        self.state, self.out = state, out
        self.md = state / f"h200-{state.name}.md"
        self.jsonl = state / "rows.jsonl"
        self.logs = state / "logs"
        for d in (state, out, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        if not self.md.exists():
            self.md.write_text(f"# {title}\n\n{about()}{HEADER}")
        self.mirror()

    def done(self) -> set[str]:
        if not self.jsonl.exists():
            return set()
        return {json.loads(line)["key"] for line in self.jsonl.read_text().splitlines() if line.strip()}

    def add(self, n: int, row: Row, result: Result, verdict: dict[str, Any]) -> None:
        if result.engine_log and Path(result.engine_log).is_file():
            shutil.copy(result.engine_log, self.logs / f"{row.key}.engine.log")
        (self.logs / f"{row.key}.serve.txt").write_text("\n".join([*result.commands, "", *result.output]) + "\n")
        with self.jsonl.open("a") as f:
            f.write(json.dumps(result.to_json() | {"verdict": verdict}) + "\n")
        lines = self.md.read_text().split("\n")
        cut = next((i for i, x in enumerate(lines) if x.startswith("## Commands")), len(lines))
        table, commands = lines[:cut], lines[cut:] or ["## Commands", ""]
        while table and not table[-1].strip():
            table.pop()
        commands += [f"### {n}. {row.key} — {result.status}", "```", *result.commands,
                     f"# engine: {result.engine_command}", "```", ""]
        self.md.write_text("\n".join([*table, table_line(n, row, result, verdict), "", *commands]))
        self.mirror()

    def mirror(self) -> None:
        for f in (self.md, self.jsonl):
            if f.exists():
                shutil.copy(f, self.out / f.name)
        with tarfile.open(self.out / "logs.tar.gz", "w:gz") as tf:
            tf.add(self.logs, arcname="logs")


def main(argv: list[str] | None = None) -> int:
    p = step_parser(__doc__.splitlines()[0], unit="row", row_cap=240.0, dry_run="the tiny model")
    p.add_argument("--rows", choices=("memory", "extras"), default="memory",
                   help="issue 9's memory matrix, or issue 32's projector and draft rows (on the CPU too)")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    rows = extras_rows() if args.rows == "extras" else cpu_rows() if args.cpu else h200_rows()
    title = args.title or ("Headroom on an NVIDIA H200: a projector and a draft model, plan vs actual (issue 32)"
                           if args.rows == "extras" else "Headroom on an NVIDIA H200: plan vs actual (issue 9)")
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    name = date + ("-extras" if args.rows == "extras" else "") + ("-cpu" if args.cpu else "")
    report = Report(cache_dir() / "bench-h200" / name, args.out, title)
    done = report.done()
    for n, row in enumerate(rows, 1):
        left = args.deadline - time.time()
        if row.key in done or n < args.first:
            continue
        if left < args.min_row:
            print(f"[matrix] {left:.0f} s left: stopping before row {n} ({row.key}); "
                  f"{len(rows) - n + 1} rows not run", flush=True)
            break
        print(f"[matrix] row {n}/{len(rows)} {row.key} ({left:.0f} s left)", flush=True)
        path = model_path(row.model)
        if not wait_gpu_idle(timeout=min(30.0, left / 3)):
            print("[matrix] a process still holds GPU memory; the plan will count it", flush=True)
        left = args.deadline - time.time() - 5  # the row must end inside the call's budget
        result = run_row(row, path, deadline=time.monotonic() + min(left, args.row_cap),
                         running_dir=cache_dir() / "running")
        verdict = judge(result)
        report.add(n, row, result, verdict)
        print(f"[matrix] row {n}: {result.status} in {result.seconds:.0f} s {json.dumps(verdict)}", flush=True)
    else:
        print(f"[matrix] every row from {args.first} is done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
