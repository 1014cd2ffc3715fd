"""Which launch configuration (vocabulary tile, warps) suits the rejection kernels on this GPU.

Tokens never depend on the configuration (tests check it); only speed does. Times
torch_backend.rejection_sample (CUDA events, median) with bf16 target and f32 draft logits.

    python benchmarks/lab/explore_rejection_variants.py [--cases 256:1,256:8,64:4] [--no-gumbel]

Then the same for gumbel_sample (fp32 logits, B = 256, V = 151936).
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402


def main():
    import argparse

    import torch
    import triton

    import torch_backend
    from jsample import kernels

    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="256:1,256:8,64:4", help="B:K pairs")
    parser.add_argument("--no-gumbel", action="store_true")
    args = parser.parse_args()
    shipped = kernels.rejection_launch_config
    vocab = 151936
    print(f"{'B':>4} {'K':>2} {'block_v':>7} {'warps':>5} {'us':>9}")
    for batch, k in (tuple(map(int, case.split(":"))) for case in args.cases.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(0)
        target = (torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(torch.bfloat16)
        draft = target[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen)
        draft_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
        num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
        seeds = torch.arange(batch, device="cuda")
        positions = torch.arange(batch, device="cuda")
        temperature = torch.full((batch,), 0.8, device="cuda")
        reference = None
        for block_v in (1024, 2048, 4096):
            for num_warps in (4, 8):
                def config(vocab_size, num_speculative_tokens, strides, fp64, block_v=block_v, num_warps=num_warps):
                    base = shipped(vocab_size, num_speculative_tokens, strides, fp64)
                    num_blocks = triton.cdiv(vocab_size, block_v)
                    return dataclasses.replace(base, block_v=block_v, num_blocks=num_blocks,
                                               reduce_block=triton.next_power_of_2(num_blocks), num_warps=num_warps)

                kernels.rejection_launch_config = config
                try:
                    def run(i):
                        return torch_backend.rejection_sample(target, draft_tokens, num_drafts, seeds, positions,
                                                              temperature, draft_logits=draft)

                    out = run(0)
                    if reference is None:
                        reference = out
                    assert all(torch.equal(a, b) for a, b in zip(out, reference)), "tokens depend on the config"
                    print(f"{batch:4d} {k:2d} {block_v:7d} {num_warps:5d} {harness.time_torch_us(run):9.1f}", flush=True)
                finally:
                    kernels.rejection_launch_config = shipped
    if not args.no_gumbel:
        explore_gumbel()


def explore_gumbel():
    import torch
    import triton

    import torch_backend
    from jsample import kernels

    shipped = kernels.gumbel_launch_config
    batch, vocab = 256, 151936
    logits = torch.randn(batch, vocab, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0)) * 3
    seeds = torch.arange(batch, device="cuda")
    positions = torch.arange(batch, device="cuda")
    temperature = torch.full((batch,), 0.8, device="cuda")
    print(f"gumbel_sample B={batch} V={vocab} fp32\n{'block_v':>7} {'warps':>5} {'us':>9}")
    reference = None
    for block_v in (1024, 2048, 4096, 8192):
        for num_warps in (4, 8):
            def config(vocab_size, row_stride, fp64, block_v=block_v, num_warps=num_warps):
                num_blocks = triton.cdiv(vocab_size, block_v)
                return dataclasses.replace(shipped(vocab_size, row_stride, fp64), block_v=block_v,
                                           num_blocks=num_blocks, reduce_block=triton.next_power_of_2(num_blocks),
                                           num_warps=num_warps)

            kernels.gumbel_launch_config = config
            try:
                def run(i):
                    return torch_backend.gumbel_sample(logits, seeds, positions, temperature)

                out = run(0)
                if reference is None:
                    reference = out
                assert torch.equal(out, reference), "tokens depend on the config"
                print(f"{block_v:7d} {num_warps:5d} {harness.time_torch_us(run):9.1f}", flush=True)
            finally:
                kernels.gumbel_launch_config = shipped


if __name__ == "__main__":
    main()
