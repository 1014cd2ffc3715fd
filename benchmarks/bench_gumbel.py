"""Benchmark gumbel_sample against its peers on a GPU.

Providers, side by side in one run: torch_backend.gumbel_sample (eager and CUDA-graph replay),
jsample.gumbel_sample (jitted), jax.random.categorical (jitted), torch.multinomial(torch.softmax(...)),
FlashInfer's sampling_from_logits when it can be imported, and a plain read of the logits
(torch.amax: the memory floor). Reports microseconds and the
fraction of the HBM read rate measured in the same run (bytes of logits read / time / read rate).

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_gumbel.py --out benchmarks/results
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import harness  # noqa: E402
import logit_families  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--batches", default="1,32,256,1024")
    parser.add_argument("--vocabs", default="32000,151936,262144")
    parser.add_argument("--families", default=",".join(logit_families.FAMILIES),
                        help="logit families (benchmarks/logit_families.py), comma-separated")
    parser.add_argument("--git-sha", default="unknown")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import torch

    import jsample
    import torch_backend

    jax.config.update("jax_enable_x64", True)
    flashinfer_sampling = harness.flashinfer_sampling()
    read_rate = harness.measured_read_rate_gbs()
    print(f"measured read rate: {read_rate:.0f} GB/s", flush=True)
    rows = []
    for family, vocab, batch in ((f, v, b) for f in args.families.split(",") for v in map(int, args.vocabs.split(","))
                                 for b in map(int, args.batches.split(","))):
        nbytes = batch * vocab * 4
        rotate = harness.copies_needed(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(batch * 7 + vocab)
        logits = [logit_families.make_logits(family, batch, vocab, gen) for _ in range(rotate)]
        seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003 + 17
        positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 2**32
        temperature = torch.full((batch,), 0.8, device="cuda")
        jlogits = [jnp.from_dlpack(x) for x in logits]
        jseeds, jpositions, jtemperature = (jnp.from_dlpack(t) for t in (seeds, positions, temperature))

        def record(provider, us, fp64=""):
            gbs = nbytes / (us * 1e-6) / 1e9
            rows.append(dict(family=family, B=batch, V=vocab, provider=provider, fp64=fp64, us=us, GBps=gbs,
                             fraction_of_read_rate=gbs / read_rate))
            print(f"{family:8s} B={batch:5d} V={vocab:6d} {provider:32s} {str(fp64):5s} {us:10.1f} us  "
                  f"{gbs:7.0f} GB/s  {gbs / read_rate:5.2f}", flush=True)

        record("read logits (torch.amax)", harness.time_torch_us(lambda i: torch.amax(logits[i], dim=1), rotate))
        for fp64 in (False, True):
            # correctness before timing: both frontends give the same tokens
            ours = torch_backend.gumbel_sample(logits[0], seeds, positions, temperature, fp64=fp64)
            sample = jax.jit(lambda x, s, p, t, fp64=fp64: jsample.gumbel_sample(x, s, p, t, fp64=fp64))
            theirs = sample(jlogits[0], jseeds, jpositions, jtemperature)
            if not torch.equal(ours.cpu(), torch.from_numpy(jax.device_get(theirs).copy())):
                raise SystemExit(f"torch and JAX tokens differ at B={batch} V={vocab} fp64={fp64}")
            record("torch_backend.gumbel_sample", harness.time_torch_us(
                lambda i: torch_backend.gumbel_sample(logits[i], seeds, positions, temperature, fp64=fp64),
                rotate), fp64)
            record("torch_backend (CUDA graph)", harness.time_graph_us(
                lambda i: torch_backend.gumbel_sample(logits[i], seeds, positions, temperature, fp64=fp64),
                rotate), fp64)
            record("jsample.gumbel_sample (jit)", harness.time_jax_us(
                lambda i: sample(jlogits[i], jseeds, jpositions, jtemperature), rotate), fp64)
        categorical = jax.jit(lambda key, x, t: jax.random.categorical(key, x / t[:, None], axis=-1))
        key = jax.random.key(0)
        record("jax.random.categorical (jit)", harness.time_jax_us(
            lambda i: categorical(key, jlogits[i], jtemperature), rotate))
        record("torch.multinomial(softmax)", harness.time_torch_us(
            lambda i: torch.multinomial(torch.softmax(logits[i] / temperature[:, None], dim=-1), 1), rotate))
        if flashinfer_sampling is not None:
            # no temperature argument: the user divides first (timed eagerly); the graph times its
            # kernel alone on logits already divided
            scaled = [x / temperature[:, None] for x in logits]
            try:
                record("flashinfer.sampling_from_logits(x / T)", harness.time_torch_us(
                    lambda i: flashinfer_sampling.sampling_from_logits(logits[i] / temperature[:, None]), rotate))
                record("flashinfer (CUDA graph), x / T given", harness.time_graph_us(
                    lambda i: flashinfer_sampling.sampling_from_logits(scaled[i]), rotate))
            except Exception as error:  # noqa: BLE001  (API drift between FlashInfer versions)
                print(f"flashinfer skipped: {error}", flush=True)
            del scaled
        del logits, jlogits
        torch.cuda.empty_cache()
    env = harness.environment(args.git_sha)
    env["read_rate_GBps"] = read_rate
    harness.write_results(args.out, "gumbel", env, rows,
                          ["family", "B", "V", "provider", "fp64", "us", "GBps", "fraction_of_read_rate"],
                          notes="float32 logits of the families of benchmarks/logit_families.py (flat: randn * 3; "
                                "typical: Zipf-like, entropy about 3 nats; peaked: entropy below 0.5 nat), "
                                "temperature 0.8. `us`: median (torch, CUDA events) or best "
                                "mean of 100 calls (JAX). FlashInfer's sampling_from_logits has no temperature: "
                                "its eager row includes the division, its graph row is the kernel alone on "
                                "divided logits. Command: `XLA_PYTHON_CLIENT_PREALLOCATE=false "
                                "python benchmarks/bench_gumbel.py --out benchmarks/results`.")


if __name__ == "__main__":
    main()
