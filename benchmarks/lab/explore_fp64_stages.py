"""GPU exploration (notes, not a product benchmark): where does FP64 gumbel_sample's first launch
spend the time that FP32's does not? (issue "throughput", target 1: FP64 <= 1.5x FP32)

Times gumbel_sample (FP32, FP64: "op"), the shipped FP32 and FP64 `gumbel_partial_kernel` (FP64: the
intervals of large batches, FP64_INTERVALS) and stripped variants of the FP64 one (the
two-launch tiling: 512 columns, one warp a program), CUDA-graph device time, one process:
  words      FP64's Philox words, the FP32 noise of the high word, score and argmax: the floor of
             an FP32 pass over FP64's words (twice FP32's Philox calls)
  bound      + fp64_noise_in_fp32's noise and bound, the lower bound's max (no shortlist)
  count      + the shortlist's count (no FP64 score)
  split      `words` without interleaving: even and odd columns kept apart (w1 and w3 of a call)
  no count   store_fp64_block_interval's fast path without the shortlist's count
  fp32 noise store_fp64_block_interval's fast path with FP32's noise of the high word (one conversion)
Variants other than the shipped kernels compute no token; they only time stages.

    python benchmarks/lab/explore_fp64_stages.py [--batches 256,1024] [--vocabs 151936]
"""

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import harness  # noqa: E402
import logit_families  # noqa: E402

from jsample.kernels import common, gumbel, stream  # noqa: E402


