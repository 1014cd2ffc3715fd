"""Lab: one FP32 and one FP64 gumbel_sample call after a warm-up, B and V from the command line, for a
profiler (ncu) to time each launch of both plans.

    ncu --kernel-name regex:"partial|reduce" --launch-skip 4 --launch-count 4 --section SpeedOfLight \
        python benchmarks/lab/profile_fp64_calls.py 64 151936
    ncu --kernel-name regex:gumbel_partial_kernel --launch-skip 2 --launch-count 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section InstructionStats \
        --section LaunchStats python benchmarks/lab/profile_fp64_calls.py 256 151936   # the first launches alone
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import logit_families  # noqa: E402

import torch_backend  # noqa: E402

batch, vocab = int(sys.argv[1]), int(sys.argv[2])
logits = logit_families.make_logits("flat", batch, vocab, torch.Generator(device="cuda").manual_seed(1)).float()
seeds = torch.arange(batch, device="cuda") * 7919
positions = torch.arange(batch, device="cuda")
temperature = torch.full((batch,), 0.8, device="cuda")
for _ in range(2):  # a warm-up call of each (2 launches each), then the profiled ones
    for fp64 in (False, True):
        torch_backend.gumbel_sample(logits, seeds, positions, temperature, fp64=fp64)
torch.cuda.synchronize()
