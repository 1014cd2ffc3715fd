"""Where a first call's seconds go (issue 39: 3 s a first call): one torch call of top_k_top_p_sample with an
empty Triton cache, with Triton's compilation listener recording each kernel's stages, the thread that compiled it
and when, and the call's total; COMPILE_THREADS from the command line (0: one kernel after another at launch).

    TRITON_CACHE_DIR=$(mktemp -d) python benchmarks/lab/explore_first_call_timeline.py B THREADS [top_k,top_p]
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402
from triton import knobs  # noqa: E402

import torch_backend  # noqa: E402
from torch_backend import _execute  # noqa: E402

B, THREADS = int(sys.argv[1]), int(sys.argv[2])
FILTERS = (sys.argv[3] if len(sys.argv) > 3 else "top_k,top_p").split(",")
V = 151936
_execute.COMPILE_THREADS = THREADS
events = []
START = time.perf_counter()


def listener(*, src, metadata, metadata_group, times, cache_hit):
    name = getattr(getattr(src, "fn", None), "__name__", "?")
    stages = " ".join(f"{stage} {us / 1e6:.2f}" for stage, us in times.lowering_stages)
    events.append((time.perf_counter() - START, threading.current_thread().name, name,
                   times.ir_initialization / 1e6, stages, cache_hit))


knobs.compilation.listener = listener
logits = (torch.randn(B, V, device="cuda") * 3).to(torch.bfloat16)
seeds = torch.arange(B, device="cuda", dtype=torch.int64)
temperature = torch.full((B,), 0.8, device="cuda")
args = dict(top_k=torch.full((B,), 50, device="cuda", dtype=torch.int64), top_p=torch.full((B,), 0.9, device="cuda"),
            min_p=torch.full((B,), 0.05, device="cuda"))
args = {k: v for k, v in args.items() if k in FILTERS}
torch.cuda.synchronize()
t0 = time.perf_counter()
START = t0
torch_backend.top_k_top_p_sample(logits, seeds, seeds, temperature, **args)
torch.cuda.synchronize()
total = time.perf_counter() - t0
for at, thread, name, make_ir, stages, hit in events:
    print(f"{at:6.2f} s  {thread:28s} {name:34s} make_ir {make_ir:.2f} {stages}{'  (cache hit)' if hit else ''}")
print(f"B={B} threads={THREADS} {FILTERS}: first call {total:.2f} s, {len(events)} compiles")
