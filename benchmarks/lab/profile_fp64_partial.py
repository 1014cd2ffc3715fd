"""Lab: the FP32 and FP64 first launches of gumbel_sample at B = 256, V = 151936 (fp32 logits), one
call each after a warm-up, for a profiler (ncu) to compare: issue utilisation, pipes, stalls.

    ncu --kernel-name gumbel_partial_kernel --launch-skip 2 --launch-count 2 --section ... \\
        python benchmarks/lab/profile_fp64_partial.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import logit_families  # noqa: E402

import torch_backend  # noqa: E402

batch, vocab = 256, 151936
logits = logit_families.make_logits("flat", batch, vocab, torch.Generator(device="cuda").manual_seed(1)).float()
seeds = torch.arange(batch, device="cuda") * 7919
positions = torch.arange(batch, device="cuda")
temperature = torch.full((batch,), 0.8, device="cuda")
for fp64 in (False, True):  # warm-up: compile both (launches 0, 1 of gumbel_partial_kernel)
    torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)
for fp64 in (False, True):  # profiled: launches 2 (FP32) and 3 (FP64)
    torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)
torch.cuda.synchronize()
