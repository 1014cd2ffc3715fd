"""A/B of two checkouts (issue 41): logprobs with filters (top-p or min-p and no top-k, top-k and top-p) and with a
top list, device time (CUDA-graph replay, median, us) on language-model-like logits
(benchmarks/logit_families.py), each checkout in its own process (ab_runs.py), with whether the outputs agree.
Also the share of rows whose kept set lies within the 64 largest logits (the list route's rows).

    python benchmarks/lab/ab_logprobs_top_p.py BASE_CHECKOUT NEW_CHECKOUT
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import torch_backend
from logit_families import make_logits

V = 151936
results, digests, shares = {}, {}, {}
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
            digests[f"{family} B={B} {name}"] = digest(fn())
            results[f"{family} B={B} {name}"] = graph_us(fn)
    p = torch.softmax(x_all / 0.7, dim=1).sort(dim=1, descending=True).values
    nucleus = ((p.cumsum(1) - p) < 0.9).sum(1)
    shares[family] = [float((nucleus <= 64).float().mean()), int(nucleus.median())]
print(json.dumps([results, digests, shares]))
"""


def main():
    runs = run_all(CASE_CODE, {label: [path] for label, path in zip(("base", "new"), sys.argv[1:3])})
    print_table(runs, "case (fp32, V = 151936, T = 0.7)", 64, 10)
    for family, (share, median) in runs["new"][2].items():
        print(f"{family}: rows whose top-p 0.9 kept set is at most 64 logits: {share:.0%}, median kept set {median}")


if __name__ == "__main__":
    main()
