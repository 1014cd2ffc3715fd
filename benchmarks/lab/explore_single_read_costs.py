"""Where the single read's logprobs spend their time (issue 41: gumbel_sample(return_logprobs=True) at most
1.15x gumbel_sample at B = 256): torch.profiler's CUDA kernel times (mean of 20 calls) of gumbel_sample with and
without return_logprobs (and num_top = 20) and of token_logprobs without filters, V = 151936, fp32 and bf16,
"typical" logits (benchmarks/logit_families.py), B = 1, 64, 256.

    python benchmarks/lab/explore_single_read_costs.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from explore_logprobs_kernels import kernel_us  # noqa: E402
from logit_families import make_logits  # noqa: E402

import torch_backend  # noqa: E402


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    print(torch.cuda.get_device_name())
    for dtype in (torch.float32, torch.bfloat16):
        x_all = make_logits("typical", 256, 151936, g).to(dtype)
        for batch in (1, 64, 256):
            x = x_all[:batch].contiguous()
            t = torch.full((batch,), 0.7, device="cuda")
            seeds = torch.arange(batch, device="cuda")
            tokens = torch_backend.gumbel_sample(x, seeds, seeds, t)
            cases = (("gumbel", lambda: torch_backend.gumbel_sample(x, seeds, seeds, t)),
                     ("gumbel logprobs", lambda: torch_backend.gumbel_sample(x, seeds, seeds, t, return_logprobs=True)),
                     ("gumbel logprobs top20",
                      lambda: torch_backend.gumbel_sample(x, seeds, seeds, t, return_logprobs=True, num_top=20)),
                     ("token_logprobs", lambda: torch_backend.token_logprobs(x, tokens, t)))
            for name, fn in cases:
                times = kernel_us(fn)
                print(f"{str(dtype)[6:]:8s} B={batch:3d} {name:22s} total {sum(times.values()):7.1f}: "
                      + ", ".join(f"{k[:34]} {v:.1f}" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
