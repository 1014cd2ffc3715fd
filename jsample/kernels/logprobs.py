"""`token_logprobs`: the log-probabilities of given tokens, and the mass the filters keep (issue 41).

docs/LOGPROBS.md defines every number; jsample/reference/logprobs.py is the float64 reference. Two
forms, both shared by the frontends and both summing the normalisers' terms as integers (_fixed):

- The single read (no filters: `token_logprobs`, and gumbel_sample's `return_logprobs` in FP32): block
  statistics (store_block_stats) from one read of the logits, in the sampler's case from the very logits
  its Gumbel-max pass loaded, reduced by `logprobs_reduce_kernel` (the section below `STATS`); the sampler's
  rank counted once its token is known (rank_count_kernel); a top list (num_top >= 1) reads again only the
  blocks that can hold one of its logits (top_list_kernel).
- With filters, the same statistics and the row's 64 largest logits (top_list_kernel) decide every row whose
  kept set lies within them (filtered_list_reduce_kernel; top-p's whole-row mass from row_mass_kernel); the
  other rows (its `pending` flags) find their kept set's threshold by vocab-parallel top_k_top_p_sample's
  searches with a single shard, the whole vocabulary on this device (plan_kept_threshold_shard's rounds as one
  plan: plan.single_shard_plan; many programs a row, a flag each for the other rows), sum their kept mass over
  many programs a row (kept_mass_kernel), and filtered_finish_kernel writes every row (the list route's copied).
  At B <= 2 on a GPU (and in the interpreter) the searches and kept sums are the steps of one launch
  (logprobs_search.pending_search_kernel), the same brackets and sums.
  Both routes follow the same rules, so a row's numbers do not depend on its route:

1. The row's largest finite logit m, the greedy rule (T < 1e-5 or NaN, or some finite x / T beyond float32:
   common.overflow_from_magnitude's rule; a greedy row is read at T = 1 and not filtered), the normalisers
   and the rank, all from the single read's block statistics (so raw, scaled and rank do not depend on the
   route, nor on the filters).
2. The kept set, exactly `top_k_top_p_sample`'s (filtered.py states the rules): every filter keeps the logits
   at or above a threshold over the order-preserving 32-bit key of the float32 values (filtered._key): top-k's
   threshold is the largest key with at least k finite logits at or above it; top-p's the smallest key (of
   those top-k keeps) whose strictly larger kept logits weigh less than p times the kept mass, in the same
   fixed-point masses (filtered._fixed_point_mass, so the same integer sums); min-p compares e = p / p_max
   (filtered._relative_probability) with min_p. The thresholds depend on the values only, not on how a
   tiling finds them: the same set.
3. The kept mass: the kept logits' terms exp((x - m) / T) summed as integers (kept_term, in any order),
   log_kept_mass = log S (row_log_kept_mass: exactly 0 where no filter limits the row), the token's logit.
4. The `num_top` (a device scalar: one compilation for every count) largest finite logits, the lowest column
   first among equal logits.
"""

import dataclasses
import functools
import math

import triton
import triton.language as tl

from jsample.kernels.common import (aligned, is_greedy, is_padding, largest_power_of_two_dividing, load_temperature,
                                    max_flagging_nan, rows_to_visit, store_sampled_block)
from jsample.kernels.filtered import _fixed_point_mass, _key, _key_value, _min_p, _relative_probability
from jsample.kernels.gumbel import argmax_reduce_kernel, gumbel_launch_config, many_rows_config
from jsample.kernels.host import jit
from jsample.kernels.plan import (ArgSpec, Buffer, Plan, ShardedPlan, Target, launch, num_rows_buffer,
                                  padded_row_slots, single_shard_plan)
from jsample.kernels.stream import LOG2E, STREAM_DRAFT, STREAM_TOKEN, exp2_approx, load_seed, seed_word_count
from jsample.validation import MAX_NUM_TOP

_KEY_FLOOR = tl.constexpr(-(2**31))
TOP_LIST = triton.next_power_of_2(MAX_NUM_TOP)  # top_list_kernel's list: one compilation for every num_top
# top_list_kernel's programs a row (compiled): each lists the candidates of every 8th block, the last merges
TOP_LIST_PROGRAMS = 8
MASS_PROGRAMS = 16  # row_mass_kernel's programs a row (top-p's whole-row mass, in contiguous parts)
SHORT_ROW_COLUMNS = 8192  # top_list_kernel's short rows on a GPU: at most this many columns a program, held at once
# The normalisers' terms exp(x - m) (in (0, 1]) are summed as integers, floor(term * 2**40): a sum that
# does not depend on its order, so neither the tiling nor the compiled layout (torch's and JAX's
# compilers may lay a block out differently, and a float sum's rounding follows the layout) changes
# a bit of it; a term below 2**-40 weighs nothing (at most V * 2**-40 of a sum >= 1).
_FIXED_ONE = tl.constexpr(2.0**40)
_LOG_FIXED_ONE = tl.constexpr(40 * math.log(2.0))


@jit
def _fixed(term):
    """floor(term * 2**40) as int64, for terms in [0, 1] (exact: a power-of-two scaling, then truncation)."""
    return (term * _FIXED_ONE).to(tl.int64)


@jit
def _finite(x):
    return tl.abs(x) < float("inf")


@jit
def _row_block(row_ptr, start, V, BLOCK_V: tl.constexpr):
    """(columns, FP32 logits) of the row's block at `start` (-inf past V)."""
    cols = start + tl.arange(0, BLOCK_V)
    return cols, tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)


@jit
def _mass_above(row_ptr, V, pivot, floor, temperature, key_max, FP64: tl.constexpr, FAST_MATH: tl.constexpr,
                BLOCK_V: tl.constexpr, first=0):
    """The fixed-point mass (int64) of the finite logits in columns [first, V) whose key is > pivot and >= floor
    (top-k's threshold: top-p weighs what top-k keeps)."""
    total = tl.zeros([BLOCK_V], tl.int64)
    for start in range(first, V, BLOCK_V):
        cols, x = _row_block(row_ptr, start, V, BLOCK_V)
        key = _key(x, 0).to(tl.int64)
        mass = _fixed_point_mass(x, temperature, key_max, 0, FP64, FAST_MATH)
        total += tl.where(_finite(x) & (key > pivot) & (key >= floor), mass, 0).to(tl.int64)
    return tl.sum(total, axis=0)


@jit
def _kept(x, threshold, temperature, key_max, min_p, filtered, HAS_MIN_P: tl.constexpr, FP64: tl.constexpr):
    """Which logits x the filters keep (every finite one in a row they do not apply to)."""
    keep = _finite(x)
    if filtered:
        keep = keep & (_key(x, 0).to(tl.int64) >= threshold)
        if HAS_MIN_P:
            keep = keep & (_relative_probability(x, temperature, key_max, 0, FP64) >= min_p)
    return keep


@jit
def kept_term(x, m, inverse_t):
    """A finite logit's fixed-point term of the kept mass, exp((x - m) / T) against the row's largest logit m
    (every path and shard takes the same term: an integer sum in any order)."""
    return _fixed(tl.where(_finite(x), tl.exp((x - m) * inverse_t), 0.0))


@jit
def top_k_and_top_p(top_k_ptr, top_p_ptr, request, HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr):
    """(k, p) of a request: 0 and 1 (no limit) for an absent filter."""
    k = tl.full([], 0, tl.int64)
    if HAS_TOP_K:
        k = tl.load(top_k_ptr + request).to(tl.int64)
    p = 1.0
    if HAS_TOP_P:
        p = tl.load(top_p_ptr + request)
    return k, p


@jit
def filters_limit(k, count, p, min_p):
    """Whether some filter may leave out a finite logit of a row of `count` finite ones: top-k with 1 <= k < count,
    top-p below 1 (NaN keeps all), min-p above 0. Otherwise log_kept_mass is exactly 0."""
    return ((k >= 1) & (k < count)) | (p < 1.0) | (min_p > 0.0)


@jit
def row_log_kept_mass(kept_sum, log_scaled_sum, filtered, limits):
    """log S from the kept terms' integer sum (kept_term) and the row's log scaled normaliser (of its block
    statistics); exactly 0 for a row the filters leave whole (greedy, or no filter limits it)."""
    log_kept_mass = tl.log(kept_sum.to(tl.float64)) - _LOG_FIXED_ONE - log_scaled_sum
    return tl.where(filtered & limits, log_kept_mass, 0.0)


@jit
def _store_padding_row(b64, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, top_ids_ptr, top_logprobs_ptr,
                       num_top):
    """The outputs of a padding row (at or past num_valid)."""
    tl.store(raw_ptr + b64, float("nan"))
    tl.store(scaled_ptr + b64, float("nan"))
    tl.store(kept_ptr + b64, float("nan"))
    tl.store(log_kept_mass_ptr + b64, float("nan"))
    tl.store(rank_ptr + b64, 0)
    for j in range(num_top):
        tl.store(top_ids_ptr + b64 * num_top + j, -1)
        tl.store(top_logprobs_ptr + b64 * num_top + j, float("-inf"))


# ---- the single read: block statistics, reduced per row (no filters, no top list) ----

STATS = tl.constexpr(5)  # a block's: largest finite x, largest non-NaN x, raw sum, scaled sum, largest finite |x|
# (each an f64, stored as two f32 words of the plan's float32 buffer: [rows, 2 * STATS, num_blocks] f32)


@jit
def _masked_block_stats(x):
    """store_block_stats' (largest finite logit, x - it where finite and -inf elsewhere, largest finite |x|) of a
    block that may hold NaN or +-inf."""
    finite = tl.abs(x) < float("inf")
    largest = tl.max(tl.where(finite, x, float("-inf")), axis=0)
    return largest, tl.where(finite, x - largest, float("-inf")), tl.max(tl.where(finite, tl.abs(x), 0.0), axis=0)


@jit
def store_block_stats(x, temperature, stats_ptr, row64, block, num_blocks, FAST_MATH: tl.constexpr):
    """The log-softmax statistics of a block of FP32 logits `x` (-inf for padding), at
    stats_ptr[row, :, block] ([rows, STATS, num_blocks] f64): its largest finite logit m_b, its largest
    non-NaN logit (a +inf counts: rank's bound), the fixed-point sums (_fixed) of exp(x - m_b) and of
    exp((x - m_b) / T) over its finite logits (T = 1 for a greedy temperature), its largest finite |x| (the
    overflow rule). Every one exact whatever the layout the compiler chose.

    FAST_MATH (a GPU): the terms from ex2.approx.ftz (exp2_approx) of the very products tl.exp's ex2.approx
    takes, so the same terms, but for terms below 2**-126 (flushed to 0, which _fixed gives them anyway):
    three instructions fewer a term. The largest non-NaN logit is a plain max there (max.f32 ignores NaN), and
    a block of finite logits skips the masks."""
    inverse_t = tl.where(is_greedy(temperature), 1.0, 1.0 / temperature)
    if FAST_MATH:
        # a block of finite logits only (the usual one: no NaN, no +-inf, not a row's padded last block) takes
        # the plain forms, the same values: two instructions a logit to tell, five fewer than the masks
        largest = max_flagging_nan(x, FAST_MATH)
        smallest = tl.min(x, axis=0)
        if (largest < float("inf")) & (smallest > float("-inf")):
            d = x - largest
            top = largest
            magnitude = tl.maximum(tl.abs(largest), tl.abs(smallest))
        else:
            largest, d, magnitude = _masked_block_stats(x)
            top = tl.max(x, axis=0)
    else:
        largest, d, magnitude = _masked_block_stats(x)
        top = tl.max(tl.where(x == x, x, float("-inf")), axis=0)
    raw_sum, scaled_sum = _block_sums(d, inverse_t, FAST_MATH)
    out = stats_ptr.to(tl.pointer_type(tl.float64)) + (row64 * STATS) * num_blocks + block
    tl.store(out, largest.to(tl.float64))
    tl.store(out + num_blocks, top.to(tl.float64))
    tl.store(out + 2 * num_blocks, raw_sum.to(tl.float64))
    tl.store(out + 3 * num_blocks, scaled_sum.to(tl.float64))
    tl.store(out + 4 * num_blocks, magnitude.to(tl.float64))


