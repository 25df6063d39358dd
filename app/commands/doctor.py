"""``headroom doctor``: a true report of what this machine has for Headroom, and whether the engine
Headroom would launch serves on this CPU (app/engine/selftest.py: a real load of a tiny model)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import __version__, paths
from app.commands.common import add_engine_arg
from app.engine import native_build
from app.engine.libpath import ensure_llama_cpp_lib, gpu_backends, load_backends
from app.planner.units import Bytes
from app.planner.words import plural

if TYPE_CHECKING:
    from app.engine.discover import EngineInfo


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", allow_abbrev=False,
                       epilog="Exit status: 0 the report was printed and the engine Headroom would launch serves "
                              "(any other problem is in the report); 1 no engine can serve on this CPU: none found "
                              "or chosen, or its self-test failed (or --recalibrate could not forget the stored "
                              "figures); 2 bad flags, or an --engine that is not an engine.",
                       help="report Python, Qt, llama-cpp-python, NVML, engines, cache; test the engine on this CPU")
    add_engine_arg(p, "to report on and self-test")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-selftest", action="store_true",
                   help="do not start the engine on a tiny model (the report only; exit 0 unless --recalibrate "
                        "fails)")
    p.add_argument("--recalibrate", action="store_true",
                   help="forget this machine's stored speed figures (host memory and compute timings, the "
                        "CPU-attention runs, what launches taught) and measure the CPU's again now; the rest "
                        "is measured by the next plan; refused, and nothing forgotten, on a busy machine or "
                        "without a llama-batched-bench")
    p.set_defaults(func=run)


def _pyside() -> dict[str, Any]:
    """PySide6's version without importing Qt (only app/ui imports PySide6)."""
    from importlib import metadata, util

    if util.find_spec("PySide6") is None:
        return {"ok": False, "reason": "PySide6 not installed (pip install PySide6-Essentials)"}
    for dist in ("PySide6-Essentials", "PySide6"):
        try:
            return {"ok": True, "version": metadata.version(dist)}
        except metadata.PackageNotFoundError:
            continue
    return {"ok": True, "version": "unknown"}


#: What "Shared library with base name 'llama' not found" means to a user: no engine yet (doctor).
NO_LIBRARY = ("no llama.cpp library yet, so pass 1 cannot measure (plans estimate the compute buffer "
              "meanwhile): it comes with an engine — run `headroom engine build`, or choose an engine whose "
              "folder holds libllama.so (File ▸ Choose engine…)")


def _llama_cpp() -> dict[str, Any]:
    """The bindings pass 1 loads, on the libllama beside the chosen engine (as measure and plan), else
    the one ``ensure_llama_cpp_lib`` finds."""
    import os

    from app.engine.chosen import chosen_engine
    from app.engine.libpath import lib_dir_beside

    lib_dir = lib_dir_beside(chosen_engine())
    if lib_dir is not None:
        os.environ["LLAMA_CPP_LIB_PATH"] = lib_dir
    else:
        lib_dir = ensure_llama_cpp_lib()
    try:
        import llama_cpp
        load_backends(lib_dir)  # a portable build's backends (the bundle's): ggml would look beside Python
    except (ImportError, OSError, RuntimeError, FileNotFoundError) as exc:
        reason = NO_LIBRARY if lib_dir is None else f"not loadable from {lib_dir}: {exc}"
        return {"ok": False, "reason": reason, "error": str(exc), "lib_dir": lib_dir}
    backends = gpu_backends(lib_dir)
    offload = bool(llama_cpp.llama_supports_gpu_offload()) and bool(backends)
    return {
        "ok": True,
        "version": getattr(llama_cpp, "__version__", "unknown"),
        "gpu_offload": offload,
        "gpu_backends": backends,
        "llama_supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "lib_dir": lib_dir,
        "note": "" if offload else
        'CPU build: pass 1 measures CPU buffers only; for GPU numbers build the engine with CUDA '
        '(headroom engine build --backend cuda) or install a CUDA build of llama-cpp-python '
        '(CMAKE_ARGS="-DGGML_CUDA=on" pip install llama-cpp-python==0.3.36)',
    }


