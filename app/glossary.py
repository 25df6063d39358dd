"""The words Headroom shows, explained once: the window's Help ▸ Glossary and docs/glossary.md (made from
this table by ``python -m app.glossary``) read the same entries, and the window's tooltips take theirs
from here (``explain``). Plain words first; the engine's flag, where there is one, after it."""

from __future__ import annotations

import sys
from pathlib import Path

#: (term, what it means), in the order a newcomer meets them.
TERMS: tuple[tuple[str, str], ...] = (
    ("pass 1", "A measurement of the launch before anything loads: llama.cpp's own allocator sizes every "
               "buffer of the exact settings without reading the weights (no_alloc), in seconds. The window's "
               "Measure button runs it; `headroom measure` in a terminal. A number that says \"measured\" "
               "comes from it; \"estimated\" is Headroom's own arithmetic until it runs."),
    ("estimated", "Worked out by Headroom from the model's header, before pass 1: within a few MiB for the "
                  "models it knows; pass 1 then measures it."),
    ("resident window", "The part of the context whose KV cache stays in GPU memory, read at GPU speed."),
    ("host tail", "The rest of the KV cache, in host RAM (\"in host RAM\" in the picture): reached over the PCIe "
                  "link, or attended on the CPU, so each token takes longer once the context grows into it."),
    ("KV cache", "What the model keeps of each token of the context so it need not read it again: its size grows "
                 "with the context, the number of sessions and the KV type (f16, q8_0: `-ctk` and `-ctv`)."),
    ("compute buffer", "Scratch memory the engine needs to evaluate a batch of tokens; its size depends on the "
                       "context and the batch size (`-ub`)."),
    ("pinned memory", "Host RAM the engine locks for fast copies to the GPU (\"pinned compute\" in the picture): it "
                      "cannot be swapped out, so it counts against the RAM other programs have."),
    ("weights loaded from disk", "The model file is mapped, not copied (\"mapped weights\"): the weights that stay "
                                 "on the CPU are read from the page cache, so they need RAM but no copy."),
    ("prompt cache", "Host RAM the server keeps earlier prompts in (`--cache-ram`), so a chat that comes back is "
                     "not read again."),
    ("shared sessions", "Several conversations over one KV pool (`-np N -kvu`): a prompt forked into K replies is "
                        "read once and its cells shared."),
    ("slots", "How many requests the engine serves at once (`-np`): each one a share of the context."),
    ("-ngl", "How many of the model's layers run on the GPU (all: every layer)."),
    ("-nkvo", "Keep the whole KV cache in host RAM, with every layer's weights on the GPU."),
    ("-ot", "Put chosen tensors (a layer's experts, its KV) in host RAM: how the host tail is placed."),
    ("tok/s", "Tokens a second. \"decode\": tokens the model writes; three figures are with the context empty, "
              "half full and full (a reply slows as the context fills). \"prefill\": tokens of a prompt read."),
    ("training context", "The longest context the model was trained on. Past it the model needs its positions "
                         "stretched (RoPE scaling), which Headroom does not set: it warns, and offers nothing "
                         "past it unless asked."),
    ("real GPUs (NVML)", "The cards this machine has, read through NVIDIA's management library (NVML): their "
                         "memory and what other programs hold on them."),
    ("simulated card", "A card from Headroom's table (Plan for: RTX 4090): how a model would fit on it. A launch "
                       "here runs on the devices this machine has."),
)

#: The CLI's pointers to its commands, as the window says them (its own buttons).
WINDOW_POINTERS: tuple[tuple[str, str], ...] = (
    ("run pass 1 (headroom measure) for measured numbers", "press Measure (pass 1) for measured numbers"),
    ("run pass 1 again for this launch (headroom measure) before trusting them",
     "press Measure (pass 1) for this launch before trusting them"),
)


def explain(term: str) -> str:
    """The glossary's words for ``term`` (case-insensitive), or ``""``."""
    key = term.lower()
    return next((text for name, text in TERMS if name.lower() == key), "")


def window_words(text: str) -> str:
    """``text`` (the planner's sentence, which the CLI prints) with its pointers to commands turned into the
    window's buttons."""
    for cli, window in WINDOW_POINTERS:
        text = text.replace(cli, window)
    return text


def markdown() -> str:
    """docs/glossary.md."""
    rows = "\n".join(f"- **{name}**: {text}" for name, text in TERMS)
    return ("# Glossary\n\nThe words Headroom shows, as the window's Help ▸ Glossary shows them (made by "
            "`python -m app.glossary` from `app/glossary.py`).\n\n" + rows + "\n")


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"
    out.write_text(markdown())
    print(out, file=sys.stderr)
