"""The architectures the engine's llama.cpp knows, and how Headroom plans each: the table of
docs/architectures.md, made from the engine's own list so that it cannot go stale.

The list is ``LLM_ARCH_NAMES`` in the engine's source (src/llama-arch.cpp). Each name is **estimated**
(the estimate knows its memory before anything runs: app/planner/gguf/model.py ``MODELLED_ARCHS``),
**measured** (pass 1 measures it and the plan follows from that measured law: app/planner/law.py), or
**no chat model** (an embedding model, an encoder, text-to-speech, a diffusion model, a draft head or the
projector's dummy: Headroom launches llama-server for chat and completion, which these do not serve).
``python -m app.engine.architectures`` prints the table from the engine source Headroom built from.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from app.engine import native_build
from app.paths import cache_dir
from app.planner.gguf.model import MODELLED_ARCHS

ARCH_FILE = Path("src") / "llama-arch.cpp"
# static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {
#     { LLM_ARCH_LLAMA,            "llama"            },
_MAP_START = re.compile(r"LLM_ARCH_NAMES\s*=\s*\{")
_ENTRY = re.compile(r'\{\s*LLM_ARCH_\w+\s*,\s*"(?P<name>[^"]+)"\s*\}')

#: Names llama-server does not serve as a chat or completion model (Headroom's list, by what each is in
#: src/models/<name>.cpp: embeddings and encoders, text-to-speech and audio decoders, diffusion models,
#: speculative draft heads, and the projector's dummy entry).
NO_CHAT = {
    "clip": "the vision projector's dummy (a projector is planned with its model: --mmproj)",
    **dict.fromkeys(("bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2", "jina-bert-v3",
                     "eurobert", "gemma-embedding", "llama-embed", "pangu-embedded"), "an embedding model"),
    "t5encoder": "an encoder",
    **dict.fromkeys(("wavtokenizer-dec", "qwen3tts", "pockettts"), "text to speech"),
    **dict.fromkeys(("dream", "llada", "llada-moe", "rnd1"), "a diffusion model (llama-diffusion-cli)"),
    **dict.fromkeys(("eagle3", "dflash"), "a speculative draft head"),
}


@dataclass(frozen=True)
class ArchRow:
    name: str
    how: str  # "estimated", "measured", or "no chat model: …"

    @property
    def planned(self) -> bool:
        return not self.how.startswith("no chat")


def read_architectures(src: Path) -> tuple[str, ...]:
    """The names in ``src``'s ``LLM_ARCH_NAMES`` (a llama.cpp tree), in its order; () when it has none."""
    try:
        text = (src / ARCH_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    start = _MAP_START.search(text)
    if start is None:
        return ()
    body = text[start.end():text.find("};", start.end())]
    return tuple(m.group("name") for m in _ENTRY.finditer(body))


def engine_source() -> Path | None:
    """The llama.cpp tree Headroom builds its engine from, when it is on this machine (the build
    extracted it); None otherwise (a bundle carries no source)."""
    tree = cache_dir() / "src" / native_build.SDIST_NAME / "vendor" / "llama.cpp"
    return tree if (tree / ARCH_FILE).is_file() else None


def rows(names: tuple[str, ...]) -> list[ArchRow]:
    out = []
    for name in names:
        if name in NO_CHAT:
            out.append(ArchRow(name, f"no chat model: {NO_CHAT[name]}"))
        else:
            out.append(ArchRow(name, "estimated" if name in MODELLED_ARCHS else "measured"))
    return out


def summary(names: tuple[str, ...]) -> str:
    """``154 architectures: 15 estimated, 122 measured by pass 1, 17 no chat model``."""
    found = rows(names)
    n_est = sum(r.how == "estimated" for r in found)
    n_meas = sum(r.how == "measured" for r in found)
    return (f"{len(found)} architectures: {n_est} estimated before anything runs, {n_meas} planned from pass 1's "
            f"measurement, {len(found) - n_est - n_meas} no chat model")


def table(names: tuple[str, ...], commit: str) -> str:
    """docs/architectures.md."""
    lines = ["# The architectures the engine knows",
             "",
             f"Made by `python -m app.engine.architectures` from `src/llama-arch.cpp` of llama.cpp {commit[:9]} (the "
             "engine Headroom builds); `tests/unit/engine/test_architectures.py` fails when it no longer matches.",
             "",
             "- **estimated**: the estimate knows its memory before anything runs (a plan from the header alone, "
             "before a download), and pass 1 then measures the compute buffers.",
             "- **measured**: pass 1 (llama.cpp's own allocator, no weights read) measures it as the model opens; "
             "the plan's KV follows from that measured law (docs/domain.md §15, `app/planner/law.py`) at any "
             "context, slot count, KV type and placement, and its numbers say so. On the Hub, pass 1 runs on the "
             "header-only copy, so this works before a download too. A memory pass 1's lines do not describe "
             "well enough (more than one sliding-window cache, an encoder-decoder's cross-attention) is refused "
             "in a sentence that says so; one the engine itself refuses, with the engine's reason.",
             "- **no chat model**: llama-server does not serve it for chat or completion.",
             "",
             f"{summary(names)}.",
             "",
             "| architecture | how Headroom plans it |",
             "|---|---|"]
    lines += [f"| `{r.name}` | {r.how} |" for r in rows(names)]
    return "\n".join(lines) + "\n"


def main() -> int:
    src = engine_source()
    if src is None:
        print("no engine source here: build the engine first (headroom engine build)", file=sys.stderr)
        return 1
    names = read_architectures(src)
    commit = native_build.source_commit(src)
    if commit == "unknown":
        commit = native_build.vendored_commit(src.parents[1])
    print(table(names, commit), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