def _nvml() -> dict[str, Any]:
    from app.machine.devices import nvml_status

    return nvml_status()


def _nvml_lines(nv: dict[str, Any]) -> list[str]:
    """The NVML part of the report: driver, one line per GPU, then warnings."""
    if not nv.get("ok"):
        return [_line("NVML", f"unavailable — {nv.get('reason') or 'unknown reason'}; planning uses the CPU "
                              "or simulated GPUs (--gpu H200)")]
    lines = [_line("NVML", f"driver {nv.get('driver') or '?'}, CUDA {nv.get('cuda') or '?'}, "
                           f"{plural(nv.get('gpus', 0), 'GPU')}" + (f" — {nv['reason']}" if nv.get("reason") else ""))]
    for d in nv.get("devices", []):
        link = f", PCIe gen{d['pcie_gen']} x{d['pcie_width']}" if d.get("pcie_gen") else ""
        lines.append(_line(f"  GPU {d['index']}", f"{d['name']}: {Bytes(d['free'])} free of {Bytes(d['total'])}"
                                                  f" ({plural(len(d['processes']), 'process', 'processes')}{link})"))
    lines += [_line("  warning", w) for w in nv.get("warnings", [])]
    return lines


def _hub() -> dict[str, Any]:
    """Which Hub, whether a token is there (never the token), where downloads and header copies go.
    No network: doctor stays instant offline."""
    import os

    from app.hub.cache import hub_cache
    from app.hub.errors import endpoint
    from app.hub.preview import hub_dir

    try:
        from huggingface_hub import get_token

        stored = get_token() is not None
    except ImportError:
        stored = False
    token = "HF_TOKEN" if os.environ.get("HF_TOKEN") else ("stored login" if stored else "")
    previews = list(hub_dir().rglob("*.gguf")) if hub_dir().is_dir() else []
    return {"endpoint": endpoint(), "token": token, "models_dir": str(hub_cache()),
            "header_copies": len(previews), "header_copies_dir": str(hub_dir())}


def _hub_line(hub: dict[str, Any]) -> str:
    token = f"token from {hub['token']}" if hub["token"] else "no token (public repos only; `hf auth login`)"
    return _line("Hugging Face", f"{hub['endpoint']} — {token}; downloads to the Hugging Face cache {hub['models_dir']}; "
                                 f"{hub['header_copies']} header-only copies in {hub['header_copies_dir']}")


def _engines(found: list[EngineInfo]) -> list[dict[str, Any]]:
    """Each engine as JSON, with its CPU code and what its GPU code does on this machine's cards
    (app/engine/gpu_reach.py: ``gpu_code``, and ``gpu_here``: the sentence or note, or which cards it uses)."""
    from app.engine.gpu_reach import reach
    from app.machine.devices import inventory

    machine = inventory()
    out = []
    for e in found:
        r = reach(e, machine)
        used = [g for g in machine.local_gpus if g.index in r.gpus]
        here = r.sentence or r.note or (
            "it runs on " + ", ".join(f"GPU {g.index} ({g.name}" + (f", sm_{g.compute[0]}{g.compute[1]}" if g.compute
                                                                     else "") + ")" for g in used) if used else "")
        out.append(e.to_json() | {"cpu_code": e.cpu_code, "system_info": e.system_info, "gpu_code": r.gpu_code,
                                  "gpu_here": here})
    return out


def _launching(found: list[EngineInfo]) -> EngineInfo | None:
    """The engine a launch would use (the chosen one, else the first found)."""
    from app.engine.discover import choose
    from app.planner.plan_types import PlanMode

    return choose(found, PlanMode.CPU)


def _selftest(engine: EngineInfo | None) -> dict[str, Any] | None:
    """``engine`` (the one a launch would use) started once on the self-test model; None when there is
    no engine."""
    from app.engine.selftest import run_selftest

    if engine is None:
        return None
    result = run_selftest(engine)
    return {"ok": result.ok, "engine": result.engine, "seconds": round(result.seconds, 2), "words": str(result),
            "kind": None if result.failure is None else result.failure.kind, "system_info": result.cpu_line,
            "log_tail": [] if result.failure is None else list(result.failure.tail)}


