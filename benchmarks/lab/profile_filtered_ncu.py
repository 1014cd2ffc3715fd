"""Lab: one top_k_top_p_sample call per filter under Nsight Compute (B = 256, V = 151936, bfloat16, a logit
family), to see what each launch of the launches' plan is bound by (occupancy, warp stalls, throughput).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats python3 benchmarks/lab/profile_filtered_ncu.py [--family flat]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import logit_families  # noqa: E402

FILTERS = {"top_p=0.9": dict(top_p=0.9), "top_k=50 top_p=0.9": dict(top_k=50, top_p=0.9)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="flat")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--filters", default=",".join(FILTERS))
    options = parser.parse_args()
    import torch

    import torch_backend

    batch, vocab = options.batch, 151936
    seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003
    positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 17
    temperature = torch.full((batch,), 0.8, device="cuda")
    x = logit_families.make_logits(options.family, batch, vocab, torch.Generator(device="cuda").manual_seed(1))
    x = x.to(torch.bfloat16)
    for name in options.filters.split(","):
        filters = FILTERS[name]
        for _ in range(2):  # compiled and warm before the profiled call
            torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters)
            torch_backend.gumbel_sample(x, seeds, positions, temperature)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        tokens = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters)
        torch_backend.gumbel_sample(x, seeds, positions, temperature)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"--- {name}: {options.family} B={batch}, tokens {tokens[:4].tolist()}...", flush=True)


if __name__ == "__main__":
    main()
