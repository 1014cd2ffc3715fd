"""Padded rows (issue 39): what does a padding row's program cost, and do kernels that loop over rows (a grid of
row slots that does not grow with the padding) or over blocks (fewer programs a row) read as fast as one program a
(row, block)? A stand-in for the row kernels' reads (a [BLOCK] tile of bf16 logits: its max and sum of exps, two
floats stored), V = 151936, rows of 4 (rejection's stats, K = 4) or 1 (gumbel's partials); CUDA graphs, median us.

    python3 benchmarks/lab/explore_padding_grids.py
"""

import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_padding import graph_us  # noqa: E402

V = 151936


@triton.jit
def _tile(x_ptr, out_ptr, b, j, block, row_stride, batch_stride, V, BLOCK: tl.constexpr, NB):
    cols = block * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + b.to(tl.int64) * batch_stride + j * row_stride + cols, mask=cols < V,
                other=float("-inf")).to(tl.float32)
    m = tl.max(x)
    s = tl.sum(tl.exp(x - m))
    o = ((b.to(tl.int64) * tl.num_programs(1) + j) * NB + block) * 2
    tl.store(out_ptr + o, m)
    tl.store(out_ptr + o + 1, s)


@triton.jit
def flags_kernel(x_ptr, out_ptr, flags_ptr, row_stride, batch_stride, V, NB, BLOCK: tl.constexpr, FLAGS: tl.constexpr):
    b = tl.program_id(0)
    if FLAGS:
        if tl.load(flags_ptr + b) == 0:
            return
    _tile(x_ptr, out_ptr, b, tl.program_id(1), tl.program_id(2), row_stride, batch_stride, V, BLOCK, NB)


@triton.jit
def count_kernel(x_ptr, out_ptr, count_ptr, row_stride, batch_stride, V, NB, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    if b >= tl.load(count_ptr):
        return
    _tile(x_ptr, out_ptr, b, tl.program_id(1), tl.program_id(2), row_stride, batch_stride, V, BLOCK, NB)


@triton.jit
def row_loop_kernel(x_ptr, out_ptr, count_ptr, row_stride, batch_stride, V, NB, BLOCK: tl.constexpr):
    n = tl.load(count_ptr)
    for b in range(tl.program_id(0), n, tl.num_programs(0)):
        _tile(x_ptr, out_ptr, b, tl.program_id(1), tl.program_id(2), row_stride, batch_stride, V, BLOCK, NB)


@triton.jit
def block_loop_kernel(x_ptr, out_ptr, count_ptr, row_stride, batch_stride, V, NB, BLOCKS_PER, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    if b >= tl.load(count_ptr):
        return
    first = tl.program_id(2) * BLOCKS_PER
    for block in range(first, tl.minimum(first + BLOCKS_PER, NB)):
        _tile(x_ptr, out_ptr, b, tl.program_id(1), block, row_stride, batch_stride, V, BLOCK, NB)


@triton.jit
def flat_loop_kernel(x_ptr, out_ptr, count_ptr, row_stride, batch_stride, V, NB, ROWS, BLOCK: tl.constexpr):
    """Persistent: program p takes items p, p + P, ... of the (row, j, block) items of the valid rows."""
    items = tl.load(count_ptr) * ROWS * NB
    for item in range(tl.program_id(0), items, tl.num_programs(0)):
        block = item % NB
        rest = item // NB
        j = rest % ROWS
        b = rest // ROWS
        o = (rest * NB + block) * 2
        cols = block * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + b.to(tl.int64) * batch_stride + j * row_stride + cols, mask=cols < V,
                    other=float("-inf")).to(tl.float32)
        m = tl.max(x)
        s = tl.sum(tl.exp(x - m))
        tl.store(out_ptr + o, m)
        tl.store(out_ptr + o + 1, s)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, V = {V} bf16, us (CUDA graph, median)")
    for rows, block, warps in ((4, 2048, 4), (1, 4096, 4), (1, 512, 1)):
        nb = triton.cdiv(V, block)
        x = torch.randn(256, rows, V, device="cuda").to(torch.bfloat16)
        out = torch.empty(256 * rows * nb * 2, device="cuda")
        counts = {n: torch.tensor([n], device="cuda", dtype=torch.int32) for n in (16, 256)}
        flags = {n: (torch.arange(256, device="cuda") < n).to(torch.uint8) for n in (16, 256)}
        strides = (V, rows * V)
        print(f"\n## rows {rows}, block {block} x {warps} warps ({nb} blocks a row)")

        def plain(b, n, use_flags=True):
            return lambda: flags_kernel[(b, rows, nb)](x, out, flags[n], *strides, V, nb, BLOCK=block,
                                                        FLAGS=use_flags, num_warps=warps)

        cells = {"B=16 plain": plain(16, 16, False), "B=256 plain": plain(256, 256, False),
                 "B=256 flags nv=16": plain(256, 16), "B=256 flags nv=256": plain(256, 256)}
        cells["B=256 count nv=16"] = lambda: count_kernel[(256, rows, nb)](x, out, counts[16], *strides, V, nb,
                                                                          BLOCK=block, num_warps=warps)
        for slots in (16, 32, 64):
            for n in (16, 256):
                cells[f"row slots {slots} nv={n}"] = (lambda s, n: lambda: row_loop_kernel[(s, rows, nb)](
                    x, out, counts[n], *strides, V, nb, BLOCK=block, num_warps=warps))(slots, n)
        for per in (4, 8):
            for n in (16, 256):
                cells[f"blocks {per} a program nv={n}"] = (lambda p, n: lambda: block_loop_kernel[
                    (256, rows, triton.cdiv(nb, p))](x, out, counts[n], *strides, V, nb, p, BLOCK=block,
                                                     num_warps=warps))(per, n)
        for waves in (4, 8, 16):
            for n in (16, 256):
                cells[f"persistent {waves} a SM nv={n}"] = (lambda w, n: lambda: flat_loop_kernel[(w * sms,)](
                    x, out, counts[n], *strides, V, nb, rows, BLOCK=block, num_warps=warps))(waves, n)
        for name, fn in cells.items():
            print(f"{name:32s} {graph_us(fn):8.1f}", flush=True)


if __name__ == "__main__":
    main()