def collect(selftest: bool = False, recalibrate: bool = False, engine: Path | None = None) -> dict[str, Any]:
    """The report; ``recalibrate``: the stored speed figures forgotten first and the CPU's measured again
    (``recalibrated``: where they were kept, or why they could not be forgotten); ``engine``: the file
    ``--engine`` gave, reported and self-tested in place of the chosen one (``given_engine``: why it
    cannot be, or None)."""
    report: dict[str, Any] = {
        "headroom": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "pyside6": _pyside(),
        "llama_cpp_python": _llama_cpp(),
        "cache_dir": str(paths.cache_dir()),
        "bundle": None if paths.bundle_dir() is None else str(paths.bundle_dir()),
        "hub": _hub(),
    }
    try:
        report["nvml"] = _nvml()
    except ImportError as exc:  # devices module not importable
        report["nvml"] = {"ok": False, "reason": str(exc)}
    found: list[EngineInfo] = []  # (discovered once: each probes every engine binary)
    try:
        from app.engine.discover import discover_engines

        found = discover_engines(engine)
        if engine is not None:
            from app.commands.common import given_engine_problem
            from app.engine.discover import EngineOrigin

            report["given_engine"] = given_engine_problem(engine, found)
            found = [e for e in found if e.source == EngineOrigin.SETTINGS]  # that engine, never another
        report["engines"] = _engines(found)
    except ImportError:
        build = native_build.find_build()
        report["engines"] = [] if build is None else [{"path": str(build.server), "kind": "llama-server",
                                                       "version": build.commit[:9], "backend": build.backend.slug,
                                                       "llama_cpp": build.label, "patches": list(build.patches)}]
    from app.engine.chosen import chosen_engine_missing

    gone = chosen_engine_missing()
    report["chosen_engine_gone"] = None if gone is None else str(gone)
    launching = _launching(found) if selftest or recalibrate else None
    if selftest:
        report["selftest"] = _selftest(launching)
    if recalibrate:
        report["recalibrated"] = _recalibrate(launching)
    report["cpu_attention"] = _cpu_attention(measure=selftest or recalibrate, engine=launching)
    report["architectures"] = _architectures()
    return report


def _architectures() -> dict[str, Any]:
    """How many architectures the engine's llama.cpp knows and how each is planned (docs/architectures.md)."""
    from app.engine.architectures import engine_source, read_architectures, rows, summary

    src = engine_source()
    names = read_architectures(src) if src is not None else ()
    if not names:
        return {"ok": False, "words": "the engine's source is not here (a bundle carries none): docs/architectures.md "
                                      "lists the architectures of the llama.cpp it carries"}
    found = rows(names)
    return {"ok": True, "words": summary(names), "estimated": [r.name for r in found if r.how == "estimated"],
            "measured": [r.name for r in found if r.how == "measured"]}


def _recalibrate(engine: EngineInfo | None) -> dict[str, Any]:
    """Forget the stored speed figures and time the host's memory and compute again (``--recalibrate``);
    the CPU-attention runs follow in ``_cpu_attention``. Nothing is forgotten that cannot be measured
    again now: not on a busy machine (a figure of a busy moment would be kept for good), nor without a
    llama-batched-bench to time the CPU's attention with."""
    from app.engine.attention_runs import find_bench, host_only
    from app.machine import calibrate

    path = calibrate.calibration_path()
    if (why := calibrate.busy()) is not None:
        return {"ok": False, "path": str(path), "words": f"not forgotten: the machine is busy ({why}), and what is "
                "measured now is kept for good; run `headroom doctor --recalibrate` again when it is quieter"}
    if find_bench(engine) is None:
        return {"ok": False, "path": str(path), "words": "not forgotten: there is no llama-batched-bench to time this "
                "CPU's attention again with (`headroom engine build`)"}
    if not calibrate.forget():
        return {"ok": False, "path": str(path), "words": f"could not forget the stored figures: {path} cannot be "
                "removed (a read-only cache?); remove it yourself and run this again"}
    data = calibrate.calibration(host_only())
    stored = "" if data.get("saved") is not False else f" (not stored: {path} cannot be written; this run only)"
    return {"ok": True, "path": str(path), "words": f"forgotten and measured again{stored}: host memory "
            f"{data['host_bandwidth'] / 1e9:.3g} GB/s (a 64 MiB copy), compute {data['host_flops'] / 1e9:.3g} "
            "GFLOP/s (a float32 matmul); what launches taught starts again from the next launch"}


