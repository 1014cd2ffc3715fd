#!/bin/bash
# Issue 39: first calls in fresh processes, each with an empty Triton cache (torch: explore_first_call_profile.py,
# without and with cProfile; JAX: explore_jax_lowering_profile.py). On a GPU host, from the repository root:
#   [WARM='1 0'] [PROFILE_ROWS=0] bash benchmarks/lab/run_first_call_profiles.sh [TORCH_CASES] [JAX_CASES]
# ROUNDS (1): each case's processes, the WARM values alternated. WARM: the JSAMPLE_WARM_TRITON values to run (Triton's set-up at import, torch_backend/_triton_setup.py); PROFILE_ROWS > 0: cProfile.
TORCH_CASES=${1:-"top_p1 top_k_top_p1 top_k1 min_p1 gumbel1 gumbel256 rejection4"}
JAX_CASES=${2:-"gumbel256 filtered1"}
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
PROFILE_ROWS=${PROFILE_ROWS:-0}
for round in $(seq ${ROUNDS:-1}); do
  for c in $TORCH_CASES; do
    for warm in ${WARM:-1 0}; do
      echo -n "JSAMPLE_WARM_TRITON=$warm "
      JSAMPLE_WARM_TRITON=$warm TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_first_call_profile.py $c $PROFILE_ROWS 2>&1 | grep -v Warning
    done
  done
done
# a second process on the first one's cache (Triton's utilities built, the kernel compiled): its first call
for warm in ${WARM:-1 0}; do
  cache=$(mktemp -d)
  for process in first second; do
    echo -n "$process process, JSAMPLE_WARM_TRITON=$warm "
    JSAMPLE_WARM_TRITON=$warm TRITON_CACHE_DIR=$cache python3 benchmarks/lab/explore_first_call_profile.py top_p1 0 2>&1 | grep -v Warning
  done
done
for c in $JAX_CASES; do
  TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/lab/explore_jax_lowering_profile.py $c 30 2>&1 | grep -v Warning
done
