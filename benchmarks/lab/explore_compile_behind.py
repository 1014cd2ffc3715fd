"""Issue 39: a first top_k_top_p_sample call at B <= 2 with the one-launch kernel compiled behind the launches' plan
(torch_backend/_compile_behind.py), against the one-launch plan compiled in the foreground (JSAMPLE_COMPILE_BEHIND=0).

    python3 benchmarks/lab/explore_compile_behind.py [--reps 2]

Every case in fresh processes on an empty Triton cache (a temporary directory each), torch frontend, one GPU: the
first call's seconds (from the call to its tokens on the host; the inputs made before, CUDA's context up), the
compilations it made (triton.knobs.runtime.jit_post_compile_hook), then how long the compile behind it took to end
(`_compile_behind.wait()`), and a second process on the first's cache (the marker: the one-launch plan at once).
Tokens of 16 calls are compared between all of them (the stand-in's and the one-launch plan's).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import torch, triton
import torch_backend
from torch_backend import _compile_behind
case = json.loads(sys.argv[1])
compiles = []
triton.knobs.runtime.jit_post_compile_hook = lambda *a, **k: compiles.append(1)
device = torch.device("cuda")
batch, vocab = case["batch"], case["vocab"]
dtype = getattr(torch, case["dtype"])
g = torch.Generator(device=device).manual_seed(batch)
logits = (torch.randn((batch, vocab), generator=g, device=device) * 3).to(dtype)
seeds = torch.arange(batch, device=device, dtype=torch.int64) + 7
positions = torch.arange(batch, device=device, dtype=torch.int64)
temperature = torch.full((batch,), 0.8, device=device)
filters = {}
if "top_k" in case["filters"]:
    filters["top_k"] = torch.full((batch,), 50, device=device, dtype=torch.int64)
if "top_p" in case["filters"]:
    filters["top_p"] = torch.full((batch,), 0.9, device=device)
if "min_p" in case["filters"]:
    filters["min_p"] = torch.full((batch,), 0.05, device=device)
def call(i):
    return torch_backend.top_k_top_p_sample(logits, seeds, positions + i, temperature, fp64=case["fp64"], **filters)
torch.cuda.synchronize()
ready = time.perf_counter() - start
t0 = time.perf_counter()
tokens = [call(0).tolist()]
first = time.perf_counter() - t0
first_compiles = len(compiles)
state = sorted(set(s for *_, s in _compile_behind.states()))
t0 = time.perf_counter()
_compile_behind.wait()
behind = time.perf_counter() - t0
tokens += [call(i).tolist() for i in range(1, 16)]
print(json.dumps(dict(ready=ready, first=first, compiles=first_compiles, state=state, behind=behind,
                      later_compiles=len(compiles) - first_compiles, tokens=tokens,
                      after=sorted(set(s for *_, s in _compile_behind.states())))))
"""


def child(case: dict, cache: str, behind: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(ROOT), TRITON_CACHE_DIR=cache,
               JSAMPLE_COMPILE_BEHIND="1" if behind else "0")
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], capture_output=True, text=True, env=env,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().split("\n")[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--cases", default="all")
    args = parser.parse_args()
    cases = [dict(filters=f, batch=b, vocab=151936, dtype="bfloat16", fp64=False)
             for f in ("top_k", "top_k+top_p", "top_p", "min_p") for b in (1, 2)]
    cases += [dict(filters="top_k+top_p", batch=1, vocab=32000, dtype="float32", fp64=False),
              dict(filters="top_k+top_p", batch=1, vocab=151936, dtype="bfloat16", fp64=True)]
    if args.cases != "all":
        cases = [cases[int(i)] for i in args.cases.split(",")]
    print("case | first call behind (s) [compiles] | compile behind it then (s) | second process (s) | "
          "first call in the foreground (s) [compiles] | tokens equal")
    for case in cases:
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory() as on, tempfile.TemporaryDirectory() as off:
                cold = child(case, on, True)
                warm = child(case, on, True)
                fore = child(case, off, False)
            equal = cold["tokens"] == warm["tokens"] == fore["tokens"]
            name = f"{case['filters']} B={case['batch']} V={case['vocab']} {case['dtype']}" + \
                (" fp64" if case["fp64"] else "")
            print(f"{name} | {cold['first']:.2f} [{cold['compiles']}] {cold['state']} | {cold['behind']:.2f} "
                  f"(later compiles {cold['later_compiles']}, then {cold['after']}) | {warm['first']:.2f} "
                  f"[{warm['compiles']}] {warm['state']} | {fore['first']:.2f} [{fore['compiles']}] | {equal}",
                  flush=True)


if __name__ == "__main__":
    main()
