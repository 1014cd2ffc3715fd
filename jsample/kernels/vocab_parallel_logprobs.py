"""Vocab-parallel `token_logprobs` (issue 42): logits split along the vocabulary over devices, the unsharded
call's logprobs, ranks and top lists, bit for bit, from O(B) words a device.

The unsharded single read (logprobs.py) cuts every row into blocks of BLOCK_V columns (single_read_config of
the whole vocabulary), keeps a block's statistics (store_block_stats: its largest finite logit m_b, its
largest non-NaN logit, the fixed-point sums of exp(x - m_b) and exp((x - m_b) / T), its largest finite |x|)
and combines them in FP64 over the row's blocks (_row_from_block_stats). Those statistics are exact whatever
order a block's columns come in: maxima, and integer sums of terms that depend only on x and m_b. So a
block's statistics are its shards' statistics combined: the maxima by max, the sums by addition, once every
part of the block takes its terms against the block's own m_b. Three rounds (plan.run_rounds):

1. `shard_logprobs_stats_kernel`, grid (B, SPAN): every global block the shard touches (at most SPAN, the same
   on every device), its statistics over the shard's columns, into the shard's record ([STATS, SPAN + 1] f64
   a row, slot SPAN the header: the shard's first and end columns, whether it holds the row's token, and
   that token's logit). A block wholly in the shard has the unsharded block's statistics; a block cut by the
   shard's edge (at most its first and its last) only its maxima. With a top list (num_top >= 1),
   `shard_top_list_kernel`: the shard's own num_top largest logits (top_list_kernel's code over its
   columns). The record is all-gathered.
2. `shard_logprobs_count_kernel`, grid (B, SPAN): from the gathered records, the token's logit (its
   shard's) and each cut block's m_b (the largest of its parts' maxima): the count of logits above the
   token's in each of the shard's blocks (reading only blocks whose largest non-NaN logit is above it, as
   the samplers' rank counts do), the sums of its cut blocks' parts against m_b, and the shard's top list
   (global columns). All-gathered.
3. `shard_logprobs_merge_kernel`, grid (B,): on every device, the row's blocks' statistics assembled in the
   unsharded layout, the best num_top of the shards' lists (the row's: a logit among the row's num_top best is
   among its shard's), then the unsharded reduce's own functions (_row_from_block_stats, store_row_logprobs,
   with the reduce's warps): the same FP64 combination in the same order, the same numbers.

Two all-gathers: 10 x (SPAN + 1) int32 words a row, then PARTIAL_WORDS + SPAN (+ 128 with a top list); SPAN is
about the shard's blocks (V / shards / 512 on a GPU). The shards' first columns are device scalars (vocab_start)
and multiples of 4; the batch and num_top are runtime values: no batch size or count costs a compilation.

With filters (top_k / top_p / min_p), the kept set is vocab-parallel top_k_top_p_sample's: its statistics and
search rounds come first (vocab_parallel_filtered.plan_kept_threshold_shard; its shard_threshold_kernel runs in
round 1 and keeps each row's threshold, over the 32-bit keys, and largest logit m on the device), or the
sampler's last round hands them over (`threshold_given`: top_k_top_p_sample's return_logprobs, and
token_logprobs with a Python-int top_k after the sampler's lists). The one-GPU kept mass is an integer sum of
kept_term(x) = floor(exp((x - m) / T) * 2**40) over the kept logits against the row's m, in any order: round 2
adds each block's kept terms and finite count into the shard's record (integer atomics), and the merge takes
log_kept_mass and kept by the one-GPU rules (row_log_kept_mass, filters_limit, _kept; raw, scaled and rank are
the block statistics' as without filters, as the one-GPU op takes them on every row).
"""

import functools

import triton
import triton.language as tl

