"""A/B of two checkouts (issue 41): one-GPU logprobs with filters, where the rows whose kept set is past the
64-logit list take vocab-parallel token_logprobs' rounds as a single shard (many programs a row) instead of
token_logprobs_kernel's passes (one program a row). Device time (CUDA-graph replay, median, us), each checkout in
its own process (ab_runs.py), with whether every output (tokens and each Logprobs field) agrees bit for bit; the
samplers' cells also without logprobs (the issue's 1.15x: same checkout, same run). "flat" logits at T = 1 keep
most of the row under top-p 0.9, "typical" ones 1 row in 8 past the list (benchmarks/logit_families.py),
"coarse" ones (typical rounded to halves) tie at the k-th largest past the list. top_k=50 is a Python int
(top_k_within_list: no search planned) but where a tensor is named.

    python benchmarks/lab/ab_single_shard_route.py BASE_CHECKOUT NEW_CHECKOUT
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import torch_backend
from logit_families import make_logits

V = 151936
results, digests = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for family, dtype in (("flat", torch.float32), ("typical", torch.float32), ("typical", torch.bfloat16),
                      ("coarse", torch.float32)):
    x_all = make_logits("typical" if family == "coarse" else family, 256, V, g).to(dtype)
    if family == "coarse":  # typical rows rounded to halves: ties at the k-th largest past the 64-logit list
        x_all = (x_all * 2).round() / 2
    for B in (1, 64, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 1.0, device="cuda")
        k50 = torch.full((B,), 50, device="cuda", dtype=torch.int64)
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        cells = {
            "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
            "token_logprobs top_p=0.9 num_top=5": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9,
                                                                                      num_top=5),
            "token_logprobs min_p=0.01": lambda: torch_backend.token_logprobs(x, tokens, t, min_p=0.01),
            "token_logprobs top_k=1000 top_p=0.95": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=1000,
                                                                                        top_p=0.95),
            "token_logprobs top_k=50 top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50,
                                                                                     top_p=0.9),
            "token_logprobs top_k=k50 (a tensor) top_p=0.9": lambda: torch_backend.token_logprobs(
                x, tokens, t, top_k=k50, top_p=0.9),
            "top_k_top_p_sample(top_p=0.9)": lambda: torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9),
            "top_k_top_p_sample(top_p=0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_p=0.9, return_logprobs=True),
            "top_k_top_p_sample(50, 0.9)": lambda: torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_k=50,
                                                                                     top_p=0.9),
            "top_k_top_p_sample(50, 0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_k=50, top_p=0.9, return_logprobs=True),
        }
        for name, fn in cells.items():
            key = f"{family} {str(dtype)[6:]} B={B} {name}"
            digests[key] = digest(fn())
            results[key] = graph_us(fn)
print(json.dumps([results, digests]))
"""


def main():
    runs = run_all(CASE_CODE, {path: [path] for path in sys.argv[1:]})
    print_table(runs, "case (V = 151936, T = 1)", 76, 10)


if __name__ == "__main__":
    main()
