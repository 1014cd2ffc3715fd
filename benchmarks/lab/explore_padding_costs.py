"""Where a padded call's time goes (issue 39): device time (CUDA-graph replay, median) of gumbel_sample and
rejection_sample at B = 16, the same with num_valid = 16 (the padded plan at the same batch: its only extra
work is the row flags), B = 256 with num_valid = 16, and the torch frontend's row-flag construction alone.

    python benchmarks/lab/explore_padding_costs.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_padding import V, graph_us, padding_ops  # noqa: E402


def main():
    ops, n = padding_ops()
    del ops["top_k_top_p_sample"]
    print(f"{torch.cuda.get_device_name()}, V = {V} bf16; us (CUDA graph, median)")
    for name, op in ops.items():
        cells = {"B=16": (16, None), "B=16 nv=16": (16, n), "B=256 nv=16": (256, n), "B=256": (256, None),
                 "B=256 nv=256": (256, torch.tensor(256, device="cuda"))}
        print(name, "  ".join(f"{cell} {graph_us(lambda: op(*args)):.1f}" for cell, args in cells.items()))
    rows = torch.arange(256, device="cuda", dtype=torch.int32)
    flags_us = graph_us(lambda: (torch.arange(256, device="cuda") < n).to(torch.int32))
    print("flags arange<n .to(int32) (3 kernels):", f"{flags_us:.1f}")
    print("flags n - rows (1 kernel):", f"{graph_us(lambda: n - rows):.1f}")
    print("an empty-ish kernel (rows + 1):", f"{graph_us(lambda: rows + 1):.1f}")


if __name__ == "__main__":
    main()
