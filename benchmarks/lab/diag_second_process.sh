export PYTHONUNBUFFERED=1
TRITON_CACHE_DIR=/tmp/d1 timeout 120 python3 benchmarks/bench_compile.py sweep --precompile --ops top_k+top_p --sizes 8 | tail -4
ls /tmp/d1 | wc -l
TRITON_CACHE_DIR=/tmp/d1 timeout 60 python3 benchmarks/bench_compile.py first-call --verbose | grep -v JitFunctionInfo | tail -3
ls /tmp/d1 | wc -l; ls -t /tmp/d1 | head -20 | while read d; do ls /tmp/d1/$d; done | head -30
TRITON_CACHE_DIR=/tmp/d1 timeout 60 python3 benchmarks/bench_compile.py first-call | tail -3
