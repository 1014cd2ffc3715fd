"""Lab: FP64 gumbel_sample's block size and warps (issue "throughput", target 1), CUDA-graph device
time, against FP32 on the same logits, in one process. Every FP64 block pays a serial tail (the
shortlisted column's FP64 score: a Philox call and FP64 logs), so larger blocks pay it less often.
Tokens must be equal across variants (the tiling never changes them). "shipped" is the checkout's
own tiling (since the commit after 739e6b2: 512 columns and one warp a program in the two-launch
plan, gumbel.many_rows_config; before it: 4096 x 8 warps in FP32, 2048 x 8 in FP64).

    python benchmarks/lab/ab_fp64_block.py [--batches 64,256,1024] [--vocabs 32000,151936,262144]
"""

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import harness  # noqa: E402
import logit_families  # noqa: E402

VARIANTS = {"shipped": None, "before": "before", "4096 x8": (4096, 8), "4096 x16": (4096, 16), "8192 x16": (8192, 16),
            "2048 x4": (2048, 4), "4096 x4": (4096, 4), "2048 x2": (2048, 2), "1024 x4": (1024, 4),
            "1024 x2": (1024, 2), "1024 x1": (1024, 1), "512 x1": (512, 1), "512 x2": (512, 2), "256 x1": (256, 1),
            "2048 x8": (2048, 8)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="64,256,1024")
    parser.add_argument("--vocabs", default="32000,151936,262144")
    parser.add_argument("--family", default="flat")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="names from VARIANTS (shipped always runs)")
    parser.add_argument("--precision", choices=("fp64", "fp32"), default="fp64",
                        help="the precision whose tiling varies (fp32: FP32 against its shipped tiling)")
    options = parser.parse_args()
    import torch
    import triton

    import torch_backend
    from jsample.kernels import gumbel
    from torch_backend import _execute

    shipped, shipped_many_rows = gumbel.gumbel_launch_config, gumbel.many_rows_config

    def use(variant):
        def config(vocab_size, row_stride, fp64, *args, **kwargs):
            c = shipped(vocab_size, row_stride, fp64, *args, **kwargs)
            if fp64 != (options.precision == "fp64") or variant in (None, "before"):
                return c
            block_v, warps = variant
            block_v = min(block_v, triton.next_power_of_2(vocab_size))
            blocks = triton.cdiv(vocab_size, block_v)
            return dataclasses.replace(c, block_v=block_v, num_blocks=blocks, reduce_block=triton.next_power_of_2(blocks),
                                       num_warps=warps)

        gumbel.gumbel_launch_config = config
        # the variant's tiling also for the two-launch plan (shipped: its own, many_rows_config)
        gumbel.many_rows_config = shipped_many_rows if variant is None else (lambda c, vocab_size: c)
        gumbel.plan_gumbel_sample.cache_clear()
        for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS):
            cache.clear()

    names = ["shipped"] + [v for v in options.variants.split(",") if v != "shipped"]
    print(f"| B | V | fp32 us | " + " | ".join(f"{options.precision} {v} us (x fp32)" for v in names) + " |", flush=True)
    for vocab in map(int, options.vocabs.split(",")):
        for batch in map(int, options.batches.split(",")):
            generator = torch.Generator(device="cuda").manual_seed(batch + vocab)
            logits = logit_families.make_logits(options.family, batch, vocab, generator).to(
                getattr(torch, options.dtype))
            seeds = torch.arange(batch, device="cuda") * 7919
            positions = torch.arange(batch, device="cuda")
            temperature = torch.full((batch,), 0.8, device="cuda")

            def call(i, fp64):
                return torch_backend.gumbel_sample(logits, seeds + i, positions, temperature, fp64=fp64)

            fp64 = options.precision == "fp64"
            use(None)
            fp32_us = min(harness.time_graph_us(lambda i: call(i, False)) for _ in range(3))
            times, tokens = {}, {}
            chosen = {name: VARIANTS[name] for name in names}
            for _ in range(2):
                for name, variant in chosen.items():
                    use(variant)
                    tokens[name] = call(0, fp64)
                    times.setdefault(name, []).append(harness.time_graph_us(lambda i: call(i, fp64)))
            for name, got in tokens.items():
                assert torch.equal(got, tokens["shipped"]), (batch, vocab, name)
            cells = " | ".join(f"{min(t):.1f} ({min(t) / fp32_us:.2f})" for t in times.values())
            print(f"| {batch} | {vocab} | {fp32_us:.1f} | {cells} |", flush=True)
    use(None)


if __name__ == "__main__":
    main()