@triton.jit
def stage_kernel(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride, out_score_ptr, out_index_ptr,
                 STAGE: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    out = row.to(tl.int64) * tl.num_programs(1) + block
    seed = tl.load(seeds_ptr + row).to(tl.int64)
    position = tl.load(positions_ptr + row).to(tl.int64)
    temperature = tl.load(temperature_ptr + row)
    first_col = block * BLOCK_V
    row_ptr = logits_ptr + tl.multiple_of(row.to(tl.int64) * row_stride, 16)
    if STAGE == 3:  # split: even and odd columns apart
        pairs = first_col // 2 + tl.arange(0, BLOCK_V // 2)
        x_even = tl.load(row_ptr + 2 * pairs, mask=2 * pairs < V, other=float("-inf"))
        x_odd = tl.load(row_ptr + 2 * pairs + 1, mask=2 * pairs + 1 < V, other=float("-inf"))
        w0, w1, w2, w3 = stream.philox_block(seed, position, pairs.to(tl.uint32), 0, True)
        inv_t = 1.0 / temperature
        s_even = tl.fma(x_even, inv_t, stream.gumbel_noise(stream.uniform_f32(w1), False, True))
        s_odd = tl.fma(x_odd, inv_t, stream.gumbel_noise(stream.uniform_f32(w3), False, True))
        best = tl.maximum(tl.max(s_even, axis=0), tl.max(s_odd, axis=0))
        i_even = tl.min(tl.where(s_even == best, 2 * pairs, 2**30), axis=0)
        i_odd = tl.min(tl.where(s_odd == best, 2 * pairs + 1, 2**30), axis=0)
        tl.store(out_score_ptr + out, best)
        tl.store(out_index_ptr + out, tl.minimum(i_even, i_odd))
    else:
        cols = first_col + tl.arange(0, BLOCK_V)
        x = common.load_block(row_ptr, cols, V, False)
        lo, hi = stream.fp64_words_block(seed, position, first_col, 0, BLOCK_V, True)
        if STAGE >= 4:  # store_fp64_block_interval's fast path, without its count (4) or with FP32's noise (5)
            if STAGE == 5:
                g = stream.gumbel_noise(stream.uniform_f32(hi), False, True)
                extreme = (hi < 32768) | (hi >= 4294963200)
            else:
                g, extreme = stream.fp64_noise_estimate(lo, hi, True)
            score, best, overflow = common.noisy_scores(x, tl.where(extreme, float("-inf"), g), temperature, False,
                                                        True, x)
            bound = 2.44140625e-04 + (tl.abs(best) + 12.0) * 3.814697265625e-06
            count = 1
            if STAGE == 5:
                threshold = tl.where(best > float("-inf"), best - 2.0 * bound, float("inf"))
                count = tl.sum((score >= threshold).to(tl.int32) + 2 * (extreme & (x > float("-inf"))).to(tl.int32),
                               axis=0)
            best_offset = tl.min(tl.where(score == best, tl.arange(0, BLOCK_V), BLOCK_V), axis=0)
            tl.store(out_score_ptr + out, best + bound)
            tl.store(out_index_ptr + out, best_offset + count)
        elif STAGE == 0:  # words
            noise = stream.gumbel_noise(stream.uniform_f32(hi), False, True)
            score, best, overflow = common.noisy_scores(x, noise, temperature, False, True, x)
            common.store_block_best(out_score_ptr, out_index_ptr, out, score, best, first_col, False, overflow)
        else:
            noise, bound = stream.fp64_noise_in_fp32(lo, hi, True)
            score, best, overflow = common.noisy_scores(x, noise, temperature, False, True, x)
            bound += tl.abs(x) * common.inverse_temperature(temperature, False) * 9.5367431640625e-07
            lower = tl.max(score - bound, axis=0)
            tl.store(out_score_ptr + out, lower)
            if STAGE == 2:  # count
                shortlist = (score > float("-inf")) & (score >= lower - bound)
                tl.store(out_index_ptr + out, tl.sum(shortlist.to(tl.int32), axis=0))
            else:
                tl.store(out_index_ptr + out, overflow.to(tl.int32))


STAGES = {"words": 0, "bound": 1, "count": 2, "split": 3, "no count": 4, "fp32 noise": 5}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="256,1024")
    parser.add_argument("--vocabs", default="151936")
    parser.add_argument("--families", default="flat,typical")
    options = parser.parse_args()
    block_v = 512
    names = ["fp32 op", "fp64 op", "fp32 op one launch", "fp64 op one launch", "fp32", "fp64", "fp64 maxnreg=64", "fp64 maxnreg=72", "fp64 256", "fp32 maxnreg=64"] + list(STAGES)
    print("| family | B | V | " + " | ".join(f"{n} us (x fp32)" for n in names) + " |", flush=True)
    for family in options.families.split(","):
        for vocab in map(int, options.vocabs.split(",")):
            for batch in map(int, options.batches.split(",")):
                generator = torch.Generator(device="cuda").manual_seed(batch + vocab)
                logits = logit_families.make_logits(family, batch, vocab, generator).float()
                seeds = torch.arange(batch, device="cuda") * 7919
                positions = torch.arange(batch, device="cuda")
                temperature = torch.full((batch,), 0.8, device="cuda")
                blocks = triton.cdiv(vocab, block_v)
                scores = torch.empty(batch, 6 * blocks, device="cuda")  # FP64 blocks of 256 too
                index = torch.empty(batch, 2 * blocks, device="cuda", dtype=torch.int32)
                config = gumbel.many_rows_config(gumbel.gumbel_launch_config(vocab, vocab, False), vocab)
                assert config.block_v == block_v and config.num_warps == 1

                registers = {}

                def shipped(fp64, block=block_v, **options):
                    blocks_here = triton.cdiv(vocab, block)
                    name = ("fp64" if fp64 else "fp32") + (f" {block}" if block != block_v else "") + "".join(
                        f" {k}={v}" for k, v in options.items())

                    def run(i):
                        registers[name] = gumbel.gumbel_partial_kernel[(batch, blocks_here)](
                            logits, seeds, positions, temperature, vocab, vocab, scores, index, STREAM=0, FP64=fp64,
                            BLOCK_V=block, ROW_ALIGN=16, VOCAB_ALIGN=config.vocab_align, FAST_MATH=True,
                            FP64_INTERVALS=fp64, num_warps=1, num_stages=1, enable_fp_fusion=False, **options)
                    return run

                def staged(stage):
                    def run(i):
                        registers[stage] = stage_kernel[(batch, blocks)](
                            logits, seeds, positions, temperature, vocab, vocab, scores, index, STAGE=STAGES[stage],
                            BLOCK_V=block_v, num_warps=1, num_stages=1, enable_fp_fusion=False)
                    return run

                import torch_backend

                def whole(fp64):
                    return lambda i: torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)

                def one_launch(fp64):
                    """The op with gumbel's one-launch plan (the last program of a row reduces it) in the
                    two-launch plan's tiling, at any batch."""
                    from torch_backend import _execute

                    def run(i):
                        shipped_config, shipped_max = gumbel.gumbel_launch_config, gumbel.ONE_LAUNCH_MAX_PROGRAMS
                        gumbel.gumbel_launch_config = lambda v, *a, **k: gumbel.many_rows_config(
                            shipped_config(v, *a, **k), v)
                        gumbel.ONE_LAUNCH_MAX_PROGRAMS = 10**9
                        try:
                            for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS):
                                cache.clear()
                            gumbel.plan_gumbel_sample.cache_clear()
                            return torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)
                        finally:
                            gumbel.gumbel_launch_config, gumbel.ONE_LAUNCH_MAX_PROGRAMS = shipped_config, shipped_max
                            gumbel.plan_gumbel_sample.cache_clear()
                    return run

                runs = {"fp32 op": whole(False), "fp64 op": whole(True), "fp32 op one launch": one_launch(False),
                        "fp64 op one launch": one_launch(True), "fp32": shipped(False), "fp64": shipped(True),
                        "fp64 maxnreg=64": shipped(True, maxnreg=64), "fp64 maxnreg=72": shipped(True, maxnreg=72),
                        "fp64 256": shipped(True, 256),
                        "fp32 maxnreg=64": shipped(False, maxnreg=64)}
                runs.update({name: staged(name) for name in STAGES})
                times = {}
                for _ in range(2):
                    for name, run in runs.items():
                        times.setdefault(name, []).append(harness.time_graph_us(run))
                fp32 = min(times["fp32"])
                cells = " | ".join(f"{min(times[n]):.1f} ({min(times[n]) / fp32:.2f})" for n in names)
                print(f"| {family} | {batch} | {vocab} | {cells} |", flush=True)
                print("registers a thread (spills): " + ", ".join(
                    f"{name} {k.n_regs} ({k.n_spills})" for name, k in registers.items()), flush=True)


if __name__ == "__main__":
    main()
