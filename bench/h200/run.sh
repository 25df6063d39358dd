#!/usr/bin/env bash
# Runs THERE, on the H200 machine, in one device call (bench/h200/README.md has the call):
# installs the carried wheels, builds the CUDA engine (sm_90) from the carried llama.cpp tree, then
# runs the steps until its time is up, writing results as it goes. Issue 32's steps, in its order:
#   kpool      the k-pool regression tests on CUDA0 + CPU (tests/integration/test_kpool_repro.py)
#   placement  the desktop card's ways at 128k/512k, memory vs NVML and speed (bench/h200/placement.py)
#   extras     a vision projector and a draft model, planned vs NVML (bench/h200/matrix.py --rows extras)
#   sweep      CUDA pass 1 where the compute estimate was not fitted (bench/h200/sweep.py)
# and issue 9's memory matrix as the step `memory` (bench/h200/matrix.py).
#   bench/h200/run.sh            on the H200 (OUT set by the device tool)
#   bench/h200/run.sh --cpu      the dry run here: CPU engine, tiny models, a loopback RPC device
# Environment: HEADROOM_BENCH_BUDGET seconds for the whole script (default 560: the call's
# timeout_s is 600), HEADROOM_BENCH_STEPS (default "kpool placement extras sweep"),
# HEADROOM_BENCH_FIRST the matrix row or placement case to start at (default 1), PYTHON (default
# python3), HEADROOM_CACHE_DIR (default .device-cache, or the first folder not on tmpfs).
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/../.."
ROOT=$PWD
CPU=0; [ "${1:-}" = "--cpu" ] && CPU=1
BUDGET=${HEADROOM_BENCH_BUDGET:-560}
OUT=${OUT:-$ROOT/.device/out}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

# The cache (engine build, generated models, measurements) on a disk, not tmpfs: loading a sparse
# shape model faults in every page (MAP_POPULATE), and tmpfs pages could not be given back.
# .device-cache is git-ignored and not carried, so a second call on the warm machine keeps it.
if [ -z "${HEADROOM_CACHE_DIR:-}" ]; then
  for d in "$ROOT/.device-cache" /var/tmp/headroom-cache /tmp/headroom-cache; do
    mkdir -p "$d" 2>/dev/null || continue
    HEADROOM_CACHE_DIR=$d
    case "$(df --output=fstype "$d" | tail -1)" in tmpfs|ramfs) continue ;; *) break ;; esac
  done
fi
export HEADROOM_CACHE_DIR
mkdir -p "$HEADROOM_CACHE_DIR"

