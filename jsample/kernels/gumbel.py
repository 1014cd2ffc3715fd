"""Seeded Gumbel-max sampling: token = argmax_k (x_k / T + g(u_k)), greedy argmax_k x_k when T < 1e-5.

Two launches, both shared by the PyTorch and JAX frontends:

1. `gumbel_partial_kernel`, grid (B, num_blocks): each program scores BLOCK_V columns of one row
   and writes the block's best score and its column (lowest column on ties). The noise is
   generated in registers from the counter-based stream (STREAM.md); no [B, V] noise tensor exists.
   With padding rows (num_valid), grid (padded_row_slots(B), num_blocks): each slot loops over every
   slots-th row, so a padding row costs a flag (or, with torch's count, nothing), not num_blocks programs.
2. `argmax_reduce_kernel`, grid (B,): the best block per row, lowest block on ties, so the token is
   the lowest column among equal best scores; -1 when the row has no finite logit.

Only finite logits are candidates: -inf, +inf and NaN logits are never chosen, so a row with no
finite logit gives -1 (STREAM.md). A score that is NaN is never chosen either.

Greedy rows (docs/STREAM.md, "Clarifications of version 1"): a temperature below 1e-5 (negative
ones too, and NaN: unchecked device values) is greedy, and so is a row in which some finite x_k / T
overflows float32 (|x_k| * (1 / T) rounds to inf in FP32). Overflow is found per block, at the cost
of one max of |x| a column, and only for T < 1, the only temperatures that can scale a finite
logit past the range; a block that finds it stores its column as -1 - column, and the reduce
launch then takes the row's greedy argmax itself (`greedy_argmax_row`: only such rows pay for it).
"""

import dataclasses
import functools
from dataclasses import dataclass

import triton
import triton.language as tl

from jsample.kernels.host import INTERPRETER, jit
from jsample.kernels.common import (aligned, greedy_argmax_row, is_padding, largest_power_of_two_dividing,
                                    load_temperature, rows_to_visit, reduce_block_best_flagged, reduce_fp64_intervals,
                                    store_fp64_block_interval, store_sampled_block)
from jsample.kernels.plan import ArgSpec, Buffer, Plan, Target, launch, num_rows_buffer, padded_row_slots
from jsample.kernels.stream import STREAM_DRAFT, STREAM_TOKEN, load_seed, seed_word_count

_BLOCK_V_MAX = 4096  # 16 KiB of fp32 logits per program: enough bytes in flight, few partials
_BLOCK_V_MIN = 16
_BLOCK_V_MAX_LARGE_PROGRAMS = 65536  # the interpreter (Target.large_programs): a row or two per program
# the two-launch plan on a GPU: one-warp programs of 512 columns, many resident per SM, hide each
# other's latency (FP64's serial shortlist tail most of all): 10% faster in FP32, 23% in FP64 than
# 4096 columns and 8 warps at B = 256, V = 151936 (benchmarks/lab/INDEX.md, ab_fp64_block)
_BLOCK_V_MANY_ROWS = 512


@dataclass(frozen=True)
class GumbelLaunchConfig:
    """How both frontends launch the two Gumbel kernels (tokens never depend on it)."""

    block_v: int
    num_blocks: int
    reduce_block: int
    row_align: int
    vocab_align: int  # power of two (<= 16) dividing V: tells the compiler masked row loads can be vectorised
    num_warps: int
    fast_math: bool  # a GPU: inline PTX for Philox's multiplies and the FP32 noise (stream.py); not in the interpreter
    num_stages: int = 1
    enable_fp_fusion: bool = False  # no FMA contraction: the same rounding as the NumPy reference


