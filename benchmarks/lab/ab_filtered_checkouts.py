"""A/B of top_k_top_p_sample at two checkouts on one GPU (issue 39: the sort-free list decision):
first-call time in an empty Triton cache per filter set, then device time (CUDA-graph replay, median)
over a grid of batch sizes, vocabularies, dtypes and filters, each checkout in its own processes,
alternated; tokens of both checkouts compared case by case.

    python benchmarks/lab/ab_filtered_checkouts.py BASE_CHECKOUT NEW_CHECKOUT [--rounds 2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

FIRST_CALL = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import torch_backend
B, V = int(sys.argv[2]), 151936
filters = json.loads(sys.argv[3])
dtype, fp64 = getattr(torch, sys.argv[4]), sys.argv[5] == "1"
g = torch.Generator(device="cuda").manual_seed(0)
logits = (torch.randn(B, V, device="cuda", generator=g) * 3).to(dtype)
seeds = torch.arange(B, device="cuda", dtype=torch.int64)
temperature = torch.full((B,), 0.8, device="cuda")
args = {name: torch.full((B,), value, device="cuda", dtype=torch.int32 if name == "top_k" else torch.float32)
        for name, value in filters.items()}
torch.cuda.synchronize()
start = time.perf_counter()
torch_backend.top_k_top_p_sample(logits, seeds, seeds, temperature, fp64=fp64, **args)
torch.cuda.synchronize()
print(json.dumps(time.perf_counter() - start))
"""

DEVICE_TIME = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import torch, triton
import torch_backend

def graph_us(fn):
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median") * 1e3

FILTERS = {"top_k=50,top_p=0.9": dict(top_k=50, top_p=0.9), "top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9),
           "min_p=0.05": dict(min_p=0.05), "top_k=1000": dict(top_k=1000)}
results = {}
ONLY = [c for c in sys.argv[2].split(";") if c] if len(sys.argv) > 2 else []
for V in (32000, 151936):
    for dtype in (torch.bfloat16, torch.float32):
        for B in (1, 2, 4, 16, 64, 256):
            g = torch.Generator(device="cuda").manual_seed(V + B)
            logits = (torch.randn(B, V, device="cuda", generator=g) * 3).to(dtype)
            seeds = torch.arange(B, device="cuda", dtype=torch.int64) * 7919
            temperature = torch.full((B,), 0.8, device="cuda")
            for name, filters in FILTERS.items():
                args = {k: torch.full((B,), v, device="cuda", dtype=torch.int32 if k == "top_k" else torch.float32)
                        for k, v in filters.items()}
                key = f"V={V} {str(dtype)[6:]} B={B} {name}"
                if ONLY and not any(key.startswith(prefix) for prefix in ONLY):
                    continue
                call = lambda: torch_backend.top_k_top_p_sample(logits, seeds, seeds, temperature, **args)
                tokens = call().cpu().numpy().tobytes()
                results[key] = [graph_us(call), hashlib.sha256(tokens).hexdigest()[:16]]
print(json.dumps(results))
"""


def run(code, *args, cache=None):
    env = dict(os.environ)
    if cache:
        env["TRITON_CACHE_DIR"] = cache
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-first-call", action="store_true")
    parser.add_argument("--first-call-only", action="store_true")
    parser.add_argument("--first-call-batches", default="1,256")
    parser.add_argument("--first-call-extra", action="store_true",
                        help="also top_k + top_p at B = 1 in float32 and FP64, and a second process's first call")
    parser.add_argument("--only", default="", help="';'-separated case prefixes, e.g. 'V=32000 float32 B=256'")
    args = parser.parse_args()
    checkouts = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    if not args.no_first_call:
        first_calls(checkouts, [int(b) for b in args.first_call_batches.split(",")], args.first_call_extra)
    if not args.first_call_only:
        device_times(checkouts, args)


def first_calls(checkouts, batches, extra):
    print("# first call, empty Triton cache, V = 151936 (seconds, the call to its end)", flush=True)
    cases = [(filters, B, "bfloat16", "0") for filters in ({"top_k": 50, "top_p": 0.9}, {"top_k": 50}, {"top_p": 0.9},
                                                         {"min_p": 0.05}) for B in batches]
    if extra:
        cases += [({"top_k": 50, "top_p": 0.9}, 1, "float32", "0"), ({"top_k": 50, "top_p": 0.9}, 1, "float32", "1")]
    for filters, B, dtype, fp64 in cases:
        caches = {name: tempfile.mkdtemp() for name in checkouts}
        row = {name: run(FIRST_CALL, path, str(B), json.dumps(filters), dtype, fp64, cache=caches[name])
               for name, path in checkouts.items()}
        line = (f"{json.dumps(filters):34s} B={B:<4d} {dtype:8s} fp64={fp64} base {row['base']:6.2f} s   "
                f"new {row['new']:6.2f} s")
        if extra and B == max(batches):  # a second process on the cache the first filled
            again = {name: run(FIRST_CALL, path, str(B), json.dumps(filters), dtype, fp64, cache=caches[name])
                     for name, path in checkouts.items()}
            line += f"   (a second process: base {again['base']:5.2f} s, new {again['new']:5.2f} s)"
        print(line, flush=True)


def device_times(checkouts, args):
    times = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            times[name].append(run(DEVICE_TIME, path, args.only))
    print("\n# device time (us, CUDA-graph replay median, the better of the rounds), tokens compared", flush=True)
    worst = 0.0
    for key in times["base"][0]:
        base = min(r[key][0] for r in times["base"])
        new = min(r[key][0] for r in times["new"])
        same = all(r[key][1] == times["base"][0][key][1] for r in times["base"] + times["new"])
        worst = max(worst, new / base)
        print(f"{key:44s} base {base:8.1f}  new {new:8.1f}  new/base {new / base:5.3f}  tokens {'equal' if same else 'DIFFER'}")
    print(f"worst new/base {worst:.3f}")


if __name__ == "__main__":
    main()
