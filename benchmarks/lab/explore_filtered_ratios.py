"""Lab: top_k_top_p_sample against gumbel_sample on the same logits, CUDA-graph device time, torch only
(issue "throughput", target 2: <= 2.5x gumbel_sample): bfloat16 logits of the three families, V =
151936, temperature 0.8, B = 256 then 1, the benchmark's four filters. A quick check of the ratios
in one process (bench_filtered.py also times JAX, plain torch and FlashInfer, which takes far longer).

    PYTHONPATH=. python3 benchmarks/lab/explore_filtered_ratios.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import harness  # noqa: E402
import logit_families  # noqa: E402
import torch_backend  # noqa: E402

FILTERS = {"top_k": dict(top_k=50), "top_p": dict(top_p=0.9), "min_p": dict(min_p=0.05),
           "top_k+top_p": dict(top_k=50, top_p=0.9)}
VOCAB = 151936


def main():
    for batch in (256, 1):
        for family in logit_families.FAMILIES:
            generator = torch.Generator(device="cuda").manual_seed(batch + len(family))
            x = logit_families.make_logits(family, batch, VOCAB, generator).to(torch.bfloat16)
            seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003 + 17
            positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 2**32
            temperature = torch.full((batch,), 0.8, device="cuda")
            gumbel_us = harness.time_graph_us(lambda i: torch_backend.gumbel_sample(x, seeds, positions, temperature))
            row = [f"{family:8s} B={batch:4d} gumbel {gumbel_us:6.1f} us"]
            for name, filters in FILTERS.items():
                us = harness.time_graph_us(lambda i, filters=filters: torch_backend.top_k_top_p_sample(
                    x, seeds, positions, temperature, **filters))
                row.append(f"{name} {us:6.1f} ({us / gumbel_us:.2f}x)")
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
