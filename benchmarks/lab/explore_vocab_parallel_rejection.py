"""Vocab-parallel rejection_sample on one GPU (issue 42; no two-GPU machine lent): the device time of one shard's
rounds, the all-gathers left out, against the one-GPU op on the shard's half of the vocabulary ("half": the
issue's one-shard op) and on the whole vocabulary.

Both shards' rounds run in lock step in one process (each all-gather the stack of the shards' records, as
tests/test_vocab_parallel.py runs them); their tokens are checked equal to the unsharded call's. Then shard 0's
rounds, with those gathered records bound, are captured as one CUDA graph and replayed (harness.time_graph_us);
the collectives (NCCL all-gathers of the records: 3-4 a call) are not in the time.

    python benchmarks/lab/explore_vocab_parallel_rejection.py [--vocabs 262144,151936] [--batches 1,64,256] [--k 4]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import harness  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocabs", default="262144,151936")
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--kernels", action="store_true", help="each kernel's device time (torch.profiler)")
    args = parser.parse_args()
    import torch

    import torch_backend
    from jsample import kernels
    from torch_backend import _execute as execute

    device = torch.device("cuda")
    k = args.k
    cells = [(vocab, int(b)) for vocab in (int(v) for v in args.vocabs.split(",")) for b in args.batches.split(",")]
    for vocab, batch in cells:
        generator = torch.Generator(device=device).manual_seed(batch)
        x = torch.randn((batch, k + 1, vocab), device=device, generator=generator) * 3
        y = x[:, :k] + 0.3 * torch.randn((batch, k, vocab), device=device, generator=generator)
        x = x.to(torch.bfloat16)
        drafts = y.argmax(2)
        values = dict(draft_tokens=drafts, num_draft_tokens=torch.full((batch,), k, device=device),
                      seeds=torch.arange(batch, device=device) * 7919, positions=torch.arange(batch, device=device),
                      temperature=torch.full((batch,), 0.8, device=device))
        for draft in (y, None):
            label = "draft logits" if draft is not None else "one-hot"
            # equal halves (at V = 151936 the split cuts a block: the heads round), and a split at an odd multiple
            # of 4 (bf16 rows then lose the unsharded call's vector width: every owned block copied)
            for sizes in ([vocab // 2, vocab - vocab // 2], [vocab // 2 - 4, vocab - vocab // 2 + 4]):
                starts = (0, sizes[0])
                shards = []
                for start, size in zip(starts, sizes):
                    env = dict(values, target_logits=x[:, :, start:start + size].contiguous(),
                               vocab_start=torch.tensor([start], dtype=torch.int32, device=device),
                               shard_starts=torch.tensor(starts + (vocab,), dtype=torch.int32, device=device))
                    if draft is not None:
                        env["draft_logits"] = draft[:, :, start:start + size].contiguous()
                    plan = execute.plan(kernels.plan_rejection_sample_shard,
                                        (env["target_logits"], env.get("draft_logits"), values["seeds"]), device,
                                        None, strict=False, fp64=False, vocab=vocab, starts=starts,
                                        start_align=kernels.start_alignment(starts))
                    shards.append((plan, env))
                outputs = [list(execute.run(plan.rounds[0], device, env)) for plan, env in shards]
                for i in range(1, len(shards[0][0].rounds)):
                    gathered = torch.stack([o[0] for o in outputs])
                    new = []
                    for (plan, env), previous in zip(shards, outputs):
                        last = plan.rounds[i - 1]
                        env["gathered_" + last.outputs[0]] = gathered
                        env.update((name + "_in", value) for name, value in zip(last.outputs[1:], previous[1:]))
                        new.append(list(execute.run(plan.rounds[i], device, env)))
                    outputs = new
                want = torch_backend.rejection_sample(x, *values.values(), draft_logits=draft)
                assert torch.equal(outputs[0][0], want[0]) and torch.equal(outputs[1][0], want[0])
                plan, env = shards[0]
                sharded = harness.time_graph_us(lambda i: [execute.run(r, device, env) for r in plan.rounds])
                # each round's launches alone
                rounds = [harness.time_graph_us(lambda i, r=r: execute.run(r, device, env)) for r in plan.rounds]
                half = x[:, :, :sizes[0]].contiguous()
                half_draft = None if draft is None else draft[:, :, :sizes[0]].contiguous()
                one_shard = harness.time_graph_us(lambda i: torch_backend.rejection_sample(
                    half, *values.values(), draft_logits=half_draft))
                whole = harness.time_graph_us(lambda i: torch_backend.rejection_sample(x, *values.values(),
                                                                                       draft_logits=draft))
                if args.kernels:
                    print(kernel_times(lambda: [execute.run(r, device, env) for r in plan.rounds]), flush=True)
                    print("one-shard op", kernel_times(lambda: torch_backend.rejection_sample(
                        half, *values.values(), draft_logits=half_draft)), flush=True)
                print(f"B={batch:4d} V={vocab} K={k} {label:12s} split {sizes}  {plan.variant:52s} shard "
                      f"{sharded:8.1f} us  one-shard op {one_shard:8.1f} us ({sharded / one_shard:.2f}x)  "
                      f"whole {whole:8.1f} us  rounds {' + '.join(f'{t:.1f}' for t in rounds)}", flush=True)


def kernel_times(fn) -> str:
    """Each kernel's mean device time a call of fn (us; explore_logprobs_kernels.kernel_us), as a line."""
    from explore_logprobs_kernels import kernel_us

    return "  ".join(f"{name} {us:.1f}" for name, us in kernel_us(fn).items())


if __name__ == "__main__":
    main()
