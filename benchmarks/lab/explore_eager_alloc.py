"""Lab: where an eager B = 1 call's host time goes now, and what allocating its outputs costs by
each way torch offers (fresh torch.empty with a device object, new_empty, a view of a pooled block).
Prints per-call wall times (200 and 2000 back-to-back calls), the ratio to a bare launch as
bench_eager measures it, and the top entries of a cProfile of each op's calls.

    python benchmarks/lab/explore_eager_alloc.py
"""

import cProfile
import io
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_eager as be  # noqa: E402


def main():
    import torch

    p = be.problems(1, 32000)
    bare = be.bare_launch()
    device = p["logits"].device
    print(f"bare launch (2000 calls)   {be.wall_us(bare, 2000):7.2f} us", flush=True)
    print(f"bare launch (200 calls)    {be.wall_us(bare, 200):7.2f} us", flush=True)
    proto = torch.empty(1, dtype=torch.int32, device=device)
    pool = torch.empty(1 << 16, dtype=torch.int32, device=device)
    counter = iter(range(10**9))
    allocations = {
        "torch.empty((1,), dtype, device=device)": lambda: torch.empty((1,), dtype=torch.int32, device=device),
        "torch.empty((1, 5), dtype, device=device)": lambda: torch.empty((1, 5), dtype=torch.int32, device=device),
        "torch.empty(1, dtype, device='cuda')": lambda: torch.empty(1, dtype=torch.int32, device="cuda"),
        "proto.new_empty((1,))": lambda: proto.new_empty((1,)),
        "pool.as_strided((1, 5), (5, 1), offset)": lambda: pool.as_strided((1, 5), (5, 1), next(counter) % 60000),
        "pool[i:i + 1]": lambda: pool[(i := next(counter) % 60000):i + 1],
    }
    for name, fn in allocations.items():
        print(f"{name:45s} {be.wall_us(fn, 2000):7.2f} us", flush=True)
    for name, call in be.calls_of(p).items():
        ratio, us, bare_us = be.against_bare(call, bare, 200)
        print(f"{name:45s} {be.wall_us(call, 2000):7.2f} us (2000 calls)  {us:7.2f} us (200)  {ratio:5.2f}x bare "
              f"({bare_us:.2f})", flush=True)
    for name, call in be.calls_of(p).items():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(3000):
            call()
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
        print(f"--- {name}\n" + "\n".join(text.getvalue().splitlines()[4:24]), flush=True)


if __name__ == "__main__":
    main()
