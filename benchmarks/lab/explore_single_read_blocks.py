"""Lab (issue 41): the single-read logprobs' block size (columns and warps a program) on the GPU:
token_logprobs (no filters) and gumbel_sample(return_logprobs=True) against gumbel_sample and the measured
read floor, CUDA-graph device time (median, us), inputs rotated past L2. Each block size runs in a process
of its own (the planning function patched there); tokens and logprobs checked equal across block sizes
(the fixed-point sums: no block size changes a bit, up to the FP64 combine).

    python benchmarks/lab/explore_single_read_blocks.py
"""

import json
import subprocess
import sys

CODE = r"""
import dataclasses, json, os, sys, hashlib
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import torch, triton
import harness
import torch_backend
from jsample.kernels import logprobs as lp
block_v, warps = int(sys.argv[1]), int(sys.argv[2])
original = lp.single_read_config
def patched(vocab, target):
    config = original(vocab, target)
    blocks = -(-vocab // block_v)
    return dataclasses.replace(config, block_v=block_v, num_blocks=blocks, reduce_block=triton.next_power_of_2(blocks),
                               num_warps=warps)
lp.single_read_config = patched
out = {}
for B in (64, 256):
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator(device="cuda").manual_seed(B)
        V = 151936
        copies = harness.copies_needed(B * V * (4 if dtype == torch.float32 else 2))
        xs = [(torch.randn(B, V, device="cuda", generator=g) * 3).to(dtype) for _ in range(copies)]
        tokens = torch.randint(0, V, (B,), device="cuda", generator=g)
        t = torch.full((B,), 0.8, device="cuda")
        seeds = torch.arange(B, device="cuda")
        key = f"B={B} {str(dtype)[6:]}"
        small = torch.zeros(1, device="cuda")
        out[key + " read floor"] = harness.fastest_read_once_us([(x, small) for x in xs])[0]
        out[key + " gumbel_sample"] = harness.time_graph_us(lambda i: torch_backend.gumbel_sample(xs[i], seeds, seeds, t), copies)
        out[key + " gumbel return_logprobs"] = harness.time_graph_us(
            lambda i: torch_backend.gumbel_sample(xs[i], seeds, seeds, t, return_logprobs=True), copies)
        out[key + " token_logprobs"] = harness.time_graph_us(lambda i: torch_backend.token_logprobs(xs[i], tokens, t), copies)
        sampled, lps = torch_backend.gumbel_sample(xs[0], seeds, seeds, t, return_logprobs=True)
        sep = torch_backend.token_logprobs(xs[0], sampled, t)
        same = all(torch.equal(getattr(lps, n), getattr(sep, n)) for n in ("raw", "scaled", "kept", "rank"))
        digest = hashlib.sha256(b"".join(getattr(lps, n).cpu().numpy().tobytes() for n in ("raw", "scaled", "rank"))
                                + sampled.cpu().numpy().tobytes()).hexdigest()[:12]
        out[key + " check"] = f"fused==separate {same} digest {digest}"
print(json.dumps(out))
"""


def main():
    results = {}
    for block_v, warps in ((512, 1), (1024, 2), (1024, 4), (2048, 4), (4096, 8)):
        run = subprocess.run([sys.executable, "-c", CODE, str(block_v), str(warps)], capture_output=True, text=True)
        if run.returncode:
            print(run.stderr[-2000:])
            continue
        results[(block_v, warps)] = json.loads(run.stdout.strip().splitlines()[-1])
    keys = list(next(iter(results.values())))
    print("# us (CUDA graph, median); columns: block columns x warps")
    print(f"{'':40s}" + "".join(f"{f'{b}x{w}':>14s}" for b, w in results))
    for key in keys:
        cells = [results[c][key] for c in results]
        if isinstance(cells[0], float):
            print(f"{key:40s}" + "".join(f"{v:14.1f}" for v in cells))
        else:
            for c, v in zip(results, cells):
                print(f"{key:40s} {c}: {v}")


if __name__ == "__main__":
    main()
