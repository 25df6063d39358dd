"""A stand-in for the llamafile / opencoti-llamafile binaries, which cannot run here.

Not recorded output: it mimics what docs/domain.md §4 says of them. ``--version`` prints
``llamafile v0.10.5``; llama-server flags are accepted only after ``--server``; the flags it
knows are llama.cpp's argument parser's answer shape: an unknown flag →
``error: invalid argument: X``, a missing model → gguf's ``failed to open GGUF file``. The
opencoti variant (``FAKE_OPENCOTI=1`` baked into its copy) also knows ``--kv-residency-mode`` and
``--vram-target``. Every run appends its argv to ``$FAKE_LLAMAFILE_CALLS`` when set.
"""

from __future__ import annotations

import os
import sys

VALUED = {"-m", "-c", "-ngl", "-fa", "-ctk", "-ctv", "-ub", "-b", "-np", "--host", "--port", "-lv", "--rpc",
          "--gpu", "--api-key"}
FLAGS = {"-kvu", "-nkvo", "--metrics", "--swa-full"}  # no --fit: an older llama.cpp inside
OPENCOTI = {"--kv-residency-mode", "--vram-target"}


def main(argv: list[str], opencoti: bool) -> int:
    calls = os.environ.get("FAKE_LLAMAFILE_CALLS")
    if calls:
        with open(calls, "a") as f:
            f.write(" ".join(argv) + "\n")
    if argv[:1] == ["--version"]:
        print("llamafile v0.10.5")
        return 0
    if argv[:1] != ["--server"]:
        print("error: this fake only serves (--server first)", file=sys.stderr)
        return 1
    valued = VALUED | (OPENCOTI if opencoti else set())
    i, model = 1, ""
    while i < len(argv):
        a = argv[i]
        if a in valued:
            if a == "-m":
                model = argv[i + 1]
            i += 2
        elif a in FLAGS:
            i += 1
        else:
            print(f"error: invalid argument: {a}", file=sys.stderr)
            return 1
    if not os.path.exists(model):
        print(f"gguf_init_from_file: failed to open GGUF file '{model}' (No such file or directory)",
              file=sys.stderr)
        return 1
    return 0
