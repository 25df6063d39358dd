"""What ``plan``, ``measure`` and ``serve`` share: one set of launch flags, one set of GPU flags,
one way from them to ``LaunchSettings`` and a ``PlanRequest`` (app.planner.request, the window's
way to a plan too), and one way to print engine advisories.

Every launch flag takes llama-server's spelling *and* Headroom's long one, so a line copied from a
llama-server command works as it is::

    -c/--ctx/--ctx-size 512k   -ctk/--ctk/--cache-type-k q8_0   -ctv/--ctv/--cache-type-v q8_0
    -np/--np/--parallel 4      -kvu/--kvu/--kv-unified          -fa/--fa/--flash-attn on|off|auto
    -ub/--ub/--ubatch-size 512 -b/--batch/--batch-size 2048     -ngl/--ngl/--gpu-layers N|all|auto
    -nkvo/--nkvo/--no-kv-offload                                 --swa-full
    -ts/--ts/--tensor-split 3,1

One difference from llama-server, on purpose: ``-ctv`` defaults to the K type (a quantized K with
an f16 V is rarely what anyone meant).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.planner.settings import (
    ALL_LAYERS,
    DEFAULT_CACHE_RAM_MIB,
    DEFAULT_DRAFT_N_MAX,
    KV_TYPES,
    FlashAttn,
    LaunchSettings,
)
from app.planner.units import Bytes, parse_tokens

if TYPE_CHECKING:  # the planner's request and solver are imported where a plan is made: `measure` needs neither
    from app.engine.discover import EngineInfo
    from app.planner.devices import Inventory
    from app.planner.gguf.model import ModelShape
    from app.planner.gguf.reader import Llamafile
    from app.planner.request import MeasurementLookup, PlanRequest


def gpu_layers(text: str) -> int:
    """``-ngl``: a layer count, or ``all``/``auto`` (llama-server's words) for every layer; the
    planner then moves layers to the host itself when they do not fit."""
    if text.strip().lower() in ("all", "auto"):
        return ALL_LAYERS
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a layer count: {text!r} (a number, all or auto)") from None
    if value < 0:
        raise argparse.ArgumentTypeError("the layer count must be >= 0")
    return value


def positive_int(text: str) -> int:
    """A slot or batch count: a whole number of at least 1 (argparse names the flag in the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def seconds(text: str) -> float:
    """A time limit: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def size(text: str) -> Bytes:
    """A memory size (``24GiB``, ``512MiB``), with ``Bytes.parse``'s own message when it is not one."""
    try:
        return Bytes.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_launch_args(p: argparse.ArgumentParser) -> None:
    """The flags that change what the engine allocates (see the module docstring)."""
    p.add_argument("-c", "--ctx", "--ctx-size", dest="ctx", default="4096", metavar="TOKENS",
                   help="context in tokens: 32768, 128k, 1M; 0 = the model's training context (default 4096)")
    p.add_argument("-ctk", "--ctk", "--cache-type-k", dest="type_k", choices=KV_TYPES, default="f16",
                   metavar="TYPE", help=f"K cache type: {' '.join(KV_TYPES)} (default f16)")
    p.add_argument("-ctv", "--ctv", "--cache-type-v", dest="type_v", choices=KV_TYPES, default=None,
                   metavar="TYPE", help="V cache type (default: the K type)")
    p.add_argument("-np", "--np", "--parallel", dest="n_parallel", type=positive_int, default=1, metavar="N",
                   help="parallel slots (default 1)")
    p.add_argument("-kvu", "--kvu", "--kv-unified", dest="kv_unified", action="store_true",
                   help="one unified KV cache for all slots")
    p.add_argument("-fa", "--fa", "--flash-attn", dest="flash_attn", choices=[f.value for f in FlashAttn],
                   default=FlashAttn.ON.value, metavar="on|off|auto", help="flash attention (default on)")
    p.add_argument("-ub", "--ub", "--ubatch-size", dest="n_ubatch", type=positive_int, default=512, metavar="N",
                   help="physical batch (default 512)")
    p.add_argument("-b", "--batch", "--batch-size", dest="n_batch", type=positive_int, default=2048, metavar="N",
                   help="logical batch (default 2048)")
    p.add_argument("-ngl", "--ngl", "--gpu-layers", "--n-gpu-layers", dest="n_gpu_layers", type=gpu_layers,
                   default=ALL_LAYERS, metavar="N", help="layers on the GPU: a number, all or auto (default all)")
    p.add_argument("-nkvo", "--nkvo", "--no-kv-offload", dest="no_kv_offload", action="store_true",
                   help="keep the KV cache in host memory")
    p.add_argument("--swa-full", dest="swa_full", action="store_true", help="full-size SWA cache")
    p.add_argument("-cram", "--cache-ram", dest="cache_ram", type=int, default=None,
                   metavar="MiB", help=f"the server's prompt cache in host RAM (-1 no limit, 0 off; default: room "
                                       f"for one full context's KV, at most llama-server's {DEFAULT_CACHE_RAM_MIB}, "
                                       "less when host RAM is short): planned and passed explicitly")
    p.add_argument("-mm", "--mmproj", dest="mmproj", default="", metavar="FILE",
                   help="a vision projector (mmproj GGUF): its weights and compute are planned and checked")
    p.add_argument("--no-mmproj-offload", dest="no_mmproj_offload", action="store_true",
                   help="keep the vision projector on the CPU (host RAM)")
    p.add_argument("-ts", "--ts", "--tensor-split", dest="tensor_split", type=tensor_split, default=(),
                   metavar="N,N,...", help="layer shares per device in the engine's order (RPC workers first); "
                                          "default: the planner chooses them by the devices' budgets")
    add_extra_args(p)


def add_extra_args(p: argparse.ArgumentParser) -> None:
    """What a launch adds to its model: LoRA adapters and a draft model (app/planner/memory/extras.py)."""
    p.add_argument("--lora", action="append", default=[], metavar="FILE",
                   help="a LoRA adapter GGUF (repeat, or comma-separated, for several): planned on the "
                        "devices of the weights it adapts")
    p.add_argument("-md", "--model-draft", "--spec-draft-model", dest="draft_model", default="", metavar="FILE",
                   help="a draft model for speculative decoding (the same vocabulary as the model)")
    p.add_argument("-ngld", "--gpu-layers-draft", "--spec-draft-ngl", dest="draft_n_gpu_layers", type=gpu_layers,
                   default=ALL_LAYERS, metavar="N", help="the draft model's layers on the GPU (default all)")
    p.add_argument("-ctkd", "--cache-type-k-draft", dest="draft_type_k", choices=KV_TYPES, default="f16",
                   metavar="TYPE", help="the draft model's K cache type (default f16)")
    p.add_argument("-ctvd", "--cache-type-v-draft", dest="draft_type_v", choices=KV_TYPES, default=None,
                   metavar="TYPE", help="the draft model's V cache type (default: its K type)")
    p.add_argument("--spec-draft-n-max", dest="draft_n_max", type=int, default=DEFAULT_DRAFT_N_MAX, metavar="N",
                   help=f"tokens the draft proposes per step (default {DEFAULT_DRAFT_N_MAX}, llama-server's)")
    p.add_argument("-cd", "--ctx-size-draft", dest="draft_ctx", default=None, metavar="TOKENS",
                   help="not in this llama.cpp: the draft's context is the model's (-c)")


def _extra_values(args: argparse.Namespace) -> dict[str, Any]:
    """The LoRA and draft flags as LaunchSettings fields; ValueError for a file that is not there."""
    if getattr(args, "draft_ctx", None) is not None:
        raise ValueError("-cd: llama.cpp 0c1e57098 has no draft context size; the draft model's context is the "
                         "model's own (-c)")
    lora = tuple(f for item in getattr(args, "lora", []) or [] for f in item.split(",") if f)
    draft = str(getattr(args, "draft_model", "") or "")
    from app.planner.gguf.reader import missing_files

    for f in (*lora, draft):
        if f and missing_files((Path(f),)):
            raise ValueError(f"file not found: {f}")
    return {"lora": tuple(str(Path(f).resolve()) for f in lora),
            "draft_model": str(Path(draft).resolve()) if draft else "",
            "draft_n_gpu_layers": getattr(args, "draft_n_gpu_layers", ALL_LAYERS),
            "draft_type_k": getattr(args, "draft_type_k", "f16"),
            "draft_type_v": getattr(args, "draft_type_v", None) or getattr(args, "draft_type_k", "f16"),
            "draft_n_max": getattr(args, "draft_n_max", DEFAULT_DRAFT_N_MAX)}


def tensor_split(text: str) -> tuple[int, ...]:
    """``-ts 3,1``: whole shares, one per device (llama-server also takes fractions: Headroom plans
    layer counts, so it asks for whole numbers)."""
    try:
        values = tuple(int(v) for v in text.replace("/", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole-number shares: {text!r} (e.g. 3,1)") from None
    if not values or any(v < 0 for v in values) or not any(values):
        raise argparse.ArgumentTypeError(f"shares must be >= 0 and not all 0: {text!r}")
    return values


class VramTarget(argparse.Action):
    """``--vram-target SIZE`` (every GPU) or ``--vram-target DEVICE=SIZE`` (one device: ``RPC0=2GiB``,
    ``CUDA1=20GiB``, or a worker by its address ``10.0.0.2:50052=8GiB``); repeatable."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        text = str(values)
        name, sep, amount = text.rpartition("=")
        if not sep:
            try:
                namespace.vram_target = size(text)
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentError(self, str(exc)) from None
            return
        if not name.strip():
            raise argparse.ArgumentError(self, f"no device before '=' in {text!r} (e.g. RPC0=2GiB)")
        try:
            value = size(amount)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        budgets = dict(getattr(namespace, "device_budgets", None) or {})
        budgets[name.strip()] = int(value)
        namespace.device_budgets = budgets


def add_gpu_args(p: argparse.ArgumentParser) -> None:
    """Which GPUs (and RPC workers) to plan for and how much of them to use."""
    from app.planner.request import DEFAULT_SAFETY

    p.add_argument("--gpu", action="append", default=[], metavar="SPEC",
                   help='"auto" (the real GPUs, default), a card name ("H200") or "NAME:SIZE" '
                        '("MyCard:24GiB"); repeat for several')
    p.add_argument("--rpc", default=None, metavar="HOST:PORT[,...]",
                   help="ggml-rpc-server workers whose devices the engine also uses (llama-server --rpc); "
                        "a bare port is this machine's. `headroom rpc-worker` starts one")
    p.add_argument("--window", action="store_true",
                   help="plan for an engine with a KV position window (the opencoti llamafile)")
    p.add_argument("--vram-target", action=VramTarget, default=None, metavar="[DEVICE=]SIZE",
                   help="GPU budget, e.g. 80GiB for every GPU, or one device's: RPC0=2GiB, CUDA1=20GiB "
                        "(repeat for several)")
    p.set_defaults(device_budgets={})
    p.add_argument("--safety", type=size, default=Bytes(DEFAULT_SAFETY), metavar="SIZE",
                   help="margin kept free per GPU (default 256MiB)")
    p.add_argument("--overhead", type=size, default=None, metavar="SIZE",
                   help="per-process GPU overhead (default: measured for this GPU and driver, else 590MiB)")


def llamafile_of(model: str | Path) -> Llamafile | None:
    """The llamafile ``model`` is (or a member of which it names), else None; PlannerError when it is
    one whose archive is damaged."""
    from app.planner.gguf.reader import in_archive, read_llamafile, split_member

    if not in_archive(model):
        return None
    inside = split_member(model)
    return read_llamafile(inside[0] if inside else model)


def start_from_llamafile(args: argparse.Namespace) -> list[str]:
    """For a llamafile model: the launch options the user did not type start from its ``.args`` (and
    its projector), as the llamafile itself would start (app/llamafile/args.py); sentences for the typed
    values its ``.args`` overrules. Once per command (``args.llamafile`` keeps what was read)."""
    if hasattr(args, "llamafile"):
        return []
    from app.llamafile.args import baked, start_from

    lf = llamafile_of(args.model)
    args.llamafile = None if lf is None else (lf, baked(lf))
    if lf is None:
        return []
    return start_from(args, args.llamafile[1], getattr(args, "typed", ()))


def llamafile_lines(args: argparse.Namespace, launch: LaunchSettings, engine_is_llamafile: bool | None = None) -> list[str]:
    """For a llamafile model: what its ``.args`` asks and what the plan changed, the flags it keeps (or,
    on another engine, does not pass), and every typed value its ``.args`` overrules (plan and serve
    print them)."""
    found = getattr(args, "llamafile", None)
    if not found:
        return []
    from app.llamafile.args import changes_line, kept_line

    lf, baked_args = found
    lines = [f"{lf.path.name} holds {', '.join(m.name for m in (lf.model, lf.projector) if m is not None)}"]
    lines += [line for line in (changes_line(baked_args, launch, getattr(args, "typed", ())),
                                kept_line(baked_args, engine_is_llamafile)) if line]
    return lines + list(getattr(args, "llamafile_notes", []))


def llamafile_json(args: argparse.Namespace, launch: LaunchSettings) -> dict[str, Any]:
    """The ``llamafile`` key of ``plan --json`` for a llamafile model (none for a GGUF)."""
    found = getattr(args, "llamafile", None)
    if not found:
        return {}
    lf, baked_args = found
    return {"llamafile": {"path": str(lf.path), "model": lf.model.name if lf.model else None,
                          "projector": lf.projector.name if lf.projector else None,
                          "args": list(lf.args.args) if lf.args else None,
                          "asks": baked_args.written, "lines": llamafile_lines(args, launch)}}


def settings_from_args(args: argparse.Namespace) -> LaunchSettings:
    """The launch flags → the one ``LaunchSettings`` (for a llamafile, started from its ``.args``:
    ``start_from_llamafile``). Raises ValueError on a bad value (PlannerError when ``-c 0`` needs a model
    file it cannot read, or a llamafile's archive is damaged)."""
    args.llamafile_notes = start_from_llamafile(args) or getattr(args, "llamafile_notes", [])
    return LaunchSettings(
        n_ctx=context(str(args.ctx), args.model), type_k=args.type_k, type_v=args.type_v or args.type_k,
        n_parallel=1 if args.n_parallel is None else args.n_parallel,  # serve: None = not given
        kv_unified=args.kv_unified, swa_full=args.swa_full,
        n_ubatch=args.n_ubatch, n_batch=args.n_batch, flash_attn=args.flash_attn,
        n_gpu_layers=args.n_gpu_layers, offload_kqv=not args.no_kv_offload,
        tensor_split=tuple(getattr(args, "tensor_split", ()) or ()),
        cache_ram_mib=getattr(args, "cache_ram", None), **_extra_values(args),
        mmproj=_file_arg(args.mmproj) if getattr(args, "mmproj", "") else "",
        mmproj_offload=not getattr(args, "no_mmproj_offload", False))


def _file_arg(text: str) -> str:
    """A file flag's value as an absolute path (a member of a llamafile, ``M.llamafile/zip/x.gguf``, too)."""
    return str(Path(text).absolute()) if "/zip/" in text else str(Path(text).resolve())


def typed_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The dests of the options the user typed on ``argv`` (``-c 8192`` → ``ctx``), by the subcommand's
    parser: what a llamafile's ``.args`` must not overrule."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    chosen = sub.choices.get(argv[0]) if sub is not None and argv else None
    options = (chosen or parser)._option_string_actions
    return {options[t.split("=", 1)[0]].dest for t in argv if t.split("=", 1)[0] in options}


def context(text: str, model: str | Path) -> int:
    """``-c``: a token count, or llama-server's ``0`` = the model's training context (read from the
    GGUF header, so it works for a model the planner does not model too)."""
    if text.strip() != "0":
        return parse_tokens(text)
    from app.planner.gguf.model import read_headers, training_context

    return training_context(read_headers(model)[0])


def inventory_from_args(args: argparse.Namespace, *, quiet: bool = False) -> Inventory:
    """The devices to plan for: ``--gpu`` (real or simulated), then the ``--rpc`` workers' devices
    in front (asked through the engine, each with a timeout; one that does not answer is named on
    stderr and left out), then the per-device ``--vram-target`` budgets. ValueError for an RPC
    address that is not one, a budget for a device there is not, or RPC without an engine."""
    import sys

    from app.machine.devices import resolve_gpus
    from app.planner.devices import with_budgets

    inventory = resolve_gpus(list(args.gpu))
    if getattr(args, "rpc", None):
        from app.engine.rpc import add_workers, parse_endpoints, query_workers, rpc_query_server

        endpoints = parse_endpoints(args.rpc)
        readings = query_workers(rpc_query_server(), endpoints)
        inventory = add_workers(inventory, readings)
        if not quiet:
            for endpoint, why in inventory.dead_workers:
                print(f"RPC worker {endpoint} did not answer: {why}; planning without it", file=sys.stderr)
    if not inventory.gpus:  # a CPU plan: which host weights the engine repacks is its CPU code's choice
        from dataclasses import replace

        from app.engine.discover import engine_cpu_features

        engine = getattr(args, "engine", None)
        inventory = replace(inventory, cpu=engine_cpu_features(Path(engine) if engine else None))
    budgets = getattr(args, "device_budgets", None) or {}
    return with_budgets(inventory, budgets) if budgets else inventory


def for_what_runs(args: argparse.Namespace, inventory: Inventory, engine: EngineInfo | None) -> tuple[Inventory, Any]:
    """``inventory`` with only the GPUs ``engine`` will use (app/engine/gpu_reach.py), and what was decided:
    a launch is planned for what will run. Cards a CUDA engine has no code for are hidden from it
    (``CUDA_VISIBLE_DEVICES``, for pass 1 and the engine alike: both are children of this process)."""
    import os
    from dataclasses import replace

    from app.engine.discover import engine_cpu_features
    from app.engine.gpu_reach import for_launch, hidden_env, reach

    found = reach(engine, inventory)
    if not found.sentence:
        return inventory, found
    kept = for_launch(inventory, found)
    os.environ.update(hidden_env(found, engine, inventory))
    if not kept.gpus:
        given = getattr(args, "engine", None)
        kept = replace(kept, cpu=engine_cpu_features(Path(given) if given else None))
    return kept, found


#: Said before pass 1 runs (not when it is cached): a second or two, longer for a huge context.
PASS1_PROGRESS = ("pass 1: measuring this launch with llama.cpp's own allocator (nothing is loaded; seconds, "
                  "longer for a context of millions)…")


def say_pass1(model: str | Path, launch: LaunchSettings, lib_dir: str | None, *, stream: Any = None) -> None:
    """``PASS1_PROGRESS`` on ``stream`` (stderr) when pass 1 is about to run for ``launch`` rather than be
    read from its cache."""
    import sys

    from app.probe.measure import cached_measurement

    if cached_measurement(model, launch, lib_dir=lib_dir) is None:
        print(f"headroom: {PASS1_PROGRESS}", file=stream or sys.stderr, flush=True)


def plan_request(args: argparse.Namespace, shape: ModelShape, inventory: Inventory,
                 lookup: MeasurementLookup | None, engine: EngineInfo | None = None) -> PlanRequest:
    """The one plan request (app.planner.request) from the GPU flags: ``--window``, ``--safety``,
    ``--vram-target``, and ``--overhead`` (else measured on this GPU and driver, else the planner's
    default). ``lookup``: pass 1 for a launch (the probe's cache, or pass 1 run through it). The
    speeds are predicted with this machine's calibrated figures (app/machine/calibrate.py) for
    ``engine``, the one that will launch (whether it attends to host KV on the CPU); a head size this
    machine has no CPU-attention run for is measured first (app/engine/attention_runs.py), said on stderr."""
    import sys

    from app.engine.attention_runs import host_attention, start_in_background
    from app.machine.request import request_for_machine

    def say(line: str) -> None:
        print(f"headroom: {line}", file=sys.stderr, flush=True)

    for line in start_in_background(inventory, (shape.head_dim_k,), engine, say=say):
        say(line)
    return request_for_machine(
        shape, inventory, engine_window=args.window, safety=int(args.safety),
        vram_target=None if args.vram_target is None else int(args.vram_target),
        overhead=None if args.overhead is None else int(args.overhead), lookup=lookup,
        calibrated=True, host_attention=host_attention(engine))


def add_engine_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--engine FILE``: the engine ``what`` uses instead of the chosen one (plan, measure, serve)."""
    p.add_argument("--engine", type=Path, default=None, metavar="FILE",
                   help=f"the engine {what}; pass 1 measures with the libllama beside it (default: the engine "
                        "chosen in the window, File ▸ Choose engine…, else the first found)")


def engine_file(args: argparse.Namespace) -> Path | None:
    """The engine file a command launches or measures with: ``--engine FILE``, else the one chosen in the
    window (app/engine/chosen.py); None: whichever discovery finds first."""
    from app.engine.chosen import chosen_engine

    given = getattr(args, "engine", None)
    return Path(given) if given is not None else chosen_engine()


def pass1_lib_dir(args: argparse.Namespace) -> str | None:
    """The libllama pass 1 loads: the one beside the engine that launches (``engine_file``), so ``measure``,
    ``plan`` and ``serve`` measure, and find cached, the same pass 1 (its cache key names the library)."""
    from app.engine.libpath import lib_dir_beside

    return lib_dir_beside(engine_file(args))


def given_engine_problem(path: Path, engines: Sequence[EngineInfo]) -> str | None:
    """Why the engine given with ``--engine`` cannot be used (it did not identify as one), or None."""
    import os

    from app.engine.discover import EngineOrigin, is_ape

    if any(e.source == EngineOrigin.SETTINGS for e in engines):
        return None
    if not os.access(path, os.X_OK) and not is_ape(path):
        return f"the engine is not executable: {path} (chmod +x it)"
    return f"{path} is not an engine Headroom can run: `{path} --version` failed"



def advisory_lines(items: Sequence[Any]) -> list[str]:
    """Engine advisories as printed by ``plan`` and ``serve`` (one line each)."""
    return [f"advisory: {a}" for a in items]


def hub_model(text: str, *, download: bool) -> str:
    """``hf:owner/name[:QUANT]`` (or a huggingface.co link) → a local file; anything else as it is.

    ``plan``/``measure`` get a header-only copy (or the file when the Hugging Face cache has it, whoever
    downloaded it); ``serve`` (``download=True``) downloads into that cache first, a progress line on
    stderr at most every 2 s. Offline (HF_HUB_OFFLINE=1) only the cache is used. HubError when the repo
    or file cannot be had."""
    import sys
    import time

    from app.hub.refs import is_hub_ref, parse_ref

    if not is_hub_ref(text):
        return text
    # The hub's modules (the GGUF reader, gguf-py, numpy ...) for a hub ref only.
    from app.hub.download import UNVERIFIED, downloaded
    from app.hub.download import download as fetch_all
    from app.hub.preview import fetch_header, fetched_bytes
    from app.hub.remote import list_ggufs, pick

    ref = parse_ref(text)
    listing = list_ggufs(ref.repo, ref.revision)
    if listing.note:
        print(f"{ref.repo}: {listing.note}", file=sys.stderr)
    gguf = pick(listing, ref)
    label = f"{gguf.repo}/{gguf.path} ({Bytes(gguf.size)})"
    local = downloaded(gguf)
    if local is not None:
        return str(local)
    if not download:
        path = fetch_header(gguf)
        print(f"header of {label}: fetched {Bytes(fetched_bytes(path))} — planning without downloading",
              file=sys.stderr)
        return str(path)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or done == total:
            last[0] = now
            print(f"downloading {label}: {Bytes(done)} of {Bytes(total)} ({100 * done // max(total, 1)} %)",
                  file=sys.stderr, flush=True)

    path = fetch_all(gguf, progress=progress)
    if not gguf.verified:
        print(f"downloaded {label}: {UNVERIFIED}", file=sys.stderr)
    return str(path)


#: A source file named in a docstring: ``(app/planner/law.py)``, ``, app/sessions/chat.py``.
_SOURCE_PATH = re.compile(r"\s*\((?:app|tests|native)/[\w/.-]+\.py\)|,\s*(?:app|tests|native)/[\w/.-]+\.py")


def help_text(doc: str, *, skip: int = 0) -> str:
    """A command's module docstring as its ``--help`` prints it under ``RawDescriptionHelpFormatter``:
    the paragraphs after the first ``skip``, prose wrapped to the terminal, indented blocks (a list of the
    chat's commands) as written; ```code``` quotes as single backquotes and no source path, which
    are for the reader of the code, not of the help."""
    import shutil
    import textwrap

    width = max(40, min(100, shutil.get_terminal_size().columns - 2))
    out = []
    for para in doc.strip("\n").split("\n\n")[skip:]:
        para = _SOURCE_PATH.sub("", para.replace("``", "`"))
        if para.startswith(" "):
            out.append(textwrap.dedent(para).rstrip())
        else:
            out.append(textwrap.fill(" ".join(para.split()), width))
    return "\n\n".join(out)


def exit_status(ok: str, negative: str, unusable: str) -> str:
    """Every subcommand's ``--help`` epilog, in the same words: 0 it fits / it ran; 1 it ran but the
    answer is negative; 2 the input or the request cannot be used. Wrapped here, for the commands
    whose help is printed as written (:func:`help_text`)."""
    return help_text(f"Exit status: 0 {ok}; 1 {negative}; 2 {unusable}.")
