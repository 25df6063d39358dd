"""Turn an H200 run's output (the device tool's ``files_at`` folder) into the recorded test fixtures.

    python3 bench/h200/record.py FILES_AT [SWEEP_TXT ...] [--log KEY]

Writes ``tests/fixtures/h200/``:

- ``pass1.jsonl``: every CUDA pass 1 measured there (the matrix's ``headroom measure --json`` and any
  extra sweep of ``headroom measure --json`` outputs, each preceded by a ``### file ctx ...`` line),
  one record per line: the shape model's name, the launch settings, the compute buffer per device;
- ``rows.jsonl``: each matrix row's launch, the GPU as NVML saw it before the launch (total, not free),
  the engine process's NVML reading and serve's plan with pass 1 (the issue 9 bar);
- ``KEY.engine.log`` for ``--log KEY``: that row's whole ``-lv 4`` engine log, behind a provenance header.

Tests replay these (tests/unit/planner/test_estimate.py, tests/unit/planner/test_h200_recorded.py): what
needs the GPU is recorded once here; everything computed from it is recomputed in the tests.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
_HASHED = re.compile(r"-[0-9a-f]{12}\.gguf$")


def _pass1_record(model: str, doc: dict[str, Any]) -> dict[str, Any]:
    m = doc["measurement"]
    return {"model": model, "settings": doc["settings"], "backend": m["backend"], "llama_commit": m["llama_commit"],
            "devices": [{"name": d["name"], "compute": d["compute"], "host": d["host"]} for d in m["devices"]]}


def sweep_records(path: Path) -> list[dict[str, Any]]:
    out = []
    for block in path.read_text().split("### ")[1:]:
        head, _, body = block.partition("\n")
        try:
            doc = json.loads(body[body.index("{"):])
        except ValueError:
            print(f"[record] skipped (no JSON): {head}", file=sys.stderr)
            continue
        if "measurement" not in doc:  # (a launch pass 1 refused: its error, not a record)
            print(f"[record] skipped (no measurement: {str(doc.get('error', ''))[:120]}): {head}", file=sys.stderr)
            continue
        out.append(_pass1_record(_HASHED.sub("", head.split()[0]), doc))
    return out


def row_records(rows_jsonl: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pass1, rows = [], []
    for line in rows_jsonl.read_text().splitlines():
        r = json.loads(line)
        model = r["key"].split("-c")[0]
        if r.get("measurement"):
            pass1.append(_pass1_record(model, r["measurement"]))
        gpu = (r.get("plan_estimated") or {}).get("gpus", [{}])[0]
        verdict = (r.get("verdict") or {}).get("CUDA0", {})
        if r.get("status") != "ok" or not gpu or not verdict:
            continue
        rows.append({"key": r["key"], "model": model, "launch": r["plan_estimated"]["launch"],
                     "gpu_total": gpu["total"], "gpu_not_free": gpu["other_processes"],
                     "nvml_engine_mib": verdict["nvml_mib"], "planned_with_pass1_mib": verdict["planned_mib"],
                     "check": r["check"], "smoke": r.get("smoke", "")})
    return pass1, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files_at", type=Path)
    ap.add_argument("sweeps", type=Path, nargs="*")
    ap.add_argument("--log", action="append", default=[], help="row key whose engine log to keep")
    args = ap.parse_args()
    report = next(args.files_at.glob("h200-*.md"))
    date = report.stem.removeprefix("h200-")
    pass1, rows = row_records(args.files_at / "rows.jsonl")
    for sweep in args.sweeps:
        pass1 += sweep_records(sweep)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    origin = f"recorded on an NVIDIA H200 on {date} by bench/h200/ (see bench/results/{report.name})"
    with open(FIXTURES / "pass1.jsonl", "w") as f:
        f.writelines(json.dumps(p, sort_keys=True) + "\n" for p in pass1)
    with open(FIXTURES / "rows.jsonl", "w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    (FIXTURES / "ORIGIN").write_text(origin + "\n")
    with tarfile.open(args.files_at / "logs.tar.gz") as tar:
        for key in args.log:
            member = tar.extractfile(f"logs/{key}.engine.log")
            if member is None:
                raise SystemExit(f"no engine log for {key}")
            text = member.read().decode(errors="replace")
            (FIXTURES / f"{key}.engine.log").write_text(f"# {origin}\n# row {key}: the engine's -lv 4 log, "
                                                        f"unchanged below this header\n{text}")
    print(f"[record] {len(pass1)} pass-1 records, {len(rows)} rows, {len(args.log)} logs -> {FIXTURES}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
