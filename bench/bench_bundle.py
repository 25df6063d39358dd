"""The bundle beside the checkout: how big each is, and how long each takes to start (issue 21).

Sizes: the bundle folder (its Python and libraries, its engine), the tarball, and what a checkout
needs for the same (the venv, the engine build's bin/, the tracked sources). Cold start: a fresh
process each run, the same three commands for both, each with its own empty cache (one warm-up run
first writes the demo model and the engine's capability cache, as any user's first start does):

- ``--version``: the executable to its first line (the interpreter and the CLI's imports);
- ``plan DEMO --gpu "RTX 4090" --ctx 512k``: to a plan on the terminal (GGUF header, planner);
- ``gui --demo --screenshot`` (offscreen): to a saved picture of the first plan, after the engine
  list is found (each engine's ``--version`` and flag probes, then 300 ms for painting).

No target: the issue asks for the numbers side by side. Run after ``./dev bundle``:
``.venv/bin/python bench/bench_bundle.py [--bundle dist/headroom] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIB = 1024 * 1024


def du(path: Path) -> int:
    """Bytes in regular files under ``path`` (links not followed, sparse files at apparent size)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def tracked_bytes() -> int:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / name).stat().st_size for name in out.decode().split("\0") if name and (ROOT / name).is_file())


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True, timeout=300, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


def commands(demo: Path, shot: Path) -> list[tuple[str, list[str]]]:
    return [
        ("--version", ["--version"]),
        ("plan DEMO --ctx 512k", ["plan", str(demo), "--gpu", "RTX 4090", "--ctx", "512k"]),
        ("gui --demo --screenshot (offscreen)", ["gui", "--demo", "--screenshot", str(shot)]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "headroom")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    bundle: Path = args.bundle.resolve()
    report_file = bundle.parent / "bundle-report.json"
    if not (bundle / "headroom").is_file() or not report_file.is_file():
        print(f"no bundle at {bundle}: run ./dev bundle first", file=sys.stderr)
        return 2
    report = json.loads(report_file.read_text())
    from app.engine import native_build
    from app.ui.demo import write_demo_model

    build = native_build.find_build(bundled=False)
    venv = Path(sys.prefix)
    checkout_exe = venv / "bin" / "headroom"
    launchers = {"checkout": [str(checkout_exe)] if checkout_exe.is_file() else [sys.executable, "-m", "app"],
                 "bundle": [str(bundle / "headroom")]}
    print(f"# {time.strftime('%H:%M:%S UTC', time.gmtime())}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"bundle {bundle} (built in {report['times']['total_s']:.0f} s; PyInstaller {report['times']['pyinstaller_s']:.0f} s)")
    print()
    print(f"{'size':54} {'MiB':>8}")
    rows = [
        ("bundle folder, all of it", du(bundle)),
        ("  its Python, Qt and libraries (_internal/)", du(bundle / "_internal")),
        ("  its engine (engine/)", du(bundle / "engine")),
        ("tarball (gzip)", int(report.get("tarball_bytes", 0))),
        (f"checkout: the venv ({venv.name}/)", du(venv)),
        ("checkout: the engine build's bin/", du(Path(build.bin_dir)) if build else 0),
        ("checkout: the tracked sources (git ls-files)", tracked_bytes()),
    ]
    for name, size in rows:
        print(f"{name:54} {size / MIB:8.1f}")
    print()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HEADROOM_", "LLAMA_CPP_"))}
    base |= {"QT_QPA_PLATFORM": "offscreen"}
    print(f"{'cold start (median of ' + str(args.runs) + ', s)':40} {'checkout':>9} {'bundle':>9} {'bundle/checkout':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        demo = write_demo_model(Path(tmp) / "demo.gguf")
        results: dict[str, dict[str, list[float]]] = {}
        for who, launcher in launchers.items():
            env = base | {"HEADROOM_CACHE_DIR": str(Path(tmp) / f"cache-{who}"),
                          "HEADROOM_CONFIG_DIR": str(Path(tmp) / f"config-{who}")}
            for label, cmd in commands(demo, Path(tmp) / f"{who}.png"):
                timed([*launcher, *cmd], env)  # warm-up: the first start's caches
                results.setdefault(label, {})[who] = [timed([*launcher, *cmd], env) for _ in range(args.runs)]
        for label, by in results.items():
            c, b = statistics.median(by["checkout"]), statistics.median(by["bundle"])
            print(f"{label:40} {c:9.3f} {b:9.3f} {b / c:16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