@jit
def _block_sums(d, inverse_t, FAST_MATH: tl.constexpr):
    """The fixed-point sums (int64) of exp(d) and exp(d / T) over a block's differences d = x - m_b (-inf where
    the logit is not finite): store_block_stats' terms (vocab-parallel logprobs sum a shard's part of a block
    with the same code). At 1 / T == 1 (T = 1, greedy rows) d * (1 / T) is d, bit for bit, so the scaled sum is
    the raw one: taken as it is, not computed again (a branch the whole block takes alike)."""
    if inverse_t == 1.0:
        raw_sum = tl.sum(_fixed(exp2_approx(d * LOG2E) if FAST_MATH else tl.exp(d)), axis=0)
        scaled_sum = raw_sum
    else:
        if FAST_MATH:
            raw_terms = exp2_approx(d * LOG2E)
            scaled_terms = exp2_approx((d * inverse_t) * LOG2E)
        else:
            raw_terms = tl.exp(d)
            scaled_terms = tl.exp(d * inverse_t)
        raw_sum = tl.sum(_fixed(raw_terms), axis=0)
        scaled_sum = tl.sum(_fixed(scaled_terms), axis=0)
    return raw_sum, scaled_sum


@jit
def logprobs_stats_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16 (ROWS = 1), or [B / ROWS, ROWS, V], as filtered_list_reduce_kernel's
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32, or one f32 for all rows
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read
    num_rows_ptr,  # [1] i32, the requests (read with ROW_SLOTS)
    V,
    row_stride,
    request_stride,
    stats_ptr,  # [B, STATS, num_blocks] f64 output (store_block_stats)
    counts_ptr,  # [B, num_blocks] i32 output: the count of logits > the token's a block
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
    ROW_SLOTS: tl.constexpr = False,  # (with HAS_ROW_VALID) grid dimension 0 is row slots: padded_row_slots
):
    """Grid (B, num_blocks): token_logprobs' single read (no filters, no top list): each program the
    statistics of a block of its row, and its count of logits above the token's (rank)."""
    if ROW_SLOTS:
        end = rows_to_visit(row_valid_ptr, tl.load(num_rows_ptr)) * ROWS
        for slot_row in tl.range(tl.program_id(0), end, tl.num_programs(0), num_stages=1):
            b64 = tl.cast(slot_row, tl.int64)  # (a Python int in the interpreter)
            if not is_padding(row_valid_ptr, b64 // ROWS):
                _stats_block(logits_ptr, tokens_ptr, temperature_ptr, V, row_stride, request_stride, stats_ptr,
                             counts_ptr, b64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, ROWS)
    else:
        b64 = tl.program_id(0).to(tl.int64)
        if HAS_ROW_VALID:
            if is_padding(row_valid_ptr, b64 // ROWS):
                return
        _stats_block(logits_ptr, tokens_ptr, temperature_ptr, V, row_stride, request_stride, stats_ptr, counts_ptr,
                     b64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, ROWS)


@jit
def _stats_block(logits_ptr, tokens_ptr, temperature_ptr, V, row_stride, request_stride, stats_ptr, counts_ptr, b64,
                 BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr,
                 ROWS: tl.constexpr):
    """logprobs_stats_kernel's block program_id(1) of row b64."""
    request = b64 // ROWS
    V = aligned(V, VOCAB_ALIGN)
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    row_ptr = logits_ptr + tl.multiple_of(request * request_stride + (b64 % ROWS) * row_stride, ROW_ALIGN)
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    token = tl.load(tokens_ptr + b64).to(tl.int64)
    x_token = tl.load(row_ptr + tl.where((token >= 0) & (token < V), token, 0)).to(tl.float32)
    store_block_stats(x, load_temperature(temperature_ptr, request), stats_ptr, b64, block, num_blocks, FAST_MATH)
    tl.store(counts_ptr + b64 * num_blocks + block, tl.sum((x > x_token).to(tl.int32), axis=0))


@jit
def gumbel_logprobs_partial_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, as gumbel_partial_kernel's
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its programs read nothing
    num_rows_ptr,  # [1] i32, B (read with ROW_SLOTS)
    V,
    row_stride,
    partial_score_ptr,  # [B, num_blocks] f32: gumbel_partial_kernel's (FP32 scores)
    partial_index_ptr,  # [B, num_blocks] i32
    stats_ptr,  # [B, STATS, num_blocks] f64: store_block_stats'
    STREAM: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
    ROW_SLOTS: tl.constexpr = False,  # (with HAS_ROW_VALID) grid dimension 0 is row slots: padded_row_slots
):
    """gumbel_sample(return_logprobs=True)'s single read, grid (B, num_blocks): each program writes its
    block's Gumbel-max partials with gumbel_partial_kernel's code (store_sampled_block: the same token,
    which argmax_reduce_kernel then takes) and, from the same loaded logits, the block's log-softmax
    statistics (store_block_stats)."""
    if ROW_SLOTS:
        for slot_row in tl.range(tl.program_id(0), rows_to_visit(row_valid_ptr, tl.load(num_rows_ptr)),
                                 tl.num_programs(0), num_stages=1):
            row = tl.cast(slot_row, tl.int32)  # (a Python int in the interpreter)
            if not is_padding(row_valid_ptr, row):
                _gumbel_logprobs_block(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride,
                                       partial_score_ptr, partial_index_ptr, stats_ptr, row, STREAM, BLOCK_V,
                                       ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, SEED_WORDS)
    else:
        row = tl.program_id(0)
        if HAS_ROW_VALID:
            if is_padding(row_valid_ptr, row):
                return
        _gumbel_logprobs_block(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride,
                               partial_score_ptr, partial_index_ptr, stats_ptr, row, STREAM, BLOCK_V, ROW_ALIGN,
                               VOCAB_ALIGN, FAST_MATH, SEED_WORDS)


@jit
def _gumbel_logprobs_block(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, V, row_stride, partial_score_ptr,
                           partial_index_ptr, stats_ptr, row, STREAM: tl.constexpr, BLOCK_V: tl.constexpr,
                           ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr,
                           SEED_WORDS: tl.constexpr):
    """gumbel_logprobs_partial_kernel's block program_id(1) of `row`."""
    V = aligned(V, VOCAB_ALIGN)
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    temperature = load_temperature(temperature_ptr, row)
    x = store_sampled_block(logits_ptr, row, row_stride, V, block * BLOCK_V, load_seed(seeds_ptr, row, SEED_WORDS),
                            tl.load(positions_ptr + row).to(tl.int64), temperature, partial_score_ptr,
                            partial_index_ptr, row.to(tl.int64) * num_blocks + block, STREAM, BLOCK_V, ROW_ALIGN,
                            False, FAST_MATH)
    store_block_stats(x, temperature, stats_ptr, row.to(tl.int64), block, num_blocks, FAST_MATH)


@jit
def rank_count_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart
    tokens_ptr,  # [B] i32: the sampled tokens (-1: no rank to count)
    stats_ptr,  # [B, STATS, num_blocks] f64: store_block_stats'
    row_valid_ptr,  # common.is_padding's (read with ROW_SLOTS): a padding row's counts are not written
    num_rows_ptr,  # [1] i32, B (read with ROW_SLOTS)
    V,
    row_stride,
    num_blocks,
    counts_ptr,  # [B, num_blocks] i32 output: the count of logits > the token's a block
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    SLOTS: tl.constexpr,  # a power of two >= the blocks a program covers
    ROW_SLOTS: tl.constexpr = False,  # grid dimension 0 is row slots (padded plans: padded_row_slots)
):
    """Grid (B, P): logprobs_stats_kernel's counts for the samplers' fused pass, taken once the token is
    known. Program p of a row covers its blocks p, p + P, ...: it reads again only those whose largest logit
    (a +inf counts) exceeds the token's (sampled tokens lie mostly near the top: few blocks), one after the
    other, and writes every one of its blocks' counts (0 where not read). (A program a block was a wave of tiny
    programs, each a few dependent loads long: benchmarks/lab/INDEX.md.) With ROW_SLOTS, grid (slots, P): slot s
    counts rows s, s + slots, ... up to the valid ones (so P follows the slots, not the padded batch)."""
    if ROW_SLOTS:
        for slot_row in tl.range(tl.program_id(0), rows_to_visit(row_valid_ptr, tl.load(num_rows_ptr)),
                                 tl.num_programs(0), num_stages=1):
            row = tl.cast(slot_row, tl.int32)  # (a Python int in the interpreter)
            if not is_padding(row_valid_ptr, row):
                _count_row(logits_ptr, tokens_ptr, stats_ptr, V, row_stride, num_blocks, counts_ptr, row.to(tl.int64),
                           BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, SLOTS)
    else:
        _count_row(logits_ptr, tokens_ptr, stats_ptr, V, row_stride, num_blocks, counts_ptr,
                   tl.program_id(0).to(tl.int64), BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, SLOTS)


@jit
def _count_row(logits_ptr, tokens_ptr, stats_ptr, V, row_stride, num_blocks, counts_ptr, b64, BLOCK_V: tl.constexpr,
               ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr, SLOTS: tl.constexpr):
    """rank_count_kernel's program program_id(1) of row b64."""
    first = tl.program_id(1)
    programs = tl.num_programs(1)
    slots = tl.arange(0, SLOTS)
    blocks = first + slots * programs
    in_row = blocks < num_blocks
    counts = tl.zeros([SLOTS], tl.int32)
    token = tl.load(tokens_ptr + b64)
    if token >= 0:
        V = aligned(V, VOCAB_ALIGN)
        row_ptr = logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN)
        x_token = tl.load(row_ptr + token).to(tl.float32)
        tops = tl.load(stats_ptr.to(tl.pointer_type(tl.float64)) + (b64 * STATS + 1) * num_blocks + blocks,
                       mask=in_row, other=float("-inf")).to(tl.float32)
        pending = in_row & (tops > x_token)
        for _ in range(tl.sum(pending.to(tl.int32), axis=0)):
            slot = tl.min(tl.where(pending, slots, SLOTS), axis=0)
            cols = (first + slot * programs) * BLOCK_V + tl.arange(0, BLOCK_V)
            x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            counts = tl.where(slots == slot, tl.sum((x > x_token).to(tl.int32), axis=0), counts)
            pending = pending & (slots != slot)
    tl.store(counts_ptr + b64 * num_blocks + blocks, counts, mask=in_row)


