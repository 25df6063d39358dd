"""Pack a trimmed llama.cpp source tree for a machine without internet (bench/h200/prepare.sh).

Keeps what CMake needs to configure the tree and build llama-server, llama-fit-params,
ggml-rpc-server, libllama, mtmd and ggml-cuda (every ``add_subdirectory`` in tools/ is
unconditional, so tools/ stays whole); drops the git objects, the vocab models, the docs, the
tests' data and the ggml backends Headroom never builds. The commit goes into
``native_build.COMMIT_FILE`` so ``native_build --source`` hands it to CMake and ``--version``
names it. Standard library only, like native_build.

    python3 bench/h200/pack_source.py [--tree DIR] [--out FILE]   # prints the tarball's size
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.engine import native_build  # noqa: E402

#: Top-level entries of the llama.cpp tree left out (none is read by CMake with tests off).
DROP_TOP = frozenset({
    ".git", ".github", ".devops", ".gemini", ".pi", "models", "docs", "media", "gguf-py", "conversion",
    "benches", "tests", "skills", "pocs_data",
})
#: ggml backends Headroom does not build (ggml/src/CMakeLists.txt adds a backend's folder only
#: when its GGML_<NAME> option is on).
DROP_BACKENDS = frozenset({
    "ggml-cann", "ggml-et", "ggml-hexagon", "ggml-metal", "ggml-opencl", "ggml-openvino", "ggml-sycl",
    "ggml-virtgpu", "ggml-vulkan", "ggml-webgpu", "ggml-zdnn", "ggml-zendnn",
})
#: The folder the tarball unpacks to.
PREFIX = "llama.cpp"


def kept(rel: Path) -> bool:
    """Whether a path (relative to the tree) goes into the tarball."""
    parts = rel.parts
    if not parts or parts[0] in DROP_TOP:
        return False
    if len(parts) >= 3 and parts[:2] == ("ggml", "src") and parts[2] in DROP_BACKENDS:
        return False
    return "__pycache__" not in parts


def pack(tree: Path, commit: str, out: Path) -> int:
    """Write the trimmed ``tree`` with ``commit`` to ``out`` (.tar.gz); return its size in bytes."""
    if not (tree / "CMakeLists.txt").is_file():
        raise FileNotFoundError(f"{tree} is not a llama.cpp tree")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tf:
        for path in sorted(tree.rglob("*")):
            rel = path.relative_to(tree)
            if path.is_dir() or not kept(rel):
                continue
            tf.add(path, arcname=f"{PREFIX}/{rel.as_posix()}", recursive=False)
        data = (commit + "\n").encode()
        info = tarfile.TarInfo(f"{PREFIX}/{native_build.COMMIT_FILE}")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    partial.replace(out)
    return out.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=None,
                        help="llama.cpp tree (default: the one vendored in the cached sdist)")
    parser.add_argument("--commit", default=None, help="its commit (default: read from the sdist's git)")
    parser.add_argument("--out", type=Path, default=ROOT / ".device" / "llama.cpp-src.tar.gz")
    args = parser.parse_args(argv)
    sdist = native_build.source_tree()
    tree = args.tree or sdist / "vendor" / "llama.cpp"
    commit = args.commit or native_build.vendored_commit(sdist)
    size = pack(tree, commit, args.out)
    print(f"{args.out}: {size / 2**20:.1f} MiB, llama.cpp {commit[:9]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
