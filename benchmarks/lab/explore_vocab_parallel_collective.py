"""Issue 42: where does vocab-parallel gumbel_sample's time go on two GPUs, beyond the one-shard op?

Per batch size (V = 262144 split in two, bf16 and float32), rank 0's device time (CUDA graphs replayed 50 times x 7,
median; both ranks replay the same graphs) of
  half        gumbel_sample on one shard alone (the target's reference)
  summary     the shard's first round alone (its summary kernels, no collective); where it is two launches,
              partial / summarize: each launch alone (summarize reads whatever the partials hold: a timing only)
  ag_small    NCCL all_gather_into_tensor of the [B, 6] int32 summaries alone
  ar_small    NCCL all_reduce (MAX) of a [B] int64 alone (the smallest one-collective alternative)
  ag_shards   NCCL all_gather_into_tensor of the [B, V / 2] shards alone (gather-then-sample's collective)
  combine     the combine round alone (from a stack of summaries)
  sharded     the whole op (summary + all-gather + combine)
  gather      all-gather of the shards + the copy into rows + the one-GPU op
NCCL's environment (NCCL_PROTO, NCCL_ALGO, ...) is the caller's: run the script once per setting.

    python3 benchmarks/lab/explore_vocab_parallel_collective.py [--batches 1,64,256] [--dtypes bfloat16,float32]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

def _time(fn, dist):
    """bench_vocab_parallel's device time a call, of a graph of one call (replayed 50 times x 7, the median)."""
    from bench_vocab_parallel import _capture, _time_graph_us

    return _time_graph_us(*_capture(lambda i: fn(), 1), dist)


def _rank(rank, world, args):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29671")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    import torch_backend
    from jsample import kernels
    from jsample.kernels.plan import Plan
    from torch_backend import _execute as execute
    from torch_backend._vocab_parallel import vocab_start

    device = torch.device("cuda", rank)
    shard_size = args.vocab // world
    for dtype in args.dtypes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            g = torch.Generator(device=device).manual_seed(batch + rank)
            shard = torch.randn((batch, shard_size), generator=g, device=device).mul_(3).to(getattr(torch, dtype))
            seeds = torch.arange(batch, device=device, dtype=torch.int64) * 7919 + 11
            positions = torch.arange(batch, device=device, dtype=torch.int64) + 100
            temperature = torch.full((batch,), 0.8, device=device)
            sharded_plan = execute.plan(kernels.plan_gumbel_sample_shard, (shard, seeds), device, None, fp64=False,
                                        draft=False, shards=world, start_align=16, row_valid=False)
            inputs = dict(logits=shard, seeds=seeds, positions=positions, temperature=temperature,
                          vocab_start=vocab_start(rank * shard_size, device))
            summary = torch.zeros((batch, 6), dtype=torch.int32, device=device)
            stack = torch.zeros((world, batch, 6), dtype=torch.int32, device=device)
            packed = torch.zeros((batch,), dtype=torch.int64, device=device)
            gathered = torch.empty((world, batch, shard_size), dtype=shard.dtype, device=device)
            whole = torch.empty((batch, args.vocab), dtype=shard.dtype, device=device)
            combine_inputs = dict(gathered_summary=stack)

            def gather():
                dist.all_gather_into_tensor(gathered, shard)
                whole.view(batch, world, shard_size).copy_(gathered.permute(1, 0, 2))
                torch_backend.gumbel_sample(whole, seeds, positions, temperature)

            cases = dict(
                half=lambda: torch_backend.gumbel_sample(shard, seeds, positions, temperature),
                summary=lambda: execute.run(sharded_plan.rounds[0], device, inputs),
                ag_small=lambda: dist.all_gather_into_tensor(stack, summary),
                ar_small=lambda: dist.all_reduce(packed, op=dist.ReduceOp.MAX),
                ag_shards=lambda: dist.all_gather_into_tensor(gathered, shard),
                combine=lambda: execute.run(sharded_plan.rounds[1], device, combine_inputs),
                sharded=lambda: torch_backend.gumbel_sample(shard, seeds, positions, temperature,
                                                            vocab_group=dist.group.WORLD),
                gather=gather)
            first = sharded_plan.rounds[0]
            if len(first.launches) == 2:
                partial = Plan(first.buffers, first.launches[:1], ("partial_score",), "partial alone")
                summarize = Plan(first.buffers, first.launches[1:], ("summary",), "summary alone")
                cases["partial"] = lambda: execute.run(partial, device, inputs)
                cases["summarize"] = lambda: execute.run(summarize, device, inputs)
            times = {name: _time(fn, dist) for name, fn in cases.items()}
            if rank == 0:
                print(f"{dtype:9s} B={batch:4d} " + " ".join(f"{k}={v:7.1f}" for k, v in times.items()), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    print("NCCL environment:", env, flush=True)
    mp.spawn(_rank, args=(2, args), nprocs=2)


if __name__ == "__main__":
    main()
