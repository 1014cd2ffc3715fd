"""Lab: instruction counts of gumbel_sample's partial kernel, compiled for sm_90 (H100 / H200) without a
GPU (Triton's own ptxas and nvdisasm), for issue "throughput", target 3: is FP32 gumbel_sample bound by
reading the logits or by issuing instructions?

Per variant it prints the SASS opcode histogram and the instructions of the path a sampled (not
greedy, not overflowing) row takes: the kernel's instructions outside the cold branches named below,
counted once per thread (the kernel has no loop: each thread owns BLOCK_V / (32 * warps) columns).
The issue floor is then (threads of a call) x (path instructions) / (SMs x 4 schedulers x 32 lanes x
clock): what the call costs if every cycle issued an instruction, with no memory stall at all.

    TRITON_INTERPRET=0 python benchmarks/lab/explore_sass_counts.py [--batch 256] [--vocab 151936]
"""

import argparse
import collections
import os
import re
import subprocess
import sys

os.environ["TRITON_INTERPRET"] = "0"  # compile, even on a machine without a GPU
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

H200_SMS, H200_CLOCK_GHZ = 132, 1.98  # SXM boost clock
LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")


def sass(kernel, signature, constexprs, warps):
    import triton

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
    from compiled_kernels import compile_for_sm90  # the tests' sm_90 compile (as jax-triton specialises)

    compiled = compile_for_sm90(kernel, signature, constexprs, warps)
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    path = "/tmp/jsample_sass.cubin"
    with open(path, "wb") as f:
        f.write(compiled.asm["cubin"])
    return subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout


def blocks(text):
    """[(label, [opcode, ...])]: the disassembly's basic blocks in order (label None for the first)."""
    result, label, ops = [], None, []
    for line in text.splitlines():
        found = LABEL.match(line)
        if found:
            result.append((label, ops))
            label, ops = found.group(1), []
            continue
        found = LINE.match(line)
        if found:
            ops.append(re.sub(r"^@!?U?P[0-9T] ", "", found.group(2)).split()[0])
    result.append((label, ops))
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    options = parser.parse_args()
    from jsample.kernels.gumbel import gumbel_partial_kernel

    signature = {"logits_ptr": "*fp32", "seeds_ptr": "*i64", "positions_ptr": "*i64", "temperature_ptr": "*fp32",
                 "V": "i32", "row_stride": "i32", "partial_score_ptr": "*fp32", "partial_index_ptr": "*i32"}
    for fp64, block_v, warps in ((False, 512, 1), (False, 4096, 8), (True, 512, 1)):
        constexprs = dict(STREAM=0, FP64=fp64, BLOCK_V=block_v, ROW_ALIGN=16, VOCAB_ALIGN=16, FAST_MATH=True,
                          SEED_WORDS=1)
        text = sass(gumbel_partial_kernel, signature, constexprs, warps)
        parsed = blocks(text)
        everything = [op for _, ops in parsed for op in ops]
        histogram = collections.Counter(op.split(".")[0] for op in everything)
        columns = block_v // (32 * warps)
        threads = options.batch * options.vocab / columns
        print(f"FP64={fp64} BLOCK_V={block_v} warps={warps}: {columns} columns a thread, "
              f"{len(everything)} SASS instructions in all")
        print("  opcodes:", ", ".join(f"{op} {n}" for op, n in histogram.most_common(16)))
        print("  basic blocks (label: instructions):", ", ".join(f"{label or 'entry'}: {len(ops)}"
                                                                    for label, ops in parsed))
        if not fp64 and block_v == 512:  # the shipped two-launch tiling: its hottest block, per column
            label, hot = max(parsed, key=lambda block: len(block[1]))
            print(f"  hottest block {label}, per column:", ", ".join(
                f"{op} {n / columns:.2f}" for op, n in collections.Counter(hot).most_common(24)))
        floor_us = threads * len(everything) / (H200_SMS * 4 * 32 * H200_CLOCK_GHZ * 1e3)
        print(f"  issue floor of B = {options.batch}, V = {options.vocab} if every instruction ran: "
              f"{floor_us:.1f} us ({len(everything) / columns:.1f} instructions a column)")


if __name__ == "__main__":
    main()
