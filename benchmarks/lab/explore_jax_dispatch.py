"""Where JAX's time goes at B = 1: per-call microseconds of N calls inside one jitted program, for
an XLA elementwise op, a trivial jax-triton kernel, and jsample's rejection_sample (3 launches) and
gumbel_sample, at V = 151936 on copies of the inputs. Run it twice, with and without
TRITON_DISABLE_LINE_INFO=1, to see whether the size of jax-triton's per-launch opaque (the
compressed PTX and TTIR, hashed on every launch by jaxlib) matters.

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/lab/explore_jax_dispatch.py [--only rejection] [--runs 10]
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness

import harness  # noqa: E402


def main():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--runs", type=int, default=10)
    options = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import triton
    import triton.language as tl

    import jsample
    from jsample._jax._launch import _import_jax_triton

    jax.config.update("jax_enable_x64", True)
    jax_triton = _import_jax_triton()

    @triton.jit
    def add_one_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        tl.store(out_ptr + cols, tl.load(x_ptr + cols) + 1.0)

    calls, vocab, k = 64, 151936, 1
    key = jax.random.PRNGKey(0)
    targets = [jax.random.normal(jax.random.fold_in(key, c), (1, k + 1, vocab)).astype(jnp.bfloat16) * 3
               for c in range(calls)]
    drafts = [t[:, :k].astype(jnp.float32) + 0.5 for t in targets]
    small = [jnp.full((128,), float(c), jnp.float32) for c in range(calls)]
    draft_tokens = jnp.zeros((1, k), jnp.int32)
    num_drafts = jnp.full((1,), k, jnp.int32)
    seeds = [jnp.full((1,), c, jnp.int64) for c in range(calls)]
    positions = jnp.zeros((1,), jnp.int64)
    temperature = jnp.full((1,), 0.8, jnp.float32)

    programs = {
        "XLA x + 1": jax.jit(lambda xs: [x + 1.0 for x in xs]),
        "jax-triton add_one": jax.jit(lambda xs: [jax_triton.triton_call(
            x, kernel=add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,), BLOCK=128)
            for x in xs]),
        "jsample.gumbel_sample B=1": jax.jit(lambda ts, ss: [jsample.gumbel_sample(
            t[:, 0], s, positions, temperature) for t, s in zip(ts, ss)]),
        "jsample.rejection_sample B=1 K=1": jax.jit(lambda ts, ds, ss: [jsample.rejection_sample(
            t, draft_tokens, num_drafts, s, positions, temperature, draft_logits=d)[0]
            for t, d, s in zip(ts, ds, ss)]),
    }
    arguments = {"XLA x + 1": (small,), "jax-triton add_one": (small,),
                 "jsample.gumbel_sample B=1": (targets, seeds),
                 "jsample.rejection_sample B=1 K=1": (targets, drafts, seeds)}
    label = f"line info {'off' if os.environ.get('TRITON_DISABLE_LINE_INFO') == '1' else 'on'}"
    for name, program in programs.items():
        if options.only not in name:
            continue
        us = harness.time_jax_us(lambda i: program(*arguments[name]), calls=options.runs) / calls
        print(f"{label:14s} {name:36s} {us:7.2f} us per call ({calls} calls in one jitted program)", flush=True)


if __name__ == "__main__":
    main()
