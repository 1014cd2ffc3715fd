"""A step of a jitted decode loop in JAX at B = 1: each op against its JAX-native peer in the same loop.

50 steps in `jax.lax.fori_loop` under one `jax.jit`; each step samples from logits that depend on the
previous step's token (so XLA cannot hoist or batch the steps), the per-step cost is the loop's wall
time / 50, median of 20 runs. Run twice, in fresh processes (XLA_FLAGS are read at start-up): with
JAX's default flags and with the flags the README recommends for small-batch loops:

    python benchmarks/bench_jitted_loop.py --out DIR [--git-sha SHA]   (runs both, writes jitted_loop.md/.json)

Rows: gumbel_sample vs jax.random.categorical; top_k_top_p_sample with top_k = 50 vs jax.lax.top_k +
categorical over the top 50 (the usual JAX top-k sampler), and with top_k = 50, top_p = 0.9 vs the same
plus a top-p cut over the sorted top 50 (cumsum); rejection_sample (K = 4, draft logits) reported alone; its step also writes the new logits into the target rows and takes the
drafts' argmax (a copy of [1, K+1, V] and a reduction, a few us), which the committed numbers include.
Targets with the recommended flags: gumbel <= 1.2x its peer, top-k/top-p <= 1.5x its peer.
"""

import argparse
import json
import os
import subprocess
import sys
import time

RECOMMENDED_FLAGS = ("--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,CONDITIONAL "
                     "--xla_gpu_graph_min_graph_size=1")
STEPS, RUNS, VOCAB, K = 50, 20, 32000, 4


def measure() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jsample

    rng = np.random.default_rng(0)
    base = jnp.asarray(rng.standard_normal((1, VOCAB)).astype(np.float32) * 3)
    target = jnp.asarray(rng.standard_normal((1, K + 1, VOCAB)).astype(np.float32) * 3)
    draft = target[:, :K] + 0.5
    one = jnp.ones((1,), jnp.float32)

    def loop(sample):
        @jax.jit
        def run(logits, seed):
            def body(i, carry):
                token, total = carry
                shifted = logits.at[0, token[0] % VOCAB].add(0.5)  # the next logits depend on the last token
                token = sample(shifted, seed, i)
                return token, total + token[0]
            return jax.lax.fori_loop(0, STEPS, body, (jnp.zeros((1,), jnp.int32), jnp.int32(0)))
        return run

    def ours_gumbel(x, seed, i):
        return jsample.gumbel_sample(x, seed, jnp.full((1,), i, jnp.int32), one)

    def peer_gumbel(x, seed, i):
        return jax.random.categorical(jax.random.fold_in(jax.random.key(0), i), x, axis=-1).astype(jnp.int32)

    def ours_top_k(x, seed, i):
        return jsample.top_k_top_p_sample(x, seed, jnp.full((1,), i, jnp.int32), one, top_k=50)

    def ours_filtered(x, seed, i):
        return jsample.top_k_top_p_sample(x, seed, jnp.full((1,), i, jnp.int32), one, top_k=50, top_p=0.9)

    def peer_top_k(x, seed, i, top_p=None):
        values, indices = jax.lax.top_k(x, 50)  # sorted, largest first
        if top_p is not None:  # keep while the mass before a token is below top_p
            p = jax.nn.softmax(values, axis=-1)
            values = jnp.where(jnp.cumsum(p, axis=-1) - p < top_p, values, -jnp.inf)
        choice = jax.random.categorical(jax.random.fold_in(jax.random.key(0), i), values, axis=-1)
        return jnp.take_along_axis(indices, choice[:, None], axis=1)[:, 0].astype(jnp.int32)

    def ours_rejection(x, seed, i):
        drafts = jnp.argmax(draft, axis=-1).astype(jnp.int32)
        tokens, _ = jsample.rejection_sample(target.at[:, 0].set(x), drafts, jnp.full((1,), K, jnp.int32), seed,
                                             jnp.full((1,), i, jnp.int32), one, draft_logits=draft)
        return tokens[:, 0]

    results = {}
    seed = jnp.zeros((1,), jnp.int32)
    for name, sample in (("gumbel_sample", ours_gumbel), ("jax.random.categorical", peer_gumbel),
                         ("top_k_top_p_sample top_k=50", ours_top_k), ("jax.lax.top_k + categorical", peer_top_k),
                         ("top_k_top_p_sample top_k=50 top_p=0.9", ours_filtered),
                         ("jax.lax.top_k + top-p + categorical", lambda x, seed, i: peer_top_k(x, seed, i, 0.9)),
                         ("rejection_sample K=4", ours_rejection)):
        run = loop(sample)
        jax.block_until_ready(run(base, seed))
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            jax.block_until_ready(run(base, seed))
            times.append(time.perf_counter() - start)
        results[name] = sorted(times)[RUNS // 2] / STEPS * 1e6
        print(f"{name}: {results[name]:.1f} us/step", flush=True)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--git-sha", default="")
    parser.add_argument("--measure", action="store_true", help="(internal) measure under the current XLA_FLAGS")
    args = parser.parse_args()
    if args.measure:
        print("RESULT " + json.dumps(measure()))
        return
    table = {}
    for label, flags in (("default flags", ""), ("recommended flags", RECOMMENDED_FLAGS)):
        env = dict(os.environ, XLA_FLAGS=flags)
        done = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True)
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        table[label] = json.loads(next(line[7:] for line in done.stdout.splitlines() if line.startswith("RESULT ")))
    rows = [("gumbel_sample", "jax.random.categorical", 1.2),
            ("top_k_top_p_sample top_k=50", "jax.lax.top_k + categorical", 1.5),
            ("top_k_top_p_sample top_k=50 top_p=0.9", "jax.lax.top_k + top-p + categorical", 1.5),
            ("rejection_sample K=4", None, None)]
    lines = [f"# A step of a jitted decode loop, B = 1, V = {VOCAB} (fp32), {STEPS} steps in lax.fori_loop",
             "", f"commit {args.git_sha}; `python benchmarks/bench_jitted_loop.py`; recommended flags: "
             f"`XLA_FLAGS=\"{RECOMMENDED_FLAGS}\"`", "",
             "| op | peer | default flags: us/step (ratio) | recommended flags: us/step (ratio) | target |",
             "|---|---|---|---|---|"]
    for ours, peer, target in rows:
        cells = []
        for label in table:
            value = table[label][ours]
            ratio = f" ({value / table[label][peer]:.2f}x of {table[label][peer]:.1f})" if peer else ""
            cells.append(f"{value:.1f}{ratio}")
        met = ""
        if target:
            met = f"<= {target}x: " + ("met" if table["recommended flags"][ours] <= target * table["recommended flags"][peer]
                                         else "not met")
        lines.append(f"| {ours} | {peer or '-'} | {cells[0]} | {cells[1]} | {met} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "jitted_loop.md"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, "jitted_loop.json"), "w") as f:
            json.dump(dict(git_sha=args.git_sha, steps=STEPS, vocab=VOCAB, flags=RECOMMENDED_FLAGS, results=table), f,
                      indent=1)


if __name__ == "__main__":
    main()
