"""Lab: the tiling of top_k_top_p_sample's launches at large batches (issue "throughput", target 2):
warps and pivots (ways) of the search launches, and the sampling launch's blocks, CUDA-graph device
time in one process, variants alternated twice (min). Tokens must be equal across variants (the kept
set and the sample never depend on the tiling).

    python benchmarks/lab/ab_filtered_tiling.py [--batches 256] [--vocabs 151936] [--families flat,typical]
"""

import argparse
import dataclasses
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import harness  # noqa: E402
import logit_families  # noqa: E402

FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "min_p=0.05": dict(min_p=0.05),
           "top_k=50 top_p=0.9": dict(top_k=50, top_p=0.9)}
# (search warps, search ways, sampling tiling: None the checkout's, "before" gumbel_launch_config's, "many
# rows" gumbel.many_rows_config's); None: the checkout's own tiling. "w4 x4" is the large-batch tiling
# shipped before this script's runs: 4 warps, 4 pivots, 4096-column sampling blocks.
VARIANTS = {"shipped": None, "w4 x4": (4, 4, "before"), "w4 x4 sample 512x1": (4, 4, "many rows"),
            "w1 x4": (1, 4, None), "w2 x4": (2, 4, None), "w8 x4": (8, 4, None), "w1 x8": (1, 8, None),
            "w2 x8": (2, 8, None), "w4 x8": (4, 8, None), "w1 x16": (1, 16, None), "w2 x16": (2, 16, None),
            "w8 x8": (8, 8, None), "w4 x16": (4, 16, None), "w8 x16": (8, 16, None),
            "w2 x8 sample 512x1": (2, 8, "many rows")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="256")
    parser.add_argument("--vocabs", default="151936")
    parser.add_argument("--families", default="flat,typical")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    options = parser.parse_args()
    import torch
    import triton

    import torch_backend
    from jsample.kernels import filtered, gumbel
    from torch_backend import _execute

    shipped = filtered.filtered_launch_config

    def use(variant):
        def config(batch, vocab_size, *args, **kwargs):
            c = shipped(batch, vocab_size, *args, **kwargs)
            if variant is None or kwargs.get("large_programs"):
                return c
            warps, ways, sample = variant
            threads = 32 * warps
            tile = threads * c.vec
            tiles = triton.cdiv(vocab_size, tile)
            chunks = max(1, min(filtered.MAX_CHUNKS, tiles, max(triton.cdiv(vocab_size, 4096), 512 // max(batch, 1))))
            chunk = triton.cdiv(tiles, chunks) * tile
            c = dataclasses.replace(c, threads=threads, num_warps=warps, ways=ways, chunk=chunk,
                                    num_chunks=triton.cdiv(vocab_size, chunk),
                                    search_steps=math.ceil((32 - c.key_shift) / math.log2(ways)),
                                    wide_sums=chunk > filtered.MAX_COLUMNS_PER_THREAD * threads)
            plain = gumbel.gumbel_launch_config(vocab_size, args[0], args[2], kwargs.get("fast_math"),
                                                kwargs.get("large_programs", False))
            if sample == "many rows":
                c = dataclasses.replace(c, gumbel=gumbel.many_rows_config(plain, vocab_size))
            elif sample == "before":
                c = dataclasses.replace(c, gumbel=plain)
            return c

        filtered.filtered_launch_config = config
        filtered.plan_top_k_top_p_sample.cache_clear()
        for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS):
            cache.clear()

    names = ["shipped"] + [v for v in options.variants.split(",") if v != "shipped"]
    print("| family | B | V | filters | gumbel us | " + " | ".join(f"{v} us (x gumbel)" for v in names) + " |",
          flush=True)
    for family in options.families.split(","):
        for vocab in map(int, options.vocabs.split(",")):
            for batch in map(int, options.batches.split(",")):
                generator = torch.Generator(device="cuda").manual_seed(batch + vocab)
                logits = logit_families.make_logits(family, batch, vocab, generator).to(getattr(torch, options.dtype))
                seeds = torch.arange(batch, device="cuda") * 7919
                positions = torch.arange(batch, device="cuda")
                temperature = torch.full((batch,), 0.8, device="cuda")
                use(None)
                gumbel_us = min(harness.time_graph_us(
                    lambda i: torch_backend.gumbel_sample(logits, seeds + i, positions, temperature)) for _ in range(3))
                for label, filters in FILTERS.items():
                    def call(i):
                        return torch_backend.top_k_top_p_sample(logits, seeds + i, positions, temperature, **filters)

                    times, tokens = {}, {}
                    for _ in range(2):
                        for name in names:
                            use(VARIANTS[name])
                            tokens[name] = call(0)
                            times.setdefault(name, []).append(harness.time_graph_us(call))
                    for name, got in tokens.items():
                        assert torch.equal(got, tokens["shipped"]), (family, batch, vocab, label, name)
                    cells = " | ".join(f"{min(t):.1f} ({min(t) / gumbel_us:.2f})" for t in times.values())
                    print(f"| {family} | {batch} | {vocab} | {label} | {gumbel_us:.1f} | {cells} |", flush=True)
    use(None)


if __name__ == "__main__":
    main()
