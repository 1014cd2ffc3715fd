#!/usr/bin/env bash
# The compile-once measurements (issue 39) on one GPU, each with an empty Triton cache of its own.
# BASE: a checkout of the code before the change (e.g. `git archive d91dfab | tar -x -C .base`).
#   bash benchmarks/lab/run_compile_once.sh BASE   # -> $OUT/compile_*.json, $OUT/compile_log.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
BASE=${1:-.base}
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
log=$OUT/compile_log.txt
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "== new, precompile then the capture-style sweep (empty cache)"
  TRITON_CACHE_DIR=/tmp/cache_new_pre timeout 420 python3 benchmarks/bench_compile.py sweep --precompile \
    --out "$OUT/compile_new_precompile.json" | tail -n 25
  echo "== new, a second process's first call (the cache the first filled)"
  TRITON_CACHE_DIR=/tmp/cache_new_pre timeout 60 python3 benchmarks/bench_compile.py first-call \
    --out "$OUT/compile_first_call.json" | tail -n 12
  echo "== new, the sweep without precompile (empty cache)"
  TRITON_CACHE_DIR=/tmp/cache_new_cold timeout 300 python3 benchmarks/bench_compile.py sweep --budget 200 \
    --out "$OUT/compile_new_cold.json" | tail -n 25
  echo "== base, top_k + top_p over the first capture sizes (empty cache)"
  TRITON_CACHE_DIR=/tmp/cache_base timeout 200 python3 benchmarks/bench_compile.py sweep --checkout "$BASE" \
    --ops top_k+top_p --sizes 1,2,4,8,16,24,32,40 --budget 120 --out "$OUT/compile_base_cold.json" | tail -n 25
} > "$log" 2>&1
tail -n 60 "$log"
