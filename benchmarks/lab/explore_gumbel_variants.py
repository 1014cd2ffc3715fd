"""GPU exploration (notes, not a product benchmark): where does gumbel_partial_kernel spend its time?

Times variants of the first-stage kernel at B=256, V=151936 (fp32) that leave one stage out or
change how it is computed, and prints the PTX instruction mix of the shipped kernel.

    python benchmarks/lab/explore_gumbel_variants.py
"""

import collections
import re

import torch
import triton
import triton.language as tl

from jsample.kernels.stream import uniform_block


@triton.jit
def _fast_log(x, MODE: tl.constexpr):
    if MODE == 0:
        return tl.log(x)
    elif MODE == 1:
        return tl.log2(x) * 0.6931471805599453
    else:
        return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                         pack=1) * 0.6931471805599453


@triton.jit
def variant_kernel(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride,
                   partial_score_ptr, partial_index_ptr,
                   BLOCK_V: tl.constexpr, NOISE: tl.constexpr, LOG_MODE: tl.constexpr, RECIPROCAL: tl.constexpr,
                   V_HINT: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    if V_HINT:
        V = tl.multiple_of(V, 16)
    seed = tl.load(seeds_ptr + row).to(tl.int64)
    position = tl.load(positions_ptr + row).to(tl.int64)
    t = tl.load(temperature_ptr + row)
    first_col = block * BLOCK_V
    cols = first_col + tl.arange(0, BLOCK_V)
    row_offset = tl.multiple_of(row.to(tl.int64) * row_stride, 16)
    x = tl.load(logits_ptr + row_offset + cols, mask=cols < V, other=float("-inf"))
    if RECIPROCAL:
        scaled = x * (1.0 / t)
    else:
        scaled = x / t
    if NOISE == 0:  # no noise at all: the read + argmax floor
        score = scaled
    elif NOISE == 1:  # Philox + uniforms only
        score = scaled + uniform_block(seed, position, first_col, 0, BLOCK_V, False)
    else:  # the full Gumbel noise
        u = uniform_block(seed, position, first_col, 0, BLOCK_V, False)
        small = u < 0.015625
        series = u * (1.0 + u * (0.5 + u * (0.3333333432674408 + u * 0.25)))
        e = tl.where(small, series, -_fast_log(1.0 - u, LOG_MODE))
        score = scaled - _fast_log(e, LOG_MODE)
    score = tl.where(tl.abs(x) < float("inf"), score, float("-inf"))
    best = tl.max(score, axis=0)
    best_col = first_col + tl.argmax(score, axis=0, tie_break_left=True)
    out = row.to(tl.int64) * tl.num_programs(1) + block
    tl.store(partial_score_ptr + out, best)
    tl.store(partial_index_ptr + out, best_col.to(tl.int32))


def main():
    batch, vocab = 256, 151936
    rotate = 4
    logits = [torch.randn(batch, vocab, device="cuda") for _ in range(rotate)]
    seeds = torch.arange(batch, device="cuda")
    positions = torch.arange(batch, device="cuda")
    temperature = torch.full((batch,), 0.8, device="cuda")
    print(f"{'variant':60s} {'us':>8s}")
    for block_v, warps in [(4096, 8), (2048, 4), (8192, 8), (4096, 4), (1024, 4)]:
        nb = triton.cdiv(vocab, block_v)
        score = torch.empty(batch, nb, device="cuda")
        index = torch.empty(batch, nb, device="cuda", dtype=torch.int32)
        variants = [(2, 0, False, False)] if (block_v, warps) != (4096, 8) else [
            (0, 0, False, False), (1, 0, False, False), (2, 0, False, False), (2, 0, True, False),
            (2, 1, False, False), (2, 2, False, False), (2, 0, False, True), (2, 2, True, True)]
        for noise, log_mode, reciprocal, v_hint in variants:
            state = {"i": 0}

            def call():
                state["i"] = (state["i"] + 1) % rotate
                variant_kernel[(batch, nb)](logits[state["i"]], seeds, positions, temperature, vocab, vocab, score,
                                            index, BLOCK_V=block_v, NOISE=noise, LOG_MODE=log_mode,
                                            RECIPROCAL=reciprocal, V_HINT=v_hint, num_warps=warps,
                                            enable_fp_fusion=False)

            us = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            name = f"BLOCK_V={block_v} warps={warps} noise={noise} log={log_mode} recip={reciprocal} vhint={v_hint}"
            print(f"{name:60s} {us:8.1f}", flush=True)

    import torch_backend
    from jsample import kernels

    torch_backend.gumbel_sample(logits[0], seeds, positions, temperature)
    compiled = list(kernels.gumbel_partial_kernel.device_caches[torch.cuda.current_device()][0].values())[0]
    ptx = compiled.asm["ptx"]
    ops = collections.Counter(m.group(1) for m in re.finditer(r"^\s+([a-z][\w.]*)", ptx, re.M))
    print("PTX instruction mix of the shipped gumbel_partial_kernel (top 30):")
    for op, n in ops.most_common(30):
        print(f"  {op:28s} {n}")
    print("registers:", compiled.n_regs, "spills:", compiled.n_spills)


if __name__ == "__main__":
    main()
