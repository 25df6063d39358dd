#!/usr/bin/env bash
# Runs HERE (with internet), before the device call: fills .device/ (git-ignored) with what the H200
# machine lacks and cannot download. bench/h200/README.md says how to call the device afterwards.
#   .device/llama.cpp-src.tar.gz  trimmed llama.cpp 0c1e57098 + its commit (bench/h200/pack_source.py)
#   .device/whl/*.whl             gguf, diskcache, pytest and its needs (cp312 manylinux / pure; the
#                                 device has the rest)
#   .device/site/llama_cpp/       llama-cpp-python's Python code (no library: it loads the engine
#                                 build's libllama through LLAMA_CPP_LIB_PATH, app/engine/libpath.py)
#   .device/HEADROOM_GIT          the commit this tree was copied from (no .git travels)
# Prints the total that travels (the limit is 64 MiB with the repo).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
DEV=$ROOT/.device

mkdir -p "$(git rev-parse --git-path info)"
EXCLUDE=$(git rev-parse --git-path info/exclude)
for p in /.device/ /.device-cache/; do grep -qxF "$p" "$EXCLUDE" 2>/dev/null || echo "$p" >>"$EXCLUDE"; done
mkdir -p "$DEV/whl" "$DEV/site"

say() { printf '[prepare] %s\n' "$*"; }

# 1. llama.cpp, trimmed, with its commit.
"$PY" bench/h200/pack_source.py --out "$DEV/llama.cpp-src.tar.gz"

# 2. Wheels for the device's Python 3.12 (KINDS.md: it has numpy, pyyaml, requests, tqdm, jinja2,
#    typing-extensions, psutil, nvidia-ml-py, huggingface-hub; not gguf, diskcache, llama-cpp-python).
#    Versions pinned to what this venv runs, so the device runs the same code as the tests.
GGUF=$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))')
DISKCACHE=$("$PY" -c 'import importlib.metadata as m; print(m.version("diskcache"))')
# pytest and what it needs, for the k-pool tests there (pure-Python wheels; the device has none of them
# that we rely on, so all travel: a pip without --upgrade would keep an older packaging)
PYTEST_PINS=$("$PY" -c 'import importlib.metadata as m
print(" ".join(f"{p}=={m.version(p)}" for p in ("pytest", "pluggy", "iniconfig", "packaging", "pygments")))')
rm -f "$DEV"/whl/*.whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEV/whl" \
  "gguf==$GGUF" "diskcache==$DISKCACHE" $PYTEST_PINS 2>&1 | grep -v "is ignored: it is neither" || true
for w in "$DEV"/whl/*.whl; do
  { unzip -p "$w" '*/METADATA' | grep '^Requires-Dist' | grep -v extra || true; } | sed "s|^|[prepare] $(basename "$w") needs |"
done

# 3. llama-cpp-python's Python package (pure Python when installed with -DLLAMA_BUILD=OFF, as ./dev does).
LCP=$("$PY" -c 'import importlib.util as u; s = u.find_spec("llama_cpp"); print(list(s.submodule_search_locations)[0])')
if find "$LCP" -name '*.so*' | grep -q .; then
  say "note: $LCP holds its own libraries; they are left behind (the engine build's libllama is used)"
fi
rm -rf "$DEV/site/llama_cpp"
cp -r "$LCP" "$DEV/site/llama_cpp"
find "$DEV/site/llama_cpp" \( -name __pycache__ -o -name lib -o -name server -o -name '*.so*' \) -prune -exec rm -rf {} +

# 4. Which Headroom this is.
{ git rev-parse HEAD; git status --short | wc -l | sed 's/$/ files changed since/'; } >"$DEV/HEADROOM_GIT"

# 5. What travels: tracked + untracked-not-ignored files (+ shared/), and .device (carried).
TREE=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
CARRY=$(du -sb "$DEV" | cut -f1)
SHARED=0; [ -d shared ] && SHARED=$(du -sb shared | cut -f1)
TOTAL=$((TREE + CARRY + SHARED))
say "$(du -sh "$DEV/llama.cpp-src.tar.gz" | cut -f1) llama.cpp source, $(du -shc "$DEV"/whl/*.whl | tail -1 | cut -f1) wheels, $(du -sh "$DEV/site" | cut -f1) llama_cpp"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
say "travels: tree $(mib "$TREE") + shared/ $(mib "$SHARED") + .device $(mib "$CARRY") = $(mib "$TOTAL") (limit 64 MiB)"
if [ "$TOTAL" -gt $((60 * 1048576)) ]; then
  say "TOO BIG: over 60 MiB; trim before calling the device"; exit 1
fi
say "ready: call the device as bench/h200/README.md says (carry [\".device\"])"
