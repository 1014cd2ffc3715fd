"""A/B of checkouts and warps (issue 41): the top list (top_list_kernel: num_top = 20, and the filters' 64-logit
list), device time (CUDA-graph replay, median, us), fp32, V = 151936, T = 0.7, "typical" logits
(benchmarks/logit_families.py), B = 1, 64, 256, each run in its own process. A run is CHECKOUT or CHECKOUT:WARPS
(top_list_kernel's launches given WARPS warps: a lab variant). Each run prints a digest of its outputs, so runs that
must agree bit for bit can be compared.

    python benchmarks/lab/ab_top_list.py BASE NEW [NEW:1 ...]
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import dataclasses
warps = int(sys.argv[2])
import torch_backend
from jsample.kernels import logprobs
from logit_families import make_logits

if warps:
    original = logprobs.top_list_launch
    def top_list_launch(*args, **kwargs):
        return dataclasses.replace(original(*args, **kwargs), num_warps=warps)
    logprobs.top_list_launch = top_list_launch

V = 151936
results, digests = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
x_all = make_logits("typical", 256, V, g)
for B in (1, 64, 256):
    x = x_all[:B].contiguous()
    seeds = torch.arange(B, device="cuda", dtype=torch.int64)
    t = torch.full((B,), 0.7, device="cuda")
    tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
    cells = {
        "token_logprobs num_top=20": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20),
        "token_logprobs num_top=64": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=64),
        "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
        "token_logprobs top_k=50 top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50, top_p=0.9),
    }
    for name, fn in cells.items():
        key = f"B={B:3d} {name}"
        digests[key] = digest(fn())
        results[key] = graph_us(fn)
print(json.dumps([results, digests]))
"""


def main():
    runs = {run: (run.split(":") + ["0"])[:2] for run in sys.argv[1:]}
    print_table(run_all(CASE_CODE, runs), "us (CUDA graph, median), fp32", 40, 13)


if __name__ == "__main__":
    main()
