"""A/B of two checkouts (issue 41): top_list_kernel on rows of fewer blocks than its 64-logit list (V = 32000 in
blocks of 512: the blocks' maxima bound nothing, and the list took the row's logits one at a time), each program
now holding its blocks at once and taking its best by a threshold (SHORT_ROW). Device time (CUDA-graph replay,
median, us), each checkout in its own process (ab_runs.py), with whether every output (tokens and each Logprobs
field) agrees bit for bit; V = 151936 (more blocks than the list: unchanged) as a control.

    [AB_VOCABS=32000] python benchmarks/lab/ab_short_row_top_list.py BASE_CHECKOUT NEW_CHECKOUT
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import torch_backend
from logit_families import make_logits

results, digests = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for V, dtype in ((32000, torch.float32), (32000, torch.bfloat16), (151936, torch.bfloat16)):
    if str(V) not in os.environ.get("AB_VOCABS", "32000,151936").split(","):
        continue
    x_all = make_logits("typical", 256, V, g).to(dtype)
    for B in (1, 64, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 0.8, device="cuda")
        tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
        cells = {
            "token_logprobs num_top=20": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20),
            "token_logprobs top_k=50 top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_k=50,
                                                                                     top_p=0.9),
            "token_logprobs top_p=0.9": lambda: torch_backend.token_logprobs(x, tokens, t, top_p=0.9),
            "token_logprobs min_p=0.01": lambda: torch_backend.token_logprobs(x, tokens, t, min_p=0.01),
            "gumbel_sample return_logprobs num_top=5": lambda: torch_backend.gumbel_sample(
                x, seeds, seeds, t, return_logprobs=True, num_top=5),
            "top_k_top_p_sample(50, 0.9) return_logprobs": lambda: torch_backend.top_k_top_p_sample(
                x, seeds, seeds, t, top_k=50, top_p=0.9, return_logprobs=True),
            "top_k_top_p_sample(50, 0.9)": lambda: torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_k=50,
                                                                                     top_p=0.9),
        }
        for name, fn in cells.items():
            key = f"{str(dtype)[6:]} V={V} B={B} {name}"
            digests[key] = digest(fn())
            results[key] = graph_us(fn)
print(json.dumps([results, digests]))
"""


def main():
    runs = run_all(CASE_CODE, {path: [path] for path in sys.argv[1:]})
    print_table(runs, "case (T = 0.8, language-model-like rows)", 80, 10)


if __name__ == "__main__":
    main()
