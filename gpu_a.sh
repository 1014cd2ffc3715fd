set -x
python3 -m pip install -q --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:. XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, jax; print(torch.__version__, triton.__version__, jax.__version__)"
{ git rev-parse HEAD 2>/dev/null; timeout -s INT 280 python3 -m pytest tests/test_vocab_parallel.py -k "rejection_shard_rounds" -v -n 4 -p no:cacheprovider --durations=5; } > $OUT/gpu_tests_vocab_parallel_rejection.txt 2>&1
tail -5 $OUT/gpu_tests_vocab_parallel_rejection.txt
timeout -s INT 200 python3 -m pytest tests/test_rejection_gpu.py -q -n 8 -p no:cacheprovider > $OUT/gpu_tests_rejection.txt 2>&1
tail -3 $OUT/gpu_tests_rejection.txt
timeout 250 python3 benchmarks/token_digest.py --size gpu --only rejection --compare benchmarks/results/digest/token_digest_gpu.json > $OUT/digest_rejection.txt 2>&1
tail -3 $OUT/digest_rejection.txt
