"""Vocab-parallel sampling on two GPUs (issue 42): logits split along the vocabulary, one shard a GPU (NCCL).

Per op (gumbel_sample; top_k_top_p_sample with top_k=50, top_p=0.9) and batch size, in one run, rank 0's device
time of
  sharded    op(shard, ..., vocab_group=WORLD): gumbel: each GPU scores its shard, one all-gather of the B x 6
             int32 summaries, the token on every GPU; top_k_top_p (top_k a [B] tensor): the kept set's search
             rounds, an all-gather of integer sums each (jsample/kernels/vocab_parallel_filtered.py), then
             gumbel's; top_k_top_p_int (top_k the Python int 50): each shard's own top-k search and list,
             one all-gather of the lists, the token on every GPU;
  gather     the engines' way: NCCL all_gather of the shards and the copy into [B, V] rows (vLLM's
             tensor_model_parallel_all_gather along the vocabulary), then gumbel_sample on the whole rows;
  half       gumbel_sample of one shard alone (no collective): the one-shard op on half the vocabulary;
and for token_logprobs ("logprobs", "logprobs_top20" with num_top=20: tokens drawn uniformly, far down the
rows, so that the rank counts read most blocks) and gumbel_sample(return_logprobs=True) ("gumbel_logprobs": the
sampled tokens' logprobs), sharded through two more all-gathers of per-row records
(jsample/kernels/vocab_parallel_logprobs.py); with filters, "logprobs_filtered" (token_logprobs of uniform tokens
with top_k = 50 and top_p = 0.9 as [B] tensors: the kept set's search rounds first) and "top_k_top_p_logprobs"
(top_k_top_p_sample(top_k=50, top_p=0.9, return_logprobs=True): the lists' tokens, then their filtered logprobs);
plus the bytes each GPU receives. Every variant is captured as one CUDA graph of a call on each rotated input set
(so that repeated calls do not measure the L2 cache) and replayed a fixed number of times on both ranks
(collectives must match), timed with CUDA events, divided by the calls; the median of 7 repeats. (Until 5bc34d8 a
graph a call was replayed in turn: at small batches the host's graph launches, not the GPU, set the pace, 8-25 us a
call more with NCCL's kernels in the graph; benchmarks/lab/results/vocab_parallel_timing_h200x2.txt.) Tokens of
sharded and gather are checked equal.

    python benchmarks/bench_vocab_parallel.py --out DIR [--vocab 262144] [--batches 1,64,256] [--temperature 0.8]
                                              [--name vocab_parallel]
                                              [--ops ...,rejection,rejection_one_hot]
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

REPEATS, REPLAYS = 7, 50


def _time_graph_us(graph, calls, dist):
    """Device time a call: `graph` (`calls` calls) replayed REPLAYS times back to back between two CUDA events, on
    every rank at once (a barrier first), divided by the calls; the median of REPEATS. The calls are in one graph so
    that the host's graph launches (tens of microseconds with NCCL's kernels in them) never pace the GPU."""
    import torch

    times = []
    for _ in range(REPEATS):
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (REPLAYS * calls))
    return statistics.median(times)


def _capture(fn, rotate):
    """(one CUDA graph of fn(0), .., fn(rotate - 1): a call on each rotated input set, so that the L2 cache does not
    hold a call's inputs, the number of calls)."""
    import torch

    for i in range(rotate):
        fn(i)  # compiles, and asks the group its shard sizes, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(rotate):
            fn(i)
    return graph, rotate


def _same(a, b) -> bool:
    """Outputs equal bit for bit (tensors, or tuples of them; NaN where the other has NaN)."""
    import torch

    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    if a.dtype.is_floating_point:
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()]))
    return bool(torch.equal(a, b))


def _time_and_compare(sharded, gather, half, rotate, dist, out) -> tuple:
    """({variant: device time}, whether sharded's outputs equal gather's): each variant captured as CUDA graphs (one
    per rotated input set) and replayed on every rank, then sharded and gather run once more to compare."""
    import torch

    times = {name: _time_graph_us(*_capture(fn, rotate), dist)
             for name, fn in (("sharded", sharded), ("gather", gather), ("half", half))}
    sharded(0)
    gather(0)
    torch.cuda.synchronize()
    return times, _same(out["sharded"], out["gather"])


