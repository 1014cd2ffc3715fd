"""First call of a jitted JAX op in a fresh process (jax-triton compiles each kernel where it lowers a call to it,
and keeps them in the process only): seconds to lower, to compile, and to the first result, with the plan's
launches lowered ahead side by side (_execute._lower_ahead, threads) or one after another
(JSAMPLE_COMPILE_THREADS=0); a token checksum to compare the two.

    for t in 0 16; do JSAMPLE_COMPILE_THREADS=$t python3 benchmarks/lab/explore_jax_first_call_threads.py CASE; done

CASE: filtered4 | filtered256 | filtered1 | rejection64 | gumbel256 (V = 151936 bf16 logits; filtered: top_k = 50,
top_p = 0.9; rejection: K = 4, draft logits).
"""

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np


def make_case(case):
    """(the jitted op, its arguments) of CASE (see the docstring)."""
    import jsample

    vocab = 151936
    rng = np.random.default_rng(0)
    kind, batch = case.rstrip("0123456789"), int(case[len(case.rstrip("0123456789")):])
    seeds = np.arange(batch, dtype=np.int32)
    positions = np.arange(batch, dtype=np.int32)
    temperature = np.full((batch,), 0.8, np.float32)
    if kind == "rejection":
        k = 4
        target = jnp.asarray(rng.standard_normal((batch, k + 1, vocab), np.float32) * 3, jnp.bfloat16)
        draft = jnp.asarray(rng.standard_normal((batch, k, vocab), np.float32) * 3)
        drafts = np.asarray(jnp.argmax(draft, -1), np.int32)
        counts = np.full((batch,), k, np.int32)
        fn = jax.jit(lambda t, d, dr, n, s, p, T: jsample.rejection_sample(t, dr, n, s, p, T, draft_logits=d)[0])
        args = (target, draft, drafts, counts, seeds, positions, temperature)
    else:
        logits = jnp.asarray(rng.standard_normal((batch, vocab), np.float32) * 3, jnp.bfloat16)
        if kind == "filtered":
            fn = jax.jit(lambda x, s, p, T: jsample.top_k_top_p_sample(x, s, p, T, top_k=50, top_p=0.9))
        else:
            fn = jax.jit(jsample.gumbel_sample)
        args = (logits, seeds, positions, temperature)
    jax.block_until_ready(args)
    return fn, args


def main(case):
    fn, args = make_case(case)
    start = time.perf_counter()
    lowered = fn.lower(*args)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    tokens = np.asarray(compiled(*args))
    done = time.perf_counter()
    tokens = tokens.reshape(-1)
    print(f"{case} threads {os.environ.get('JSAMPLE_COMPILE_THREADS', 'default')}: lower {lowered_at - start:.2f} s, "
          f"compile {compiled_at - lowered_at:.2f} s, first result {done - compiled_at:.2f} s, total "
          f"{done - start:.2f} s; tokens checksum {int(np.sum(tokens.astype(np.int64) * np.arange(1, tokens.size + 1)))}",
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
