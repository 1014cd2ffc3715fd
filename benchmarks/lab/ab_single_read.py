"""A/B of two checkouts (issue 41): the single read's logprobs (gumbel_sample(return_logprobs=True), with num_top =
20, token_logprobs without filters) and gumbel_sample itself, device time (CUDA-graph replay, median, us), fp32 and
bf16, V = 151936, "typical" logits (benchmarks/logit_families.py), B = 1, 64, 256, T = 0.7 and (some cells) T = 1,
each run in its own process.
A run is CHECKOUT or CHECKOUT:BLOCK_V:WARPS (the single read's blocks replaced: a lab variant, which changes the
blocks' sums and so the logprobs' last bits). Every run also prints a digest of its outputs (tokens and every
logprobs field), so runs whose numbers must agree bit for bit can be compared.

    python benchmarks/lab/ab_single_read.py BASE NEW [NEW:2048:4 ...]

(The runner and the table: ab_runs.py. The results committed before it came, from the same cases: results/ab_single_read_*.)
"""

import sys

from ab_runs import print_table, run_all

CASE_CODE = r"""
import dataclasses
block_v, warps = int(sys.argv[2]), int(sys.argv[3])
import torch_backend
from jsample.kernels import logprobs
from logit_families import make_logits

if block_v:
    original = logprobs.single_read_config
    def single_read_config(vocab, target):
        config = original(vocab, target)
        blocks = -(-vocab // block_v)
        return dataclasses.replace(config, block_v=block_v, num_warps=warps, num_blocks=blocks,
                                   reduce_block=triton.next_power_of_2(blocks))
    logprobs.single_read_config = single_read_config

V = 151936
results, digests = {}, {}
g = torch.Generator(device="cuda").manual_seed(0)
for dtype in (torch.float32, torch.bfloat16):
    x_all = make_logits("typical", 256, V, g).to(dtype)
    for B in (1, 64, 256):
        x = x_all[:B].contiguous()
        seeds = torch.arange(B, device="cuda", dtype=torch.int64)
        t = torch.full((B,), 0.7, device="cuda")
        one = torch.ones((B,), device="cuda")  # T = 1 (RL's rollouts): the scaled sums are the raw ones
        tokens = torch_backend.gumbel_sample(x, seeds, seeds, t)
        cells = {
            "gumbel_sample": lambda: torch_backend.gumbel_sample(x, seeds, seeds, t),
            "gumbel_sample return_logprobs": lambda: torch_backend.gumbel_sample(x, seeds, seeds, t,
                                                                                 return_logprobs=True),
            "gumbel_sample return_logprobs num_top=20": lambda: torch_backend.gumbel_sample(
                x, seeds, seeds, t, return_logprobs=True, num_top=20),
            "token_logprobs": lambda: torch_backend.token_logprobs(x, tokens, t),
            "token_logprobs num_top=20": lambda: torch_backend.token_logprobs(x, tokens, t, num_top=20),
            "T=1 gumbel_sample": lambda: torch_backend.gumbel_sample(x, seeds, seeds, one),
            "T=1 gumbel_sample return_logprobs": lambda: torch_backend.gumbel_sample(x, seeds, seeds, one,
                                                                                     return_logprobs=True),
            "T=1 token_logprobs": lambda: torch_backend.token_logprobs(x, tokens, one),
        }
        for name, fn in cells.items():
            key = f"{str(dtype)[6:]:8s} B={B:3d} {name}"
            digests[key] = digest(fn())
            results[key] = graph_us(fn)
print(json.dumps([results, digests]))
"""


def main():
    runs = {run: (run.split(":") + ["0", "0"])[:3] for run in sys.argv[1:]}
    print_table(run_all(CASE_CODE, runs), "us (CUDA graph, median)")


if __name__ == "__main__":
    main()
