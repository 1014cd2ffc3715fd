"""Which kernel of the logprobs' list route takes the time at small batches (issue 41)? torch.profiler's CUDA
kernel times (mean of 20 calls) of token_logprobs with top_p, with top_k + top_p, and with num_top = 20,
fp32, V = 151936, "typical" logits (benchmarks/logit_families.py), B = 1 and 256.

    python benchmarks/lab/explore_logprobs_kernels.py
"""

import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from logit_families import make_logits  # noqa: E402

import torch_backend  # noqa: E402


def kernel_us(fn, calls=20):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    x_all = make_logits("typical", 256, 151936, g)
    print(torch.cuda.get_device_name())
    for batch in (1, 256):
        x = x_all[:batch].contiguous()
        t = torch.full((batch,), 0.7, device="cuda")
        seeds = torch.arange(batch, device="cuda")
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        for name, fn in (("top_p=0.9", lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9)),
                         ("top_k=50 top_p=0.9", lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50, top_p=0.9)),
                         ("num_top=20", lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20))):
            times = kernel_us(fn)
            print(f"B={batch} {name}: " + ", ".join(f"{k[:40]} {v:.1f}" for k, v in times.items()))


if __name__ == "__main__":
    main()
