"""A/B of two checkouts (issue 41): logprobs with filters on rows whose kept set is larger than the 64-logit list
(token_logprobs_kernel's passes: its threshold searches), device time (CUDA-graph replay, median, us), each
checkout in its own process (ab_runs.py), with whether the outputs agree. "flat" logits at T = 1 keep most of
the row under top-p 0.9; "typical" ones keep hundreds of logits under top-k 1000 (benchmarks/logit_families.py).

    python benchmarks/lab/ab_logprobs_passes.py BASE_CHECKOUT NEW_CHECKOUT [MORE_CHECKOUTS]
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import torch_backend
from logit_families import make_logits

V = 151936
results, digests, shares = {}, {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for family, dtype in (("flat", torch.float32), ("flat", torch.bfloat16), ("typical", torch.float32)):
    x_all = make_logits(family, 256, V, g).to(dtype)
    for B in (1, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 1.0, device="cuda")
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        cells = {
            "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
            "token_logprobs top_k=1000": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=1000),
            "token_logprobs top_k=1000 top_p=0.95": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=1000,
                                                                                        top_p=0.95),
            "top_k_top_p_sample(top_p=0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_p=0.9, return_logprobs=True),
        }
        for name, fn in cells.items():
            key = f"{family} {str(dtype)[6:]} B={B} {name}"
            digests[key] = digest(fn())
            results[key] = graph_us(fn)
    p = torch.softmax(x_all.float(), dim=1).sort(dim=1, descending=True).values
    nucleus = ((p.cumsum(1) - p) < 0.9).sum(1)
    shares[f"{family} {str(dtype)[6:]}"] = [float((nucleus <= 64).float().mean()), int(nucleus.median())]
print(json.dumps([results, digests, shares]))
"""


def main():
    runs = run_all(CASE_CODE, {path: [path] for path in sys.argv[1:]})
    print_table(runs, "case (V = 151936, T = 1)", 70, 10)
    for family, (share, median) in runs[sys.argv[1]][2].items():
        print(f"{family}: rows whose top-p 0.9 kept set is at most 64 logits: {share:.0%}, median kept set {median}")


if __name__ == "__main__":
    main()
