"""What three dependent phases cost at B = 1 on a GPU, whatever their work: the floor of any
rejection_sample design (softmax normalisers over the rows -> the decision and the residual pass over
row a_b -> the argmax of its block partials).

Every variant reads the B = 1 target (bf16 [1, K+1, V]) and draft (f32 [1, K, V]) logits once in
4096-element programs (harness.read_once's work), then runs a second phase of V / 2048 programs that
each read the first phase's partials and one 2048-column block of target row 0 (the emit pass's
shape), then a one-program reduction of the second phase's partials. All timed as CUDA-graph replays
(harness.time_graph_us), as bench_rejection times jsample:

* `read once`: the first phase alone (bench_rejection's read_once row).
* `3 launches`: the three phases as three launches.
* `3 launches, PDL`: the same as a programmatic dependent launch chain (griddepcontrol).
* `1 launch, tickets`: one launch of both phases' programs plus the reduction in the last program to
  finish: each program takes a ticket from an atomic counter; the first tickets do phase 1, the
  others wait for phase 1's arrival count to complete (deadlock-free: every ticket below theirs is held
  by a program already running that waits for nothing), and the last to arrive reduces. Counters
  zeroed by a memset node in the graph (`+ memset`) or reset by that last program (`self-reset`).

    python benchmarks/lab/explore_phase_floor.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/: harness

import harness  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

CHUNK = 4096
BLOCK = 2048


@triton.jit
def _phase1(a_ptr, b_ptr, a_chunks, a_numel, b_numel, part1_ptr, p, CHUNK: tl.constexpr):
    cols = tl.arange(0, CHUNK)
    if p < a_chunks:
        offsets = p.to(tl.int64) * CHUNK + cols
        x = tl.load(a_ptr + offsets, mask=offsets < a_numel, other=float("-inf")).to(tl.float32)
    else:
        offsets = (p - a_chunks).to(tl.int64) * CHUNK + cols
        x = tl.load(b_ptr + offsets, mask=offsets < b_numel, other=float("-inf")).to(tl.float32)
    tl.store(part1_ptr + p, tl.max(x, axis=0))


@triton.jit
def _phase2(a_ptr, vocab, part1_ptr, n1, part2_ptr, p, REDUCE1: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, REDUCE1)
    shift = tl.max(tl.load(part1_ptr + i, mask=i < n1, other=float("-inf"), cache_modifier=".cg"), axis=0)
    cols = p * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(a_ptr + cols, mask=cols < vocab, other=float("-inf")).to(tl.float32)
    tl.store(part2_ptr + p, tl.max(x - shift, axis=0))


@triton.jit
def _phase3(part2_ptr, n2, out_ptr, REDUCE2: tl.constexpr):
    i = tl.arange(0, REDUCE2)
    tl.store(out_ptr, tl.max(tl.load(part2_ptr + i, mask=i < n2, other=float("-inf"), cache_modifier=".cg"), axis=0))


@triton.jit
def phase1_kernel(a_ptr, b_ptr, a_chunks, a_numel, b_numel, part1_ptr, CHUNK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
    _phase1(a_ptr, b_ptr, a_chunks, a_numel, b_numel, part1_ptr, tl.program_id(0), CHUNK)


@triton.jit
def phase2_kernel(a_ptr, vocab, part1_ptr, n1, part2_ptr, REDUCE1: tl.constexpr, BLOCK: tl.constexpr,
                  PDL: tl.constexpr):
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    _phase2(a_ptr, vocab, part1_ptr, n1, part2_ptr, tl.program_id(0), REDUCE1, BLOCK)


@triton.jit
def phase3_kernel(part2_ptr, n2, out_ptr, REDUCE2: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_wait()
    _phase3(part2_ptr, n2, out_ptr, REDUCE2)


@triton.jit
def ticket_kernel(a_ptr, b_ptr, a_chunks, a_numel, b_numel, vocab, part1_ptr, n1, part2_ptr, n2, out_ptr,
                  counters_ptr, CHUNK: tl.constexpr, REDUCE1: tl.constexpr, BLOCK: tl.constexpr,
                  REDUCE2: tl.constexpr, SELF_RESET: tl.constexpr):
    # counters: [tickets, phase-1 arrivals, phase-2 arrivals]
    ticket = tl.atomic_add(counters_ptr, 1, sem="relaxed", scope="gpu")
    if ticket < n1:
        _phase1(a_ptr, b_ptr, a_chunks, a_numel, b_numel, part1_ptr, ticket, CHUNK)
        tl.debug_barrier()
        tl.atomic_add(counters_ptr + 1, 1, sem="release", scope="gpu")
    else:
        arrived = tl.atomic_add(counters_ptr + 1, 0, sem="acquire", scope="gpu")
        while arrived < n1:
            arrived = tl.atomic_add(counters_ptr + 1, 0, sem="acquire", scope="gpu")
        _phase2(a_ptr, vocab, part1_ptr, n1, part2_ptr, ticket - n1, REDUCE1, BLOCK)
        tl.debug_barrier()
        if tl.atomic_add(counters_ptr + 2, 1, sem="acq_rel", scope="gpu") == n2 - 1:
            _phase3(part2_ptr, n2, out_ptr, REDUCE2)
            if SELF_RESET:
                tl.atomic_xchg(counters_ptr, 0, sem="relaxed", scope="gpu")
                tl.atomic_xchg(counters_ptr + 1, 0, sem="relaxed", scope="gpu")
                tl.atomic_xchg(counters_ptr + 2, 0, sem="relaxed", scope="gpu")


def variants(k, vocab):
    target = torch.randn(1, k + 1, vocab, device="cuda").to(torch.bfloat16)
    draft = torch.randn(1, k, vocab, device="cuda")
    a_chunks, b_chunks = triton.cdiv(target.numel(), CHUNK), triton.cdiv(draft.numel(), CHUNK)
    n1, n2 = a_chunks + b_chunks, triton.cdiv(vocab, BLOCK)
    part1 = torch.empty(n1, device="cuda")
    part2 = torch.empty(n2, device="cuda")
    out = torch.empty(1, device="cuda")
    cached_counters = torch.zeros(3, dtype=torch.int32, device="cuda")
    r1, r2 = triton.next_power_of_2(n1), triton.next_power_of_2(n2)
    common = (target, draft, a_chunks, target.numel(), draft.numel())

    def read_once():
        phase1_kernel[(n1,)](*common, part1, CHUNK=CHUNK, PDL=False, num_warps=4)

    def launches(pdl):
        def run():
            phase1_kernel[(n1,)](*common, part1, CHUNK=CHUNK, PDL=pdl, num_warps=4)
            phase2_kernel[(n2,)](target, vocab, part1, n1, part2, REDUCE1=r1, BLOCK=BLOCK, PDL=pdl, num_warps=4,
                                 launch_pdl=pdl)
            phase3_kernel[(1,)](part2, n2, out, REDUCE2=r2, PDL=pdl, num_warps=1, launch_pdl=pdl)
        return run

    def tickets(self_reset):
        def run():
            counters = cached_counters if self_reset else torch.zeros(3, dtype=torch.int32, device="cuda")
            ticket_kernel[(n1 + n2,)](*common, vocab, part1, n1, part2, n2, out, counters, CHUNK=CHUNK, REDUCE1=r1,
                                      BLOCK=BLOCK, REDUCE2=r2, SELF_RESET=self_reset, num_warps=4)
        return run

    def expected():
        return (target[0, 0].float() - torch.maximum(target.float().max(), draft.max())).max()

    return {"read once": (read_once, None), "3 launches": (launches(False), expected),
            "3 launches, PDL": (launches(True), expected), "1 launch, tickets + memset": (tickets(False), expected),
            "1 launch, tickets self-reset": (tickets(True), expected)}, out


def main():
    print(torch.cuda.get_device_name(), "triton", triton.__version__, flush=True)
    vocab = 151936
    for k in (1, 4, 8):
        runs, out = variants(k, vocab)
        for name, (fn, expected) in runs.items():
            times = [harness.time_graph_us(lambda i: fn()) for _ in range(3)]
            check = ""
            if expected is not None:
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                check = f"  result right: {bool(out[0] == expected())}"
            print(f"B=1 K={k} {name:32s} " + " ".join(f"{t:6.2f}" for t in times) + " us" + check, flush=True)


if __name__ == "__main__":
    main()
