"""Known engine issues that matter before serving shared sessions, keyed by architecture and by
where the engine's llama.cpp sits relative to the fix (docs/domain.md §5).

- k-pool models (``qwen4exp``, ``glm5-next``) with shared sequences: decode-time graph re-reserve
  that later runs out of room in an unchanged graph — fixed in b11412 (#29958); then a data race
  when sequences share cells on the CPU backend — fixed in 43fe9c642 (#29994), which came after.
- ``kimi-linear`` and ``minimax-01`` reserve their prompt graph with ``n_seqs = 1``, so
  multi-sequence graphs re-reserve by design (not a bug, but the compute buffer grows then).
- opencoti's rolling-KV window is mutually exclusive with ``--kv-unified``.

An engine is placed by its commit (a table of commits we know the date of) or, failing that, by its
build number. A build number under ``MIN_REAL_BUILD`` is what a tree without git history (the
llama-cpp-python sdist, a shallow clone) reports — it places nothing. The engine Headroom builds
carries both k-pool fixes as patches (native/patches, docs/engine-patches.md): it names them
(``patched``, from its build stamp) and is told "fixed in this build"; any other engine at that
commit is placed by its commit and still warned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import NamedTuple

#: Architectures whose KV lives in a k-pool (src/llama-arch.cpp names).
KPOOL_ARCHS = frozenset({"qwen4exp", "glm5-next"})
#: Architectures that reserve the final prompt graph with n_seqs = 1 (re-reserve by design).
SINGLE_SEQ_RESERVE_ARCHS = frozenset({"kimi-linear", "minimax-01"})
#: Build numbers below this come from a tree without history ("build 0" / "build 1").
MIN_REAL_BUILD = 100


@dataclass(frozen=True)
class Fix:
    """A llama.cpp fix: its build number and/or commit, the PR, and what it fixed."""

    name: str
    build: int | None
    commit: str | None
    pr: int
    date: str
    what: str

    def label(self) -> str:
        return self.commit or f"b{self.build}"


SCATTER_FIX = Fix("b11412", 11412, None, 29958, "2026-10-06",
                  "k-pool decode graphs re-reserved at decode time and aborted on growth "
                  "(always scatter + gather since)")
RACE_FIX = Fix("43fe9c642", None, "43fe9c642", 29994, "2026-10-06",
               "a data race on the CPU backend when sequences share k-pool cells "
               "(partial seq_cp is an assertion failure since)")
#: Order matters: RACE_FIX landed after SCATTER_FIX.
KPOOL_FIXES = (SCATTER_FIX, RACE_FIX)
#: Headroom's patch 5 (docs/engine-patches.md): a layer whose KV is in host memory attends on the CPU
#: for decode. Without it llama.cpp runs that attention on the GPU and copies the layer's used KV over the
#: bus for every token (-ngl + -ot host tail; -nkvo with flash attention). No upstream fix is known.
HOST_KV_ATTENTION = "host-kv-attention"


class Placement(Enum):
    HAS = "has the fix"
    LACKS = "predates the fix"
    UNKNOWN = "cannot be placed"


@dataclass(frozen=True)
class KnownCommit:
    commit: str
    date: str
    has: frozenset[str]  # Fix.name values this commit includes
    note: str


#: Commits we can place. 0c1e57098 is what llama-cpp-python 0.3.36 vendors (Headroom's build).
KNOWN_COMMITS = (
    KnownCommit("0c1e57098", "2026-10-01", frozenset(), "llama.cpp vendored by llama-cpp-python 0.3.36"),
    KnownCommit("43fe9c642", "2026-10-06", frozenset({SCATTER_FIX.name, RACE_FIX.name}),
                "the data-race fix itself (#29994)"),
)


def _same_commit(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return len(a) >= 7 and len(b) >= 7 and (a.startswith(b) or b.startswith(a))


def known_commit(commit: str | None) -> KnownCommit | None:
    if not commit or commit == "unknown":
        return None
    return next((k for k in KNOWN_COMMITS if _same_commit(k.commit, commit)), None)


def place(fix: Fix, commit: str | None, build: int | None) -> Placement:
    """Where the engine stands relative to ``fix``: by known commit first, then build number."""
    known = known_commit(commit)
    if known is not None:
        return Placement.HAS if fix.name in known.has else Placement.LACKS
    if build is None or build < MIN_REAL_BUILD:
        return Placement.UNKNOWN
    if fix.build is not None:
        return Placement.HAS if build >= fix.build else Placement.LACKS
    # A fix known only by commit: a build before an earlier fix in the series predates it too.
    earlier = KPOOL_FIXES[: KPOOL_FIXES.index(fix)] if fix in KPOOL_FIXES else ()
    if any(f.build is not None and build < f.build for f in earlier):
        return Placement.LACKS
    return Placement.UNKNOWN


class Severity(StrEnum):
    """How much an advisory matters; the value is the word it is printed with (``[error] …``)."""

    ERROR = "error"  # do not launch like this: the launch is refused
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Advisory:
    key: str
    severity: Severity
    title: str
    detail: str
    action: str

    def __str__(self) -> str:
        return f"[{self.severity}] {self.title}: {self.detail} — {self.action}"


def _engine_words(commit: str | None, build: int | None) -> str:
    known = known_commit(commit)
    if known is not None:
        return f"llama.cpp {known.commit} ({known.date}, {known.note})"
    parts = []
    if commit and commit != "unknown":
        parts.append(f"commit {commit[:9]}")
    if build is not None:
        parts.append(f"build {build}")
    return "llama.cpp " + (", ".join(parts) if parts else "of unknown commit and build")


SMOKE_HINT = ("run the diagnostic smoke test (headroom serve MODEL --smoke --diagnostic, plus --unplanned "
              "for a model Headroom cannot plan: launches with GGML_SCHED_DEBUG_REALLOC=1, forks two "
              "sessions, continues both; it needs two backends — a GPU, or a ggml-rpc-server via --rpc — "
              "since one backend re-reserves silently)")


def _kpool(arch: str, fix: Fix, placement: Placement, engine: str) -> Advisory:
    pr = f"llama.cpp #{fix.pr}, {fix.label()}, {fix.date}"
    if placement is Placement.LACKS:
        return Advisory(
            f"kpool-{fix.name}", Severity.WARNING, f"{arch} with shared sessions on an engine without {fix.label()}",
            f"{engine} predates the fix for {fix.what} ({pr}); forking or sharing sessions can abort "
            "the engine or corrupt replies",
            f"use an engine at {fix.label()} or later (-np 1 avoids sharing cells, but on this engine even "
            f"one sequence re-reserves its decode graph); to confirm on this engine, {SMOKE_HINT}")
    return Advisory(
        f"kpool-{fix.name}-unplaced", Severity.WARNING, f"{arch}: cannot tell whether this engine has {fix.label()}",
        f"{engine} cannot be placed relative to the fix for {fix.what} ({pr})",
        SMOKE_HINT)


def _fixed_here(arch: str, fixes: list[Fix], engine: str) -> Advisory:
    names = " and ".join(f"{f.label()} (llama.cpp #{f.pr})" for f in fixes)
    return Advisory(
        "kpool-fixed-in-build", Severity.INFO, f"{arch} with shared sessions: fixed in this build",
        f"{engine} carries Headroom's ports of {names}: "
        + "; ".join(f.what for f in fixes),
        "nothing to do; forking and sharing sessions is safe on this engine")


def _host_kv(patched: tuple[str, ...], engine: str) -> Advisory:
    if HOST_KV_ATTENTION in patched:
        return Advisory(
            "host-kv-attention-in-build", Severity.INFO, "KV in host RAM: attention on the CPU in this build",
            f"{engine} carries Headroom's patch for it: the layers whose KV is in host RAM read it on the CPU "
            "for each decoded token, and only their activations cross the bus",
            "nothing to do")
    return Advisory(
        "host-kv-attention", Severity.WARNING, "KV in host RAM: this engine attends on the GPU",
        f"{engine} runs the attention of the layers whose KV is in host RAM on the GPU, copying their whole "
        "used KV over the bus for every decoded token: decode slows as the context fills",
        "serve with Headroom's engine (headroom engine build: its patch keeps that attention on the CPU), "
        "or keep the KV resident (a shorter context or a q8_0 KV)")


def advisories_for(arch: str, engine_commit: str | None, engine_build_number: int | None,
                   n_parallel: int, kv_unified: bool, window_mode: bool,
                   patched: tuple[str, ...] = (), *, spills: bool = True, host_kv: bool = False) -> list[Advisory]:
    """Known issues for serving ``arch`` with these settings on this engine (empty: none known).
    ``patched``: the ``Fix.name`` values the engine carries as Headroom patches (its build stamp).
    ``spills``: the window has a host tail (False: every cell resident, nothing spills).
    ``host_kv``: some layer's KV is in host RAM while its weights are on a GPU (a KV host tail, or
    -nkvo with flash attention)."""
    out: list[Advisory] = []
    shared = n_parallel > 1
    engine = _engine_words(engine_commit, engine_build_number)
    if host_kv and not window_mode:
        out.append(_host_kv(patched, engine))
    if window_mode and kv_unified:
        out.append(Advisory(
            "window-excludes-kvu", Severity.ERROR, "the rolling-KV window excludes --kv-unified",
            "opencoti's window keeps a per-sequence device window and cannot run on one unified pool",
            "drop -kvu (each slot then gets n_ctx/-np cells and forks copy instead of sharing), "
            "or serve in stock mode to share one pool"))
    if window_mode and shared and spills:
        out.append(Advisory(
            "window-no-prefix-reuse", Severity.INFO, "spilled window: no prompt-cache reuse",
            "while the window spills to the host tail, context shift and prompt-cache reuse are off",
            "continuing a session re-decodes its text; keep sessions short or fit them resident"))
    if arch in KPOOL_ARCHS and not shared and SCATTER_FIX.name not in patched \
            and place(SCATTER_FIX, engine_commit, engine_build_number) is Placement.LACKS:
        # Seen on this project's engine (tests/integration/test_kpool_repro.py): with one sequence the
        # decode graph still differs from the reserved one once the pool count steps, so the engine
        # re-reserves at decode time (silently; a diagnostic launch aborts on it).
        out.append(Advisory(
            "kpool-single-rereserve", Severity.INFO, f"{arch}: decode-time graph re-reserve on this engine",
            f"{engine} predates {SCATTER_FIX.label()}: even one sequence re-reserves its decode graph when "
            "the k-pool grows, so the compute buffer can grow past what pass 1 measured",
            f"leave room above the measured compute buffer, or use an engine at {SCATTER_FIX.label()} or later"))
    if arch in KPOOL_ARCHS and shared:
        carried = [fix for fix in KPOOL_FIXES if fix.name in patched]
        if carried:
            out.append(_fixed_here(arch, carried, engine))
        for fix in KPOOL_FIXES:
            placement = Placement.HAS if fix.name in patched else place(fix, engine_commit, engine_build_number)
            if placement is not Placement.HAS:
                out.append(_kpool(arch, fix, placement, engine))
    if arch in SINGLE_SEQ_RESERVE_ARCHS and shared:
        out.append(Advisory(
            "rereserve-by-design", Severity.INFO, f"{arch} re-reserves multi-sequence graphs",
            f"{arch} reserves its prompt graph for one sequence, so the first decode of several "
            "sessions together re-allocates the compute buffer (by design, not an engine bug)",
            "leave room above the measured compute buffer when several sessions decode at once; "
            "a diagnostic smoke test on this model is not evidence of the k-pool bug"))
    return out


# version: 0.5.0-dev (build 1, commit 0c1e570)
_VERSION_RE = re.compile(r"\(build (?P<build>\d+), commit (?P<commit>[0-9a-fA-F]+|unknown)\)")
# /props "build_info": "b1-0c1e570"
_BUILD_INFO_RE = re.compile(r"^b(?P<build>\d+)-(?P<commit>[0-9a-fA-F]+|unknown)$")


class EngineVersion(NamedTuple):
    """Where an engine's llama.cpp sits: its build number and commit (None: not known)."""

    build: int | None
    commit: str | None


def parse_engine_version(text: str) -> EngineVersion:
    """The build and commit from ``llama-server --version`` output or ``/props`` ``build_info``."""
    m = _VERSION_RE.search(text) or _BUILD_INFO_RE.match(text.strip())
    if m is None:
        return EngineVersion(None, None)
    commit = m.group("commit")
    return EngineVersion(int(m.group("build")), None if commit == "unknown" else commit.lower())
