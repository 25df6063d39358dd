"""A llamafile's ``.args`` as the settings a plan starts from, and what the plan changed of them.

The flags that change what the engine allocates are read into the command's own launch options (by
their argparse ``dest``), so a plan of a llamafile starts where the llamafile itself would start; a flag
the user typed wins, and a flag ``.args`` puts *after* the user's arguments (past its ``...``) wins over
the command line, so the plan keeps it and says so. Everything else in ``.args`` (sampling, chat
template, ``--host``/``--port``) is listed as kept, or as replaced by Headroom's own where Headroom must
choose (the address and port it supervises). How each llamafile version merges ``.args`` with a command
line: docs/llamafiles.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.planner.gguf.dotargs import DotArgs
from app.planner.gguf.reader import Llamafile, member_path
from app.planner.settings import ALL_LAYERS, LaunchSettings
from app.text import printable

#: ``.args`` flag → (the launch option's argparse dest, whether it takes a value), in llama.cpp's
#: common/arg.cpp spellings. ``-fa`` alone (llamafile 0.9.x's llama.cpp) means on.
_FLAGS: dict[str, tuple[str, bool]] = {
    **dict.fromkeys(("-c", "--ctx-size"), ("ctx", True)),
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers"), ("n_gpu_layers", True)),
    **dict.fromkeys(("-ctk", "--cache-type-k"), ("type_k", True)),
    **dict.fromkeys(("-ctv", "--cache-type-v"), ("type_v", True)),
    **dict.fromkeys(("-np", "--parallel"), ("n_parallel", True)),
    **dict.fromkeys(("-kvu", "--kv-unified"), ("kv_unified", False)),
    **dict.fromkeys(("-ub", "--ubatch-size"), ("n_ubatch", True)),
    **dict.fromkeys(("-b", "--batch-size"), ("n_batch", True)),
    **dict.fromkeys(("-nkvo", "--no-kv-offload"), ("no_kv_offload", False)),
    "--swa-full": ("swa_full", False),
    **dict.fromkeys(("-cram", "--cache-ram"), ("cache_ram", True)),
    **dict.fromkeys(("-mm", "--mmproj"), ("mmproj", True)),
    "--no-mmproj-offload": ("no_mmproj_offload", False),
    **dict.fromkeys(("-ts", "--tensor-split"), ("tensor_split", True)),
    **dict.fromkeys(("-fa", "--flash-attn"), ("flash_attn", True)),
}
#: The flags Headroom always gives itself for a launch it supervises (the model, where it listens,
#: how it logs): ``.args``' own are replaced, and said so.
REPLACED = ("-m", "--model", "--host", "--port", "--api-key", "--api-key-file", "-lv", "--verbosity",
            "--fit", "--metrics")
#: llamafile's own wrapper flags (taken out before llama.cpp parses the rest; docs/domain.md §14).
WRAPPER = ("--server", "--cli", "--chat", "--v2", "--gpu", "--nobrowser", "--fast", "--precise")
_WRAPPER_VALUED = ("--gpu",)
_REPLACED_VALUED = ("-m", "--model", "--host", "--port", "--api-key", "--api-key-file", "-lv", "--verbosity", "--fit")


@dataclass(frozen=True)
class BakedArgs:
    """What a llamafile's ``.args`` asks for: launch options by dest (``{"ctx": "8192"}``) with the flag
    as written, those it fixes past the user's arguments, the flags Headroom replaces, and the rest."""

    values: dict[str, Any] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)  # dest -> "-c 8192" as .args gives it
    fixed: frozenset[str] = frozenset()  # dests set after ``...``: they win over the command line
    replaced: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # as shown (escaped), one flag and its value each
    kept_args: tuple[str, ...] = ()  # the same, as the arguments they are (for a new .args)
    gpu: str | None = None  # its ``--gpu``, when it gives one (the first wins: llamafile_early_gpu_init)


