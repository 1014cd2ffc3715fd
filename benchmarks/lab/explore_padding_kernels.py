"""Where a padded call's device time goes (issue 39): each kernel's time (torch.profiler, CUDA) of
bench_padding's calls, B = 16, B = 256 with num_valid = 16, and B = 256 with num_valid = 256.

    python benchmarks/lab/explore_padding_kernels.py
"""

import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_padding import padding_ops  # noqa: E402


def kernel_times(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    times = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name[:40]] += event.device_time / reps
    return times


def main():
    ops, n = padding_ops()
    full = torch.tensor(256, device="cuda")
    for name, op in ops.items():
        for label, call in (("B=16", lambda: op(16, None)), ("B=256 nv=16", lambda: op(256, n)),
                            ("B=256 nv=256", lambda: op(256, full))):
            times = kernel_times(call)
            parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
            print(f"{name} {label}: {sum(times.values()):.1f} us: {parts}", flush=True)


if __name__ == "__main__":
    main()
