"""Lab: top_k_top_p_sample's launches' plan with the unfiltered winner shortcut against a base
checkout (issue "throughput", target 2): CUDA-graph device time of every filter of the benchmark on
the three logit families, with gumbel_sample on the same logits for the ratio, each checkout in a
process of its own, alternated (min over rounds). The tokens of both checkouts must be equal.
Small batches rotate over harness.copies_needed logits draws (64 at B = 1, one graph each), so a cell's
time is the median over draws, as in bench_filtered.py: at B = 1 one draw either keeps its unfiltered
winner or searches.

    python benchmarks/lab/ab_filtered_winner.py BASE NEW [--rounds 2] [--batches 64,256] [--float32-batches 256]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CASE_CODE = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import torch
import harness, logit_families
import torch_backend

FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "min_p=0.05": dict(min_p=0.05),
           "top_k=50 top_p=0.9": dict(top_k=50, top_p=0.9)}
results = {}
def batch_list(text):
    return [int(b) for b in text.split(",") if b]
for dtype_name, batches in (("bfloat16", batch_list(sys.argv[3])), ("float32", batch_list(sys.argv[4]))):
    dtype = getattr(torch, dtype_name)
    for batch in batches:
        V = 151936
        rotate = harness.copies_needed(batch * V * dtype.itemsize)
        seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003
        positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 17
        temperature = torch.full((batch,), 0.8, device="cuda")
        for family in ("flat", "typical", "peaked"):
            generator = torch.Generator(device="cuda").manual_seed(batch + len(family))
            xs = [logit_families.make_logits(family, batch, V, generator).to(dtype) for _ in range(rotate)]
            case = f"{dtype_name} B={batch} {family}"
            results[f"{case} gumbel"] = [harness.time_graph_us(
                lambda i: torch_backend.gumbel_sample(xs[i], seeds, positions, temperature), rotate), ""]
            for name, filters in FILTERS.items():
                call = lambda i, filters=filters: torch_backend.top_k_top_p_sample(xs[i], seeds, positions, temperature,
                                                                                  **filters)
                tokens = b"".join(call(i).cpu().numpy().tobytes() for i in range(rotate))
                results[f"{case} {name}"] = [harness.time_graph_us(call, rotate),
                                             hashlib.sha256(tokens).hexdigest()[:12]]
print(json.dumps(results))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", default="64,256", help="bfloat16 logits' batch sizes")
    parser.add_argument("--new-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable of the new checkout's processes only (repeatable)")
    parser.add_argument("--float32-batches", default="256", help="float32 logits' batch sizes ('' for none)")
    options = parser.parse_args()
    benchmarks = os.path.dirname(HERE)
    runs = {"base": [], "new": []}
    new_env = dict(os.environ, **dict(item.split("=", 1) for item in options.new_env))
    for _ in range(options.rounds):
        for name, checkout in (("base", options.base), ("new", options.new)):
            out = subprocess.run([sys.executable, "-c", CASE_CODE, checkout, benchmarks, options.batches,
                                  options.float32_batches],
                                 capture_output=True, text=True, check=True,
                                 env=new_env if name == "new" else None).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{'case':48s} {'base us':>9s} {'new us':>9s} {'new/base':>8s} {'base/gumbel':>11s} {'new/gumbel':>10s}")
    for case in runs["base"][0]:
        base = min(run[case][0] for run in runs["base"])
        new = min(run[case][0] for run in runs["new"])
        hashes = {run[case][1] for run in runs["base"] + runs["new"]}
        if len(hashes) != 1:
            print(f"TOKENS DIFFER: {case} {hashes}")
        prefix = " ".join(case.split(" ")[:3])
        gb = min(run[f"{prefix} gumbel"][0] for run in runs["base"])
        gn = min(run[f"{prefix} gumbel"][0] for run in runs["new"])
        print(f"{case:48s} {base:9.1f} {new:9.1f} {new / base:8.3f} {base / gb:11.2f} {new / gn:10.2f}", flush=True)


if __name__ == "__main__":
    main()
