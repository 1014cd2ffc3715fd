"""Shared by the lab's A/B scripts that compare outputs as well as times (ab_single_read.py, ab_top_list.py):
`CASE_PRELUDE` (each run's process: the checkout first on the path, `graph_us` and `digest`), `run_all` (a
process a run, each printing json [times, digests] last) and `print_table` (times, ratios to the first run,
whether each run's outputs equal the first's)."""

import json
import subprocess
import sys

CASE_PRELUDE = r"""
import hashlib, json, os, sys
path = sys.argv[1]
sys.path.insert(0, path)
sys.path.insert(0, path + "/benchmarks")
import torch, triton

def graph_us(fn):
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=10, rep=100, return_mode="median") * 1e3

def digest(out):
    h = hashlib.sha256()
    for part in (out if isinstance(out, tuple) else (out,)):
        for field in (part if isinstance(part, tuple) else (part,)):
            h.update(field.cpu().numpy().tobytes())
    return h.hexdigest()[:12]
"""


def run_all(case_code: str, runs: dict) -> dict:
    """{label: [times, digests]}: each run ({label: argv strings, its checkout first}) in its own process."""
    results = {}
    for label, argv in runs.items():
        out = subprocess.run([sys.executable, "-c", CASE_PRELUDE + case_code, *argv], capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{argv} failed:\n{out.stderr[-3000:]}")
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
    return results


def print_table(results: dict, title: str, case_width: int = 48, column_width: int = 16) -> None:
    labels = list(results)
    print(f"{title:{case_width}s}" + "".join(f"{label[-(column_width - 2):]:>{column_width}s}" for label in labels)
          + "".join(f"{'/ first':>9s}" for _ in labels[1:]) + "  outputs equal to the first run's")
    for case, first in results[labels[0]][0].items():
        times = [results[label][0][case] for label in labels]
        same = ["=" if results[label][1][case] == results[labels[0]][1][case] else "differ" for label in labels[1:]]
        print(f"{case:{case_width}s}" + "".join(f"{t:{column_width}.1f}" for t in times)
              + "".join(f"{t / first:9.3f}" for t in times[1:]) + "  " + " ".join(same))