from jsample.kernels.common import aligned, is_greedy, is_padding, largest_power_of_two_dividing, load_temperature
from jsample.kernels.filtered import _key, _key_value, _min_p
from jsample.kernels.host import jit
from jsample.kernels.logprobs import (STATS, TOP_LIST, TOP_LIST_PROGRAMS, _block_sums, _finite, _kept,
                                      _row_from_block_stats, _sorted_entries, _store_padding_row, filters_limit,
                                      kept_term, list_row_top, row_log_kept_mass, single_read_config,
                                      store_block_stats, store_row_logprobs, top_k_and_top_p, top_list_buffers)
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.vocab_parallel_filtered import plan_kept_threshold_shard

# the counts record's words before its blocks' counts (i64 as i32 pairs): the cut first and last blocks' sums (raw,
# scaled), and with filters the shard's kept terms' sum and its count of finite logits
PARTIAL_WORDS = 12
_PARTIAL = tl.constexpr(PARTIAL_WORDS)
_TOP = tl.constexpr(TOP_LIST)


def stats_record_words(span: int) -> int:
    """int32 words a row of round 1's record takes: STATS f64 values for each of SPAN blocks and the header."""
    return 2 * STATS.value * (span + 1)


def counts_record_words(span: int, top: bool) -> int:
    """int32 words a row of round 2's record takes: two cut blocks' sums (i64 pairs), SPAN counts (even), and with
    a top list TOP_LIST columns and TOP_LIST logits."""
    return PARTIAL_WORDS + span + span % 2 + (2 * TOP_LIST if top else 0)


