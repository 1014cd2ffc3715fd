"""A/B of two checkouts (issue 41): logprobs with filters (top-p or min-p and no top-k, top-k and top-p) and with a
top list, device time (CUDA-graph replay, median, us) on language-model-like logits
(benchmarks/logit_families.py), each checkout in its own process.
Also the share of rows whose kept set lies within the 64 largest logits (the list route's rows).

    python benchmarks/lab/ab_logprobs_top_p.py BASE_CHECKOUT NEW_CHECKOUT
"""

import json
import subprocess
import sys

CASE_CODE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import torch, triton
import torch_backend
from logit_families import make_logits

def graph_us(fn):
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=10, rep=100, return_mode="median") * 1e3

V = 151936
results, shares = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for family in ("typical", "peaked"):
    x_all = make_logits(family, 256, V, g)
    for B in (1, 64, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 0.7, device="cuda")
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        cells = {
            "token_logprobs num_top=20": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20),
            "token_logprobs top_k=50 top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50,
                                                                                     top_p=0.9),
            "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
            "token_logprobs min_p=0.1": lambda: torch_backend.token_logprobs(x, tokens, t, min_p=0.1),
            "top_k_top_p_sample(top_p=0.9)": lambda: torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9),
            "top_k_top_p_sample(top_p=0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_p=0.9, return_logprobs=True),
        }
        for name, fn in cells.items():
            results[f"{family} B={B} {name}"] = graph_us(fn)
    p = torch.softmax(x_all / 0.7, dim=1).sort(dim=1, descending=True).values
    nucleus = ((p.cumsum(1) - p) < 0.9).sum(1)
    shares[family] = [float((nucleus <= 64).float().mean()), int(nucleus.median())]
print(json.dumps([results, shares]))
"""


def main():
    base, new = sys.argv[1], sys.argv[2]
    runs = {}
    for label, path in (("base", base), ("new", new)):
        out = subprocess.run([sys.executable, "-c", CASE_CODE, path], capture_output=True, text=True, check=True).stdout
        runs[label] = json.loads(out.strip().splitlines()[-1])
    print(f"{'case (fp32, V = 151936, T = 0.7)':64s} {'base us':>10s} {'new us':>10s} {'new / base':>10s}")
    for case, base_us in runs["base"][0].items():
        new_us = runs["new"][0][case]
        print(f"{case:64s} {base_us:10.1f} {new_us:10.1f} {new_us / base_us:10.3f}")
    for family, (share, median) in runs["new"][1].items():
        print(f"{family}: rows whose top-p 0.9 kept set is at most 64 logits: {share:.0%}, median kept set {median}")


if __name__ == "__main__":
    main()
