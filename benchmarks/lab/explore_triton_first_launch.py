"""The fixed part of any first call with an empty Triton cache (issue 39): the first launch of a trivial Triton
kernel in a fresh process (Triton's driver utilities built for the cache, the kernel compiled, its module loaded),
then a second trivial kernel.

    TRITON_CACHE_DIR=$(mktemp -d) python benchmarks/lab/explore_triton_first_launch.py
"""

import time

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr):
    tl.store(y_ptr + tl.arange(0, 16), tl.load(x_ptr + tl.arange(0, 16)))


@triton.jit
def _double(x_ptr, y_ptr):
    tl.store(y_ptr + tl.arange(0, 16), 2 * tl.load(x_ptr + tl.arange(0, 16)))


x = torch.zeros(16, device="cuda")
y = torch.empty_like(x)
torch.cuda.synchronize()
for kernel in (_copy, _double):
    start = time.perf_counter()
    kernel[(1,)](x, y)
    torch.cuda.synchronize()
    print(f"{kernel.fn.__name__}: first launch {time.perf_counter() - start:.2f} s")
