"""Lab: device time of each launch of top_k_top_p_sample's launches' plan (torch profiler, CUDA
kernels), B = 256, V = 151936, per logit family and filter.

    python benchmarks/lab/explore_filtered_launches.py [--dtype bfloat16] [--batch 256] [--variant chunks_1024]

`--variant`: a launch-plan variant of explore_filtered_variants.py (`+` joins several) instead of the shipped plan.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import logit_families  # noqa: E402

FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "min_p=0.05": dict(min_p=0.05),
           "top_k=50 top_p=0.9": dict(top_k=50, top_p=0.9)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--families", default="flat,typical,peaked")
    parser.add_argument("--sequence", action="store_true", help="also each launch of a call, in order")
    parser.add_argument("--variant", default="shipped",
                        help="explore_filtered_variants.py's variant names (comma-separated: each in turn)")
    parser.add_argument("--filters", default=",".join(FILTERS), help=f"comma-separated, of {', '.join(FILTERS)}")
    options = parser.parse_args()
    import explore_filtered_variants

    for name in options.variant.split(","):
        with explore_filtered_variants.variant(name, explore_filtered_variants.variants())():
            profile_launches(options, name)


def profile_launches(options, variant):
    import torch
    from torch.profiler import ProfilerActivity, profile

    import torch_backend

    batch, vocab = options.batch, 151936
    seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003
    positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 17
    temperature = torch.full((batch,), 0.8, device="cuda")
    for family in options.families.split(","):
        x = logit_families.make_logits(family, batch, vocab, torch.Generator(device="cuda").manual_seed(1))
        x = x.to(getattr(torch, options.dtype))
        for name in options.filters.split(","):
            filters = FILTERS[name]
            for _ in range(3):
                torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters)
                torch.cuda.synchronize()
            print(f"--- {options.dtype} B={batch} {family} {name} ({variant})")
            for event in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
                if event.count >= 10:
                    print(f"  {event.key[:60]:60s} x{event.count // 10:3d}  {event.device_time_total / 10:8.1f} us a call")
            if options.sequence:  # each launch of the last call, in order
                kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and "kernel" in e.name.lower()]
                launches = len(kernels) // 10
                print("  sequence (us): " + " ".join(f"{e.name.replace('_kernel', '').replace('filter', 'f')}="
                                                  f"{e.device_time:.1f}" for e in kernels[-launches:]))


if __name__ == "__main__":
    main()