def _cpu_attention(*, measure: bool, engine: EngineInfo | None) -> list[str]:
    """The speed model's CPU-attention figures for this machine (64- and 128-wide heads): stored, or
    measured now with an engine's llama-batched-bench (``measure``: doctor runs engines; ``engine``'s,
    the one a launch would use, where it has one: not only Headroom's own build's), or why not."""
    import sys

    from app.engine.attention_runs import host_runs

    return host_runs(measure_missing=measure, say=lambda line: print(line, file=sys.stderr, flush=True),
                     engine=engine)


def _line(label: str, value: str) -> str:
    return f"{label:<18} {value}"


def run(args: argparse.Namespace) -> int:
    report = collect(selftest=not args.no_selftest, recalibrate=args.recalibrate, engine=args.engine)
    if report.get("given_engine"):
        print(f"headroom doctor: {report['given_engine']}", file=sys.stderr)
        if args.json:  # (fails in JSON too, as measure --json does)
            print(json.dumps({"ok": False, "error": report["given_engine"]}, indent=2))
        return 2
    test = report.get("selftest")
    status = 1 if not args.no_selftest and (test is None or not test["ok"]) else 0  # no engine serves
    if not (report.get("recalibrated") or {"ok": True})["ok"]:
        status = 1
    if args.json:
        print(json.dumps(report, indent=2))
        return status
    print(_line("Headroom", report["headroom"]))
    print(_line("Python", report["python"]))
    if report["bundle"]:
        print(_line("Bundle", f"{report['bundle']} (read-only: caches and settings stay in your directories)"))
    qt = report["pyside6"]
    print(_line("PySide6", qt["version"] if qt["ok"] else qt["reason"]))
    lc = report["llama_cpp_python"]
    if lc["ok"]:
        mode = (f"GPU offload: yes ({', '.join(lc['gpu_backends'])})" if lc["gpu_offload"]
                else "GPU offload: no (CPU build; llama_supports_gpu_offload() says "
                f"{lc['llama_supports_gpu_offload']} because of the RPC backend)")
        print(_line("llama-cpp-python", f"{lc['version']} — {mode}; library from {lc['lib_dir']}"))
        if lc["note"]:
            print(_line("", lc["note"]))
    else:
        print(_line("llama-cpp-python", lc["reason"]))
    for line in _nvml_lines(report["nvml"]):
        print(line)
    engines = report["engines"]
    if not engines:
        print(_line("Engines", "none found (run `headroom engine build`, or choose one in the window, "
                               "File ▸ Choose engine…)"))
    if report.get("chosen_engine_gone"):
        print(_line("Chosen engine", f"gone: {report['chosen_engine_gone']} (choose another: File ▸ Choose engine…)"))
    for e in engines:
        what = f" ({e['llama_cpp']})" if e.get("llama_cpp") else ""
        where = f" ({e['source']})" if e.get("source") else ""
        print(_line("Engine", f"{e.get('kind', '?')} {e.get('version', '')}{what} at {e.get('path', '?')}{where}"))
        if e.get("cpu_code"):
            print(_line("  CPU code", e["cpu_code"]))
        if e.get("gpu_code"):
            print(_line("  GPU code", e["gpu_code"]))
        if e.get("gpu_here"):
            print(_line("  here", e["gpu_here"]))
    if test is None and not args.no_selftest:
        print(_line("Engine self-test", "no engine to test, so nothing can serve yet (see Engines)"))
    if test is not None:
        print(_line("Engine self-test", f"{test['engine']} {test['words']}"))
        for line in test["log_tail"]:
            print(_line("", f"  {line}"))
    if (recal := report.get("recalibrated")) is not None:
        print(_line("Speed figures", recal["words"]))
    for line in report["cpu_attention"]:
        print(_line("CPU attention", line))
    print(_line("Architectures", report["architectures"]["words"]))
    print(_hub_line(report["hub"]))
    print(_line("Cache", report["cache_dir"]))
    return status
