"""Lab: device time of each launch of gumbel_sample's plan, FP32 and FP64 (torch profiler, CUDA
kernels), and the whole call's CUDA-graph time, per (B, V): where FP64's extra time goes at the
small grids of issue "throughput", target 1 (the partial launch or the reduce).

    python benchmarks/lab/explore_gumbel_launches.py [--cells 64x151936,256x32000] [--dtype bfloat16]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import harness  # noqa: E402
import logit_families  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", default="64x32000,256x32000,64x151936,256x151936,64x262144")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--family", default="flat")
    options = parser.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import torch_backend

    for cell in options.cells.split(","):
        batch, vocab = map(int, cell.split("x"))
        logits = logit_families.make_logits(options.family, batch, vocab,
                                            torch.Generator(device="cuda").manual_seed(batch + vocab))
        logits = logits.to(getattr(torch, options.dtype))
        seeds = torch.arange(batch, device="cuda") * 7919
        positions = torch.arange(batch, device="cuda")
        temperature = torch.full((batch,), 0.8, device="cuda")
        line = []
        for fp64 in (False, True):
            def call(i):
                return torch_backend.gumbel_sample(logits, seeds + i, positions, temperature, fp64=fp64)
            graph_us = min(harness.time_graph_us(call) for _ in range(3))
            for _ in range(3):
                call(0)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(20):
                    call(i)
                torch.cuda.synchronize()
            kernels = [e for e in prof.key_averages() if e.count >= 20 and e.key.endswith("_kernel")]
            parts = " + ".join(f"{e.key.replace('_kernel', '')} {e.device_time_total / 20:.1f}" for e in kernels)
            line.append(f"{'fp64' if fp64 else 'fp32'} graph {graph_us:.1f} us = {parts}")
        print(f"{options.dtype} B={batch} V={vocab}: " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
