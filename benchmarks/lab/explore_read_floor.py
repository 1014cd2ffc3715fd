"""How tight is bench_rejection.py's measured read floor? For every cell of its grid (same inputs,
same rotation over copies), times several one-launch kernels that read the target and draft logits
once: harness.read_once's chunk programs at several chunk sizes and warp counts, and a persistent
grid-stride variant. A floor is only as good as the best reader; the benchmark should use it.

    python benchmarks/lab/explore_read_floor.py [--batches 1,64,256] [--drafts 1,4,8]
"""

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness

import harness  # noqa: E402


@functools.cache
def _strided_max_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def strided_max_kernel(a_ptr, b_ptr, a_chunks, b_chunks, a_numel, b_numel, out_ptr,
                           CHUNK: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, CHUNK)
        best = tl.full([CHUNK], float("-inf"), tl.float32)
        for i in range(0, tl.cdiv(a_chunks - pid, NUM_PROGRAMS)):
            offsets = (pid + i * NUM_PROGRAMS).to(tl.int64) * CHUNK + cols
            best = tl.maximum(best, tl.load(a_ptr + offsets, mask=offsets < a_numel, other=float("-inf")).to(tl.float32))
        for i in range(0, tl.cdiv(b_chunks - pid, NUM_PROGRAMS)):
            offsets = (pid + i * NUM_PROGRAMS).to(tl.int64) * CHUNK + cols
            best = tl.maximum(best, tl.load(b_ptr + offsets, mask=offsets < b_numel, other=float("-inf")).to(tl.float32))
        tl.store(out_ptr + pid, tl.max(best, axis=0))

    return strided_max_kernel


def strided_read(tensors, chunk, programs, warps, stages):
    import torch

    kernel = _strided_max_kernel()
    a, b = tensors
    a_chunks, b_chunks = -(-a.numel() // chunk), -(-b.numel() // chunk)
    out = torch.empty(programs, dtype=torch.float32, device=a.device)

    def run():
        kernel[(programs,)](a, b, a_chunks, b_chunks, a.numel(), b.numel(), out, CHUNK=chunk,
                            NUM_PROGRAMS=programs, num_warps=warps, num_stages=stages)
        return out

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", default="1,64,256")
    parser.add_argument("--drafts", default="1,4,8")
    args = parser.parse_args()
    import torch

    import torch_backend

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    vocab = 151936
    for batch in map(int, args.batches.split(",")):
        for k in map(int, args.drafts.split(",")):
            nbytes = batch * (k + 1) * vocab * 2 + batch * k * vocab * 4
            rotate = harness.copies_needed(nbytes)
            gen = torch.Generator(device="cuda").manual_seed(batch * 100 + k)
            targets = [(torch.randn(batch, k + 1, vocab, device="cuda", generator=gen) * 3).to(torch.bfloat16)
                       for _ in range(rotate)]
            drafts = [t[:, :k].float() + torch.randn(batch, k, vocab, device="cuda", generator=gen) for t in targets]
            draft_tokens = torch.randint(0, vocab, (batch, k), device="cuda", generator=gen, dtype=torch.int32)
            num_drafts = torch.full((batch,), k, dtype=torch.int32, device="cuda")
            seeds = torch.randint(0, 2**62, (batch,), device="cuda", generator=gen)
            positions = torch.randint(0, 2**20, (batch,), device="cuda", generator=gen)
            temperature = torch.full((batch,), 0.8, device="cuda")
            results = {}
            for chunk in (2048, 4096, 8192, 16384):
                for warps in (4, 8):
                    reads = [harness.read_once((targets[i], drafts[i]), chunk=chunk, num_warps=warps)
                             for i in range(rotate)]
                    results[f"chunks {chunk}x{warps}w"] = harness.time_graph_us(lambda i: reads[i](), rotate)
            for chunk in (2048, 4096):
                for per_sm in (2, 4, 8):
                    for warps, stages in ((4, 3), (8, 3), (8, 1)):
                        reads = [strided_read((targets[i], drafts[i]), chunk, per_sm * sms, warps, stages)
                                 for i in range(rotate)]
                        results[f"strided {chunk} {per_sm}/SM {warps}w {stages}s"] = harness.time_graph_us(
                            lambda i: reads[i](), rotate)
            ours = harness.time_graph_us(lambda i: torch_backend.rejection_sample(
                targets[i], draft_tokens, num_drafts, seeds, positions, temperature, draft_logits=drafts[i]), rotate)
            best = min(results, key=results.get)
            print(f"B={batch:3d} K={k} bytes {nbytes / 1e6:8.1f} MB  jsample {ours:7.1f} us  "
                  f"read_once(4096x4w) {results['chunks 4096x4w']:7.1f} us ({results['chunks 4096x4w'] / ours:.3f})  "
                  f"best {results[best]:7.1f} us ({results[best] / ours:.3f}, {best})", flush=True)
            for name, us in sorted(results.items(), key=lambda item: item[1]):
                print(f"    {name:32s} {us:8.2f}", flush=True)
            del targets, drafts


if __name__ == "__main__":
    main()