say() { printf '[run %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { say "STOP: $*"; exit 1; }

say "machine: $(uname -m), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, $(df -h /tmp | awk 'NR==2 {print $4}') free in /tmp"
say "cache: $HEADROOM_CACHE_DIR ($(df -hT "$HEADROOM_CACHE_DIR" | awk 'NR==2 {print $2", "$5" free"}'))"
say "headroom $(head -1 .device/HEADROOM_GIT 2>/dev/null || echo '?') ($(sed -n 2p .device/HEADROOM_GIT 2>/dev/null))"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
PATH=$(dirname "$(command -v "$PY")"):$PATH  # the image's cmake and ninja live beside its python3
say "tools: $(command -v cmake || echo 'NO cmake'), $(command -v ninja || echo 'no ninja'), $(command -v g++ || echo 'NO g++')"
if [ "$CPU" = 0 ]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || die "no nvidia-smi"
  nvcc --version | tail -2 || die "no nvcc"
  ls /usr/local/cuda*/lib64/libcublas.so* /usr/local/cuda*/targets/*/lib/libcublas.so* 2>/dev/null | head -3
else
  export HEADROOM_ENGINE_BACKEND=cpu
  # Reuse the CPU build the tests made instead of compiling again (native_build sees the same commit).
  [ -e "$HEADROOM_CACHE_DIR/engines" ] || [ ! -d "$HOME/.cache/headroom/engines" ] \
    || ln -s "$HOME/.cache/headroom/engines" "$HEADROOM_CACHE_DIR/engines"
fi
"$PY" -V

# 1. Python packages the machine lacks (prepare.sh made them): gguf, diskcache; llama_cpp's code.
SITE=$HEADROOM_CACHE_DIR/site
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .device/whl/*.whl \
  || die "wheels did not install"
export PYTHONPATH=$ROOT:$SITE:$ROOT/.device/site${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c 'import gguf, numpy, psutil, pynvml' || die "a Python package is missing"
"$PY" -c 'import pytest' 2>/dev/null || say "no pytest here: the kpool step cannot run (prepare.sh carries its wheels)"

# Know before compiling that the build will be CUDA (a CPU build there would waste the lease).
if [ "$CPU" = 0 ]; then
  DET=$("$PY" -c 'from app.engine.native_build import detect_backend; print(" | ".join(detect_backend()))')
  say "backend: $DET"
  case "$DET" in
    cuda*) ;;
    *) find / -xdev \( -name 'libcublas.so*' -o -name nvcc \) 2>/dev/null | head -20; die "no CUDA build possible: $DET" ;;
  esac
fi

# 2. The engine, built once per machine (cached by commit and backend under HEADROOM_CACHE_DIR).
SRC=$HEADROOM_CACHE_DIR/src
if [ ! -f "$SRC/llama.cpp/CMakeLists.txt" ]; then
  mkdir -p "$SRC" && tar xzf .device/llama.cpp-src.tar.gz -C "$SRC" || die "no llama.cpp source (run prepare.sh)"
fi
say "building the engine ($( [ "$CPU" = 1 ] && echo CPU || echo "CUDA, sm_${HEADROOM_CUDA_ARCHS:-90}")); log: build.log"
HEADROOM_CUDA_ARCHS=${HEADROOM_CUDA_ARCHS:-90} "$PY" native/build.py --source "$SRC/llama.cpp" --jobs "$(nproc)" \
  >"$OUT/build.log" 2>&1
RC=$?
grep '^\[engine-build\]' "$OUT/build.log"
[ $RC = 0 ] || { tail -40 "$OUT/build.log"; die "engine build failed (exit $RC)"; }
BIN=$("$PY" -c 'from app.engine.native_build import find_build; b = find_build(); print(b.bin_dir if b else "")')
BACKEND=$("$PY" -c 'from app.engine.native_build import find_build; b = find_build(); print(b.backend if b else "")')
[ "$CPU" = 1 ] || [ "$BACKEND" = cuda ] || die "the build is '$BACKEND', not CUDA (see build.log: nvcc or cuBLAS missing)"
"$BIN/llama-server" --version 2>&1 | tail -2
say "engine bin: $(du -sh "$BIN" | cut -f1) ($(cd "$BIN" && du -shc libggml-cuda.so* 2>/dev/null | tail -1 | cut -f1) ggml-cuda)"
export LLAMA_CPP_LIB_PATH=$BIN

# 3. `headroom` as a user types it.
mkdir -p "$HEADROOM_CACHE_DIR/bin"
printf '#!/bin/sh\nexec "%s" -m app "$@"\n' "$(command -v "$PY")" >"$HEADROOM_CACHE_DIR/bin/headroom"
chmod +x "$HEADROOM_CACHE_DIR/bin/headroom"
export PATH=$HEADROOM_CACHE_DIR/bin:$PATH
headroom doctor 2>&1 | tail -15

# 4. The steps, until the budget is spent (results land in $OUT as they come). The later steps keep
#    their seconds (RESERVE) from the ones before, so a slow placement row cannot starve them.
STEPS=${HEADROOM_BENCH_STEPS:-kpool placement extras sweep}
CPUFLAG=$( [ "$CPU" = 1 ] && echo --cpu )
reserve() {  # the seconds the steps after $1 keep for themselves
  local after=0 r=0 s
  for s in $STEPS; do
    if [ $after = 1 ]; then case $s in extras) r=$((r + 35)) ;; sweep) r=$((r + 45)) ;; *) r=$((r + 60)) ;; esac; fi
    [ "$s" = "$1" ] && after=1
  done
  echo $r
}
RC=0
for STEP in $STEPS; do
  END=$((T0 + BUDGET - $(reserve "$STEP")))
  say "step $STEP: until $((END - $(date +%s))) s from now"
  case $STEP in
    kpool)
      KPOOL_ENV=(); [ "$CPU" = 1 ] || KPOOL_ENV=(HEADROOM_KPOOL_DEVICE=cuda)
      LEFT=$((END - $(date +%s))); [ "$LEFT" -gt 10 ] || LEFT=10  # (a slow build leaves it little, never less)
      env "${KPOOL_ENV[@]}" timeout "$LEFT" "$PY" -m pytest -q -p no:cacheprovider \
        tests/integration/test_kpool_repro.py 2>&1 | tee "$OUT/kpool.txt" | tail -15 ;;
    placement)
      "$PY" bench/h200/placement.py --out "$OUT" --deadline "$END" --first "${HEADROOM_BENCH_FIRST:-1}" $CPUFLAG ;;
    extras)
      "$PY" bench/h200/matrix.py --rows extras --out "$OUT" --deadline "$END" $CPUFLAG ;;
    sweep)
      "$PY" bench/h200/sweep.py --out "$OUT" --deadline "$END" $CPUFLAG ;;
    memory)
      "$PY" bench/h200/matrix.py --out "$OUT" --deadline "$END" --first "${HEADROOM_BENCH_FIRST:-1}" $CPUFLAG ;;
    *) say "unknown step: $STEP" ;;
  esac
  R=$?; [ $R = 0 ] || RC=$R
  say "step $STEP: exit $R"
done
say "done (exit $RC); results: $(ls "$OUT" | tr '\n' ' ')"
exit $RC
