"""Benchmark top_k_top_p_sample against its peers on a GPU.

Providers: torch_backend.top_k_top_p_sample (eager and CUDA-graph replay), jsample.top_k_top_p_sample
(jitted), a plain PyTorch implementation (softmax, sort, cumulative sum, masks, torch.multinomial),
FlashInfer's top_k_top_p_sampling_from_logits when it can be imported (top-k and top-p only), and one
Triton launch reading the logits once (harness.read_once, CUDA graph: the floor of any one-pass op).
bfloat16 logits, temperature 0.8, filters top_k = 50, top_p = 0.9, min_p = 0.05 (as given per row).

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_filtered.py --out benchmarks/results
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import harness  # noqa: E402
import logit_families  # noqa: E402

FILTERS = {"top_k": dict(top_k=50), "top_p": dict(top_p=0.9), "min_p": dict(min_p=0.05),
           "top_k+top_p": dict(top_k=50, top_p=0.9)}


def plain_torch(logits, temperature, top_k=None, top_p=None, min_p=None):
    import torch

    x = logits.float() / temperature[:, None]
    if top_k is not None:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p is not None:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    if min_p is not None:
        probs = probs.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), 0.0)
    return torch.multinomial(probs, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--vocab", type=int, default=151936)
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
    vocab = args.vocab
    rows = []
    for family, batch in ((f, b) for f in args.families.split(",") for b in map(int, args.batches.split(","))):
        nbytes = batch * vocab * 2
        rotate = harness.copies_needed(nbytes)
        gen = torch.Generator(device="cuda").manual_seed(batch)
        logits = [logit_families.make_logits(family, batch, vocab, gen).to(torch.bfloat16) for _ in range(rotate)]
        seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003 + 17
        positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 2**32
        temperature = torch.full((batch,), 0.8, device="cuda")
        jlogits = [jnp.from_dlpack(x) for x in logits]
        jseeds, jpositions, jtemperature = (jnp.from_dlpack(t) for t in (seeds, positions, temperature))
        read_us = harness.time_graph_us(lambda i, runs=[harness.read_once((x, x[:0])) for x in logits]: runs[i](),
                                        rotate)

        # the throughput issue's yardstick: gumbel_sample on the same logits, CUDA graph, this run
        gumbel_us = harness.time_graph_us(
            lambda i: torch_backend.gumbel_sample(logits[i], seeds, positions, temperature), rotate)

        def record(name, provider, us):
            rows.append(dict(family=family, B=batch, V=vocab, filters=name, provider=provider, us=us,
                             read_once_us=read_us, read_once_fraction=read_us / us, x_gumbel=us / gumbel_us))
            print(f"{family:8s} B={batch:4d} {name:12s} {provider:44s} {us:9.1f} us  read once {read_us:6.1f} us "
                  f"{read_us / us:5.2f}  {us / gumbel_us:5.2f}x gumbel_sample", flush=True)

        record("none", "torch_backend.gumbel_sample (CUDA graph)", gumbel_us)

        for name, filters in FILTERS.items():
            per_row = {k: torch.full((batch,), v, device="cuda", dtype=torch.int32 if k == "top_k" else torch.float32)
                       for k, v in filters.items()}
            jper_row = {k: jnp.from_dlpack(v) for k, v in per_row.items()}
            sample = jax.jit(lambda x, s, p, t, f: jsample.top_k_top_p_sample(x, s, p, t, **f))
            ours = torch_backend.top_k_top_p_sample(logits[0], seeds, positions, temperature, **per_row)
            theirs = sample(jlogits[0], jseeds, jpositions, jtemperature, jper_row)
            if not torch.equal(ours.cpu(), torch.from_numpy(jax.device_get(theirs).copy())):
                raise SystemExit(f"torch and JAX tokens differ at B={batch} {name}")
            record(name, "torch_backend.top_k_top_p_sample", harness.time_torch_us(
                lambda i: torch_backend.top_k_top_p_sample(logits[i], seeds, positions, temperature, **per_row),
                rotate))
            record(name, "torch_backend (CUDA graph)", harness.time_graph_us(
                lambda i: torch_backend.top_k_top_p_sample(logits[i], seeds, positions, temperature, **per_row),
                rotate))
            record(name, "jsample.top_k_top_p_sample (jit)", harness.time_jax_us(
                lambda i: sample(jlogits[i], jseeds, jpositions, jtemperature, jper_row), rotate))
            record(name, "plain torch (sort, cumsum, multinomial)", harness.time_torch_us(
                lambda i: plain_torch(logits[i], temperature, **filters), rotate))
            if flashinfer_sampling is not None and "min_p" not in filters:
                def flashinfer(i):
                    x = logits[i].float() / temperature[:, None]
                    return flashinfer_sampling.top_k_top_p_sampling_from_logits(
                        x, per_row.get("top_k", torch.full((batch,), vocab, device="cuda", dtype=torch.int32)),
                        per_row.get("top_p", torch.ones(batch, device="cuda")))

                record(name, "flashinfer top_k_top_p_sampling_from_logits", harness.time_torch_us(flashinfer, rotate))
                record(name, "flashinfer (CUDA graph)", harness.time_graph_us(flashinfer, rotate))

    notes = ("bfloat16 logits [B, V] of the families of benchmarks/logit_families.py (flat: N(0, 9); typical: "
             "Zipf-like, entropy about 3 nats; peaked: entropy below 0.5 nat), temperature 0.8; `us`: median (torch, CUDA events) or best mean "
             "of 100 calls (JAX, including dispatch). `read_once_us`: one Triton launch reading the logits once "
             "(CUDA graph). `x_gumbel`: us / the CUDA-graph time of torch_backend.gumbel_sample on the same logits "
             "in this run (the 'none' row). FlashInfer gets the logits divided by T (its kernel takes no temperature) "
             "and the division is timed with it. Command: `XLA_PYTHON_CLIENT_PREALLOCATE=false python "
             "benchmarks/bench_filtered.py --out benchmarks/results --git-sha <sha>`.")
    harness.write_results(args.out, "filtered", harness.environment(args.git_sha), rows,
                          ["family", "B", "V", "filters", "provider", "us", "read_once_us", "read_once_fraction",
                           "x_gumbel"],
                          notes)


if __name__ == "__main__":
    main()
