"""Vocab-parallel top_k_top_p_sample's rounds on ONE GPU (issue 42): the shards' rounds run in lock step on the same
device (each all-gather a torch.stack), each round timed with CUDA events (median of 20, after a warm-up), next to
the one-GPU op on the whole rows and on one shard (eager), and the whole lock-step sequence captured as one CUDA
graph (divided by the shards: a shard's kernels without launch gaps). No collective is measured: this is the kernels' share of a
sharded call (each shard's rounds, so a two-GPU call's device time is about one shard's column plus the
collectives). Tokens of the rounds are checked against the one-GPU op.

    python3 benchmarks/lab/explore_vocab_parallel_rounds.py [--vocab 262144] [--batches 1,64,256] [--shards 2]
"""

import argparse
import statistics

import torch

import torch_backend
from jsample import kernels
from torch_backend import _execute as execute


def _timed(fn, repeats=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args()
    device = torch.device("cuda")
    for dtype in args.dtypes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            width = args.vocab // args.shards
            x = torch.randn((batch, args.vocab), device=device).mul_(3).to(getattr(torch, dtype))
            seeds = torch.arange(batch, device=device) * 7919 + 11
            positions = torch.arange(batch, device=device) + 100
            temperature = torch.full((batch,), 0.8, device=device)
            filters = dict(top_k=torch.full((batch,), 50, device=device), top_p=torch.full((batch,), 0.9, device=device))
            shards = [x[:, i * width:(i + 1) * width].contiguous() for i in range(args.shards)]
            plans = [execute.plan(kernels.plan_top_k_top_p_shard, (s, seeds), device, None, has_top_k=True,
                                  has_top_p=True, has_min_p=False, fp64=False, shards=args.shards, start_align=16)
                     for s in shards]
            envs = [dict(logits=s, seeds=seeds, positions=positions, temperature=temperature,
                         vocab_start=torch.full((1,), i * width, dtype=torch.int32, device=device), **filters)
                    for i, s in enumerate(shards)]
            rounds = len(plans[0].rounds)
            per_round = []
            results = [None] * args.shards
            for r in range(rounds):
                def run_round():
                    for i, (plan, env) in enumerate(zip(plans, envs)):
                        results[i] = execute.run(plan.rounds[r], device, env)
                per_round.append(_timed(run_round) / args.shards)
                if r < rounds - 1:
                    gathered = torch.stack([out[0] for out in results])
                    for plan, env, out in zip(plans, envs, results):
                        env["gathered_" + plan.rounds[r].outputs[0]] = gathered
                        env.update((n + "_in", v) for n, v in zip(plan.rounds[r].outputs[1:], out[1:]))
            def all_rounds():  # every shard's rounds in lock step, the gathers as stacks: one CUDA graph
                local = [dict(env) for env in envs]
                outs = [None] * args.shards
                for r in range(rounds):
                    outs = [execute.run(plan.rounds[r], device, env) for plan, env in zip(plans, local)]
                    if r < rounds - 1:
                        gathered = torch.stack([out[0] for out in outs])
                        for plan, env, out in zip(plans, local, outs):
                            env["gathered_" + plan.rounds[r].outputs[0]] = gathered
                            env.update((n + "_in", v) for n, v in zip(plan.rounds[r].outputs[1:], out[1:]))
                return outs

            all_rounds()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                all_rounds()
            graphed = _timed(graph.replay) / args.shards
            want = torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters)
            whole = _timed(lambda: torch_backend.top_k_top_p_sample(x, seeds, positions, temperature, **filters))
            half = _timed(lambda: torch_backend.top_k_top_p_sample(shards[0], seeds, positions, temperature, **filters))
            equal = all(torch.equal(out[0], want) for out in results)
            print(f"{dtype} B={batch} V={args.vocab}/{args.shards}: rounds (us a shard) "
                  + " ".join(f"{t:.1f}" for t in per_round)
                  + f" | sum {sum(per_round):.1f} | a shard's rounds as a CUDA graph {graphed:.1f} | one-GPU op whole {whole:.1f} half {half:.1f} | tokens equal {equal}",
                  flush=True)


if __name__ == "__main__":
    main()