def rank_count_launch(config, batch: int, vocab: int, row_stride: int, row_align: int, valid: str, row_valid: bool):
    """rank_count_kernel's launch: P programs a row, more for fewer rows (2048 programs in all, 8 to 64 a row, at
    most one a block); SLOTS follows V alone (the blocks of 8 programs), so no batch size compiles anything. With
    row_valid on padded_row_slots(batch) row slots: P as for that many rows (a padded batch of 256 with 16
    valid rows counts them on 64 programs a row, as a batch of 16 does, not 8)."""
    rows = padded_row_slots(batch) if row_valid else batch
    least = min(8, config.num_blocks)
    programs = min(config.num_blocks, max(least, min(64, 2048 // rows)))
    return launch(rank_count_kernel, (rows, programs),
                  ("logits", "sampled", "logprob_stats", valid, "num_rows" if row_valid else valid, vocab, row_stride,
                   config.num_blocks), ("rank_counts",),
                  BLOCK_V=config.block_v, ROW_ALIGN=row_align, VOCAB_ALIGN=config.vocab_align,
                  SLOTS=triton.next_power_of_2(-(-config.num_blocks // least)), ROW_SLOTS=row_valid,
                  num_warps=config.num_warps)


@jit
def _take_best(values, cols, eligible, NONE: tl.constexpr):
    """(value, column) of the largest eligible value, the lowest column among equal ones ((-inf, NONE): none)."""
    best = tl.max(tl.where(eligible, values, float("-inf")), axis=0)
    col = tl.min(tl.where(eligible & (values == best), cols, NONE), axis=0)
    return best, col


@jit
def top_list_kernel(
    logits_ptr,  # as logprobs_stats_kernel's
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row lists nothing
    num_top_ptr,  # [1] i32: the count a row, 1..TOP (0: nothing to do)
    V,
    row_stride,
    request_stride,
    num_blocks,
    stats_ptr,  # [B, STATS, num_blocks] f64: store_block_stats' (each block's largest finite logit)
    top_ids_ptr,  # [B, num_top] i32 output: the columns, largest logit first, the lowest column first on ties
    top_values_ptr,  # [B, num_top] f32 output: their logits (logprobs_reduce_kernel's input)
    partial_ids_ptr,  # [B, PROGRAMS * TOP] i32 scratch (PROGRAMS > 1): each program's list
    partial_values_ptr,  # [B, PROGRAMS * TOP] f32 scratch
    arrivals_ptr,  # [B] i32, zero on entry, left zero (PROGRAMS > 1): the row's programs that have listed
    BLOCK_V: tl.constexpr,  # the stats' blocks
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= num_blocks
    TOP: tl.constexpr,  # a power of two >= MAX_NUM_TOP
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
    COUNT: tl.constexpr = 0,  # > 0: this many a row (filtered_list_reduce_kernel's list), num_top_ptr unread
    PROGRAMS: tl.constexpr = 1,  # a row's programs (grid dimension 1), a power of two
    SHORT_ROW: tl.constexpr = False,  # (COUNT = TOP) fewer blocks than TOP (list_row_top's short rows): held at once
):
    """Grid (B, PROGRAMS): the row's num_top largest finite logits, reading only the blocks that can hold one.
    The num_top-th largest of the blocks' maxima is a lower bound of the row's num_top-th largest logit (that
    many blocks hold a logit at or above it), so a block whose largest logit is below it holds none of them:
    program p reads the other blocks among blocks p, p + PROGRAMS, ... (about num_top of them in all; every
    block only where the row's logits are equal) in column order, keeping a list of the best num_top so far
    (a logit enters where it beats the list's worst: larger, or equal and in a lower column). With one
    program it writes its list sorted; with several, each writes its list, and the last of the row's programs
    to arrive (an atomic count it resets to zero) writes the best num_top of the lists, sorted: the same
    logits (the lists' union holds the row's num_top best in that order). Padding past a row's finite
    logits: column -1, value -inf. SHORT_ROW: list_row_top's."""
    b64 = tl.program_id(0).to(tl.int64)
    request = b64 // ROWS
    if COUNT > 0:
        num_top = tl.full([], COUNT, tl.int32)
    else:
        num_top = tl.load(num_top_ptr)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, request):
            if tl.program_id(1) == 0:  # (no arrival: the row's count stays zero)
                for j in range(num_top):
                    tl.store(top_ids_ptr + b64 * num_top + j, -1)
                    tl.store(top_values_ptr + b64 * num_top + j, float("-inf"))
            return
    if num_top > 0:
        V = aligned(V, VOCAB_ALIGN)
        row_ptr = logits_ptr + tl.multiple_of(request * request_stride + (b64 % ROWS) * row_stride, ROW_ALIGN)
        maxima_ptr = stats_ptr.to(tl.pointer_type(tl.float64)) + (b64 * STATS) * num_blocks
        list_row_top(row_ptr, 0, V, num_top, maxima_ptr, num_blocks, b64, top_ids_ptr, top_values_ptr, partial_ids_ptr,
                     partial_values_ptr, arrivals_ptr, BLOCK_V, REDUCE_BLOCK, TOP, PROGRAMS, False, SHORT_ROW)


@jit
def list_row_top(row_ptr, first, V, num_top, maxima_ptr, num_blocks, b64, top_ids_ptr, top_values_ptr, partial_ids_ptr,
                 partial_values_ptr, arrivals_ptr, BLOCK_V: tl.constexpr, REDUCE_BLOCK: tl.constexpr,
                 TOP: tl.constexpr, PROGRAMS: tl.constexpr, FIRST: tl.constexpr, SHORT_ROW: tl.constexpr = False):
    """top_list_kernel's list of row b64 (num_top >= 1): its columns [0, V) at row_ptr (with FIRST, [first, V):
    a vocabulary shard's columns counted from its first block's start), blocks of BLOCK_V whose largest finite
    logits are at maxima_ptr (f64, num_blocks of them).

    SHORT_ROW (the plan's choice: the filters' list of TOP over fewer blocks than that, e.g. V = 32000 in blocks
    of 512, so num_top is above the blocks' count: the num_top-th largest block maximum, the bound, is -inf, and a
    list that takes its logits one at a time took hundreds of steps, 130 us at B = 1): the program holds all its
    blocks at once and takes its num_top best by their threshold (the num_top-th largest key among them, by
    bisection), the lowest columns among the threshold's ties, into its list's slots in column order; the last
    program merges the lists by one sort, as with several programs. The same list."""
    if SHORT_ROW:
        _short_row_top(row_ptr, first, V, num_top, num_blocks, b64, top_ids_ptr, top_values_ptr, partial_ids_ptr,
                       partial_values_ptr, arrivals_ptr, BLOCK_V, REDUCE_BLOCK, TOP, PROGRAMS, FIRST)
    else:
        _bounded_row_top(row_ptr, first, V, num_top, maxima_ptr, num_blocks, b64, top_ids_ptr, top_values_ptr,
                         partial_ids_ptr, partial_values_ptr, arrivals_ptr, BLOCK_V, REDUCE_BLOCK, TOP, PROGRAMS, FIRST)


@jit
def _bounded_row_top(row_ptr, first, V, num_top, maxima_ptr, num_blocks, b64, top_ids_ptr, top_values_ptr,
                     partial_ids_ptr, partial_values_ptr, arrivals_ptr, BLOCK_V: tl.constexpr,
                     REDUCE_BLOCK: tl.constexpr, TOP: tl.constexpr, PROGRAMS: tl.constexpr, FIRST: tl.constexpr):
    """list_row_top's list where the blocks' maxima bound it (the num_top-th largest of them)."""
    blocks = tl.arange(0, REDUCE_BLOCK)
    block_max = tl.load(maxima_ptr + blocks, mask=blocks < num_blocks, other=float("-inf")).to(tl.float32)
    bound = _kth_largest(block_max, num_top)
    slots = tl.arange(0, TOP)
    list_values = tl.full([TOP], float("-inf"), tl.float32)
    list_cols = tl.full([TOP], -1, tl.int32)
    count = num_top * 0  # entries in the list (the first `count` slots)
    worst_value = tl.full([], float("-inf"), tl.float32)  # the list's worst entry, once it is full
    worst_col = tl.full([], -1, tl.int32)
    offsets = tl.arange(0, BLOCK_V)
    for block in range(tl.program_id(1), num_blocks, PROGRAMS):
        largest = tl.load(maxima_ptr + block).to(tl.float32)
        if (largest >= bound) & (largest > float("-inf")):
            cols = block * BLOCK_V + offsets
            if FIRST:
                held = (cols >= first) & (cols < V)
            else:
                held = cols < V
            x = tl.load(row_ptr + cols, mask=held, other=float("-inf")).to(tl.float32)
            eligible = (tl.abs(x) < float("inf")) & (x >= bound)
            more = num_top > 0
            while more:
                beats = (count < num_top) | (x > worst_value) | ((x == worst_value) & (cols < worst_col))
                value, col = _take_best(x, cols, eligible & beats, 2147483647)
                more = col < 2147483647
                if more:
                    eligible = eligible & (cols != col)
                    slot = tl.where(count < num_top, count,
                                    tl.min(tl.where((list_values == worst_value) & (list_cols == worst_col),
                                                    slots, TOP), axis=0))
                    list_values = tl.where(slots == slot, value, list_values)
                    list_cols = tl.where(slots == slot, col, list_cols)
                    count = tl.minimum(count + 1, num_top)
                    if count == num_top:  # the worst: the smallest value, the highest column among equal ones
                        worst_value = tl.min(tl.where(slots < count, list_values, float("inf")), axis=0)
                        worst_col = tl.max(tl.where((slots < count) & (list_values == worst_value), list_cols,
                                                    -1), axis=0)
    if PROGRAMS == 1:
        _store_sorted(list_values, list_cols, slots < count, num_top, b64, top_ids_ptr, top_values_ptr)
    else:
        mine = b64 * (PROGRAMS * TOP) + tl.program_id(1) * TOP + slots
        tl.store(partial_values_ptr + mine, list_values)
        tl.store(partial_ids_ptr + mine, tl.where(slots < count, list_cols, -1))
        tl.debug_barrier()  # every thread's stores before the one release
        if tl.atomic_add(arrivals_ptr + b64, 1, sem="acq_rel", scope="gpu") == PROGRAMS - 1:
            every = b64 * (PROGRAMS * TOP) + tl.arange(0, PROGRAMS * TOP)
            values = tl.load(partial_values_ptr + every, cache_modifier=".cg")
            ids = tl.load(partial_ids_ptr + every, cache_modifier=".cg")
            _store_merged(values, ids, row_ptr, num_top, b64, top_ids_ptr, top_values_ptr)
            tl.atomic_xchg(arrivals_ptr + b64, 0, sem="relaxed", scope="gpu")


@jit
def _short_row_top(row_ptr, first, V, num_top, num_blocks, b64, top_ids_ptr, top_values_ptr, partial_ids_ptr,
                   partial_values_ptr, arrivals_ptr, BLOCK_V: tl.constexpr, REDUCE_BLOCK: tl.constexpr,
                   TOP: tl.constexpr, PROGRAMS: tl.constexpr, FIRST: tl.constexpr):
    """list_row_top's SHORT_ROW list: this program's blocks (program_id(1) + i * PROGRAMS) at once, its num_top
    best finite logits (larger first, the lower column first among equal ones) written to its partial list in
    column order, then the lists merged by the last program to arrive (with one program, by itself)."""
    PER: tl.constexpr = (REDUCE_BLOCK + PROGRAMS - 1) // PROGRAMS
    block_ids = tl.program_id(1) + tl.arange(0, PER) * PROGRAMS
    cols = tl.reshape(block_ids[:, None] * BLOCK_V + tl.arange(0, BLOCK_V)[None, :], [PER * BLOCK_V])
    held = (cols < num_blocks * BLOCK_V) & (cols < V)
    if FIRST:
        held = held & (cols >= first)
    x = tl.load(row_ptr + cols, mask=held, other=float("-inf")).to(tl.float32)
    eligible = held & (tl.abs(x) < float("inf"))
    keys = _key(x, 0).to(tl.int64)
    # the num_top-th largest eligible key (every eligible one where fewer: lo stays below them all)
    lo = tl.full([], -(2**31), tl.int64)
    hi = tl.full([], 2**31, tl.int64)
    for _ in range(32):
        mid = (lo + hi) // 2
        enough = tl.sum((eligible & (keys >= mid)).to(tl.int32), axis=0) >= num_top
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    above = eligible & (keys > lo)
    tie = eligible & (keys == lo)
    tie_rank = tl.cumsum(tie.to(tl.int32), 0) - 1  # in column order
    chosen = above | (tie & (tie_rank < num_top - tl.sum(above.to(tl.int32), axis=0)))
    slot = tl.cumsum(chosen.to(tl.int32), 0) - 1
    mine = b64 * (PROGRAMS * TOP) + tl.program_id(1) * TOP
    slots = tl.arange(0, TOP)
    count = tl.sum(chosen.to(tl.int32), axis=0)
    tl.store(partial_values_ptr + mine + slots, float("-inf"), mask=slots >= count)
    tl.store(partial_ids_ptr + mine + slots, -1, mask=slots >= count)
    tl.store(partial_values_ptr + mine + slot, x, mask=chosen)
    tl.store(partial_ids_ptr + mine + slot, cols, mask=chosen)
    tl.debug_barrier()  # every thread's stores before the one release
    last = True
    if PROGRAMS > 1:
        last = tl.atomic_add(arrivals_ptr + b64, 1, sem="acq_rel", scope="gpu") == PROGRAMS - 1
    if last:
        every = b64 * (PROGRAMS * TOP) + tl.arange(0, PROGRAMS * TOP)
        values = tl.load(partial_values_ptr + every, cache_modifier=".cg")
        ids = tl.load(partial_ids_ptr + every, cache_modifier=".cg")
        _store_merged(values, ids, row_ptr, num_top, b64, top_ids_ptr, top_values_ptr)
        if PROGRAMS > 1:
            tl.atomic_xchg(arrivals_ptr + b64, 0, sem="relaxed", scope="gpu")


@jit
def _kth_largest(values, k):
    """The k-th largest of the FP32 `values` (no NaN; -inf fills), with multiplicity (-inf where there are fewer
    than k): the largest key with at least k values at or above it, by bisection over the order-preserving keys
    (32 counts, where taking the best k times took 2k reductions)."""
    keys = _key(values, 0)
    lo = tl.full([], -(2**31), tl.int64)  # below every key (-inf's is above it)
    hi = tl.full([], 2**31, tl.int64)  # fewer than k (k >= 1) at or above it
    for _ in range(32):
        mid = (lo + hi) // 2
        enough = tl.sum((keys >= mid).to(tl.int32), axis=0) >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    return tl.where(lo > -(2**31), _key_value(lo, 0), float("-inf"))  # fewer than k values: -inf


@jit
def _sorted_entries(values, cols):
    """The listed entries (column >= 0, distinct, finite values) in top_list_kernel's order by one sort: each entry
    packed as (its value's key, 2**31 - 1 - its column), in descending order the same order (a larger value first,
    the lower column first among equal ones, -0.0 equal to +0.0 as _key makes them). Returns, in that order, their
    columns (-1 past the listed ones), their values' keys, and which are listed."""
    packed = tl.where(cols >= 0, _key(values, 0).to(tl.int64) * 4294967296 + (2147483647 - cols),
                      -9223372036854775807)
    order = tl.sort(packed, descending=True)
    listed = order > -9223372036854775807
    return tl.where(listed, 2147483647 - (order & 4294967295), -1).to(tl.int32), (order >> 32).to(tl.int32), listed


@jit
def _store_merged(values, cols, row_ptr, num_top, b64, top_ids_ptr, top_values_ptr):
    """_store_sorted of the listed entries by one sort (_sorted_entries); the values read again from the row by
    column (the logits themselves, sign of zero included)."""
    sorted_cols, _, listed = _sorted_entries(values, cols)
    rank = tl.arange(0, values.shape[0])
    wanted = rank < num_top
    sorted_values = tl.load(row_ptr + sorted_cols, mask=wanted & listed, other=float("-inf")).to(tl.float32)
    tl.store(top_ids_ptr + b64 * num_top + rank, sorted_cols, mask=wanted)
    tl.store(top_values_ptr + b64 * num_top + rank, sorted_values, mask=wanted)


@jit
def _store_sorted(values, cols, listed, num_top, b64, top_ids_ptr, top_values_ptr):
    """The num_top best of the listed (value, column) pairs, largest first, the lowest column first among
    equal values (-1 and -inf past the listed ones)."""
    for j in range(num_top):
        value, col = _take_best(values, cols, listed, 2147483647)
        listed = listed & (cols != col)
        out = b64 * num_top + j
        tl.store(top_ids_ptr + out, tl.where(col < 2147483647, col, -1))
        tl.store(top_values_ptr + out, value)


@jit
def _row_from_block_stats(stats_ptr, counts_ptr, b64, num_blocks, temperature, REDUCE_BLOCK: tl.constexpr):
    """A row's numbers from its blocks' statistics (store_block_stats) and rank counts: (m, the count of logits
    above the token's, greedy, log raw sum, log scaled sum), the normalisers combined in FP64 over the blocks (the
    blocks' integer sums times exp(m_b - m); an overflowing row's scaled sum is its raw one, read at T = 1)."""
    blocks = tl.arange(0, REDUCE_BLOCK)
    in_row = blocks < num_blocks
    base = stats_ptr.to(tl.pointer_type(tl.float64)) + (b64 * STATS) * num_blocks + blocks
    block_max = tl.load(base, mask=in_row, other=float("-inf")).to(tl.float32)  # (f32 values, stored as f64)
    raw_b = tl.load(base + 2 * num_blocks, mask=in_row, other=0.0)
    scaled_b = tl.load(base + 3 * num_blocks, mask=in_row, other=0.0)
    magnitude = tl.max(tl.load(base + 4 * num_blocks, mask=in_row, other=0.0), axis=0).to(tl.float32)
    larger = tl.sum(tl.load(counts_ptr + b64 * num_blocks + blocks, mask=in_row, other=0), axis=0)
    m = tl.max(block_max, axis=0)
    overflow = magnitude * (1.0 / temperature) == float("inf")
    greedy = is_greedy(temperature) | overflow
    blocks_t = tl.where(is_greedy(temperature), 1.0, 1.0 / temperature)  # the blocks' scaled sums' 1 / T
    shift = tl.where(block_max > float("-inf"), block_max.to(tl.float64) - m.to(tl.float64), float("-inf"))
    log_raw_sum = tl.log(tl.sum(raw_b * tl.exp(shift), axis=0)) - _LOG_FIXED_ONE
    log_scaled_sum = tl.log(tl.sum(scaled_b * tl.exp(shift * blocks_t.to(tl.float64)), axis=0)) - _LOG_FIXED_ONE
    return m, larger, greedy, log_raw_sum, tl.where(overflow, log_raw_sum, log_scaled_sum)


@jit
def _top_k_on_list(top_k_ptr, request, count_listed, LIST: tl.constexpr, HAS_TOP_K: tl.constexpr):
    """(k, whether the list is full, whether top-k acts) for a row whose list holds count_listed logits: top-k acts
    where 1 <= k < the count of finite logits (k == LIST == a full list's count keeps them all either way).
    filtered_list_reduce_kernel's rule, which row_mass_kernel follows to know the rows that need the mass."""
    if HAS_TOP_K:
        k = tl.load(top_k_ptr + request).to(tl.int64)
    else:
        k = tl.full([], 0, tl.int64)
    full = count_listed == LIST
    return k, full, (k >= 1) & ((k < count_listed) | full)


@jit
def row_mass_kernel(
    logits_ptr,  # as filtered_list_reduce_kernel's
    temperature_ptr,
    top_k_ptr,  # [B] i32|i64 (read with HAS_TOP_K)
    top_p_ptr,  # [B] f32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's mass is not needed
    V,
    row_stride,
    request_stride,
    list_ids_ptr,  # [B, LIST] i32: top_list_kernel's
    list_values_ptr,  # [B, LIST] f32
    mass_ptr,  # [B, P] i64 output (as i32 pairs): each program's part of the row's fixed-point mass, or of its
    # count of logits at or above the k-th largest (0: not needed)
    LIST: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr,
    MASS_BLOCK: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
    HAS_TOP_K: tl.constexpr = True,
    HAS_TOP_P: tl.constexpr = True,
):
    """Grid (B, P): filtered_list_reduce_kernel's whole-row mass of top-p (the fixed-point masses of every finite
    logit, an integer sum: any split of the row gives it), for the rows that may need it (a full list, top-p in
    (0, 1), top-k not acting), split over P programs, each a contiguous part of the row (one program a row
    was the list route's slowest step at small batches: benchmarks/lab/INDEX.md); for a row whose top-k (k <=
    LIST) keeps ties of its k-th largest logit past a full list, the count of logits at or above that one
    instead (an integer sum too)."""
    b64 = tl.program_id(0).to(tl.int64)
    request = b64 // ROWS
    part = tl.program_id(1)
    parts = tl.num_programs(1)
    total = tl.zeros([], tl.int64)
    needed = True
    if HAS_ROW_VALID:
        needed = not is_padding(row_valid_ptr, request)
    if needed:
        slots = tl.arange(0, LIST)
        values = tl.load(list_values_ptr + b64 * LIST + slots)
        count_listed = tl.sum((tl.load(list_ids_ptr + b64 * LIST + slots) >= 0).to(tl.int32), axis=0)
        k, full, active = _top_k_on_list(top_k_ptr, request, count_listed, LIST, HAS_TOP_K)
        p = 1.0
        if HAS_TOP_P:
            p = tl.load(top_p_ptr + request)
        kth = tl.sum(tl.where(slots == k - 1, values, 0.0), axis=0)
        ties = full & active & (k <= LIST) & (tl.sum(tl.where(slots == LIST - 1, values, 0.0), axis=0) >= kth)
        if ties | (full & (not active) & (p > 0.0) & (p < 1.0)):
            V = aligned(V, VOCAB_ALIGN)
            row_ptr = logits_ptr + tl.multiple_of(request * request_stride + (b64 % ROWS) * row_stride, ROW_ALIGN)
            chunk = tl.cdiv(V, parts * MASS_BLOCK) * MASS_BLOCK
            end = tl.minimum(part * chunk + chunk, V)
            if ties:
                counts = tl.zeros([MASS_BLOCK], tl.int32)
                for start in range(part * chunk, end, MASS_BLOCK):
                    cols, x = _row_block(row_ptr, start, end, MASS_BLOCK)
                    counts += (_finite(x) & (_key(x, 0).to(tl.int64) >= _key(kth, 0).to(tl.int64))).to(tl.int32)
                total = tl.sum(counts.to(tl.int64), axis=0)
            else:
                temperature = load_temperature(temperature_ptr, request)
                key_max = _key(tl.max(values, axis=0), 0)  # the row's largest finite logit (the list's first)
                floor = tl.full([], _KEY_FLOOR, tl.int64)  # every finite logit's key is above it
                total = _mass_above(row_ptr, end, floor - 1, floor, temperature, key_max, FP64, FAST_MATH, MASS_BLOCK,
                                    part * chunk)
    tl.store(mass_ptr.to(tl.pointer_type(tl.int64)) + b64 * parts + part, total)


@jit
def filtered_list_reduce_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16 (ROWS = 1), or [B / ROWS, ROWS, V]: rows `row_stride` elements apart within
    # a request, requests `request_stride` apart, columns contiguous
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32, or one f32 for all rows (load_temperature)
    top_k_ptr,  # [B] i32|i64
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    num_top_ptr,  # [1] i32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row is neither done nor pending
    V,
    row_stride,
    request_stride,
    num_blocks,
    stats_ptr,  # [B, STATS, num_blocks] f64: logprobs_stats_kernel's
    counts_ptr,  # [B, num_blocks] i32: its rank counts
    list_ids_ptr,  # [B, LIST] i32: top_list_kernel's LIST largest finite logits (-1 past the row's finite ones)
    list_values_ptr,  # [B, LIST] f32
    row_mass_ptr,  # [B, MASS_PROGRAMS] i64 as i32 pairs (read with top-p or top-k): row_mass_kernel's parts
    raw_ptr,  # [B] f32 outputs: raw, scaled, kept, log_kept_mass, for the rows it takes (done)
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,  # [B] i32
    top_ids_ptr,  # [B, num_top] i32
    top_logprobs_ptr,  # [B, num_top] f32
    done_ptr,  # [B] i32 output: 1 where this kernel wrote the row
    pending_ptr,  # [B] u8 output: 1 for the other rows but padding ones (the searches' row_valid)
    REDUCE_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr,
    MASS_PROGRAMS: tl.constexpr,  # row_mass_kernel's programs a row
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
    HAS_TOP_K: tl.constexpr = True,
    ALL_ROWS: tl.constexpr = False,  # every row's k is in [1, LIST] (a host-known int): outputs are the op's
):
    """Grid (B,): token_logprobs with filters from the single read's statistics and the row's LIST largest
    logits, where the kept set lies within them: top-k active with k <= LIST (where its ties at the k-th
    largest reach past a full list, every logit it keeps past the list equals the list's last: row_mass_kernel
    counts them, and they add that count times the last's mass and term); without top-k (or where it keeps
    every logit), a row whose top-p or min-p cuts inside the list (the logits at or below the list's last one
    are not kept) or that no filter limits; rows that filters do not touch (greedy, no finite logit) too. The
    module docstring's rules, in its fixed-point masses and terms: top-k's threshold is the k-th largest
    logit's key, top-p's the smallest kept key whose strictly larger kept logits weigh less than p times the
    kept mass (the list is sorted: a running sum; without top-k the kept mass is the whole row's, an integer
    sum), min-p compares e with min_p; the kept terms exp((x - m) / T) are summed as integers. Every other row
    (done = 0) but padding ones is pending: the searches', kept_mass_kernel's and filtered_finish_kernel's.
    With ALL_ROWS no row is pending, and this kernel writes the padding rows' fill too."""
    b64 = tl.program_id(0).to(tl.int64)
    request = b64 // ROWS
    done = tl.full([], 1, tl.int32)
    padding = tl.full([], 0, tl.int1)
    if HAS_ROW_VALID:
        padding = is_padding(row_valid_ptr, request)
        if padding:
            done = done * 0
            if ALL_ROWS:
                _store_padding_row(b64, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, top_ids_ptr,
                                   top_logprobs_ptr, tl.load(num_top_ptr))
    if done == 1:
        V = aligned(V, VOCAB_ALIGN)
        row_ptr = logits_ptr + tl.multiple_of(request * request_stride + (b64 % ROWS) * row_stride, ROW_ALIGN)
        temperature = load_temperature(temperature_ptr, request)
        m, larger, greedy, log_raw_sum, log_scaled_sum = _row_from_block_stats(stats_ptr, counts_ptr, b64, num_blocks,
                                                                               temperature, REDUCE_BLOCK)
        inverse_t = tl.where(greedy, 1.0, 1.0 / temperature)
        # the list, largest first (-inf past the row's finite logits)
        slots = tl.arange(0, LIST)
        values = tl.load(list_values_ptr + b64 * LIST + slots)
        listed = tl.load(list_ids_ptr + b64 * LIST + slots) >= 0
        count_listed = tl.sum(listed.to(tl.int32), axis=0)
        filtered = (not greedy) & (count_listed > 0)
        key_max = _key(m, 0)
        keys = _key(values, 0).to(tl.int64)
        threshold = tl.full([], _KEY_FLOOR, tl.int64)
        k, full, active = _top_k_on_list(top_k_ptr, request, count_listed, LIST, HAS_TOP_K)
        min_p = 0.0
        if HAS_MIN_P:
            min_p = _min_p(min_p_ptr, request)
        p = 1.0
        if HAS_TOP_P:
            p = tl.load(top_p_ptr + request)
        top_p_acts = filtered & (p < 1.0)  # (NaN keeps all)
        # whether some filter may leave out a logit: otherwise every finite one is kept (log_kept_mass = 0)
        limits = active | top_p_acts | (min_p > 0.0)
        # top-p's mass of all kept logits where top-k keeps every one and the list does not hold them all: the
        # whole row's, an integer sum (the same limit, so the same kept set)
        row_mass = tl.zeros([], tl.int64)
        last = tl.sum(tl.where(slots == LIST - 1, values, 0.0), axis=0)
        ties_past = tl.zeros([], tl.int64)  # the logits past the list that top-k keeps (each equal to `last`)
        if filtered:
            if active & (k <= LIST):
                kth = tl.sum(tl.where(slots == k - 1, values, 0.0), axis=0)
                if full & (last >= kth):  # (so last == kth)
                    parts = row_mass_ptr.to(tl.pointer_type(tl.int64)) + b64 * MASS_PROGRAMS
                    ties_past = tl.sum(tl.load(parts + tl.arange(0, MASS_PROGRAMS)), axis=0) - LIST
                threshold = _key(kth, 0).to(tl.int64)
            elif active:
                done = done * 0  # top-k keeps more logits than the list holds
            elif full & limits:
                # the kept set lies within the list where top-p or min-p leaves out the list's last logit (and so
                # every logit at or below it)
                cut = _relative_probability(last, temperature, key_max, 0, FP64) < min_p
                if HAS_TOP_P:
                    cut = cut | (p <= 0.0)
                    if (p > 0.0) & (p < 1.0):
                        parts = row_mass_ptr.to(tl.pointer_type(tl.int64)) + b64 * MASS_PROGRAMS
                        row_mass = tl.sum(tl.load(parts + tl.arange(0, MASS_PROGRAMS)), axis=0)
                        above_last = tl.where(values > last, _fixed_point_mass(values, temperature, key_max, 0, FP64,
                                                                               FAST_MATH), 0).to(tl.int64)
                        limit = p.to(tl.float64) * row_mass.to(tl.float64)
                        cut = cut | (tl.sum(above_last, axis=0).to(tl.float64) >= limit)
                if not cut:
                    done = done * 0
        if done == 1:
            kept = listed & (keys >= threshold)
            if HAS_TOP_P:
                if filtered & (p <= 0.0):
                    threshold = key_max.to(tl.int64)  # the largest logit only
                elif filtered & (p > 0.0) & (p < 1.0):
                    mass = tl.where(kept, _fixed_point_mass(values, temperature, key_max, 0, FP64, FAST_MATH),
                                    0).to(tl.int64)
                    mass_last = _fixed_point_mass(last, temperature, key_max, 0, FP64, FAST_MATH).to(tl.int64)
                    kept_mass = tl.where(row_mass > 0, row_mass, tl.sum(mass, axis=0) + ties_past * mass_last)
                    limit = p.to(tl.float64) * kept_mass.to(tl.float64)
                    before = tl.cumsum(mass, 0) - mass  # the mass of the larger listed logits (a sorted list)
                    short = kept & (before.to(tl.float64) < limit)
                    threshold = tl.min(tl.where(short, keys, 2**62), axis=0)
            kept = _kept(values, threshold, temperature, key_max, min_p, filtered, HAS_MIN_P, FP64) & listed
            kept_sum = tl.sum(tl.where(kept, kept_term(values, m, inverse_t), 0), axis=0)
            last_kept = _kept(last, threshold, temperature, key_max, min_p, filtered, HAS_MIN_P, FP64)
            kept_sum += tl.where(last_kept, ties_past * kept_term(last, m, inverse_t), 0)
            log_kept_mass = row_log_kept_mass(kept_sum, log_scaled_sum, filtered, limits)
            token = tl.load(tokens_ptr + b64).to(tl.int64)
            valid = (token >= 0) & (token < V) & (m > float("-inf"))
            x_token = tl.load(row_ptr + tl.where(valid, token, 0)).to(tl.float32)
            token_kept = _kept(x_token, threshold, temperature, key_max, min_p, filtered, HAS_MIN_P, FP64)
            store_row_logprobs(b64, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum,
                               num_top_ptr, top_ids_ptr, top_ids_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr,
                               rank_ptr, top_logprobs_ptr, False, log_kept_mass, token_kept)
            _store_list_top(b64, num_top_ptr, list_ids_ptr, values, m, log_raw_sum, top_ids_ptr, top_logprobs_ptr,
                            LIST)
    tl.store(done_ptr + b64, done)
    tl.store(pending_ptr + b64, ((done == 0) & ~padding).to(tl.uint8))


@jit
def _store_list_top(b64, num_top_ptr, list_ids_ptr, values, m, log_raw_sum, top_ids_ptr, top_logprobs_ptr,
                    LIST: tl.constexpr):
    """A row's top outputs: the list's first num_top (num_top <= LIST; `values` its logits), raw logprobs."""
    slots = tl.arange(0, LIST)
    num_top = tl.load(num_top_ptr)
    for j in range(num_top):
        out = b64 * num_top + j
        value = tl.sum(tl.where(slots == j, values, 0.0), axis=0)
        col = tl.load(list_ids_ptr + b64 * LIST + j)
        tl.store(top_ids_ptr + out, col)
        tl.store(top_logprobs_ptr + out, tl.where(col >= 0, value.to(tl.float64) - m.to(tl.float64) - log_raw_sum,
                                                  float("-inf")).to(tl.float32))


@jit
def kept_mass_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32, or one f32 for all rows
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    pending_ptr,  # [B] u8: filtered_list_reduce_kernel's (the rows to sum; a pending row is filtered, not greedy)
    threshold_ptr,  # [B, 4] i32 (read with HAS_THRESHOLD): shard_threshold_kernel's kept-set threshold (i64)
    list_values_ptr,  # [B, LIST] f32: top_list_kernel's (the first: the row's largest finite logit m)
    V,
    row_stride,
    sums_ptr,  # [B, 2, P] i64 output (as i32 pairs): each program's kept terms' sum and finite count (0: not pending)
    LIST: tl.constexpr,
    FP64: tl.constexpr,
    MASS_BLOCK: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    HAS_THRESHOLD: tl.constexpr,  # top-k or top-p (else every finite logit passes the threshold)
    HAS_MIN_P: tl.constexpr,
):
    """Grid (B, P): a pending row's kept mass, the terms kept_term(x) of the logits the filters keep (_kept: at or
    above the threshold, min-p's e), and its count of finite logits, integer sums over P contiguous parts of the
    row (any split gives the same sums)."""
    b64 = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    parts = tl.num_programs(1)
    kept_sum = tl.zeros([], tl.int64)
    count = tl.zeros([], tl.int64)
    if tl.load(pending_ptr + b64) != 0:
        V = aligned(V, VOCAB_ALIGN)
        row_ptr = logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN)
        temperature = load_temperature(temperature_ptr, b64)
        m = tl.load(list_values_ptr + b64 * LIST)
        threshold = tl.full([], _KEY_FLOOR, tl.int64)
        if HAS_THRESHOLD:
            threshold = tl.load((threshold_ptr + b64 * 4).to(tl.pointer_type(tl.int64)))
        min_p = 0.0
        if HAS_MIN_P:
            min_p = _min_p(min_p_ptr, b64)
        chunk = tl.cdiv(V, parts * MASS_BLOCK) * MASS_BLOCK
        kept_sum, count = kept_sums(row_ptr, part * chunk, tl.minimum(part * chunk + chunk, V), threshold,
                                    temperature, m, min_p, HAS_MIN_P, FP64, MASS_BLOCK)
    out = sums_ptr.to(tl.pointer_type(tl.int64)) + b64 * 2 * parts + part
    tl.store(out, kept_sum)
    tl.store(out + parts, count)


@jit
def kept_sums(row_ptr, first, end, threshold, temperature, m, min_p, HAS_MIN_P: tl.constexpr, FP64: tl.constexpr,
              BLOCK: tl.constexpr):
    """(the kept terms' sum kept_term(x) over the logits of columns [first, end) the filters keep (_kept: at or
    above `threshold`, min-p's e), their finite logits' count): a filtered row's part, integer sums (any split of
    the row adds up to the same sums). `m`: the row's largest finite logit."""
    inverse_t = 1.0 / temperature
    terms = tl.zeros([BLOCK], tl.int64)
    finite = tl.zeros([BLOCK], tl.int32)
    for start in range(first, end, BLOCK):
        cols, x = _row_block(row_ptr, start, end, BLOCK)
        kept = _kept(x, threshold, temperature, _key(m, 0), min_p, True, HAS_MIN_P, FP64)
        terms += tl.where(kept, kept_term(x, m, inverse_t), 0)
        finite += _finite(x).to(tl.int32)
    return tl.sum(terms, axis=0), tl.sum(finite.to(tl.int64), axis=0)


@jit
def filtered_finish_kernel(
    logits_ptr,  # as kept_mass_kernel's
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,
    top_k_ptr,  # [B] i32|i64 (read with HAS_TOP_K)
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    num_top_ptr,  # [1] i32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID)
    V,
    row_stride,
    num_blocks,
    stats_ptr,  # [B, STATS, num_blocks] f64: logprobs_stats_kernel's
    counts_ptr,  # [B, num_blocks] i32: its rank counts
    list_ids_ptr,  # [B, LIST]: top_list_kernel's
    list_values_ptr,
    threshold_ptr,  # [B, 4] i32 (read with HAS_THRESHOLD): as kept_mass_kernel's
    sums_ptr,  # [B, 2, P] i64: kept_mass_kernel's
    fast_raw_ptr,  # filtered_list_reduce_kernel's outputs, copied where it decided the row (fast_done)
    fast_scaled_ptr,
    fast_kept_ptr,
    fast_log_kept_mass_ptr,
    fast_rank_ptr,
    fast_top_ids_ptr,
    fast_top_logprobs_ptr,
    fast_done_ptr,
    raw_ptr,  # [B] f32 outputs: raw, scaled, kept, log_kept_mass
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,  # [B] i32
    top_ids_ptr,  # [B, num_top] i32
    top_logprobs_ptr,  # [B, num_top] f32
    REDUCE_BLOCK: tl.constexpr,
    LIST: tl.constexpr,
    PARTS: tl.constexpr,  # kept_mass_kernel's programs a row
    FP64: tl.constexpr,
    HAS_THRESHOLD: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): token_logprobs with filters, every row: the list route's rows copied, padding rows' fill, and a
    pending row from the single read's statistics (raw, scaled, rank), its kept set's threshold and kept_mass_kernel's
    sums (kept, log_kept_mass, by the rules filtered_list_reduce_kernel follows) and the list (its top)."""
    b64 = tl.program_id(0).to(tl.int64)
    num_top = tl.load(num_top_ptr)
    if tl.load(fast_done_ptr + b64) != 0:
        tl.store(raw_ptr + b64, tl.load(fast_raw_ptr + b64))
        tl.store(scaled_ptr + b64, tl.load(fast_scaled_ptr + b64))
        tl.store(kept_ptr + b64, tl.load(fast_kept_ptr + b64))
        tl.store(log_kept_mass_ptr + b64, tl.load(fast_log_kept_mass_ptr + b64))
        tl.store(rank_ptr + b64, tl.load(fast_rank_ptr + b64))
        for j in range(num_top):
            tl.store(top_ids_ptr + b64 * num_top + j, tl.load(fast_top_ids_ptr + b64 * num_top + j))
            tl.store(top_logprobs_ptr + b64 * num_top + j, tl.load(fast_top_logprobs_ptr + b64 * num_top + j))
        return
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b64):
            _store_padding_row(b64, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, top_ids_ptr,
                               top_logprobs_ptr, num_top)
            return
    # a pending row: filtered (not greedy), with a finite logit
    temperature = load_temperature(temperature_ptr, b64)
    m, larger, greedy, log_raw_sum, log_scaled_sum = _row_from_block_stats(stats_ptr, counts_ptr, b64, num_blocks,
                                                                           temperature, REDUCE_BLOCK)
    sums = sums_ptr.to(tl.pointer_type(tl.int64)) + b64 * 2 * PARTS + tl.arange(0, PARTS)
    kept_sum = tl.sum(tl.load(sums), axis=0)
    count = tl.sum(tl.load(sums + PARTS), axis=0)
    k, p = top_k_and_top_p(top_k_ptr, top_p_ptr, b64, HAS_TOP_K, HAS_TOP_P)
    min_p = 0.0
    if HAS_MIN_P:
        min_p = _min_p(min_p_ptr, b64)
    log_kept_mass = row_log_kept_mass(kept_sum, log_scaled_sum, True, filters_limit(k, count, p, min_p))
    threshold = tl.full([], _KEY_FLOOR, tl.int64)
    if HAS_THRESHOLD:
        threshold = tl.load((threshold_ptr + b64 * 4).to(tl.pointer_type(tl.int64)))
    token = tl.load(tokens_ptr + b64).to(tl.int64)
    valid = (token >= 0) & (token < V) & (m > float("-inf"))
    x_token = tl.load(logits_ptr + b64 * row_stride + tl.where(valid, token, 0)).to(tl.float32)
    token_kept = _kept(x_token, threshold, temperature, _key(m, 0), min_p, True, HAS_MIN_P, FP64)
    store_row_logprobs(b64, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum, num_top_ptr,
                       top_ids_ptr, top_ids_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr,
                       top_logprobs_ptr, False, log_kept_mass, token_kept)
    values = tl.load(list_values_ptr + b64 * LIST + tl.arange(0, LIST))
    _store_list_top(b64, num_top_ptr, list_ids_ptr, values, m, log_raw_sum, top_ids_ptr, top_logprobs_ptr, LIST)


@jit
def logprobs_reduce_kernel(
    logits_ptr,  # as logprobs_stats_kernel's
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,
    row_valid_ptr,
    V,
    row_stride,
    request_stride,
    num_blocks,
    stats_ptr,  # [B, STATS, num_blocks] f64: store_block_stats'
    counts_ptr,  # [B, num_blocks] i32: logprobs_stats_kernel's or rank_count_kernel's
    raw_ptr,  # [B] f32 outputs: raw, scaled, kept, log_kept_mass
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,  # [B] i32
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= num_blocks
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
):
    """Grid (B,): a row's token_logprobs (no filters: kept = scaled, log_kept_mass = 0) from its blocks'
    statistics, by the module docstring's rules (greedy rows read at T = 1, NaN where undefined, rank 0
    for an invalid token): the normalisers combined in FP64 over the blocks (the blocks' integer sums
    times exp(m_b - m)), the rank from the blocks' counts. The separate op and the samplers' fused pass
    both end here: the same numbers bit for bit."""
    _reduce_row(logits_ptr, tokens_ptr, temperature_ptr, row_valid_ptr, V, row_stride, request_stride, num_blocks,
                stats_ptr, counts_ptr, counts_ptr, counts_ptr, raw_ptr, raw_ptr, scaled_ptr, kept_ptr,
                log_kept_mass_ptr, rank_ptr, raw_ptr, REDUCE_BLOCK, HAS_ROW_VALID, ROWS, False)


@jit
def logprobs_reduce_top_kernel(
    logits_ptr,  # as logprobs_reduce_kernel's
    tokens_ptr,
    temperature_ptr,
    row_valid_ptr,
    V,
    row_stride,
    request_stride,
    num_blocks,
    stats_ptr,
    counts_ptr,
    num_top_ptr,  # [1] i32
    top_ids_ptr,  # [B, num_top] i32: top_list_kernel's
    top_values_ptr,  # [B, num_top] f32: top_list_kernel's logits
    raw_ptr,  # as logprobs_reduce_kernel's outputs
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,
    top_logprobs_ptr,  # [B, num_top] f32 output: the listed logits' raw logprobs (-inf past the list)
    REDUCE_BLOCK: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    ROWS: tl.constexpr = 1,
):
    """logprobs_reduce_kernel with a top list (num_top >= 1): its outputs, and top_list_kernel's logits as
    raw logprobs by store_row_logprobs' formula, with the row's normaliser."""
    _reduce_row(logits_ptr, tokens_ptr, temperature_ptr, row_valid_ptr, V, row_stride, request_stride, num_blocks,
                stats_ptr, counts_ptr, num_top_ptr, top_ids_ptr, top_values_ptr, raw_ptr, scaled_ptr, kept_ptr,
                log_kept_mass_ptr, rank_ptr, top_logprobs_ptr, REDUCE_BLOCK, HAS_ROW_VALID, ROWS, True)


@jit
def _reduce_row(logits_ptr, tokens_ptr, temperature_ptr, row_valid_ptr, V, row_stride, request_stride, num_blocks,
                stats_ptr, counts_ptr, num_top_ptr, top_ids_ptr, top_values_ptr, raw_ptr, scaled_ptr, kept_ptr,
                log_kept_mass_ptr, rank_ptr, top_logprobs_ptr, REDUCE_BLOCK: tl.constexpr,
                HAS_ROW_VALID: tl.constexpr, ROWS: tl.constexpr, HAS_TOP: tl.constexpr):
    """The reduce kernels' body (HAS_TOP: with the top list's logprobs)."""
    b64 = tl.program_id(0).to(tl.int64)
    request = b64 // ROWS
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, request):
            _store_padding_row(b64, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, rank_ptr, raw_ptr, 0)
            if HAS_TOP:  # (top_list_kernel wrote its top_ids)
                num_top = tl.load(num_top_ptr)
                for j in range(num_top):
                    tl.store(top_logprobs_ptr + b64 * num_top + j, float("-inf"))
            return
    row_ptr = logits_ptr + request * request_stride + (b64 % ROWS) * row_stride
    temperature = load_temperature(temperature_ptr, request)
    token = tl.load(tokens_ptr + b64).to(tl.int64)
    m, larger, greedy, log_raw_sum, log_scaled_sum = _row_from_block_stats(stats_ptr, counts_ptr, b64, num_blocks,
                                                                           temperature, REDUCE_BLOCK)
    valid = (token >= 0) & (token < V) & (m > float("-inf"))
    x_token = tl.load(row_ptr + tl.where(valid, token, 0)).to(tl.float32)
    store_row_logprobs(b64, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum, num_top_ptr,
                       top_ids_ptr, top_values_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr,
                       top_logprobs_ptr, HAS_TOP)


@jit
def store_row_logprobs(b64, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum, num_top_ptr,
                       top_ids_ptr, top_values_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr,
                       top_logprobs_ptr, HAS_TOP: tl.constexpr, log_kept_mass=0.0, token_kept=True):
    """The outputs of row b64 from its numbers (_row_from_block_stats') and its token's logit x_token (valid: a
    token of the row, and the row has a finite logit), its log_kept_mass (row_log_kept_mass: 0 without filters)
    and whether the filters keep the token: _reduce_row's, filtered_list_reduce_kernel's and vocab-parallel
    token_logprobs' merge's stores."""
    inverse_t = tl.where(greedy, 1.0, 1.0 / temperature)
    d = x_token.to(tl.float64) - m.to(tl.float64)
    scaled = d * inverse_t.to(tl.float64) - log_scaled_sum
    nan = float("nan")
    defined = valid & (x_token == x_token) & (x_token < float("inf"))  # NaN or +inf at the token: NaN
    tl.store(raw_ptr + b64, tl.where(defined, d - log_raw_sum, nan).to(tl.float32))
    tl.store(scaled_ptr + b64, tl.where(defined, scaled, nan).to(tl.float32))
    kept = tl.where(token_kept, scaled - log_kept_mass, float("-inf"))  # (scaled - 0.0 is scaled, bit for bit)
    tl.store(kept_ptr + b64, tl.where(defined, kept, nan).to(tl.float32))
    tl.store(log_kept_mass_ptr + b64, tl.where(defined, log_kept_mass, nan).to(tl.float32))
    tl.store(rank_ptr + b64, tl.where(valid, 1 + larger, 0))
    if HAS_TOP:  # the raw logprob, with this row's normaliser
        num_top = tl.load(num_top_ptr)
        for j in range(num_top):
            out = b64 * num_top + j
            logprob = tl.load(top_values_ptr + out).to(tl.float64) - m.to(tl.float64) - log_raw_sum
            tl.store(top_logprobs_ptr + out, tl.where(tl.load(top_ids_ptr + out) >= 0, logprob,
                                                      float("-inf")).to(tl.float32))


@functools.lru_cache(maxsize=512)
def plan_token_logprobs(logits: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool, has_min_p: bool,
                        fp64: bool, num_top: int, row_valid: bool = False, top_k_in_list: bool = False) -> Plan:
    """The launch of `token_logprobs` on inputs `logits` [B, V] (rows `logits.strides[0]` apart, columns
    contiguous), `tokens` [B], `temperature` [B] f32 (or one f32), `top_k` / `top_p` / `min_p` [B] where
    given, `num_top` [1] i32 (equal to `num_top`: the outputs' width; the kernel reads the count from the
    device, so no count costs a compilation); outputs raw, scaled, kept, log_kept_mass [B] f32, rank [B]
    i32, top_ids [B, num_top] i32, top_logprobs [B, num_top] f32. With `row_valid`, input `row_valid`
    (common.is_padding; a padding row: NaN logprobs, rank 0, top_ids -1, its logits unread). `top_k_in_list`:
    every row's top_k is in [1, TOP_LIST] (the caller's Python int, top_k_within_list): the list decides every
    row, no search is planned.

    Without filters `logits` may be [B, R, V] (rejection_sample's target logits, R = K + 1): then `tokens` is
    [B, R], the outputs [B, R] (top ones [B, R, num_top]), and temperature and row_valid are per request b."""
    if top_k_in_list and not has_top_k:
        raise ValueError("plan_token_logprobs: top_k_in_list needs top_k")
    batch, vocab = logits.shape[0], logits.shape[-1]
    rows = logits.shape[1] if len(logits.shape) == 3 else 1
    lead = (batch, rows) if len(logits.shape) == 3 else (batch,)
    outputs = (Buffer("raw", lead, "float32"), Buffer("scaled", lead, "float32"),
               Buffer("kept", lead, "float32"), Buffer("log_kept_mass", lead, "float32"),
               Buffer("rank", lead, "int32"), Buffer("top_ids", lead + (num_top,), "int32"),
               Buffer("top_logprobs", lead + (num_top,), "float32"))
    names = tuple(b.name for b in outputs)
    if batch * rows == 0:
        return Plan(outputs, (), names, "empty")
    request_stride, row_stride = logits.strides[0], logits.strides[-2]
    align = math.gcd(request_stride, row_stride if rows > 1 else 0)
    row_align = largest_power_of_two_dividing(align, 16) if align else 16
    stand_in = "tokens"  # for an absent filter: never read
    if not (has_top_k or has_top_p or has_min_p):
        # the single read: the blocks of the samplers' fused pass (the same sums: fused == separate exactly)
        config = single_read_config(vocab, target)
        valid = "row_valid" if row_valid else stand_in
        args = ("logits", "tokens", "temperature", valid, vocab, row_stride, request_stride)
        scratch = (Buffer("logprob_stats", (batch * rows, 2 * STATS.value, config.num_blocks), "float32"),
                   Buffer("rank_counts", (batch * rows, config.num_blocks), "int32")) + (
            (num_rows_buffer(batch),) if row_valid else ())
        stats = stats_launch(config, batch, rows, vocab, row_stride, request_stride, row_align, valid, row_valid)
        reduce_args = args + (config.num_blocks, "logprob_stats", "rank_counts")
        if num_top == 0:
            return Plan(scratch + outputs, (stats, launch(
                logprobs_reduce_kernel, (batch * rows,), reduce_args, names[:5], REDUCE_BLOCK=config.reduce_block,
                HAS_ROW_VALID=row_valid, ROWS=rows, num_warps=4)), names, "single read")
        scratch += (Buffer("top_values", lead + (num_top,), "float32"),) + top_list_buffers(batch * rows, target)
        return Plan(scratch + outputs, (stats, top_list_launch(config, batch * rows, vocab, row_stride, request_stride,
                                                               row_align, valid, row_valid, rows, target), launch(
            logprobs_reduce_top_kernel, (batch * rows,), reduce_args + ("num_top", "top_ids", "top_values"),
            names[:5] + ("top_logprobs",), REDUCE_BLOCK=config.reduce_block, HAS_ROW_VALID=row_valid, ROWS=rows,
            num_warps=4)), names, "single read, top list")
    if rows > 1:
        raise ValueError("plan_token_logprobs: filters take [B, V] logits")
    args = ("logits", "tokens", "temperature", "top_k" if has_top_k else stand_in, "top_p" if has_top_p else stand_in,
            "min_p" if has_min_p else stand_in, "num_top", "row_valid" if row_valid else stand_in)
    # the single read's statistics and the LIST largest logits a row decide the rows whose kept set lies within
    # them (filtered_list_reduce_kernel); the others (`pending`) take the searches of vocab-parallel
    # top_k_top_p_sample as one shard (many programs a row; the others' a flag each), then their kept mass
    # (kept_mass_kernel); filtered_finish_kernel writes every row
    config = single_read_config(vocab, target)
    valid = "row_valid" if row_valid else stand_in
    aligns = dict(ROW_ALIGN=row_align, VOCAB_ALIGN=largest_power_of_two_dividing(vocab, 16), HAS_ROW_VALID=row_valid,
                  ROWS=rows, HAS_TOP_K=has_top_k)
    # with top_k_in_list no row is pending: filtered_list_reduce_kernel writes the outputs (ALL_ROWS)
    flags = (Buffer("fast_done", (batch,), "int32"), Buffer("pending", (batch,), "uint8"))
    fast = () if top_k_in_list else tuple(dataclasses.replace(b, name="fast_" + b.name) for b in outputs)
    mass = has_top_p or has_top_k  # (top-p's whole-row mass, or the count of top-k's ties past the list)
    scratch = (Buffer("logprob_stats", (batch, 2 * STATS.value, config.num_blocks), "float32"),
               Buffer("rank_counts", (batch, config.num_blocks), "int32"),
               Buffer("list_ids", (batch, TOP_LIST), "int32"),
               Buffer("list_values", (batch, TOP_LIST), "float32")) + top_list_buffers(batch, target) + fast + flags + (
        (num_rows_buffer(batch),) if row_valid else ()) + (
        (Buffer("row_mass", (batch, 2 * MASS_PROGRAMS), "int32"),) if mass else ())  # i64 as i32 pairs (JAX: no x64)
    launches = (
        stats_launch(config, batch, rows, vocab, row_stride, request_stride, row_align, valid, row_valid),
        top_list_launch(config, batch, vocab, row_stride, request_stride, row_align, valid, row_valid, rows,
                        target, ("list_ids", "list_values"), count=TOP_LIST),
    ) + ((launch(row_mass_kernel, (batch, MASS_PROGRAMS),
                 ("logits", "temperature", args[3], args[4], args[7], vocab, row_stride, request_stride, "list_ids",
                  "list_values"), ("row_mass",), LIST=TOP_LIST, FP64=fp64, FAST_MATH=not target.interpreter,
                 MASS_BLOCK=2048, HAS_TOP_P=has_top_p, num_warps=4, **aligns),) if mass else ()) + (
        launch(filtered_list_reduce_kernel, (batch,),
               args + (vocab, row_stride, request_stride, config.num_blocks, "logprob_stats", "rank_counts",
                       "list_ids", "list_values", "row_mass" if mass else "list_ids"),
               tuple(b.name for b in (fast or outputs) + flags), REDUCE_BLOCK=config.reduce_block, LIST=TOP_LIST,
               HAS_TOP_P=has_top_p, HAS_MIN_P=has_min_p, FP64=fp64, FAST_MATH=not target.interpreter,
               MASS_PROGRAMS=MASS_PROGRAMS, ALL_ROWS=top_k_in_list, num_warps=8, **aligns),)
    if top_k_in_list:
        return Plan(scratch + outputs, launches, names, "filters' list")
    searched = has_top_k or has_top_p
    threshold = "kept_threshold" if searched else stand_in
    scratch += (Buffer("kept_sums", (batch, 2, 2 * MASS_PROGRAMS), "int32"),)  # i64 as i32 pairs
    filters = dict(HAS_THRESHOLD=searched, HAS_MIN_P=has_min_p, FP64=fp64)
    # (imported here: these modules build on this one)
    from jsample.kernels.logprobs_search import pending_search_launch
    from jsample.kernels.vocab_parallel_filtered import plan_kept_threshold_shard

    one_launch = searched and pending_search_launch(
        batch, vocab, row_stride, logits.dtype, fp64, target, row_align=row_align,
        vocab_align=largest_power_of_two_dividing(vocab, 16), parts=MASS_PROGRAMS, list_size=TOP_LIST,
        args=("logits", "temperature", args[3], args[4], args[5], "pending", "list_values"), has_top_k=has_top_k,
        has_top_p=has_top_p, has_min_p=has_min_p)
    if one_launch:  # the pending rows' searches and kept sums, steps of one launch (logprobs_search)
        scratch += one_launch[0] + (Buffer("kept_threshold", (batch, 4), "int32"),) + (
            () if row_valid else (num_rows_buffer(batch),))
        launches += (one_launch[1],)
    else:
        if searched:  # the kept set's thresholds of the pending rows: vocab-parallel top_k_top_p_sample's, one shard
            rounds, threshold_launch = plan_kept_threshold_shard(logits, target, has_top_k=has_top_k,
                                                                 has_top_p=has_top_p, fp64=fp64, shards=1,
                                                                 row_valid=True)
            last = Plan((Buffer("kept_threshold", (batch, 4), "int32"),), (threshold_launch,), ("kept_threshold",))
            searches = single_shard_plan(ShardedPlan(rounds + (last,)), "search_", {"row_valid": "pending"})
            scratch += searches.buffers
            launches += searches.launches
        launches += (launch(kept_mass_kernel, (batch, MASS_PROGRAMS),
                            ("logits", "temperature", args[5], "pending", threshold, "list_values", vocab, row_stride),
                            ("kept_sums",), LIST=TOP_LIST, MASS_BLOCK=2048, ROW_ALIGN=row_align,
                            VOCAB_ALIGN=largest_power_of_two_dividing(vocab, 16), num_warps=4, **filters),)
    launches += (
        launch(filtered_finish_kernel, (batch,),
               args + (vocab, row_stride, config.num_blocks, "logprob_stats", "rank_counts", "list_ids", "list_values",
                       threshold, "kept_sums") + tuple(b.name for b in fast + flags[:1]), names,
               REDUCE_BLOCK=config.reduce_block, LIST=TOP_LIST, PARTS=MASS_PROGRAMS, HAS_TOP_K=has_top_k,
               HAS_TOP_P=has_top_p, HAS_ROW_VALID=row_valid, num_warps=4, **filters),)
    return Plan(scratch + outputs, launches, names, "filters' list, then the pending rows' searches" +
                (" in one launch" if one_launch else ""))


def top_k_within_list(top_k) -> bool:
    """Whether a call's `top_k` is a Python int in [1, TOP_LIST] (plan_token_logprobs' top_k_in_list): every row's
    kept set then lies within its list, up to ties of its k-th largest logit (counted); per-row arrays, whose
    values the host cannot see, may need the searches."""
    return isinstance(top_k, int) and not isinstance(top_k, bool) and 1 <= top_k <= TOP_LIST


def stats_launch(config, batch: int, rows: int, vocab: int, row_stride: int, request_stride: int, row_align: int,
                 valid: str, row_valid: bool):
    """token_logprobs' single read (logprobs_stats_kernel) of `batch` requests of `rows` rows; with row_valid on
    padded_row_slots(batch) x rows slots (a padding row costs its flag, not num_blocks programs)."""
    args = ("logits", "tokens", "temperature", valid, "num_rows" if row_valid else valid, vocab, row_stride,
            request_stride)
    return launch(logprobs_stats_kernel, (padded_row_slots(batch) * rows if row_valid else batch * rows,
                                          config.num_blocks), args, ("logprob_stats", "rank_counts"),
                  BLOCK_V=config.block_v, ROW_ALIGN=row_align, VOCAB_ALIGN=config.vocab_align,
                  FAST_MATH=config.fast_math, HAS_ROW_VALID=row_valid, ROWS=rows, ROW_SLOTS=row_valid,
                  num_warps=config.num_warps)


def top_list_launch(config, rows: int, vocab: int, row_stride: int, request_stride: int, row_align: int,
                    valid: str, row_valid: bool, rows_a_request: int, target: Target,
                    outputs=("top_ids", "top_values"), count: int = 0):
    """top_list_kernel's launch after the single read's statistics (`config`: single_read_config's):
    TOP_LIST_PROGRAMS programs a row, one in the interpreter's large programs."""
    programs = 1 if target.large_programs else TOP_LIST_PROGRAMS
    # the filters' list (`count`: TOP_LIST a row) over fewer blocks than it (the blocks' maxima bound nothing), few
    # enough to hold a program's at once. Not a caller's num_top (read on the device): compiled in, the short rows'
    # code slowed its lists at V = 32000 1.1-1.7x even where they never took it (lab INDEX)
    short_row = config.num_blocks < count and (target.large_programs or
                                               config.reduce_block * config.block_v <= SHORT_ROW_COLUMNS * programs)
    return launch(top_list_kernel, (rows, programs), ("logits", valid, "num_top", vocab, row_stride, request_stride,
                                                      config.num_blocks, "logprob_stats"),
                  outputs + ("top_partial_ids", "top_partial_values", "top_arrivals"),
                  BLOCK_V=config.block_v, REDUCE_BLOCK=config.reduce_block, TOP=TOP_LIST, ROW_ALIGN=row_align,
                  VOCAB_ALIGN=config.vocab_align, HAS_ROW_VALID=row_valid, ROWS=rows_a_request, COUNT=count,
                  PROGRAMS=programs, SHORT_ROW=short_row, num_warps=4)


def top_list_buffers(rows: int, target: Target) -> tuple:
    """top_list_launch's scratch (untouched with one program a row): the arrival counts are the executor's
    counters where it keeps them (zero on entry, left zero), else zeroed each call (a CUDA-graph capture)."""
    return (Buffer("top_partial_ids", (rows, TOP_LIST_PROGRAMS * TOP_LIST), "int32"),
            Buffer("top_partial_values", (rows, TOP_LIST_PROGRAMS * TOP_LIST), "float32"),
            Buffer("top_arrivals", (rows,), "int32", counters=target.arrival_counters,
                   zeroed=not target.arrival_counters))


def single_read_config(vocab: int, target: Target):
    """The blocks of the single-read logprobs (token_logprobs without filters or top list, and
    gumbel_sample's fused return_logprobs): gumbel_sample's many-rows tiling (512 columns, one warp), or
    blocks of at most 4096 in the interpreter."""
    config = gumbel_launch_config(vocab, 0, False, fast_math=not target.interpreter,
                                  large_programs=target.large_programs)
    if target.large_programs:  # (blocks of 4096: the CPU tests combine several blocks a row)
        block_v = min(config.block_v, 4096)
        num_blocks = -(-vocab // block_v)
        return dataclasses.replace(config, block_v=block_v, num_blocks=num_blocks,
                                   reduce_block=triton.next_power_of_2(num_blocks))
    return many_rows_config(config, vocab)


def plan_gumbel_logprobs(logits: ArgSpec, seeds: ArgSpec, target: Target, *, draft: bool, row_valid: bool,
                         num_top: int = 0) -> Plan:
    """gumbel_sample(return_logprobs=True) in FP32 in one read of the logits: the token of
    gumbel_partial_kernel's code and the logprobs of token_logprobs' single read (the same blocks and
    sums: equal to token_logprobs of the sampled tokens bit for bit), with num_top >= 1 its top list (the
    blocks that can hold one read again). Inputs and outputs as plan_gumbel_sample's with return_logprobs."""
    batch, vocab = logits.shape
    row_stride = logits.strides[0]
    config = single_read_config(vocab, target)
    names = ("sampled", "raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs")
    outputs = (Buffer("sampled", (batch,), "int32"),) + tuple(
        Buffer(name, (batch,), "int32" if name == "rank" else "float32") for name in names[1:6]) + (
        Buffer("top_ids", (batch, num_top), "int32"), Buffer("top_logprobs", (batch, num_top), "float32"))
    if batch == 0:
        return Plan(outputs, (), names, "empty")
    valid = "row_valid" if row_valid else "positions"  # the stand-in is never read
    scratch = (Buffer("partial_score", (batch, config.num_blocks), "float32"),
               Buffer("partial_index", (batch, config.num_blocks), "int32"),
               Buffer("logprob_stats", (batch, 2 * STATS.value, config.num_blocks), "float32"),
               Buffer("rank_counts", (batch, config.num_blocks), "int32")) + (
        (num_rows_buffer(batch),) if row_valid else ())
    row_align = largest_power_of_two_dividing(row_stride, 16) if row_stride else 16
    launches = (
        launch(gumbel_logprobs_partial_kernel, (padded_row_slots(batch) if row_valid else batch, config.num_blocks),
               ("logits", "seeds", "positions", "temperature", valid, "num_rows" if row_valid else valid, vocab,
                row_stride), ("partial_score", "partial_index", "logprob_stats"), HAS_ROW_VALID=row_valid,
               ROW_SLOTS=row_valid,
               STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, BLOCK_V=config.block_v, ROW_ALIGN=row_align,
               VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math, SEED_WORDS=seed_word_count(seeds.shape),
               num_warps=config.num_warps),
        launch(argmax_reduce_kernel, (batch,),
               ("partial_score", "partial_index", "logits", valid, vocab, row_stride, config.num_blocks), ("sampled",),
               HAS_ROW_VALID=row_valid, FP64=False, REDUCE_BLOCK=config.reduce_block, num_warps=1),
        rank_count_launch(config, batch, vocab, row_stride, row_align, valid, row_valid),
    )
    reduce_args = ("logits", "sampled", "temperature", valid, vocab, row_stride, row_stride, config.num_blocks,
                   "logprob_stats", "rank_counts")
    if num_top == 0:
        return Plan(scratch + outputs, launches + (launch(
            logprobs_reduce_kernel, (batch,), reduce_args, names[1:6], REDUCE_BLOCK=config.reduce_block,
            HAS_ROW_VALID=row_valid, ROWS=1, num_warps=4),), names, "single read")
    return Plan(scratch + (Buffer("top_values", (batch, num_top), "float32"),) + top_list_buffers(batch, target) + outputs,
                launches + (
        top_list_launch(config, batch, vocab, row_stride, row_stride, row_align, valid, row_valid, 1, target),
        launch(logprobs_reduce_top_kernel, (batch,), reduce_args + ("num_top", "top_ids", "top_values"),
               names[1:6] + ("top_logprobs",), REDUCE_BLOCK=config.reduce_block, HAS_ROW_VALID=row_valid, ROWS=1,
               num_warps=4)), names, "single read, top list")


def with_logprobs(sampling: Plan, logits: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                  has_min_p: bool, fp64: bool, num_top: int, row_valid: bool, logits_name: str = "logits",
                  top_k_in_list: bool = False) -> Plan:
    """A sampling plan (output `tokens`, then any others) followed by token_logprobs' plan for its tokens: the
    samplers' `return_logprobs` where the single read does not apply (outputs the sampling plan's, then
    token_logprobs' seven). The logprobs launches are token_logprobs' own, so they equal token_logprobs of the
    same inputs and tokens exactly; they read the rows again. The sampled tokens are renamed `sampled` in the
    plan (`tokens` is the logprobs launches' input name); they read the sampling plan's `logits_name` input
    (rejection_sample: `target_logits`, [B, K + 1, V])."""
    logprobs = plan_token_logprobs(logits, target, has_top_k=has_top_k, has_top_p=has_top_p, has_min_p=has_min_p,
                                   fp64=fp64, num_top=num_top, row_valid=row_valid, top_k_in_list=top_k_in_list)

    def rename(names):
        return tuple("sampled" if name == "tokens" else name for name in names)

    scoring = tuple(dataclasses.replace(step, args=tuple(logits_name if a == "logits" else a for a in step.args))
                    for step in logprobs.launches)
    steps = tuple(dataclasses.replace(step, args=rename(step.args), outputs=rename(step.outputs))
                  for step in sampling.launches + scoring)
    buffers = tuple(dataclasses.replace(b, name="sampled") if b.name == "tokens" else b for b in sampling.buffers)
    return Plan(buffers + logprobs.buffers, steps, rename(sampling.outputs) + logprobs.outputs,
                sampling.variant + " + logprobs")