def baked(lf: Llamafile) -> BakedArgs:
    """What ``lf``'s ``.args`` asks (nothing when it has none), its projector named as a member path;
    the archive's one projector when ``.args`` names none (llamafile would not load it, Headroom offers it)."""
    args = lf.args or DotArgs(())
    values: dict[str, Any] = {}
    written: dict[str, str] = {}
    fixed: set[str] = set()
    replaced: list[str] = []
    kept: list[str] = []
    kept_args: list[str] = []
    gpu: str | None = None
    after = len(args.args) if args.insert is None else args.insert
    i, tokens = 0, list(args.args)
    while i < len(tokens):
        flag, eq, inline = tokens[i].partition("=")
        took_next = False
        if flag in _FLAGS:
            dest, valued = _FLAGS[flag]
            value: str | bool = True
            if valued:
                given, took_next = _value(tokens, i, inline if eq else None, optional=flag in ("-fa", "--flash-attn"))
                value = "on" if given is None else given
            if dest == "mmproj" and isinstance(value, str) and value.startswith("/zip/"):
                value = str(member_path(lf.path, value))
            values[dest] = value
            written[dest] = printable(" ".join(tokens[i:i + (2 if took_next else 1)]))
            if i >= after:
                fixed.add(dest)
        elif flag in WRAPPER:
            took_next = flag in _WRAPPER_VALUED and not eq and i + 1 < len(tokens)
            if flag == "--gpu" and gpu is None:
                gpu = inline if eq else (tokens[i + 1] if took_next else None)
        elif flag in REPLACED:
            took_next = flag in _REPLACED_VALUED and not eq and i + 1 < len(tokens)
            if flag not in ("-m", "--model"):
                replaced.append(printable(" ".join(tokens[i:i + (2 if took_next else 1)])))
        else:
            took_next = flag.startswith("-") and i + 1 < len(tokens) and not tokens[i + 1].startswith("-")
            kept.append(printable(" ".join(tokens[i:i + (2 if took_next else 1)])))
            kept_args += tokens[i:i + (2 if took_next else 1)]
        i += 2 if took_next else 1
    if "mmproj" not in values and lf.projector is not None:
        values["mmproj"] = str(lf.path_of(lf.projector))
    return BakedArgs(values, written, frozenset(fixed), tuple(replaced), tuple(kept), tuple(kept_args), gpu)


def _value(tokens: Sequence[str], i: int, inline: str | None, *, optional: bool) -> tuple[str | None, bool]:
    """The flag's value (inline, or the next token) and whether the next token was it. An optional
    value (``-fa``) is taken only when the next token is one of its words."""
    if inline is not None:
        return inline, False
    if i + 1 >= len(tokens):
        return None, False
    nxt = tokens[i + 1]
    if optional and nxt not in ("on", "off", "auto"):
        return None, False
    return nxt, True


def start_from(args: Any, found: BakedArgs, typed: Iterable[str]) -> list[str]:
    """Set on ``args`` (a command's parsed options) each value ``.args`` asks for that the user did not
    type; a value ``.args`` fixes past the user's arguments replaces the typed one too. Returns a
    sentence for each typed value that cannot win."""
    typed = set(typed)
    lost = []
    for dest, value in found.values.items():
        if dest in typed and dest not in found.fixed:
            continue
        try:
            option = _as_option(dest, value)
        except ValueError:
            raise ValueError(f"the llamafile's .args gives {found.written.get(dest, dest)}, which llama.cpp "
                             "cannot read either") from None
        if dest in typed and getattr(args, dest, None) != option:
            lost.append(f"the llamafile's .args gives {found.written.get(dest, dest)} after the command line, so "
                        f"it wins over yours: planned with it")
        setattr(args, dest, option)
    return lost


def _as_option(dest: str, value: Any) -> Any:
    """``.args``' text as the option argparse would have made of it."""
    if dest in ("n_parallel", "n_ubatch", "n_batch", "cache_ram"):
        return int(value)
    if dest == "n_gpu_layers":  # llama-server's words, as the launch options take them
        return ALL_LAYERS if str(value).lower() in ("all", "auto") else int(value)
    if dest == "tensor_split":
        return tuple(int(float(v)) for v in str(value).replace("/", ",").split(",") if v.strip())
    return value


def launched(launch: LaunchSettings) -> dict[str, tuple[Any, str]]:
    """dest → (the option's value, the flag as the launch gives it) for the flags ``.args`` may set."""
    zip_name = "/zip/" + launch.mmproj.rsplit("/zip/", 1)[-1] if "/zip/" in launch.mmproj else launch.mmproj
    return {
        "ctx": (str(launch.n_ctx), f"-c {launch.n_ctx}"),
        "n_gpu_layers": (min(launch.n_gpu_layers, ALL_LAYERS),
                         f"-ngl {'all' if launch.n_gpu_layers >= ALL_LAYERS else launch.n_gpu_layers}"),
        "type_k": (launch.type_k, f"-ctk {launch.type_k}"), "type_v": (launch.type_v, f"-ctv {launch.type_v}"),
        "n_parallel": (launch.n_parallel, f"-np {launch.n_parallel}"),
        "kv_unified": (launch.kv_unified, "-kvu" if launch.kv_unified else "no -kvu"),
        "n_ubatch": (launch.n_ubatch, f"-ub {launch.n_ubatch}"), "n_batch": (launch.n_batch, f"-b {launch.n_batch}"),
        "no_kv_offload": (not launch.offload_kqv, "-nkvo" if not launch.offload_kqv else "the KV on the GPU"),
        "swa_full": (launch.swa_full, "--swa-full" if launch.swa_full else "no --swa-full"),
        "cache_ram": (launch.cache_ram_mib, f"--cache-ram {launch.cache_ram_mib}"),
        "mmproj": (launch.mmproj, f"--mmproj {zip_name}" if launch.mmproj else "no projector"),
        "no_mmproj_offload": (not launch.mmproj_offload, "--no-mmproj-offload" if not launch.mmproj_offload
                              else "the projector on the GPU"),
        "tensor_split": (launch.tensor_split, f"-ts {','.join(map(str, launch.tensor_split))}"),
        "flash_attn": (str(launch.flash_attn), f"-fa {launch.flash_attn}"),
    }


