"""A/B of two checkouts in one run on a GPU: device time (CUDA-graph replay, median) of gumbel_sample,
top_k_top_p_sample and rejection_sample, each checkout in its own process, alternated.

    python benchmarks/lab/ab_checkouts.py BASE_CHECKOUT NEW_CHECKOUT [--rounds 2]
"""

import argparse
import json
import subprocess
import sys

CASE_CODE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, triton
import torch_backend

def graph_us(fn):
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3

torch.manual_seed(0)
results = {}
B, V = 256, 151936
seeds = torch.arange(B, device="cuda", dtype=torch.int64)
positions = torch.arange(B, device="cuda", dtype=torch.int64)
for dtype in (torch.float32, torch.bfloat16):
    x = (torch.randn(B, V, device="cuda") * 3).to(dtype)
    for t in (0.7, 1.0):
        temperature = torch.full((B,), t, device="cuda")
        name = f"gumbel {str(dtype)[6:]} T={t}"
        results[name] = graph_us(lambda: torch_backend.gumbel_sample(x, seeds, positions, temperature))
    results[f"top_k=50 top_p=0.9 {str(dtype)[6:]} T=0.7"] = graph_us(
        lambda: torch_backend.top_k_top_p_sample(x, seeds, positions, temperature * 0.7, top_k=50, top_p=0.9))
K = 4
target = (torch.randn(B, K + 1, V, device="cuda") * 3).to(torch.bfloat16)
draft = target[:, :K].float() + torch.randn(B, K, V, device="cuda")
drafts = target[:, :K].float().argmax(-1).to(torch.int32)
n = torch.full((B,), K, device="cuda", dtype=torch.int32)
temperature = torch.full((B,), 0.7, device="cuda")
results["rejection B=256 K=4 bf16 T=0.7"] = graph_us(
    lambda: torch_backend.rejection_sample(target, drafts, n, seeds, positions, temperature, draft_logits=draft))
print(json.dumps(results))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = {"base": [], "new": []}
    for _ in range(args.rounds):
        for label in ("base", "new"):
            out = subprocess.run([sys.executable, "-c", CASE_CODE, getattr(args, label)], capture_output=True,
                                 text=True, check=True).stdout
            runs[label].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{'case':40s} {'base us':>16s} {'new us':>16s} {'new / base':>10s}")
    for case in runs["base"][0]:
        base = [r[case] for r in runs["base"]]
        new = [r[case] for r in runs["new"]]
        print(f"{case:40s} {' '.join(f'{v:7.1f}' for v in base):>16s} {' '.join(f'{v:7.1f}' for v in new):>16s} "
              f"{min(new) / min(base):10.3f}")


if __name__ == "__main__":
    main()