def _result_row(op, dtype, batch, vocab, world, times, collectives, words, gathered_bytes, equal) -> dict:
    """A results row: the variants' times and ratios, the collectives and the bytes each rank receives (`words`
    int32 words a row of the sharded records, `gathered_bytes` a row of the gathered shards)."""
    return dict(op=op, dtype=dtype, batch=batch, vocab=vocab, shards=world,
                sharded_us=round(times["sharded"], 2), gather_then_sample_us=round(times["gather"], 2),
                half_vocab_op_us=round(times["half"], 2),
                sharded_vs_gather=round(times["sharded"] / times["gather"], 3),
                sharded_vs_half=round(times["sharded"] / times["half"], 3), collectives=collectives,
                bytes_in_sharded=(world - 1) * batch * words * 4, bytes_in_gather=(world - 1) * batch * gathered_bytes,
                tokens_equal=equal)


def _rank(rank, world, args, queue):
    try:
        _measure(rank, world, args, queue)
    except BaseException:  # to the parent at once: the other rank may wait in a collective for good
        import traceback
        queue.put(traceback.format_exc())


def _measure(rank, world, args, queue):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    import torch_backend
    from jsample import kernels
    from torch_backend import _execute as execute

    device = torch.device("cuda", rank)
    vocab, rows = args.vocab, []
    shard_size = vocab // world
    for op, dtype in [(op, dtype) for op in args.ops.split(",") for dtype in args.dtypes.split(",")]:
        sample = getattr(torch_backend, "gumbel_sample" if op.startswith("gumbel") else "top_k_top_p_sample")
        if op.startswith("rejection"):
            rows.extend(_measure_rejection(op, dtype, args, rank, world, device))
            continue
        for batch in [int(b) for b in args.batches.split(",")]:
            torch_dtype = getattr(torch, dtype)
            nbytes = batch * shard_size * torch_dtype.itemsize
            rotate = harness.copies_needed(nbytes)
            generator = torch.Generator(device=device).manual_seed(1000 * batch + rank)
            shards = [torch.randn((batch, shard_size), generator=generator, device=device).mul_(3).to(torch_dtype)
                      for _ in range(rotate)]
            seeds = torch.arange(batch, device=device, dtype=torch.int64) * 7919 + 11
            positions = torch.arange(batch, device=device, dtype=torch.int64) + 100
            temperature = torch.full((batch,), args.temperature, device=device)
            filters = {}
            if op == "gumbel_logprobs":
                filters = dict(return_logprobs=True)
            elif op == "top_k_top_p_logprobs":  # the lists' tokens, then their filtered token_logprobs
                filters = dict(top_k=50, top_p=torch.full((batch,), 0.9, device=device), return_logprobs=True)
            elif op in ("logprobs", "logprobs_top20", "logprobs_filtered"):  # uniform global tokens, on both ranks
                token_generator = torch.Generator(device=device).manual_seed(batch)
                global_tokens = torch.randint(0, vocab, (batch,), generator=token_generator, device=device)
                num_top = 20 if op == "logprobs_top20" else 0
                kept_by = dict(top_k=torch.full((batch,), 50, device=device),
                               top_p=torch.full((batch,), 0.9, device=device)) if op == "logprobs_filtered" else {}

                def sample(logits, seeds, positions, temperature, vocab_group=None):
                    if vocab_group is None and logits.shape[1] == shard_size:  # half: the tokens within the shard
                        return torch_backend.token_logprobs(logits, global_tokens % shard_size, temperature,
                                                            num_top=num_top, **kept_by)
                    return torch_backend.token_logprobs(logits, global_tokens, temperature, num_top=num_top,
                                                        vocab_group=vocab_group, **kept_by)
            elif op != "gumbel":  # per-row top_k (the search rounds), or the Python int 50 (the shards' lists)
                filters = dict(top_k=torch.full((batch,), 50, device=device) if op == "top_k_top_p" else 50,
                               top_p=torch.full((batch,), 0.9, device=device))
            gathered = torch.empty((world, batch, shard_size), dtype=torch_dtype, device=device)
            whole = torch.empty((batch, vocab), dtype=torch_dtype, device=device)
            out = {}

            def sharded(i):
                out["sharded"] = sample(shards[i], seeds, positions, temperature, vocab_group=dist.group.WORLD,
                                        **filters)

            def gather(i):
                dist.all_gather_into_tensor(gathered, shards[i])
                whole.view(batch, world, shard_size).copy_(gathered.permute(1, 0, 2))
                out["gather"] = sample(whole, seeds, positions, temperature, **filters)

            def half(i):
                out["half"] = sample(shards[i], seeds, positions, temperature, **filters)

            times, equal = _time_and_compare(sharded, gather, half, rotate, dist, out)
            rounds, words = 1, 6
            if "logprobs" in op:  # token_logprobs' records (after the sampler's)
                filtered = op in ("logprobs_filtered", "top_k_top_p_logprobs")
                logprobs_plan = execute.plan(kernels.plan_token_logprobs_shard, (shards[0],), device, None,
                                             vocab=vocab, starts=tuple(r * shard_size for r in range(world)),
                                             start_align=16, num_top=20 if op == "logprobs_top20" else 0,
                                             has_top_k=filtered, has_top_p=filtered,
                                             threshold_given=op == "top_k_top_p_logprobs")
                records = [plan.buffer(plan.outputs[0]) for plan in logprobs_plan.rounds[:-1]]
                if op == "top_k_top_p_logprobs":  # the lists' record first
                    records += [execute.plan(kernels.plan_top_k_top_p_shard, (shards[0], seeds), device, None,
                                             has_top_k=True, has_top_p=True, has_min_p=False, fp64=False,
                                             shards=world, start_align=16, list_capacity=64).rounds[0].buffer("record")]
                rounds = len(records) + (op == "gumbel_logprobs")
                words = sum(record.shape[1] for record in records) + 6 * (op == "gumbel_logprobs")
            elif op != "gumbel":  # the all-gathered records' int32 words a row, read from the plan
                sharded_plan = execute.plan(kernels.plan_top_k_top_p_shard, (shards[0], seeds), device, None,
                                            has_top_k=True, has_top_p=True, has_min_p=False, fp64=False, shards=world,
                                            start_align=16, list_capacity=kernels.shard_list_capacity(filters["top_k"]))
                records = [plan.buffer(plan.outputs[0]) for plan in sharded_plan.rounds[:-1]]
                rounds, words = len(records), sum(record.shape[1] for record in records)
            rows.append(_result_row(op, dtype, batch, vocab, world, times, rounds, words,
                                    shard_size * torch_dtype.itemsize, equal))
            if rank == 0:
                print(rows[-1], flush=True)
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def _measure_rejection(op, dtype, args, rank, world, device) -> list:
    """rejection_sample (K = 4, every request drafting 4; "rejection": f32 draft logits near the target's,
    "rejection_one_hot": one-hot drafts), per batch size: sharded (vocab_group), gather (all-gather the target
    and draft shards, then the one-GPU op on whole rows) and half (the one-GPU op on one shard alone)."""
    import torch
    import torch.distributed as dist

    import torch_backend
    from jsample import kernels
    from torch_backend import _execute as execute

    k, vocab, rows = 4, args.vocab, []
    shard_size = vocab // world
    torch_dtype = getattr(torch, dtype)
    for batch in [int(b) for b in args.batches.split(",")]:
        nbytes = batch * (k + 1) * shard_size * torch_dtype.itemsize
        rotate = harness.copies_needed(nbytes)
        generator = torch.Generator(device=device).manual_seed(1000 * batch + rank)
        targets = [torch.randn((batch, k + 1, shard_size), generator=generator, device=device).mul_(3)
                   for _ in range(rotate)]
        drafts_logits = [t[:, :k] + 0.3 * torch.randn((batch, k, shard_size), generator=generator, device=device)
                         for t in targets] if op == "rejection" else [None] * rotate
        targets = [t.to(torch_dtype) for t in targets]
        # the same global draft tokens on both ranks
        draft_generator = torch.Generator(device=device).manual_seed(batch)
        drafts = torch.randint(0, vocab, (batch, k), generator=draft_generator, device=device)
        requests = dict(num_draft_tokens=torch.full((batch,), k, device=device),
                        seeds=torch.arange(batch, device=device, dtype=torch.int64) * 7919 + 11,
                        positions=torch.arange(batch, device=device, dtype=torch.int64) + 100,
                        temperature=torch.full((batch,), args.temperature, device=device))
        whole = torch.empty((batch, k + 1, vocab), dtype=torch_dtype, device=device)
        gathered = torch.empty((world, batch, k + 1, shard_size), dtype=torch_dtype, device=device)
        whole_draft = torch.empty((batch, k, vocab), device=device)
        gathered_draft = torch.empty((world, batch, k, shard_size), device=device)
        out = {}

        def call(target, draft, token_ids, **extra):
            return torch_backend.rejection_sample(target, token_ids, requests["num_draft_tokens"], requests["seeds"],
                                                  requests["positions"], requests["temperature"], draft_logits=draft,
                                                  **extra)

        def sharded(i):
            out["sharded"] = call(targets[i], drafts_logits[i], drafts, vocab_group=dist.group.WORLD)

        def gather(i):
            dist.all_gather_into_tensor(gathered, targets[i].contiguous())
            whole.view(batch, k + 1, world, shard_size).copy_(gathered.permute(1, 2, 0, 3))
            draft = None
            if drafts_logits[i] is not None:
                dist.all_gather_into_tensor(gathered_draft, drafts_logits[i].contiguous())
                whole_draft.view(batch, k, world, shard_size).copy_(gathered_draft.permute(1, 2, 0, 3))
                draft = whole_draft
            out["gather"] = call(whole, draft, drafts)

        def half(i):
            out["half"] = call(targets[i], drafts_logits[i], drafts % shard_size)

        times, equal = _time_and_compare(sharded, gather, half, rotate, dist, out)
        starts = tuple(r * shard_size for r in range(world))
        plan = execute.plan(kernels.plan_rejection_sample_shard, (targets[0], drafts_logits[0], requests["seeds"]),
                            device, None, strict=False, fp64=False, vocab=vocab, starts=starts,
                            start_align=kernels.start_alignment(starts))
        records = [p.buffer(p.outputs[0]) for p in plan.rounds[:-1]]
        words = sum(r.shape[1] * (r.shape[2] if len(r.shape) > 2 else 1) for r in records)
        gathered_bytes = (k + 1) * shard_size * torch_dtype.itemsize + (k * shard_size * 4 if op == "rejection" else 0)
        rows.append(_result_row(op, dtype, batch, vocab, world, times, len(records), words, gathered_bytes, equal))
        if rank == 0:
            print(rows[-1], flush=True)
    return rows


