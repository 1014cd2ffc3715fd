"""B = 1 rejection_sample (torch, CUDA graph, V = 151936, the inputs of bench_rejection.py with three
draft choices: random drafts, draft 0 rejected, all drafts accepted) for whichever jsample is first
on PYTHONPATH, so that two checkouts can be compared on one machine in one session. Prints the
times, the one-launch read of the same logits (harness.read_once) and the tokens, which must not
change between checkouts.

    PYTHONPATH=<checkout> python benchmarks/lab/explore_pdl_prologue.py [--label NAME] [--decide-warps N]

`--decide-warps` overrides config.decide_num_warps (both launch plans alike, as shipped code must).
"""

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness  # harness only: jsample comes from PYTHONPATH

import harness  # noqa: E402
import torch  # noqa: E402

import torch_backend  # noqa: E402
from jsample import kernels  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="")
    parser.add_argument("--decide-warps", type=int, default=0)
    parser.add_argument("--drafts", default="1,4,8")
    args = parser.parse_args()
    if args.decide_warps:
        shipped = kernels.rejection_launch_config
        kernels.rejection_launch_config = lambda *a: dataclasses.replace(shipped(*a),
                                                                         decide_num_warps=args.decide_warps)
    label = f"{args.label} ({os.path.dirname(torch_backend.__file__)}"
    label += f", decide warps {args.decide_warps})" if args.decide_warps else ")"
    vocab, batch = 151936, 1
    for k in map(int, args.drafts.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)  # as bench_rejection.py
        target = (torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(torch.bfloat16)
        draft = target[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen)
        accepted_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
        num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
        seeds = torch.randint(0, 2**62, (batch,), device="cuda", generator=gen)
        positions = torch.randint(0, 2**20, (batch,), device="cuda", generator=gen)
        temperature = torch.full((batch,), 0.8, device="cuda")
        rejected_tokens = (draft - target[:, :k].float()).argmax(dim=-1).int()  # p / q smallest
        all_accepted_tokens = (target[:, :k].float() - draft).argmax(dim=-1).int()  # p / q largest
        read = harness.read_once((target, draft))
        line = [f"K={k}", f"read once {harness.time_graph_us(lambda i: read()):6.2f}"]
        workloads = (("random drafts", accepted_tokens), ("draft 0 rejected", rejected_tokens),
                     ("all accepted", all_accepted_tokens))
        for name, drafts in workloads:
            def run(i, drafts=drafts):
                return torch_backend.rejection_sample(target, drafts, num_drafts, seeds, positions, temperature,
                                                      draft_logits=draft)
            tokens, num_sampled = run(0)
            line.append(f"{name} {harness.time_graph_us(run):6.2f} us tokens {tokens[0].tolist()}")
        print(f"{label:48s} " + "  ".join(line), flush=True)


if __name__ == "__main__":
    main()
