"""Where a padded call's time goes (issue 39): device time (CUDA-graph replay, median) of gumbel_sample and
rejection_sample at B = 16, the same with num_valid = 16 (the padded plan at the same batch: its only extra
work is the row flags), B = 256 with num_valid = 16, and the torch frontend's row-flag construction alone.

    python benchmarks/lab/explore_padding_costs.py
"""

import torch
import triton

import torch_backend

V, K = 151936, 4


def graph_us(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(256, V, device="cuda", generator=g) * 3).to(torch.bfloat16)
    target = (torch.randn(256, K + 1, V, device="cuda", generator=g) * 3).to(torch.bfloat16)
    drafts = target[:, :K].float().argmax(-1).to(torch.int32)
    counts = torch.full((256,), K, device="cuda", dtype=torch.int32)
    seeds = torch.arange(256, device="cuda", dtype=torch.int64) * 7919
    positions = torch.arange(256, device="cuda", dtype=torch.int64)
    temperature = torch.full((256,), 0.8, device="cuda")
    n = torch.tensor(16, device="cuda")
    ops = {
        "gumbel_sample": lambda b, nv: torch_backend.gumbel_sample(x[:b], seeds[:b], positions[:b], temperature[:b],
                                                                    num_valid=nv),
        "rejection_sample K=4": lambda b, nv: torch_backend.rejection_sample(
            target[:b], drafts[:b], counts[:b], seeds[:b], positions[:b], temperature[:b], num_valid=nv)[0],
    }
    print(f"{torch.cuda.get_device_name()}, V = {V} bf16; us (CUDA graph, median)")
    for name, op in ops.items():
        cells = {"B=16": (16, None), "B=16 nv=16": (16, n), "B=256 nv=16": (256, n), "B=256": (256, None),
                 "B=256 nv=256": (256, torch.tensor(256, device="cuda"))}
        print(name, "  ".join(f"{cell} {graph_us(lambda: op(*args)):.1f}" for cell, args in cells.items()))
    rows = torch.arange(256, device="cuda", dtype=torch.int32)
    print("flags arange<n .to(int32) (3 kernels):", f"{graph_us(lambda: (torch.arange(256, device='cuda') < n).to(torch.int32)):.1f}")
    print("flags n - rows (1 kernel):", f"{graph_us(lambda: n - rows):.1f}")
    print("an empty-ish kernel (rows + 1):", f"{graph_us(lambda: rows + 1):.1f}")


if __name__ == "__main__":
    main()
