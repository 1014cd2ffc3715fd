"""Issue 41 (rows whose kept set is past the 64-logit list take token_logprobs_kernel's passes: milliseconds): what
would the vocab-parallel token_logprobs' rounds cost on one device, as one shard (their searches run many programs
a row), and do they give one-GPU token_logprobs' numbers bit for bit?

The rounds of `plan_token_logprobs_shard` with a single shard (start 0, the whole vocabulary) run one after another,
each round's record "all-gathered" as a stack of one (plan.run_rounds). Per case it prints whether every Logprobs
field equals torch_backend.token_logprobs' bit for bit, and on a GPU the device time (CUDA graph, median) of:
token_logprobs (at 330e65a, where this was run: the list, then the passes for the other rows; since 55f232c the
pending rows' searches), the single-shard rounds on every row, and the same rounds with only the rows whose top-p
kept set is past the list as valid rows (row flags: the others padding, a flag read each): what a per-row route
would cost those rows.

    python benchmarks/lab/explore_single_shard_logprobs.py            (a GPU: V = 151936, B = 1, 64, 256)
    python benchmarks/lab/explore_single_shard_logprobs.py --cpu      (the interpreter: V = 3000, B = 4; bits only)
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "..")]

FIELDS = ("raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs")


def single_shard(logits, tokens, temperature, top_p, valid=None):
    """token_logprobs(top_p=...) through the vocab-parallel rounds of one shard: the seven fields."""
    import torch

    from jsample import kernels
    from jsample.kernels.plan import run_rounds
    from torch_backend import _execute as execute
    from torch_backend.logprobs import num_top_tensor

    device = logits.device
    vocab = logits.shape[1]
    sharded = execute.plan(kernels.plan_token_logprobs_shard, (logits,), device, None, vocab=vocab, starts=(0,),
                           start_align=kernels.start_alignment((0,)), num_top=0, row_valid=valid is not None,
                           has_top_k=False, has_top_p=True, has_min_p=False, fp64=False, threshold_given=False)
    inputs = dict(logits=logits, tokens=tokens, temperature=temperature, top_p=top_p,
                  vocab_start=torch.zeros((1,), dtype=torch.int32, device=device),
                  num_top=num_top_tensor(0, device))
    if valid is not None:
        inputs["row_valid"] = valid
    return run_rounds(sharded.rounds, lambda plan, env: execute.run(plan, device, env),
                      lambda record: record.unsqueeze(0), inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    import torch

    import torch_backend
    from logit_families import make_logits

    device = torch.device("cpu" if args.cpu else "cuda")
    vocab, batches = (3000, (4,)) if args.cpu else (151936, (1, 64, 256))
    g = torch.Generator(device=device).manual_seed(0)
    for family in ("flat", "typical"):
        for dtype in (torch.float32, torch.bfloat16):
            x_all = make_logits(family, max(batches), vocab, g, device).to(dtype)
            for batch in batches:
                x = x_all[:batch].contiguous()
                seeds = torch.arange(batch, device=device, dtype=torch.int64)
                t = torch.ones((batch,), device=device)
                top_p = torch.full((batch,), 0.9, device=device)
                tokens = torch_backend.top_k_top_p_sample(x, seeds, seeds, t, top_p=0.9)
                want = torch_backend.token_logprobs(x, tokens, t, top_p=0.9)
                got = single_shard(x, tokens, t, top_p)
                equal = all(torch.equal(getattr(want, name).nan_to_num(0.5), field.nan_to_num(0.5))
                            for name, field in zip(FIELDS, got))
                p = torch.softmax(x.float(), dim=1).sort(dim=1, descending=True).values
                past_list = ((p.cumsum(1) - p) < 0.9).sum(1) > 64
                flags = past_list.to(torch.uint8)
                flagged = single_shard(x, tokens, t, top_p, flags)
                rows = past_list.nonzero()[:, 0]
                flagged_equal = all(torch.equal(getattr(want, name)[rows].nan_to_num(0.5), field[rows].nan_to_num(0.5))
                                    for name, field in zip(FIELDS, flagged))
                line = (f"{family:7s} {str(dtype)[6:]:8s} B={batch:3d}: bits equal {equal} (flagged rows only: "
                        f"{flagged_equal}); rows past the list {int(past_list.sum())} of {batch}")
                if not args.cpu:
                    import harness

                    one_gpu = harness.time_graph_us(lambda i: torch_backend.token_logprobs(x, tokens, t, top_p=0.9))
                    every_row = harness.time_graph_us(lambda i: single_shard(x, tokens, t, top_p))
                    those_rows = harness.time_graph_us(lambda i: single_shard(x, tokens, t, top_p, flags))
                    line += (f"; token_logprobs {one_gpu:8.1f} us, single-shard rounds {every_row:8.1f} us, "
                             f"on the rows past the list only {those_rows:8.1f} us")
                print(line, flush=True)


if __name__ == "__main__":
    main()
