"""Eager torch calls: host wall time per call against one bare Triton launch, and against the op's
CUDA-graph device time, in one process (issue "one launch plan, two executors").

Rows (H200, same run):
* B = 1, V = 32000 (bf16 logits): wall time per eager call after warm-up, each op and each filter of
  the filtered benchmark, next to a bare Triton launch of a trivial kernel and torch.argmax; the
  ratio to the bare launch (median of 7 rounds, each timing the bare launch and the call next to
  each other).
* B = 256, V = 151936: eager wall time per call (back-to-back calls, one synchronize) against the
  CUDA-graph replay time of the same call.

    python benchmarks/bench_eager.py [--out DIR] [--git-sha SHA] [--calls N]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "min_p=0.05": dict(min_p=0.05),
           "top_k=50, top_p=0.9": dict(top_k=50, top_p=0.9)}


def wall_us(fn, calls: int) -> float:
    """Median over 5 rounds of host wall time per call of `calls` back-to-back calls (one sync)."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(rounds)[2]


def round_us(fn, calls: int) -> float:
    """Host wall time per call of `calls` back-to-back calls, one synchronize."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def against_bare(fn, bare, calls: int, rounds: int = 7):
    """(median ratio, median us of fn, median us of the bare launch) over `rounds` rounds, each timing
    `calls` calls of the bare launch then of fn: the host's speed drifts between rounds (seconds
    apart, by 10-40% on the H200 host), so each ratio compares times taken next to each other."""
    for _ in range(20):
        fn()
        bare()
    ratios, ops, bares = [], [], []
    for _ in range(rounds):
        b = round_us(bare, calls)
        o = round_us(fn, calls)
        ratios.append(o / b)
        ops.append(o)
        bares.append(b)
    middle = rounds // 2
    return sorted(ratios)[middle], sorted(ops)[middle], sorted(bares)[middle]


def problems(batch, vocab, k=4):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(batch * 7 + vocab)
    logits = (torch.randn(batch, vocab, device="cuda", generator=generator) * 3).to(torch.bfloat16)
    seeds = torch.arange(batch, device="cuda", dtype=torch.int64) * 1000003
    positions = torch.arange(batch, device="cuda", dtype=torch.int64) + 17
    temperature = torch.full((batch,), 0.8, device="cuda")
    target = torch.randn(batch, k + 1, vocab, device="cuda", generator=generator)
    draft = target[:, :k] + 0.5 * torch.randn(batch, k, vocab, device="cuda", generator=generator)
    drafts = draft.argmax(-1).to(torch.int32)
    num_drafts = torch.full((batch,), k, device="cuda", dtype=torch.int32)
    target_tokens = torch.randint(0, vocab, (batch, k + 1), device="cuda", dtype=torch.int32, generator=generator)
    rates = torch.full((k,), 0.7, device="cuda")
    return dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, target=target, draft=draft,
                drafts=drafts, num_drafts=num_drafts, target_tokens=target_tokens, rates=rates)


def calls_of(p):
    """name -> zero-argument eager call."""
    import torch_backend as tb

    calls = {"gumbel_sample": lambda: tb.gumbel_sample(p["logits"], p["seeds"], p["positions"], p["temperature"]),
             "gumbel_sample (T a Python float)": lambda: tb.gumbel_sample(p["logits"], p["seeds"], p["positions"], 0.8)}
    for name, filters in FILTERS.items():
        calls[f"top_k_top_p_sample {name}"] = (
            lambda filters=filters: tb.top_k_top_p_sample(p["logits"], p["seeds"], p["positions"], p["temperature"],
                                                          **filters))
    calls["rejection_sample K=4 draft logits"] = lambda: tb.rejection_sample(
        p["target"], p["drafts"], p["num_drafts"], p["seeds"], p["positions"], p["temperature"], draft_logits=p["draft"])
    calls["synthetic_rejection_sample K=4"] = lambda: tb.synthetic_rejection_sample(
        p["target_tokens"], p["drafts"], p["num_drafts"], p["seeds"], p["positions"], p["rates"])
    return calls


def bare_launch():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def trivial_kernel(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)

    x = torch.zeros(1, device="cuda")
    return lambda: trivial_kernel[(1,)](x)


TARGETS = {"gumbel_sample": 1.5, "gumbel_sample (T a Python float)": 1.5, "rejection_sample K=4 draft logits": 3.0,
           "synthetic_rejection_sample K=4": 1.5}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--git-sha", default="unknown")
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    import torch

    rows = []
    bare_call = bare_launch()
    bare = wall_us(bare_call, options.calls)
    p1 = problems(1, 32000)
    argmax = wall_us(lambda: torch.argmax(p1["logits"], -1), options.calls)
    rows.append(dict(case="bare Triton launch (trivial kernel)", B=1, V=32000, eager_us=bare, ratio=1.0))
    rows.append(dict(case="torch.argmax", B=1, V=32000, eager_us=argmax, ratio=argmax / bare))
    for name, call in calls_of(p1).items():
        ratio, us, bare_us = against_bare(call, bare_call, options.calls)
        target = TARGETS.get(name, 3.0)
        rows.append(dict(case=name, B=1, V=32000, eager_us=us, bare_us=bare_us, ratio=ratio, target=target,
                         holds=ratio <= target))
        print(f"{name:45s} B=1 V=32000 eager {us:8.1f} us  {ratio:5.2f}x bare ({bare_us:.1f} us)", flush=True)
    p256 = problems(256, 151936)
    for name, call in calls_of(p256).items():
        if "Python float" in name:
            continue
        us = wall_us(call, max(20, options.calls // 10))
        graph = harness.time_graph_us(lambda i, call=call: call())
        rows.append(dict(case=name, B=256, V=151936, eager_us=us, graph_us=graph, ratio=us / graph, target=1.1,
                         holds=us / graph <= 1.1))
        print(f"{name:45s} B=256 V=151936 eager {us:8.1f} us  graph {graph:8.1f} us  {us / graph:5.2f}x", flush=True)
    env = harness.environment(options.git_sha)
    harness.write_results(options.out, "eager", env, rows,
                          ["case", "B", "V", "eager_us", "bare_us", "graph_us", "ratio", "target", "holds"],
                          notes="B = 1: eager wall time per call / one bare Triton launch of a trivial kernel, same "
                                "process: the median over 7 rounds of the ratio of times taken next to each other. B = 256: eager wall time per call / CUDA-graph replay time of the call.")


if __name__ == "__main__":
    main()