def gumbel_launch_config(vocab_size: int, row_stride: int, fp64: bool, fast_math: bool = None,
                         large_programs: bool = False) -> GumbelLaunchConfig:
    """The launch configuration of `gumbel_sample` for a [B, V] logits array with this row stride
    (`fast_math`: compiled code, not the interpreter; by default, whether the interpreter is off;
    `large_programs`: Target.large_programs, blocks of up to 65536 columns)."""
    largest = _BLOCK_V_MAX_LARGE_PROGRAMS if large_programs else _BLOCK_V_MAX
    block_v = max(_BLOCK_V_MIN, min(largest // (2 if fp64 else 1), triton.next_power_of_2(vocab_size)))
    num_blocks = triton.cdiv(vocab_size, block_v)
    return GumbelLaunchConfig(
        block_v=block_v,
        num_blocks=num_blocks,
        reduce_block=triton.next_power_of_2(num_blocks),
        row_align=largest_power_of_two_dividing(row_stride, 16) if row_stride else 16,
        vocab_align=largest_power_of_two_dividing(vocab_size, 16),
        num_warps=8 if block_v >= 2048 else 4,
        fast_math=not INTERPRETER if fast_math is None else fast_math,
    )


@jit
def gumbel_partial_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 (low, high) words with SEED_WORDS = 2: the 64-bit seed
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32, or one f32 for all rows (load_temperature); below 1e-5 = greedy
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its programs read nothing
    num_rows_ptr,  # [1] i32, B (read with ROW_SLOTS)
    V,
    row_stride,
    partial_score_ptr,  # [B, NUM_BLOCKS] f32; FP64: f64 as f32 pairs; FP64_INTERVALS: fp64_partial_words
    partial_index_ptr,  # [B, NUM_BLOCKS] i32
    STREAM: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,  # config.vocab_align
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    FP64_INTERVALS: tl.constexpr = False,  # FP64 partials as FP32 intervals (store_fp64_block_interval)
    HAS_ROW_VALID: tl.constexpr = False,
    ROW_SLOTS: tl.constexpr = False,  # (with HAS_ROW_VALID) grid dimension 0 is row slots: padded_row_slots
):
    if ROW_SLOTS:
        num_rows = tl.load(num_rows_ptr)
        for slot_row in tl.range(tl.program_id(0), rows_to_visit(row_valid_ptr, num_rows), tl.num_programs(0),
                                 num_stages=1):
            row = tl.cast(slot_row, tl.int32)  # (a Python int in the interpreter)
            if not is_padding(row_valid_ptr, row):  # padding: its reduce writes -1
                _gumbel_partial(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride,
                                partial_score_ptr, partial_index_ptr, row, num_rows, STREAM, FP64, BLOCK_V, ROW_ALIGN,
                                VOCAB_ALIGN, FAST_MATH, SEED_WORDS, FP64_INTERVALS)
    else:
        row = tl.program_id(0)
        if HAS_ROW_VALID:
            if is_padding(row_valid_ptr, row):  # padding: its reduce writes -1
                return
        _gumbel_partial(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride, partial_score_ptr,
                        partial_index_ptr, row, tl.num_programs(0), STREAM, FP64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN,
                        FAST_MATH, SEED_WORDS, FP64_INTERVALS)


@jit
def _gumbel_partial(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride, partial_score_ptr,
                    partial_index_ptr, row, num_rows, STREAM: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr,
                    ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr,
                    SEED_WORDS: tl.constexpr, FP64_INTERVALS: tl.constexpr):
    """gumbel_partial_kernel's block program_id(1) of `row` (of num_rows: B)."""
    V = aligned(V, VOCAB_ALIGN)
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    seed = load_seed(seeds_ptr, row, SEED_WORDS)
    position = tl.load(positions_ptr + row).to(tl.int64)
    temperature = load_temperature(temperature_ptr, row)
    out = row.to(tl.int64) * num_blocks + block
    if FP64 and FP64_INTERVALS:
        store_fp64_block_interval(logits_ptr, row, row_stride, V, block * BLOCK_V, seed, position, temperature,
                                  partial_score_ptr, fp64_partial_bounds(partial_score_ptr, num_blocks, num_rows),
                                  partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FAST_MATH)
    else:
        store_sampled_block(logits_ptr, row, row_stride, V, block * BLOCK_V, seed, position, temperature,
                            partial_score_ptr, partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)


@jit
def fp64_partial_bounds(partial_score_ptr, num_blocks, num_rows):
    """Where gumbel_sample's FP64 block bounds are: fp64_partial_words f32 words hold the [B, num_blocks]
    f64 scores, then the [B, num_blocks] f32 bounds (store_fp64_block_interval); B is num_rows."""
    return partial_score_ptr + 2 * num_rows.to(tl.int64) * num_blocks


def fp64_partial_words(num_blocks: int) -> int:
    """f32 words a row of gumbel_sample's FP64 partial scores takes: an f64 score and an f32 bound a block."""
    return 3 * num_blocks


@jit
def argmax_reduce_kernel(
    partial_score_ptr,  # [B, NUM_BLOCKS] f32; with FP64, f64 stored as [B, 2 * NUM_BLOCKS] f32 words
    partial_index_ptr,  # [B, NUM_BLOCKS] i32, the best column of each block (-1 - column: the row overflows)
    logits_ptr,  # [B, V], the partial launch's logits: read only for rows that overflow
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its token is -1
    V,
    row_stride,
    num_blocks,
    tokens_ptr,  # [B] i32 output
    FP64: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= num_blocks
    HAS_ROW_VALID: tl.constexpr = False,
):
    """One token per row from the block partials; a row whose scaled logits overflow is greedy."""
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, tl.program_id(0)):
            tl.store(tokens_ptr + tl.program_id(0), -1)
            return
    store_row_token(partial_score_ptr, partial_index_ptr, logits_ptr, V, row_stride, num_blocks, tokens_ptr,
                    tl.program_id(0), FP64, REDUCE_BLOCK)


