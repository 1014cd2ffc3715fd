"""Logprobs on the GPU (issue 41), same run: the samplers with and without return_logprobs, token_logprobs
against the measured read floor of the logits and against torch's (and JAX's) log_softmax + gather (+ topk).
CUDA-graph device time (median, us), inputs rotated over copies so that L2 holds none of them; JAX: wall
time a call of a jitted function, many calls in flight.

    python benchmarks/bench_logprobs.py [--out DIR]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import harness  # noqa: E402
import torch_backend  # noqa: E402


def jax_cells(xs, tokens):
    """JAX's log_softmax + take_along_axis (+ top_k), jitted, on the same logits; {} without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    arrays = [jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16 if x.dtype == torch.bfloat16 else jnp.float32)
              for x in xs]
    tok = jnp.asarray(tokens.cpu().numpy())
    gather = jax.jit(lambda x, t: jnp.take_along_axis(jax.nn.log_softmax(x.astype(jnp.float32)), t[:, None], 1))
    with_top = jax.jit(lambda x, t: (jnp.take_along_axis(jax.nn.log_softmax(x.astype(jnp.float32)), t[:, None], 1),
                                     jax.lax.top_k(x, 20)))
    return {"JAX log_softmax+take (wall)": harness.time_jax_us(lambda i: gather(arrays[i], tok), len(arrays)),
            "JAX log_softmax+take+top_k(20) (wall)": harness.time_jax_us(lambda i: with_top(arrays[i], tok),
                                                                         len(arrays))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-jax", action="store_true")
    args = parser.parse_args()
    rows = []
    print(f"{torch.cuda.get_device_name()}; us (CUDA graph, median; inputs rotated past L2)")
    for batch, vocab in ((1, 151936), (64, 151936), (256, 151936)):
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator(device="cuda").manual_seed(0)
            copies = harness.copies_needed(batch * vocab * (4 if dtype == torch.float32 else 2))
            xs = [(torch.randn(batch, vocab, device="cuda", generator=g) * 3).to(dtype) for _ in range(copies)]
            tokens = torch.randint(0, vocab, (batch,), device="cuda", generator=g)
            t = torch.full((batch,), 0.8, device="cuda")
            seeds = torch.arange(batch, device="cuda")
            small = torch.zeros(1, device="cuda")
            floor, reader = harness.fastest_read_once_us([(x, small) for x in xs])
            cells = {
                "torch log_softmax+gather": lambda i: torch.log_softmax(xs[i].float(), -1).gather(1, tokens[:, None]),
                "torch log_softmax+gather+topk(20)": lambda i: (
                    torch.log_softmax(xs[i].float(), -1).gather(1, tokens[:, None]), torch.topk(xs[i], 20, dim=-1)),
                "token_logprobs": lambda i: torch_backend.token_logprobs(xs[i], tokens, t),
                "token_logprobs num_top=20": lambda i: torch_backend.token_logprobs(xs[i], tokens, t, num_top=20),
                "token_logprobs top_k=50 top_p=0.9": lambda i: torch_backend.token_logprobs(xs[i], tokens, t, top_k=50,
                                                                                            top_p=0.9),
                "gumbel_sample": lambda i: torch_backend.gumbel_sample(xs[i], seeds, seeds, t),
                "gumbel_sample return_logprobs": lambda i: torch_backend.gumbel_sample(xs[i], seeds, seeds, t,
                                                                                       return_logprobs=True),
                "gumbel_sample return_logprobs num_top=20": lambda i: torch_backend.gumbel_sample(
                    xs[i], seeds, seeds, t, return_logprobs=True, num_top=20),
                "top_k_top_p_sample(50, 0.9)": lambda i: torch_backend.top_k_top_p_sample(
                    xs[i], seeds, seeds, t, top_k=50, top_p=0.9),
                "top_k_top_p_sample(50, 0.9) return_logprobs": lambda i: torch_backend.top_k_top_p_sample(
                    xs[i], seeds, seeds, t, top_k=50, top_p=0.9, return_logprobs=True),
            }
            measured = {f"read floor ({reader})": floor}
            for name, fn in cells.items():
                measured[name] = harness.time_graph_us(fn, len(xs))
            if not args.no_jax:
                measured.update(jax_cells(xs, tokens))
            ratios = {"token_logprobs": ("token_logprobs", f"read floor ({reader})"),
                      "gumbel": ("gumbel_sample return_logprobs", "gumbel_sample"),
                      "gumbel top20": ("gumbel_sample return_logprobs num_top=20", "gumbel_sample"),
                      "filtered": ("top_k_top_p_sample(50, 0.9) return_logprobs", "top_k_top_p_sample(50, 0.9)")}
            for name, us in measured.items():
                rows.append(dict(batch=batch, vocab=vocab, dtype=str(dtype).split(".")[-1], cell=name, us=us))
                print(f"B={batch:4d} V={vocab} {rows[-1]['dtype']:9s} {name:48s} {us:9.1f}", flush=True)
            for label, (a, b) in ratios.items():
                print(f"B={batch:4d} V={vocab} {rows[-1]['dtype']:9s} ratio {label:42s} {measured[a] / measured[b]:9.3f}",
                      flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "logprobs.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
