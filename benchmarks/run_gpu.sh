#!/usr/bin/env bash
# Every GPU result in benchmarks/results/, in one command on a CUDA machine (the device image lacks
# jax-triton: see benchmarks/results/README.md). Writes to $OUT (default benchmarks/results).
#   bash benchmarks/run_gpu.sh [tests] [multi] [bench] [eager] [loop] [rejection] [filtered] [variants] [digest]
#                              [digest_filtered] [compile] [padding] [digest_ab] [second_process] [logprobs]
#                              [vocab_parallel] [vocab_parallel_tests] [vocab_parallel_bench]
#   (default: tests bench)
# `multi` needs two or more GPUs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
SHA=$(cat GIT_SHA 2>/dev/null || git rev-parse HEAD)
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
steps=${*:-tests bench}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
for step in $steps; do
  case $step in
    tests)  # -v: a line a test as it ends, so that failures stay named when xdist's teardown hangs past the timeout
      { echo "commit $SHA"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        JSAMPLE_PROPERTY_EXAMPLES=30 timeout -s INT 500 python3 -m pytest tests -v -n 14 -rf -p no:cacheprovider --durations=5 \
          --ignore=tests/test_multi_gpu.py; } \
        > "$OUT/gpu_tests.txt" 2>&1
      tail -3 "$OUT/gpu_tests.txt" ;;
    compile)  # cold cost: the capture-style sweep with and without precompile, each in an empty Triton cache
      # (BASE: a checkout of the code to compare with, e.g. `git archive d91dfab | tar -x -C .base`)
      OUT="$OUT/compile" bash benchmarks/lab/run_compile_once.sh "${BASE:-.base}" | tail -n 20
      python3 -m pytest tests/test_compiles_gpu.py tests/test_padding.py -q -n 4 -p no:cacheprovider \
        > "$OUT/compile/gpu_tests_padding_compiles.txt" 2>&1; tail -2 "$OUT/compile/gpu_tests_padding_compiles.txt" ;;
    padding)  # padded rows (num_valid): B = 256 with 16 valid against B = 16
      python3 benchmarks/lab/bench_padding.py > "$OUT/bench_padding.txt" 2>&1; tail -n 5 "$OUT/bench_padding.txt" ;;
    multi)
      { echo "commit $SHA"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        timeout -s INT 300 python3 -m pytest tests/test_multi_gpu.py -q -rA -p no:cacheprovider; } \
        > "$OUT/gpu_tests_multi_gpu.txt" 2>&1
      tail -3 "$OUT/gpu_tests_multi_gpu.txt" ;;
    vocab_parallel)  # two GPUs: vocab-parallel tests (NCCL, then shard_map in two parts: their compiles take minutes
      # with jax-triton 0.3's PTX, which XLA hands ptxas one kernel at a time), then the sharded-vs-gather benchmark;
      # a device call allows 600 s: run the steps `vocab_parallel_tests` and `vocab_parallel_bench` in two calls
      OUT="$OUT" bash benchmarks/run_gpu.sh vocab_parallel_tests vocab_parallel_bench ;;
    vocab_parallel_tests)
      { echo "commit $SHA"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        timeout -s INT 250 python3 -m pytest tests/test_multi_gpu.py -v -rA -p no:cacheprovider -k vocab_parallel_torch
        # the two JAX parts side by side (each compiles its kernels with ptxas in XLA, one at a time)
        for part in samplers rejection; do
          timeout -s INT 300 python3 -m pytest tests/test_multi_gpu.py -v -rA -p no:cacheprovider \
            -k "vocab_parallel_jax and $part" > "$OUT/gpu_tests_vocab_parallel_jax_$part.txt" 2>&1 &
        done
        wait; cat "$OUT"/gpu_tests_vocab_parallel_jax_*.txt
      } > "$OUT/gpu_tests_vocab_parallel.txt" 2>&1
      grep -E "passed|failed|PASSED|FAILED|ERROR" "$OUT/gpu_tests_vocab_parallel.txt" | tail -8 ;;
    vocab_parallel_bench)
      timeout -s INT 300 python3 benchmarks/bench_vocab_parallel.py --out "$OUT" --git-sha "$SHA" \
        > "$OUT/bench_vocab_parallel_log.txt" 2>&1
      tail -n 8 "$OUT/bench_vocab_parallel_log.txt" ;;
    bench)  # one GPU: the harness hands torch tensors to JAX, which fails across device indices
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/bench_gumbel.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_gumbel_log.txt" 2>&1
      python3 benchmarks/bench_rejection.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_rejection_log.txt" 2>&1
      python3 benchmarks/bench_filtered.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_filtered_log.txt" 2>&1
      tail -n 2 "$OUT/bench_gumbel_log.txt" "$OUT/bench_rejection_log.txt" "$OUT/bench_filtered_log.txt" ;;
    eager)  # eager torch calls: wall time against a bare launch and against the CUDA-graph time
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/bench_eager.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_eager_log.txt" 2>&1
      tail -n 12 "$OUT/bench_eager_log.txt" ;;
    rejection)  # rejection_sample's benchmark alone
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/bench_rejection.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_rejection_log.txt" 2>&1
      tail -n 5 "$OUT/bench_rejection_log.txt" ;;
    filtered)  # top_k_top_p_sample's benchmark alone
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/bench_filtered.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_filtered_log.txt" 2>&1
      tail -n 5 "$OUT/bench_filtered_log.txt" ;;
    variants)  # lab: top_k_top_p_sample's plan variants against the shipped plan (issue 19, target 2; VARIANTS=, VARIANT_ARGS=)
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/lab/explore_filtered_variants.py ${VARIANTS:+--variants "$VARIANTS"} ${VARIANT_ARGS:-} \
        > "$OUT/explore_filtered_variants.txt" 2>&1
      tail -n 30 "$OUT/explore_filtered_variants.txt" ;;
    loop)  # a step of a jitted JAX decode loop at B = 1, default and recommended XLA flags
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 benchmarks/bench_jitted_loop.py --out "$OUT" --git-sha "$SHA" > "$OUT/bench_jitted_loop_log.txt" 2>&1
      tail -n 8 "$OUT/bench_jitted_loop_log.txt" ;;
    digest_filtered)  # top_k_top_p_sample's GPU tokens at V = 151936 and 32000 against the digests recorded before
      for V in 151936 32000; do
        timeout -s INT 280 python3 benchmarks/token_digest.py --size gpu --only "top_k_top_p_sample V=$V" \
          --compare benchmarks/results/digest/token_digest_gpu_V${V}_filtered_winner.json \
          > "$OUT/compare_gpu_V${V}_filtered.txt" 2>&1
        tail -n 2 "$OUT/compare_gpu_V${V}_filtered.txt"
      done ;;
    digest_ab)  # every op's GPU tokens at this checkout and at BASE (if present), in parallel processes (a vocabulary
      # and a group of cases each); merge and compare the parts afterwards with benchmarks/merge_digests.py
      mkdir -p "$OUT/digest"
      for V in 1 37 32000 151936; do
        for group in float32 bfloat16 K=; do
          part="V${V}_${group%=}"
          timeout -s INT ${DIGEST_TIMEOUT:-540} python3 benchmarks/token_digest.py --size gpu --only "V=$V $group" \
            --out "$OUT/digest/head_$part.json" > "$OUT/digest/head_$part.log" 2>&1 &
          if [ -d "${BASE:-.base}" ]; then
            (cd "${BASE:-.base}" && timeout -s INT ${DIGEST_TIMEOUT:-540} python3 benchmarks/token_digest.py --size gpu \
              --only "V=$V $group" --out "$OUT/digest/base_$part.json" > "$OUT/digest/base_$part.log" 2>&1) &
          fi
        done
      done
      wait; tail -qn 1 "$OUT"/digest/*.log ;;
    logprobs)  # token_logprobs: its GPU tests and its time against torch's log_softmax + gather (+ topk)
      export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 -m pytest -q -n 6 -p no:cacheprovider tests/test_logprobs.py > "$OUT/gpu_tests_logprobs.txt" 2>&1
      python3 benchmarks/bench_logprobs.py --out "$OUT" > "$OUT/logprobs.md" 2>&1; tail -n 3 "$OUT/gpu_tests_logprobs.txt" ;;
    second_process)  # does a second process reuse what precompile compiled? (issue 39: under 1 s)
      bash benchmarks/lab/diag_second_process.sh > "$OUT/second_process.txt" 2>&1; tail -n 12 "$OUT/second_process.txt" ;;
    digest)  # every op's tokens over benchmarks/token_digest.py's grid: compare with results/digest/
      python3 benchmarks/token_digest.py --size gpu --out "$OUT/token_digest_gpu.json" > "$OUT/token_digest_gpu_log.txt" 2>&1
      tail -n 1 "$OUT/token_digest_gpu_log.txt" ;;
  esac
done