@jit
def argmax_reduce_fp64_kernel(
    partial_score_ptr,  # gumbel_partial_kernel's FP64 partials (fp64_partial_words)
    partial_index_ptr,  # [B, NUM_BLOCKS] i32, the best column of each block (-1 - column: the row overflows)
    logits_ptr,  # [B, V] and the rest: the partial launch's; read for rows that overflow and FP64 candidates
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its token is -1
    V,
    row_stride,
    num_blocks,
    tokens_ptr,  # [B] i32 output
    STREAM: tl.constexpr,
    FAST_MATH: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= num_blocks
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """argmax_reduce_kernel for FP64 partials: the row's candidates scored in FP64 (reduce_fp64_intervals).
    Two warps: its FP64 reductions are serial chains, 3-4 us shorter than with one warp at B = 64-256
    (benchmarks/lab/INDEX.md)."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            tl.store(tokens_ptr + row, -1)
            return
    row_ptr = logits_ptr + row.to(tl.int64) * row_stride
    token, overflow = reduce_fp64_intervals(partial_score_ptr,
                                            fp64_partial_bounds(partial_score_ptr, num_blocks, tl.num_programs(0)),
                                            partial_index_ptr, row, num_blocks, row_ptr, V, seeds_ptr, positions_ptr,
                                            temperature_ptr, STREAM, FAST_MATH, REDUCE_BLOCK, SEED_WORDS)
    if overflow:
        token = greedy_argmax_row(row_ptr, V, 1024)
    tl.store(tokens_ptr + row, token)


@jit
def store_row_token(partial_score_ptr, partial_index_ptr, logits_ptr, V, row_stride, num_blocks, tokens_ptr, row,
                    FP64: tl.constexpr, REDUCE_BLOCK: tl.constexpr):
    """argmax_reduce_kernel's work for row `row` (filtered_reduce_kernel's too)."""
    token, overflow = reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, row, num_blocks, FP64,
                                                REDUCE_BLOCK, False)
    if overflow:
        token = greedy_argmax_row(logits_ptr + row.to(tl.int64) * row_stride, V, 1024)
    tl.store(tokens_ptr + row, token)


@jit
def gumbel_one_launch_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # as gumbel_partial_kernel's
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32, or one f32 for all rows (load_temperature)
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its token is -1, nothing read
    V,
    row_stride,
    partial_score_ptr,  # scratch, as gumbel_partial_kernel's output
    partial_index_ptr,  # scratch, as gumbel_partial_kernel's output
    arrivals_ptr,  # [B] i32, zero on entry, left zero (one self-resetting counter per row)
    tokens_ptr,  # [B] i32 output
    STREAM: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= num_blocks
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """The two launches in one, for small batches where a launch costs more than the wait: the
    programs of gumbel_partial_kernel, then the last of each row's programs to arrive (an atomic count
    that it resets to zero for the next call) reduces the row as argmax_reduce_kernel does, with the
    same code: the same token. The count's release / acquire orders the partials before the reduce."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):  # padding: no arrival (its counter stays zero)
            if tl.program_id(1) == 0:
                tl.store(tokens_ptr + row, -1)
            return
    _gumbel_partial(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride, partial_score_ptr,
                    partial_index_ptr, row, tl.num_programs(0), STREAM, FP64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN,
                    FAST_MATH, SEED_WORDS, False)
    num_blocks = tl.num_programs(1)
    tl.debug_barrier()  # every thread's stores before the one release
    if tl.atomic_add(arrivals_ptr + row, 1, sem="acq_rel", scope="gpu") == num_blocks - 1:
        token, overflow = reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, row, num_blocks, FP64,
                                                    REDUCE_BLOCK, False)
        if overflow:
            token = greedy_argmax_row(logits_ptr + row.to(tl.int64) * row_stride, V, 1024)
        tl.store(tokens_ptr + row, token)
        tl.atomic_xchg(arrivals_ptr + row, 0, sem="relaxed", scope="gpu")