def main():
    import torch
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--git-sha", default="")
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--temperature", type=float, default=0.8)  # every row's
    parser.add_argument("--name", default="vocab_parallel")  # the results files' name
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--ops", default="gumbel,top_k_top_p,top_k_top_p_int,logprobs,logprobs_top20,gumbel_logprobs")
    parser.add_argument("--port", type=int, default=29650)
    args = parser.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit("needs two or more GPUs")
    world = 2
    context = mp.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_rank, args=(r, world, args, queue)) for r in range(world)]
    for w in workers:
        w.start()
    rows = queue.get(timeout=900)
    if isinstance(rows, str):
        for w in workers:
            w.terminate()
        raise SystemExit(rows)
    for w in workers:
        w.join()
    columns = ["op", "dtype", "batch", "vocab", "shards", "sharded_us", "gather_then_sample_us", "half_vocab_op_us",
               "sharded_vs_gather", "sharded_vs_half", "collectives", "bytes_in_sharded", "bytes_in_gather", "tokens_equal"]
    notes = ("Two GPUs, NCCL, each variant one CUDA graph of a call on each rotated input set, replayed 50 times x 7 "
             "(median), rank 0's device time a call. "
             "gather = all_gather_into_tensor of the shards + the copy into [B, V] rows + the op; "
             "half = the op on one shard alone. top_k_top_p: top_k=50, top_p=0.9 on every row (top_k a [B] tensor: "
             "the search rounds; top_k_top_p_int: top_k the Python int 50: the shards' lists, one all-gather). "
             "logprobs: token_logprobs of uniformly drawn tokens (two all-gathers; _top20: num_top=20); "
             "gumbel_logprobs: gumbel_sample(return_logprobs=True) (three; gather and half: the fused single read); "
             "logprobs_filtered: token_logprobs with top_k=50, top_p=0.9 ([B] tensors: the searches, then three); "
             "top_k_top_p_logprobs: top_k_top_p_sample(top_k=50, top_p=0.9, return_logprobs=True); "
             "rejection / rejection_one_hot (in --ops): rejection_sample, K = 4, f32 draft logits or one-hot drafts "
             "(gather: the target's and the draft's shards).")
    if args.out:
        harness.write_results(args.out, args.name, harness.environment(args.git_sha), rows, columns,
                              f"Every row's temperature {args.temperature}. " + notes)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
