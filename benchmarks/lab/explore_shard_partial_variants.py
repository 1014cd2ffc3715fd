"""Issue 42: what does vocab-parallel gumbel_sample's partial launch pay for its greedy candidates, against
gumbel_sample's own partial launch on the same shard? One GPU, no collective.

Variants of the shard's partial kernel (each block's scores and best as store_sampled_block stores them, then):
  shipped             vocab_parallel.greedy_value: the block's largest finite logit where the row's T < 1, else -inf
  value_apart         that value by a reduction of its own, at every temperature
  none                no greedy value (a lower bound: not a correct vocab-parallel summary)
(5bc34d8 took the value in the scores' own reduction, a third value of max_and_magnitude's: no faster than apart,
results/shard_partial_variants_h200.txt, and dropped.)
and `gumbel_partial`: gumbel_sample's own first launch on the shard (its partials only). Device time a call, one
CUDA graph of a call on each rotated input set, replayed 20 times, the median of 7.

    python3 benchmarks/lab/explore_shard_partial_variants.py [--batches 64,256,1024] [--dtypes bfloat16,float32]
                                                             [--temperature 0.8]
"""

import argparse
import dataclasses
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import triton.language as tl  # noqa: E402

from jsample.kernels.common import aligned, largest_finite, load_temperature, store_sampled_block  # noqa: E402
from jsample.kernels.host import jit  # noqa: E402
from jsample.kernels.stream import load_seed  # noqa: E402
from jsample.kernels.vocab_parallel import greedy_value  # noqa: E402


@jit
def partial_variant_kernel(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, vocab_start_ptr, row_valid_ptr,
                           V_shard, row_stride, partial_score_ptr, partial_index_ptr, greedy_value_ptr,
                           STREAM: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr,
                           START_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr,
                           SEED_WORDS: tl.constexpr = 1, HAS_ROW_VALID: tl.constexpr = False,
                           MODE: tl.constexpr = 0):
    row = tl.program_id(0)
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    start = aligned(tl.load(vocab_start_ptr), START_ALIGN)
    end = start + aligned(V_shard, VOCAB_ALIGN)
    first_col = start + block * BLOCK_V
    out = row.to(tl.int64) * num_blocks + block
    seed = load_seed(seeds_ptr, row, SEED_WORDS)
    position = tl.load(positions_ptr + row).to(tl.int64)
    temperature = load_temperature(temperature_ptr, row)
    if MODE == 0:
        x = store_sampled_block(logits_ptr - start, row, row_stride, end, first_col, seed, position, temperature,
                                partial_score_ptr, partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
        tl.store(greedy_value_ptr + out, greedy_value(x, temperature))
    elif MODE == 1:
        x = store_sampled_block(logits_ptr - start, row, row_stride, end, first_col, seed, position, temperature,
                                partial_score_ptr, partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
        tl.store(greedy_value_ptr + out, largest_finite(x))
    else:
        store_sampled_block(logits_ptr - start, row, row_stride, end, first_col, seed, position, temperature,
                            partial_score_ptr, partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)


def _time(fn, rotate):
    import torch

    for i in range(rotate):
        fn(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(rotate):
            fn(i)
    times = []
    for _ in range(7):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (20 * rotate))
    return statistics.median(times)


def main():
    import torch

    import harness
    from jsample import kernels
    from jsample.kernels.plan import Plan
    from torch_backend import _execute as execute

    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=131072)
    parser.add_argument("--batches", default="64,256,1024")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--temperature", type=float, default=0.8)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    for dtype in args.dtypes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            torch_dtype = getattr(torch, dtype)
            rotate = harness.copies_needed(batch * args.vocab * torch_dtype.itemsize)
            g = torch.Generator(device=device).manual_seed(batch)
            shards = [torch.randn((batch, args.vocab), generator=g, device=device).mul_(3).to(torch_dtype)
                      for _ in range(rotate)]
            seeds = torch.arange(batch, device=device, dtype=torch.int64) * 7919 + 11
            positions = torch.arange(batch, device=device, dtype=torch.int64) + 100
            temperature = torch.full((batch,), args.temperature, device=device)
            start = torch.full((1,), 131072, dtype=torch.int32, device=device)
            shard_plan = execute.plan(kernels.plan_gumbel_shard, (shards[0], seeds), device, None, fp64=False,
                                      draft=False, start_align=16)
            one_plan = execute.plan(kernels.plan_gumbel_sample, (shards[0], seeds), device, None, fp64=False,
                                    draft=False)
            cases = {}
            if len(shard_plan.launches) == 2:
                first = shard_plan.launches[0]
                for mode, name in ((0, "shipped"), (1, "value_apart"), (2, "none")):
                    variant = dataclasses.replace(first, kernel=partial_variant_kernel,
                                                  constexprs=first.constexprs + (("MODE", mode),))
                    plan = Plan(shard_plan.buffers, (variant,), ("partial_score",), name)
                    cases[name] = (lambda plan: lambda i: execute.run(plan, device, dict(
                        logits=shards[i], seeds=seeds, positions=positions, temperature=temperature,
                        vocab_start=start)))(plan)
            if len(one_plan.launches) == 2:
                plan = Plan(one_plan.buffers, one_plan.launches[:1], ("partial_score",), "gumbel partial")
                cases["gumbel_partial"] = lambda i: execute.run(plan, device, dict(
                    logits=shards[i], seeds=seeds, positions=positions, temperature=temperature))
            cases["gumbel_sample"] = lambda i: kernels and __import__("torch_backend").gumbel_sample(
                shards[i], seeds, positions, temperature)
            times = {name: _time(fn, rotate) for name, fn in cases.items()}
            print(f"{dtype:9s} B={batch:5d} V={args.vocab} T={args.temperature} " + " ".join(f"{k}={v:7.1f}" for k, v in times.items()),
                  flush=True)


if __name__ == "__main__":
    main()