# one_launch_gumbel: at most this many programs (B * num_blocks) take the one-launch plan
ONE_LAUNCH_MAX_PROGRAMS = 300
# FP64 in the two-launch plan: from this many programs (about two waves of one-warp programs on an
# H100 / H200) blocks store FP32 intervals and the reduce scores each row's candidates in FP64
# (store_fp64_block_interval); below, each block scores its own shortlist in FP64, whose tails run
# side by side in one wave rather than after it (B = 64, V = 32000: 19.1 us against 22.1 us on an
# H200; B = 64, V = 151936: 51.6 us against 41.7 us; benchmarks/lab/INDEX.md)
FP64_INTERVALS_MIN_PROGRAMS = 8192


def many_rows_config(config: GumbelLaunchConfig, vocab_size: int) -> GumbelLaunchConfig:
    """The tiling of gumbel_sample's two-launch plan (more rows than one launch takes), except in the
    interpreter's large programs: blocks of _BLOCK_V_MANY_ROWS columns, one warp each."""
    block_v = max(_BLOCK_V_MIN, min(_BLOCK_V_MANY_ROWS, triton.next_power_of_2(vocab_size)))
    num_blocks = triton.cdiv(vocab_size, block_v)
    return dataclasses.replace(config, block_v=block_v, num_blocks=num_blocks,
                               reduce_block=triton.next_power_of_2(num_blocks), num_warps=1)


