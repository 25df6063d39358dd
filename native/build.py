#!/usr/bin/env python3
"""Build the stock engine (llama-server, llama-fit-params, ggml-rpc-server) from the llama.cpp
that llama-cpp-python's sdist vendors. Standard library only; see app/engine/native_build.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.native_build import main

if __name__ == "__main__":
    sys.exit(main())
