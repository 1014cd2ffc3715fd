"""A/B of two checkouts (issue 41): token_logprobs with filters where the rows whose kept set is past the 64-logit
list take their searches and kept sums as the steps of one launch (logprobs_search.pending_search_kernel: groups
of programs meeting at barriers) instead of a launch a step (vocab-parallel searches as one shard, then
kept_mass_kernel). Device time (CUDA-graph replay, median, us), each checkout in its own process (ab_runs.py),
with whether every output (tokens and each Logprobs field) agrees bit for bit. "flat" logits at T = 1 keep most of
the row under top-p 0.9 (every row pending), "typical" ones 1 row in 8 past the list, a per-row top_k tensor of 50
none (the searches' fixed cost), of 1000 every row (benchmarks/logit_families.py).

    python benchmarks/lab/ab_pending_search_one_launch.py BASE_CHECKOUT NEW_CHECKOUT
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import torch_backend
from logit_families import make_logits

results, digests = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for V, family, dtype in ((151936, "flat", torch.float32), (151936, "typical", torch.float32),
                         (151936, "typical", torch.bfloat16), (32000, "typical", torch.float32)):
    x_all = make_logits(family, 256, V, g).to(dtype)
    for B in (1, 2, 8, 64, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 1.0, device="cuda")
        k50 = torch.full((B,), 50, device="cuda", dtype=torch.int64)
        k1000 = torch.full((B,), 1000, device="cuda", dtype=torch.int64)
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        cells = {
            "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
            "token_logprobs top_k=k50 (a tensor) top_p=0.9": lambda: torch_backend.token_logprobs(
                x, tokens, t, top_k=k50, top_p=0.9),
            "token_logprobs top_k=k1000 (a tensor) top_p=0.95": lambda: torch_backend.token_logprobs(
                x, tokens, t, top_k=k1000, top_p=0.95),
            "token_logprobs top_k=50 top_p=0.9 min_p=0.01": lambda: torch_backend.token_logprobs(
                x, tokens, t, top_k=50, top_p=0.9, min_p=0.01),
            "token_logprobs min_p=0.01": lambda: torch_backend.token_logprobs(x, tokens, t, min_p=0.01),
            "top_k_top_p_sample(top_p=0.9)": lambda: torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9),
            "top_k_top_p_sample(top_p=0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_p=0.9, return_logprobs=True),
        }
        for name, fn in cells.items():
            key = f"{family} {str(dtype)[6:]} V={V} B={B} {name}"
            digests[key] = digest(fn())
            results[key] = graph_us(fn)
print(json.dumps([results, digests]))
"""


def main():
    runs = run_all(CASE_CODE, {path: [path] for path in sys.argv[1:]})
    print_table(runs, "case (T = 1)", 90, 10)


if __name__ == "__main__":
    main()