@functools.lru_cache(maxsize=512)
def plan_gumbel_sample(logits: ArgSpec, seeds: ArgSpec, target: Target, *, fp64: bool, draft: bool,
                       row_valid: bool = False, return_logprobs: bool = False, num_top: int = 0) -> Plan:
    """The launches of `gumbel_sample` on inputs `logits` [B, V] (rows `logits.strides[0]` apart,
    columns contiguous), `seeds`, `positions` [B], `temperature` [B] f32 and, with `row_valid`,
    `row_valid` (common.is_padding: a padding row, token -1, its logits unread); output `tokens` [B] i32. With
    `return_logprobs`, input `num_top` [1] i32 and the outputs `sampled` (the tokens) and token_logprobs'
    (logprobs.with_logprobs)."""
    if return_logprobs:
        from jsample.kernels.logprobs import plan_gumbel_logprobs, with_logprobs

        if not fp64:  # the single read (FP64: the sampling plan, then token_logprobs)
            return plan_gumbel_logprobs(logits, seeds, target, draft=draft, row_valid=row_valid, num_top=num_top)
        sampling = plan_gumbel_sample(logits, seeds, target, fp64=fp64, draft=draft, row_valid=row_valid)
        return with_logprobs(sampling, logits, target, has_top_k=False, has_top_p=False, has_min_p=False, fp64=fp64,
                             num_top=num_top, row_valid=row_valid)
    batch, vocab = logits.shape
    tokens = Buffer("tokens", (batch,), "int32")
    if batch == 0:
        return Plan((tokens,), (), ("tokens",), "empty")
    row_stride = logits.strides[0]
    config = gumbel_launch_config(vocab, row_stride, fp64, fast_math=not target.interpreter,
                                  large_programs=target.large_programs)
    one_launch = target.arrival_counters and batch * config.num_blocks <= ONE_LAUNCH_MAX_PROGRAMS
    if not one_launch and not target.large_programs:
        config = many_rows_config(config, vocab)
    slots = row_valid and not one_launch  # (padded_row_slots: the padding rows' programs cost their flags only)
    intervals = fp64 and not one_launch and batch * config.num_blocks >= FP64_INTERVALS_MIN_PROGRAMS
    words = fp64_partial_words(config.num_blocks) if intervals else config.num_blocks * (2 if fp64 else 1)
    buffers = (Buffer("partial_score", (batch, words), "float32"),
               Buffer("partial_index", (batch, config.num_blocks), "int32"), tokens) + (
        (num_rows_buffer(batch),) if slots else ())
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    valid = "row_valid" if row_valid else "positions"  # the stand-in is never read
    if one_launch:
        launches = (launch(
            gumbel_one_launch_kernel, (batch, config.num_blocks),
            ("logits", "seeds", "positions", "temperature", valid, vocab, row_stride),
            ("partial_score", "partial_index", "arrivals", "tokens"), HAS_ROW_VALID=row_valid,
            STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, FP64=fp64, BLOCK_V=config.block_v,
            ROW_ALIGN=config.row_align, VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math,
            REDUCE_BLOCK=config.reduce_block, SEED_WORDS=seed_word_count(seeds.shape), num_warps=config.num_warps,
            **options),)
        return Plan(buffers + (Buffer("arrivals", (batch,), "int32", counters=True),), launches, ("tokens",),
                    "one launch")
    launches = (
        launch(gumbel_partial_kernel, (padded_row_slots(batch) if slots else batch, config.num_blocks),
               ("logits", "seeds", "positions", "temperature", valid, "num_rows" if slots else "positions", vocab,
                row_stride), ("partial_score", "partial_index"), HAS_ROW_VALID=row_valid, ROW_SLOTS=slots,
               STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, FP64=fp64, BLOCK_V=config.block_v,
               ROW_ALIGN=config.row_align, VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math,
               SEED_WORDS=seed_word_count(seeds.shape), FP64_INTERVALS=intervals, num_warps=config.num_warps,
               num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion),
        launch(argmax_reduce_fp64_kernel, (batch,),
               ("partial_score", "partial_index", "logits", "seeds", "positions", "temperature", valid, vocab,
                row_stride, config.num_blocks), ("tokens",), HAS_ROW_VALID=row_valid,
               STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, FAST_MATH=config.fast_math,
               REDUCE_BLOCK=config.reduce_block, SEED_WORDS=seed_word_count(seeds.shape), num_warps=2,
               num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion) if intervals else
        launch(argmax_reduce_kernel, (batch,),
               ("partial_score", "partial_index", "logits", valid, vocab, row_stride, config.num_blocks), ("tokens",),
               HAS_ROW_VALID=row_valid, FP64=fp64, REDUCE_BLOCK=config.reduce_block, num_warps=1,
               num_stages=config.num_stages,
               enable_fp_fusion=config.enable_fp_fusion),
    )
    return Plan(buffers, launches, ("tokens",), "two launches, FP64 intervals" if intervals else "two launches")
