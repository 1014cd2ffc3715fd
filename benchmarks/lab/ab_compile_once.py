"""A/B of two checkouts for the compile-once change (issue 39): device time (CUDA-graph replay, median)
and a hash of the tokens at every cell, each checkout in its own process, alternated; the tokens must
be equal, cell by cell.

Cells: the committed benchmarks' (B = 1, 64, 256) and the batch sizes whose tilings the change moved
(top_k_top_p_sample's one-launch plan at B = 2..16, its launches' plan between that and many rows).

    python benchmarks/lab/ab_compile_once.py BASE_CHECKOUT NEW_CHECKOUT [--rounds 2]
"""

import argparse
import json
import subprocess
import sys

CASE_CODE = r"""
import hashlib, json, re, sys
sys.path.insert(0, sys.argv[1])
import torch, triton
import torch_backend

def graph_us(fn):
    out = fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    us = triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3
    outs = out if isinstance(out, tuple) else (out,)
    return us, hashlib.sha256(b"".join(o.cpu().numpy().tobytes() for o in outs)).hexdigest()[:12]

results = {}
def cell(name, fn):
    if re.search(sys.argv[2], name):
        results[name] = graph_us(fn)

def inputs(b, v, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed + b)
    x = (torch.randn(b, v, device="cuda", generator=g) * 3).to(dtype)
    seeds = torch.arange(b, device="cuda", dtype=torch.int64) * 1000003 + 17
    positions = torch.arange(b, device="cuda", dtype=torch.int64)
    return x, seeds, positions, torch.full((b,), 0.8, device="cuda")

FILTERS = {"top_k+top_p": lambda b: dict(top_k=torch.full((b,), 50, device="cuda", dtype=torch.int32),
                                          top_p=torch.full((b,), 0.9, device="cuda")),
           "top_p": lambda b: dict(top_p=torch.full((b,), 0.9, device="cuda")),
           "min_p": lambda b: dict(min_p=torch.full((b,), 0.05, device="cuda"))}
for v, batches, names in ((151936, (1, 2, 3, 4, 8, 16, 64, 256), ("top_k+top_p",)),
                          (151936, (1, 256), ("top_p", "min_p")), (32000, (2, 4, 8, 16, 32, 64), ("top_k+top_p",)),
                          (32000, (64,), ("top_p",))):
    for b in batches:
        for name in names:
            x, s, p, t = inputs(b, v)
            f = FILTERS[name](b)
            cell(f"filtered {name} V={v} B={b}", lambda: torch_backend.top_k_top_p_sample(x, s, p, t, **f))
for b in (1, 32, 256):
    x, s, p, t = inputs(b, 151936)
    cell(f"gumbel V=151936 B={b}", lambda: torch_backend.gumbel_sample(x, s, p, t))
K = 4
for b in (1, 64, 256):
    g = torch.Generator(device="cuda").manual_seed(b)
    target = (torch.randn(b, K + 1, 151936, device="cuda", generator=g) * 3).to(torch.bfloat16)
    draft = target[:, :K].float() + torch.randn(b, K, 151936, device="cuda", generator=g)
    drafts = target[:, :K].float().argmax(-1).to(torch.int32)
    n = torch.full((b,), K, device="cuda", dtype=torch.int32)
    _, s, p, t = inputs(b, 8)
    cell(f"rejection K=4 V=151936 B={b}", lambda: torch_backend.rejection_sample(target, drafts, n, s, p, t))
    cell(f"rejection+draft K=4 V=151936 B={b}",
         lambda: torch_backend.rejection_sample(target, drafts, n, s, p, t, draft_logits=draft))
print(json.dumps(results))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="", help="a regular expression: the cells it finds in their names")
    args = parser.parse_args()
    runs = {"base": [], "new": []}
    for _ in range(args.rounds):
        for label in ("base", "new"):
            out = subprocess.run([sys.executable, "-c", CASE_CODE, getattr(args, label), args.only], capture_output=True,
                                 text=True)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'case':40s} {'base us':>16s} {'new us':>16s} {'new / base':>10s}  tokens")
    differ = 0
    for case in runs["base"][0]:
        base = [r[case][0] for r in runs["base"]]
        new = [r[case][0] for r in runs["new"]]
        same = {r[case][1] for r in runs["base"] + runs["new"]}
        differ += len(same) != 1
        print(f"{case:40s} {' '.join(f'{v:7.1f}' for v in base):>16s} {' '.join(f'{v:7.1f}' for v in new):>16s} "
              f"{min(new) / min(base):10.3f}  {'equal' if len(same) == 1 else 'DIFFER'}")
    print(f"tokens: {len(runs['base'][0]) - differ} of {len(runs['base'][0])} cells equal")


if __name__ == "__main__":
    main()