def changes_line(found: BakedArgs, launch: LaunchSettings, typed: Iterable[str]) -> str:
    """One line: what the llamafile's ``.args`` asks and what the plan launches instead, and why
    ("the llamafile's .args asks -c 8192; planned -c 32768 because you asked for it"); '' when it asks
    nothing."""
    if not found.written:
        return ""
    typed = set(typed)
    now = launched(launch)
    changed = []
    for dest in found.written:
        if dest not in now or (dest == "mmproj" and found.values.get(dest) == launch.mmproj):
            continue
        value, flag = now[dest]
        try:
            same = _as_option(dest, found.values[dest]) == value
        except ValueError:
            same = False
        if not same:
            changed.append(f"{flag} {'because you asked for it' if dest in typed else 'because the plan needs it'}")
    line = f"the llamafile's .args asks {', '.join(found.written.values())}"
    line += f"; planned {', '.join(changed)}" if changed else "; planned as it asks"
    if found.replaced:
        line += f"; Headroom gives its own {', '.join(found.replaced)}"
    return line


def _same_path(a: object, b: str) -> bool:
    return isinstance(a, str) and bool(a) and bool(b) and Path(a).absolute() == Path(b).absolute()


def kept_line(found: BakedArgs, engine_is_llamafile: bool | None = None) -> str:
    """The other flags ``.args`` gives ('' when none): the llamafile keeps them when it launches itself;
    another engine is not given them (sampling defaults: a client sets those per request).
    ``engine_is_llamafile`` None: the engine is not chosen yet (``plan``)."""
    if not found.kept:
        return ""
    flags = " ".join(found.kept)
    if engine_is_llamafile is None:
        return f"kept from its .args when it launches itself: {flags}"
    if engine_is_llamafile:
        return f"kept from its .args: {flags}"
    return f"not passed to this engine (the llamafile's own defaults; a client sets them per request): {flags}"


def model_flag(lf: Llamafile) -> str:
    """How the llamafile names its own model in a command line: ``/zip/<name>``."""
    assert lf.model is not None
    return "/zip/" + lf.model.name


def is_member_of(path: str | Path, lf: Llamafile) -> bool:
    return str(path).startswith(str(lf.path) + "/")


def asked_context(found: BakedArgs) -> int | None:
    """The context ``.args`` asks for (``-c 8192``), or None (none given, ``-c 0``, or not a number)."""
    try:
        n = int(str(found.values.get("ctx", "")))
    except ValueError:
        return None
    return n if n > 0 else None


def opened(path: Path) -> tuple[Llamafile, BakedArgs] | None:
    """For a llamafile (or a member of one): it and what its ``.args`` asks; None for anything else
    (a GGUF, or a damaged archive, which the reader refuses in its own words)."""
    from app.planner.errors import PlannerError
    from app.planner.gguf.reader import in_archive, read_llamafile, split_member

    if not in_archive(path):
        return None
    inside = split_member(path)
    try:
        lf = read_llamafile(inside[0] if inside else path)
    except PlannerError:
        return None
    return lf, baked(lf)


#: dest → LaunchSettings field, for the options a window shows (bools and numbers as the field takes them).
_FIELDS = {"ctx": "n_ctx", "n_gpu_layers": "n_gpu_layers", "type_k": "type_k", "type_v": "type_v",
           "n_parallel": "n_parallel", "kv_unified": "kv_unified", "n_ubatch": "n_ubatch", "n_batch": "n_batch",
           "swa_full": "swa_full", "cache_ram": "cache_ram_mib", "mmproj": "mmproj", "flash_attn": "flash_attn"}


def baked_launch(found: BakedArgs, launch: LaunchSettings) -> LaunchSettings:
    """``launch`` with what ``.args`` asks (the window's start for a llamafile; a value llama.cpp could
    not read either is left as it was)."""
    changes: dict[str, Any] = {}
    for dest, value in found.values.items():
        try:
            option = _as_option(dest, value)
        except ValueError:
            continue
        if dest == "no_kv_offload":
            changes["offload_kqv"] = not option
        elif dest == "no_mmproj_offload":
            changes["mmproj_offload"] = not option
        elif dest == "ctx" and (n := asked_context(found)) is not None:
            changes["n_ctx"] = n
        elif dest in _FIELDS and dest != "ctx":
            changes[_FIELDS[dest]] = option
    try:
        return launch.with_(**changes)
    except ValueError:  # (a KV type llama.cpp does not know, say: the settings as they were)
        return launch
