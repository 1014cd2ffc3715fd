"""Lab: top_k_top_p_sample as one launch (filtered_one_launch_kernel, the row's programs meeting at
barriers) against the search launches (filter_step_kernel x (1 + search steps), filtered_partial_kernel,
argmax_reduce_kernel), on an H200, torch; and the one-launch kernel's pivots per step (WAYS).

Checks first: for every case the one-launch tokens equal the launches' tokens (and each WAYS
variant's), and JAX's jitted tokens equal torch's. Then, per case: CUDA-graph replay time of each plan,
and eager wall time per call against one bare Triton launch.

    python benchmarks/lab/ab_filtered_one_launch.py [--quick] > out.txt
"""

import argparse
import dataclasses
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import harness  # noqa: E402
from bench_eager import wall_us  # noqa: E402
import logit_families  # noqa: E402

FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "min_p=0.05": dict(min_p=0.05),
           "top_k=50 top_p=0.9": dict(top_k=50, top_p=0.9)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jsample
    import torch_backend
    from jsample.kernels import filtered
    from torch_backend import _execute

    shipped_target, shipped_config = _execute.target, filtered.filtered_one_launch_config

    def use(resident=None, ways=None):
        """Plans for a target with this resident_programs (None: the device's), one-launch WAYS."""
        def target(device):
            t = shipped_target(device)
            return t if resident is None else dataclasses.replace(t, resident_programs=resident)

        def config(*a, **k):
            c = shipped_config(*a, **k)
            if c is None or ways is None:
                return c
            return dataclasses.replace(c, ways=ways, search_steps=math.ceil((32 - c.key_shift) / math.log2(ways)))

        _execute.target = target
        filtered.filtered_one_launch_config = config
        filtered.plan_top_k_top_p_sample.cache_clear()
        for cache in (_execute._PLANS, _execute._LAUNCHERS, _execute._RECIPES, _execute._REPLAYS):
            cache.clear()

    import triton
    import triton.language as tl

    @triton.jit
    def trivial_kernel(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)

    one = torch.zeros(1, device="cuda")

    variants = {"launches": dict(resident=0), "one launch": dict(), "one, ways 32": dict(ways=32),
                "one, ways 64": dict(ways=64)}
    generator = torch.Generator(device="cuda").manual_seed(0)
    sizes = [(1, 32000), (4, 32000), (1, 151936)] if args.quick else [
        (1, 32000), (2, 32000), (4, 32000), (8, 32000), (16, 32000), (1, 151936), (2, 151936), (4, 151936),
        (8, 151936)]
    print("bare launch us", round(wall_us(lambda: trivial_kernel[(1,)](one), 200), 2))
    print("| B | V | family | filters | plan (one launch) | " + " | ".join(f"{v} graph us" for v in variants)
          + " | launches eager us | one launch eager us | bare launch us |")
    for batch, vocab in sizes:
        for family in ("flat", "typical"):
            logits = logit_families.make_logits(family, batch, vocab, generator).to(torch.bfloat16)
            seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 7919 + 11
            positions = torch.arange(batch, device="cuda", dtype=torch.int32) + 3
            temperature = torch.full((batch,), 0.9, device="cuda")
            for name, filters in FILTERS.items():
                def call():
                    return torch_backend.top_k_top_p_sample(logits, seeds, positions, temperature, **filters)
                tokens, graph = {}, {}
                for variant, options in variants.items():
                    use(**options)
                    tokens[variant] = call()
                    graph[variant] = harness.time_graph_us(lambda i: call())
                use()
                call()
                plan = next(iter(_execute._PLANS.values())).variant
                for variant, got in tokens.items():
                    assert torch.equal(got, tokens["launches"]), (batch, vocab, family, name, variant, got,
                                                                  tokens["launches"])
                jitted = jax.jit(lambda x, s, p, t: jsample.top_k_top_p_sample(x, s, p, t, **filters))
                from_jax = jitted(jnp.asarray(logits.float().cpu().numpy()).astype(jnp.bfloat16),
                                  jnp.asarray(seeds.cpu().numpy().astype(np.uint32)),
                                  jnp.asarray(positions.cpu().numpy()), jnp.asarray(temperature.cpu().numpy()))
                # seeds < 2**32 here: uint32 words equal the int64 values
                assert np.array_equal(np.asarray(from_jax), tokens["launches"].cpu().numpy()), (batch, vocab, name)
                use(resident=0)
                eager_launches = wall_us(call, 200)
                use()
                eager_one = wall_us(call, 200)
                bare = wall_us(lambda: trivial_kernel[(1,)](one), 200)
                print(f"| {batch} | {vocab} | {family} | {name} | {plan} | "
                      + " | ".join(f"{graph[v]:.1f}" for v in variants)
                      + f" | {eager_launches:.1f} | {eager_one:.1f} | {bare:.1f} |", flush=True)


if __name__ == "__main__":
    main()