def shard_span(starts, vocab: int, block_v: int) -> int:
    """The most global blocks of `block_v` columns any shard touches; `starts`: every shard's first column."""
    ends = tuple(starts[1:]) + (vocab,)
    return max(((end - 1) // block_v - start // block_v + 1 for start, end in zip(starts, ends) if end > start),
               default=1)


@jit
def _shard_columns(vocab_start_ptr, V_shard, START_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr):
    """(first, end) global columns of this shard."""
    start = aligned(tl.load(vocab_start_ptr), START_ALIGN)
    return start, start + aligned(V_shard, VOCAB_ALIGN)


@jit
def _header(record, SPAN: tl.constexpr):
    """A shard's row record's header slot (f64 pointer: k * (SPAN + 1) apart): the largest logit -inf (no block),
    then the shard's first column, its end column, whether it holds the token, the token's logit."""
    return record.to(tl.pointer_type(tl.float64)) + SPAN


@jit
def shard_logprobs_stats_kernel(
    logits_ptr,  # [B, V_shard] f32|bf16|f16: this device's columns, rows `row_stride` elements apart
    tokens_ptr,  # [B] i32|i64: global columns
    temperature_ptr,  # [B] f32, or one f32 for all rows
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's logits unread in every round
    V_shard,
    row_stride,
    record_ptr,  # [B, stats_record_words(SPAN)] i32 output
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,  # the unsharded single read's blocks
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Round 1 (the module's docstring): block first + j of the row, over this shard's columns."""
    row = tl.program_id(0).to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    j = tl.program_id(1)
    start, end = _shard_columns(vocab_start_ptr, V_shard, START_ALIGN, VOCAB_ALIGN)
    cols = (start // BLOCK_V + j) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ptr = logits_ptr + tl.multiple_of(row * row_stride, ROW_ALIGN) - start  # indexed by global columns
    x = tl.load(row_ptr + cols, mask=(cols >= start) & (cols < end), other=float("-inf")).to(tl.float32)
    record = record_ptr + row * (2 * STATS * (SPAN + 1))
    store_block_stats(x, load_temperature(temperature_ptr, row), record, 0, j, SPAN + 1, FAST_MATH)
    if j == 0:
        token = tl.load(tokens_ptr + row).to(tl.int64)
        here = (token >= start) & (token < end)
        x_token = tl.load(row_ptr + tl.where(here, token, start)).to(tl.float32)
        header = _header(record, SPAN)
        tl.store(header, float("-inf"))
        tl.store(header + (SPAN + 1), start.to(tl.float64))
        tl.store(header + 2 * (SPAN + 1), end.to(tl.float64))
        tl.store(header + 3 * (SPAN + 1), here.to(tl.float64))
        tl.store(header + 4 * (SPAN + 1), tl.where(here, x_token, float("nan")).to(tl.float64))


@jit
def shard_top_list_kernel(
    logits_ptr,  # as shard_logprobs_stats_kernel's
    vocab_start_ptr,
    row_valid_ptr,  # as shard_logprobs_stats_kernel's
    num_top_ptr,  # [1] i32: the count a row, 1..TOP_LIST
    V_shard,
    row_stride,
    record_ptr,  # [B, stats_record_words(SPAN)] i32: shard_logprobs_stats_kernel's
    top_ids_ptr,  # [B, num_top] i32 output: columns counted from the start of the shard's first block
    top_values_ptr,  # [B, num_top] f32 output
    partial_ids_ptr,  # top_list_kernel's scratch and counters
    partial_values_ptr,
    arrivals_ptr,
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # a power of two > SPAN
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    PROGRAMS: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, PROGRAMS): top_list_kernel's list of the shard's columns (their blocks' maxima from the record)."""
    row = tl.program_id(0).to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    num_top = tl.load(num_top_ptr)
    if num_top > 0:
        start, end = _shard_columns(vocab_start_ptr, V_shard, START_ALIGN, VOCAB_ALIGN)
        base = (start // BLOCK_V) * BLOCK_V  # the shard's first block's first global column
        row_ptr = logits_ptr + tl.multiple_of(row * row_stride, ROW_ALIGN) - start + base
        maxima = record_ptr.to(tl.pointer_type(tl.float64)) + row * (STATS * (SPAN + 1))
        list_row_top(row_ptr, start - base, end - base, num_top, maxima, SPAN + 1, row, top_ids_ptr, top_values_ptr,
                     partial_ids_ptr, partial_values_ptr, arrivals_ptr, BLOCK_V, REDUCE_BLOCK, _TOP, PROGRAMS, True)


@jit
def _token_logit(gathered_ptr, row, batch, SHARDS: tl.constexpr, SPAN: tl.constexpr):
    """(the row's token's logit, whether a shard holds the token) from the gathered stats records."""
    x_token = tl.full([], float("nan"), tl.float32)
    held = tl.full([], 0, tl.int1)
    for s in tl.static_range(SHARDS):
        header = _header(gathered_ptr + (s * batch + row) * (2 * STATS * (SPAN + 1)), SPAN)
        here = tl.load(header + 3 * (SPAN + 1)) != 0
        x_token = tl.where(here, tl.load(header + 4 * (SPAN + 1)).to(tl.float32), x_token)
        held = held | here
    return x_token, held


@jit
def _block_part(gathered_ptr, s, row, batch, g, V, SPAN: tl.constexpr, BLOCK_V: tl.constexpr):
    """(shard s's slot of global block g, whether shard s holds columns of it, whether it holds all of them,
    the slot's stats pointer (f64, STATS values SPAN + 1 apart), shard s's first column): g may be a vector."""
    record = gathered_ptr + (s * batch + row) * (2 * STATS * (SPAN + 1))
    header = _header(record, SPAN)
    start = tl.load(header + (SPAN + 1)).to(tl.int32)
    end = tl.load(header + 2 * (SPAN + 1)).to(tl.int32)
    j = g - start // BLOCK_V
    lo = g * BLOCK_V
    holds = (j >= 0) & (j < SPAN) & (lo < end) & (lo + BLOCK_V > start)
    whole = holds & (lo >= start) & (tl.minimum(lo + BLOCK_V, V) <= end)
    return j, holds, whole, record.to(tl.pointer_type(tl.float64)) + tl.where(holds, j, 0), start


@jit
def shard_logprobs_count_kernel(
    logits_ptr,  # as shard_logprobs_stats_kernel's
    temperature_ptr,
    vocab_start_ptr,
    row_valid_ptr,  # as shard_logprobs_stats_kernel's
    num_top_ptr,  # [1] i32 (read with HAS_TOP)
    top_ids_ptr,  # [B, num_top] i32 (HAS_TOP): shard_top_list_kernel's, from the shard's first block's start
    top_values_ptr,  # [B, num_top] f32 (HAS_TOP)
    gathered_ptr,  # [SHARDS, B, stats_record_words(SPAN)] i32: every shard's round 1 record, in column order
    min_p_ptr,  # [B] f32 (read with FILTERED and HAS_MIN_P)
    threshold_ptr,  # [B, 4] i32 (read with FILTERED): shard_threshold_kernel's
    V,  # the whole vocabulary
    V_shard,
    row_stride,
    record_ptr,  # [B, counts_record_words(SPAN, HAS_TOP)] i32 output (zero on entry with FILTERED)
    SHARDS: tl.constexpr,
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    HAS_TOP: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
    FILTERED: tl.constexpr = False,  # filters: the kept terms' sum and the finite count of the shard's columns
    HAS_MIN_P: tl.constexpr = False,
    FP64: tl.constexpr = False,  # the samplers' fp64 flag (min-p's relative probabilities)
):
    """Round 2 (the module's docstring): block first + j's count of logits above the token's, and, for a block
    cut by this shard's edge, the sums of the shard's part against the whole block's largest finite logit; the
    first program of a row copies the shard's top list into the record (global columns). With filters, every
    block adds its kept terms (kept_term, against the row's largest logit) and its finite logits to the row's
    two sums (integer atomics: any order)."""
    row = tl.program_id(0).to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    batch = tl.num_programs(0).to(tl.int64)
    j = tl.program_id(1)
    start, end = _shard_columns(vocab_start_ptr, V_shard, START_ALIGN, VOCAB_ALIGN)
    g = start // BLOCK_V + j
    lo = g * BLOCK_V
    record = record_ptr + row * (_PARTIAL + SPAN + SPAN % 2 + (2 * _TOP if HAS_TOP else 0))
    if HAS_TOP:
        if j == 0:
            num_top = tl.load(num_top_ptr)
            slots = tl.arange(0, _TOP)
            listed = slots < num_top
            ids = tl.load(top_ids_ptr + row * num_top + slots, mask=listed, other=-1)
            values = tl.load(top_values_ptr + row * num_top + slots, mask=listed, other=float("-inf"))
            lists = record + _PARTIAL + SPAN + SPAN % 2
            tl.store(lists + slots, tl.where(ids >= 0, ids + (start // BLOCK_V) * BLOCK_V, -1))
            tl.store((lists + _TOP + slots).to(tl.pointer_type(tl.float32)), values)
    if lo >= end:  # past the shard's blocks
        tl.store(record + _PARTIAL + j, 0)
        return
    x_token, held = _token_logit(gathered_ptr, row, batch, SHARDS, SPAN)
    # the block's largest finite logit (its parts' largest), and this shard's largest non-NaN one in it
    block_max = tl.full([], float("-inf"), tl.float32)
    top = tl.full([], float("-inf"), tl.float32)
    for s in tl.static_range(SHARDS):
        slot, holds, whole, stats, first = _block_part(gathered_ptr, s, row, batch, g, V, SPAN, BLOCK_V)
        block_max = tl.maximum(block_max, tl.where(holds, tl.load(stats).to(tl.float32), float("-inf")))
        top = tl.where((first == start) & holds, tl.load(stats + (SPAN + 1)).to(tl.float32), top)
    cut = (lo < start) | (tl.minimum(lo + BLOCK_V, V) > end)
    count = tl.zeros([], tl.int32)
    if (held & (top > x_token)) | cut | FILTERED:
        cols = lo + tl.arange(0, BLOCK_V)
        row_ptr = logits_ptr + tl.multiple_of(row * row_stride, ROW_ALIGN) - start
        x = tl.load(row_ptr + cols, mask=(cols >= start) & (cols < end), other=float("-inf")).to(tl.float32)
        count = tl.sum((x > x_token).to(tl.int32), axis=0)
        temperature = load_temperature(temperature_ptr, row)
        inverse_t = tl.where(is_greedy(temperature), 1.0, 1.0 / temperature)
        if cut:
            d = tl.where(tl.abs(x) < float("inf"), x - block_max, float("-inf"))
            raw_sum, scaled_sum = _block_sums(d, inverse_t, FAST_MATH)
            at = record.to(tl.pointer_type(tl.int64)) + tl.where(j == 0, 0, 2)  # the first block's, or the last's
            tl.store(at, raw_sum)
            tl.store(at + 1, scaled_sum)
        if FILTERED:  # (a greedy row's sums are not used: its kept set is every finite logit)
            threshold = tl.load((threshold_ptr + row * 4).to(tl.pointer_type(tl.int64)))
            m = tl.load(threshold_ptr + row * 4 + 2).to(tl.float32, bitcast=True)
            min_p = 0.0
            if HAS_MIN_P:
                min_p = _min_p(min_p_ptr, row)
            kept = _kept(x, threshold, temperature, _key(m, 0), min_p, True, HAS_MIN_P, FP64)
            sums = record.to(tl.pointer_type(tl.int64)) + 4
            tl.atomic_add(sums, tl.sum(tl.where(kept, kept_term(x, m, inverse_t), 0), axis=0), sem="relaxed")
            tl.atomic_add(sums + 1, tl.sum(_finite(x).to(tl.int64), axis=0), sem="relaxed")
    tl.store(record + _PARTIAL + j, tl.where(held, count, 0))


@jit
def shard_logprobs_merge_kernel(
    gathered_stats_ptr,  # [SHARDS, B, stats_record_words(SPAN)] i32: round 1's records
    gathered_counts_ptr,  # [SHARDS, B, counts_record_words(SPAN, HAS_TOP)] i32: round 2's records
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,
    row_valid_ptr,  # as shard_logprobs_stats_kernel's: a padding row's outputs are NaN, rank 0, no top list
    num_top_ptr,  # [1] i32 (read with HAS_TOP)
    top_k_ptr,  # [B] i32|i64 (read with HAS_TOP_K)
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    threshold_ptr,  # [B, 4] i32 (read with FILTERED): shard_threshold_kernel's
    V,  # the whole vocabulary
    num_blocks,  # the unsharded single read's blocks a row
    stats_ptr,  # [B, 2 * STATS, num_blocks] f32 scratch: the unsharded layout (f64 values)
    counts_ptr,  # [B, num_blocks] i32 scratch
    top_values_ptr,  # [B, num_top] f32 scratch (HAS_TOP): the merged list's logits
    raw_ptr,  # [B] f32 outputs: raw, scaled, kept, log_kept_mass (logprobs_reduce_kernel's)
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,  # [B] i32
    top_ids_ptr,  # [B, num_top] i32 output (HAS_TOP)
    top_logprobs_ptr,  # [B, num_top] f32 output (HAS_TOP)
    SHARDS: tl.constexpr,
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # the unsharded reduce's
    HAS_TOP: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,  # a power of two >= SHARDS
    HAS_ROW_VALID: tl.constexpr = False,
    FILTERED: tl.constexpr = False,
    HAS_TOP_K: tl.constexpr = False,
    HAS_TOP_P: tl.constexpr = False,
    HAS_MIN_P: tl.constexpr = False,
    FP64: tl.constexpr = False,
):
    """Round 3 (the module's docstring), with logprobs_reduce_kernel's warps: the row's blocks' statistics as
    the unsharded read stores them (every part of a block combined: maxima by max, sums added), the merged top
    list, then that kernel's own reduction of them; with filters, the kept mass from the shards' kept sums and
    finite counts, by the one-GPU rules (row_log_kept_mass, filters_limit, _kept)."""
    row = tl.program_id(0).to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            _store_padding_row(row, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, top_ids_ptr,
                               top_logprobs_ptr, tl.load(num_top_ptr) if HAS_TOP else 0)
            return
    g = tl.arange(0, REDUCE_BLOCK)
    in_row = g < num_blocks
    stats = stats_ptr.to(tl.pointer_type(tl.float64)) + (row * STATS) * num_blocks + g
    counts = counts_ptr + row * num_blocks + g
    words = _PARTIAL + SPAN + SPAN % 2 + (2 * _TOP if HAS_TOP else 0)
    for k in tl.static_range(STATS):
        tl.store(stats + k * num_blocks, float("-inf") if k < 2 else 0.0, mask=in_row)
    tl.store(counts, 0, mask=in_row)
    for s in tl.static_range(SHARDS):
        tl.debug_barrier()  # the previous part's stores, by other threads, before these loads
        slot, holds, whole, part, first = _block_part(gathered_stats_ptr, s, row, batch, g, V, SPAN, BLOCK_V)
        holds = holds & in_row
        partial = gathered_counts_ptr + (s * batch + row) * words
        last = tl.max(tl.where(holds, slot, 0), axis=0)
        sums = partial.to(tl.pointer_type(tl.int64)) + tl.where(slot == 0, 0, 2)  # a cut block's: round 2's
        cut_sums = holds & ~whole & ((slot == 0) | (slot == last))
        for k in tl.static_range(STATS):
            value = tl.load(part + k * (SPAN + 1), mask=holds, other=0.0)
            if k == 2 or k == 3:
                value = tl.where(whole, value, tl.load(sums + (k - 2), mask=cut_sums, other=0).to(tl.float64))
            now = tl.load(stats + k * num_blocks, mask=holds, other=0.0)
            combined = value + now if k == 2 or k == 3 else tl.maximum(value, now)
            tl.store(stats + k * num_blocks, combined, mask=holds)
        tl.store(counts, tl.load(counts, mask=holds, other=0) + tl.load(partial + _PARTIAL + slot, mask=holds,
                                                                         other=0), mask=holds)
    if HAS_TOP:  # the best num_top of the shards' lists, as top_list_kernel orders them
        num_top = tl.load(num_top_ptr)
        entries = tl.arange(0, SHARDS_BLOCK * _TOP)
        shard = entries // _TOP
        listed = shard < SHARDS
        lists = gathered_counts_ptr + (shard * batch + row) * words + _PARTIAL + SPAN + SPAN % 2 + entries % _TOP
        cols = tl.load(lists, mask=listed, other=-1)
        values = tl.load((lists + _TOP).to(tl.pointer_type(tl.float32)), mask=listed, other=float("-inf"))
        sorted_cols, keys, found = _sorted_entries(values, cols)
        wanted = entries < num_top
        tl.store(top_ids_ptr + row * num_top + entries, sorted_cols, mask=wanted)
        tl.store(top_values_ptr + row * num_top + entries, tl.where(found, _key_value(keys, 0), float("-inf")),
                 mask=wanted)
    tl.debug_barrier()
    temperature = load_temperature(temperature_ptr, row)
    token = tl.load(tokens_ptr + row).to(tl.int64)
    m, larger, greedy, log_raw_sum, log_scaled_sum = _row_from_block_stats(stats_ptr, counts_ptr, row, num_blocks,
                                                                           temperature, REDUCE_BLOCK)
    x_token, held = _token_logit(gathered_stats_ptr, row, batch, SHARDS, SPAN)
    valid = held & (token >= 0) & (token < V) & (m > float("-inf"))
    log_kept_mass = tl.zeros([], tl.float64)
    token_kept = tl.full([], 1, tl.int1)
    if FILTERED:
        s = tl.arange(0, SHARDS_BLOCK)
        sums = (gathered_counts_ptr + (s * batch + row) * words).to(tl.pointer_type(tl.int64)) + 4
        kept_sum = tl.sum(tl.load(sums, mask=s < SHARDS, other=0), axis=0)
        count = tl.sum(tl.load(sums + 1, mask=s < SHARDS, other=0), axis=0)
        k, p = top_k_and_top_p(top_k_ptr, top_p_ptr, row, HAS_TOP_K, HAS_TOP_P)
        min_p = 0.0
        if HAS_MIN_P:
            min_p = _min_p(min_p_ptr, row)
        filtered = (not greedy) & (count > 0)
        log_kept_mass = row_log_kept_mass(kept_sum, log_scaled_sum, filtered, filters_limit(k, count, p, min_p))
        threshold = tl.load((threshold_ptr + row * 4).to(tl.pointer_type(tl.int64)))
        token_kept = _kept(x_token, threshold, temperature, _key(m, 0), min_p, filtered, HAS_MIN_P, FP64)
    store_row_logprobs(row, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum, num_top_ptr,
                       top_ids_ptr, top_values_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr,
                       top_logprobs_ptr, HAS_TOP, log_kept_mass, token_kept)


@functools.lru_cache(maxsize=512)
def plan_token_logprobs_shard(logits: ArgSpec, target: Target, *, vocab: int, starts: tuple, start_align: int,
                              num_top: int = 0, row_valid: bool = False, has_top_k: bool = False,
                              has_top_p: bool = False, has_min_p: bool = False, fp64: bool = False,
                              threshold_given: bool = False) -> ShardedPlan:
    """Vocab-parallel `token_logprobs` of this device's shard `logits` [B, V_shard] of a `vocab`-column
    vocabulary whose shards start at `starts` (every shard's first column, in order; this one's is the input
    `vocab_start` [1] i32, a multiple of `start_align`): inputs `tokens` [B] (global columns), `temperature` [B]
    f32 (or one f32), `vocab_start`, and `num_top` [1] i32 (equal to `num_top`: the top outputs' width; read on the
    device, so every count from 1 runs the same kernels), `top_k` / `top_p` / `min_p` [B] where given (then
    `temperature` [B]) and, with `row_valid`, `row_valid` (common.is_padding: a padding row, its logits unread: NaN
    logprobs, rank 0, top_ids -1); outputs token_logprobs' (raw, scaled, kept, log_kept_mass, rank, top_ids,
    top_logprobs), on every device. With filters, vocab-parallel top_k_top_p_sample's statistics and search rounds
    come first (its kept set: plan_kept_threshold_shard), or with `threshold_given` the input `kept_threshold`
    [B, 4] i32 holds it (the sampler's last round stored it: plan_top_k_top_p_shard's store_threshold); round 2
    sums each shard's kept terms against the row's largest logit."""
    batch, shard_vocab = logits.shape
    filtered = has_top_k or has_top_p or has_min_p
    config = single_read_config(vocab, target)  # the unsharded call's blocks
    span = shard_span(starts, vocab, config.block_v)
    top = num_top > 0
    names = ("raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs")
    outputs = tuple(Buffer(name, (batch,), "int32" if name == "rank" else "float32") for name in names[:5]) + (
        Buffer("top_ids", (batch, num_top), "int32"), Buffer("top_logprobs", (batch, num_top), "float32"))
    stats_record = Buffer("stats_record", (batch, stats_record_words(span)), "int32")
    counts_record = Buffer("counts_record", (batch, counts_record_words(span, top)), "int32", zeroed=filtered)
    if batch == 0:
        return ShardedPlan((Plan((stats_record,), (), ("stats_record",), "empty"),
                            Plan((counts_record,), (), ("counts_record",), "empty"),
                            Plan(outputs, (), names, "empty")), "empty")
    row_stride = logits.strides[0]
    shards = len(starts)
    tiles = dict(SPAN=span, BLOCK_V=config.block_v, ROW_ALIGN=largest_power_of_two_dividing(row_stride, 16),
                 START_ALIGN=start_align, VOCAB_ALIGN=largest_power_of_two_dividing(shard_vocab, 16))
    valid = "row_valid" if row_valid else "vocab_start"  # (the stand-in is never read)
    tiles["HAS_ROW_VALID"] = row_valid
    columns = ("logits", "vocab_start", valid)
    stats_launches = (launch(
        shard_logprobs_stats_kernel, (batch, span), ("logits", "tokens", "temperature", "vocab_start", valid,
                                                     shard_vocab, row_stride), ("stats_record",),
        FAST_MATH=config.fast_math, num_warps=config.num_warps, **tiles),)
    stats_buffers = (stats_record,)
    list_names = ()
    if top:
        programs = 1 if target.large_programs else TOP_LIST_PROGRAMS
        list_names = ("shard_top_ids", "shard_top_values")
        stats_buffers += (Buffer("shard_top_ids", (batch, num_top), "int32"),
                          Buffer("shard_top_values", (batch, num_top), "float32")) + top_list_buffers(batch, target)
        stats_launches += (launch(
            shard_top_list_kernel, (batch, programs), columns + ("num_top", shard_vocab, row_stride, "stats_record"),
            list_names + ("top_partial_ids", "top_partial_values", "top_arrivals"),
            REDUCE_BLOCK=triton.next_power_of_2(span + 1), PROGRAMS=programs, num_warps=4, **tiles),)
    search_rounds = ()
    threshold = "vocab_start"  # (the stand-in is never read)
    if filtered and threshold_given:
        threshold = "kept_threshold"
    elif filtered:
        search_rounds, threshold_launch = plan_kept_threshold_shard(logits, target, has_top_k=has_top_k,
                                                                    has_top_p=has_top_p, fp64=fp64, shards=shards,
                                                                    row_valid=row_valid)
        stats_launches = (threshold_launch,) + stats_launches
        stats_buffers += (Buffer("kept_threshold", (batch, 4), "int32"),)
        list_names += ("kept_threshold",)
        threshold = "kept_threshold_in"
    filters = dict(FILTERED=filtered, HAS_MIN_P=has_min_p, FP64=fp64)
    top_k, top_p, min_p = (name if given else "vocab_start" for name, given in
                           (("top_k", has_top_k), ("top_p", has_top_p), ("min_p", has_min_p)))
    stats = Plan(stats_buffers, stats_launches, ("stats_record",) + list_names, "vocab shard logprobs stats")
    top_args = ("shard_top_ids_in", "shard_top_values_in") if top else ("vocab_start", "vocab_start")
    counts = Plan((counts_record,), (launch(
        shard_logprobs_count_kernel, (batch, span),
        ("logits", "temperature", "vocab_start", valid, "num_top" if top else "vocab_start") + top_args + (
            "gathered_stats_record", min_p, threshold, vocab, shard_vocab, row_stride),
        ("counts_record",), SHARDS=shards, FAST_MATH=config.fast_math, HAS_TOP=top, num_warps=config.num_warps,
        **filters, **tiles),), ("counts_record",), "vocab shard logprobs counts")
    scratch = (Buffer("merged_stats", (batch, 2 * STATS.value, config.num_blocks), "float32"),
               Buffer("merged_counts", (batch, config.num_blocks), "int32"),
               Buffer("merged_top_values", (batch, num_top), "float32"))
    merge = Plan(scratch + outputs, (launch(
        shard_logprobs_merge_kernel, (batch,),
        ("gathered_stats_record", "gathered_counts_record", "tokens", "temperature", valid,
         "num_top" if top else "tokens", top_k, top_p, min_p, threshold, vocab, config.num_blocks),
        ("merged_stats", "merged_counts", "merged_top_values") + names, SHARDS=shards, SPAN=span,
        BLOCK_V=config.block_v, REDUCE_BLOCK=config.reduce_block, HAS_TOP=top,
        SHARDS_BLOCK=triton.next_power_of_2(shards), HAS_ROW_VALID=row_valid, HAS_TOP_K=has_top_k,
        HAS_TOP_P=has_top_p, num_warps=4, **filters),), names, "vocab merge logprobs")
    return ShardedPlan(search_rounds + (stats, counts, merge),
                       "vocab shard logprobs" + (", filtered" if filtered else ""))
