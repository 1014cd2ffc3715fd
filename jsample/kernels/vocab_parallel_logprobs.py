"""Vocab-parallel `token_logprobs` (issue 42): logits split along the vocabulary over devices, the unsharded
call's logprobs and ranks, bit for bit, from O(B) words a device.

The unsharded single read (logprobs.py) cuts every row into blocks of BLOCK_V columns (single_read_config of
the whole vocabulary), keeps a block's statistics (store_block_stats: its largest finite logit m_b, its
largest non-NaN logit, the fixed-point sums of exp(x - m_b) and exp((x - m_b) / T), its largest finite |x|)
and combines them in FP64 over the row's blocks (_row_from_block_stats). Those statistics are exact whatever
order a block's columns come in: maxima, and integer sums of terms that depend only on x and m_b. So a
block's statistics are its shards' statistics combined: the maxima by max, the sums by addition, once every
part of the block takes its terms against the block's own m_b. Three rounds (plan.run_rounds):

1. `shard_logprobs_stats_kernel`, grid (B, SPAN): every global block the shard touches (at most SPAN, the same
   on every device), its statistics over the shard's columns, into the shard's record (RECORD_HEADER words
   after them: the shard's first and end columns, whether it holds the row's token, and that token's
   logit). A block wholly in the shard has the unsharded block's statistics; a block cut by the shard's
   edge (at most its first and its last) only its maxima. All-gathered.
2. `shard_logprobs_count_kernel`, grid (B, SPAN): from the gathered records, the token's logit (its
   shard's) and each cut block's m_b (the largest of its parts' maxima): the count of logits above the
   token's in each of the shard's blocks (reading only blocks whose largest non-NaN logit is above it, as
   the samplers' rank counts do), and the sums of its cut blocks' parts against m_b. All-gathered.
3. `shard_logprobs_merge_kernel`, grid (B,): on every device, the row's blocks' statistics assembled in the
   unsharded layout, then the unsharded reduce's own functions (_row_from_block_stats, store_row_logprobs,
   with the reduce's warps): the same FP64 combination in the same order, the same numbers.

Two all-gathers: 10 x SPAN + 4 words a row, then 8 + SPAN (SPAN about the shard's blocks, V / shards / 512
on a GPU). The shards' first columns are device scalars (vocab_start) and multiples of 4; a shard's count of
columns and the batch are runtime values: no batch size costs a compilation.
"""

import functools

import triton
import triton.language as tl

from jsample.kernels.common import aligned, is_greedy, largest_power_of_two_dividing, load_temperature
from jsample.kernels.host import jit
from jsample.kernels.logprobs import (STATS, _block_sums, _row_from_block_stats, single_read_config,
                                      store_block_stats, store_row_logprobs)
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch

RECORD_HEADER = 4  # the stats record's words after its blocks: first column, end column, holds the token, its logit
_HEADER = tl.constexpr(RECORD_HEADER)
PARTIAL_WORDS = 8  # the counts record's words before its blocks' counts: the cut first and last blocks' sums
_PARTIAL = tl.constexpr(PARTIAL_WORDS)


def stats_record_words(span: int) -> int:
    """int32 words a row of round 1's record takes: SPAN blocks' statistics (f64), then the header."""
    return 2 * STATS.value * span + RECORD_HEADER


def counts_record_words(span: int) -> int:
    """int32 words a row of round 2's record takes: two cut blocks' sums (i64 pairs), then SPAN counts (even)."""
    return PARTIAL_WORDS + span + span % 2


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
def shard_logprobs_stats_kernel(
    logits_ptr,  # [B, V_shard] f32|bf16|f16: this device's columns, rows `row_stride` elements apart
    tokens_ptr,  # [B] i32|i64: global columns
    temperature_ptr,  # [B] f32, or one f32 for all rows
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column
    V_shard,
    row_stride,
    record_ptr,  # [B, stats_record_words(SPAN)] i32 output
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,  # the unsharded single read's blocks
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    """Round 1 (the module's docstring): block first + j of the row, over this shard's columns."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    start, end = _shard_columns(vocab_start_ptr, V_shard, START_ALIGN, VOCAB_ALIGN)
    cols = (start // BLOCK_V + j) * BLOCK_V + tl.arange(0, BLOCK_V)
    row_ptr = logits_ptr + tl.multiple_of(row * row_stride, ROW_ALIGN) - start  # indexed by global columns
    x = tl.load(row_ptr + cols, mask=(cols >= start) & (cols < end), other=float("-inf")).to(tl.float32)
    record = record_ptr + row * (2 * STATS * SPAN + _HEADER)
    store_block_stats(x, load_temperature(temperature_ptr, row), record, 0, j, SPAN, FAST_MATH)
    if j == 0:
        token = tl.load(tokens_ptr + row).to(tl.int64)
        here = (token >= start) & (token < end)
        header = record + 2 * STATS * SPAN
        tl.store(header, start)
        tl.store(header + 1, end)
        tl.store(header + 2, here.to(tl.int32))
        x_token = tl.load(row_ptr + tl.where(here, token, start)).to(tl.float32)
        tl.store((header + 3).to(tl.pointer_type(tl.float32)), tl.where(here, x_token, float("nan")))


@jit
def _token_logit(gathered_ptr, row, batch, SHARDS: tl.constexpr, SPAN: tl.constexpr):
    """(the row's token's logit, whether a shard holds the token) from the gathered stats records."""
    x_token = tl.full([], float("nan"), tl.float32)
    held = tl.full([], 0, tl.int1)
    for s in tl.static_range(SHARDS):
        header = gathered_ptr + (s * batch + row) * (2 * STATS * SPAN + _HEADER) + 2 * STATS * SPAN
        here = tl.load(header + 2) != 0
        x_token = tl.where(here, tl.load((header + 3).to(tl.pointer_type(tl.float32))), x_token)
        held = held | here
    return x_token, held


@jit
def _block_part(gathered_ptr, s, row, batch, g, V, SPAN: tl.constexpr, BLOCK_V: tl.constexpr):
    """(shard s's slot of global block g, whether shard s holds columns of it, whether it holds all of them,
    the slot's stats pointer (f64, STATS values SPAN apart)): g may be a vector."""
    record = gathered_ptr + (s * batch + row) * (2 * STATS * SPAN + _HEADER)
    start = tl.load(record + 2 * STATS * SPAN)
    end = tl.load(record + 2 * STATS * SPAN + 1)
    j = g - start // BLOCK_V
    lo = g * BLOCK_V
    holds = (j >= 0) & (j < SPAN) & (lo < end) & (lo + BLOCK_V > start)
    whole = holds & (lo >= start) & (tl.minimum(lo + BLOCK_V, V) <= end)
    return j, holds, whole, record.to(tl.pointer_type(tl.float64)) + tl.where(holds, j, 0)


@jit
def shard_logprobs_count_kernel(
    logits_ptr,  # as shard_logprobs_stats_kernel's
    temperature_ptr,
    vocab_start_ptr,
    gathered_ptr,  # [SHARDS, B, stats_record_words(SPAN)] i32: every shard's round 1 record, in column order
    V,  # the whole vocabulary
    V_shard,
    row_stride,
    record_ptr,  # [B, counts_record_words(SPAN)] i32 output
    SHARDS: tl.constexpr,
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    """Round 2 (the module's docstring): block first + j's count of logits above the token's, and, for a block
    cut by this shard's edge, the sums of the shard's part against the whole block's largest finite logit."""
    row = tl.program_id(0).to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    j = tl.program_id(1)
    start, end = _shard_columns(vocab_start_ptr, V_shard, START_ALIGN, VOCAB_ALIGN)
    g = start // BLOCK_V + j
    lo = g * BLOCK_V
    record = record_ptr + row * (_PARTIAL + SPAN + SPAN % 2)
    if lo >= end:  # past the shard's blocks
        tl.store(record + _PARTIAL + j, 0)
        return
    x_token, held = _token_logit(gathered_ptr, row, batch, SHARDS, SPAN)
    # the block's largest finite logit (its parts' largest), and this shard's largest non-NaN one in it
    block_max = tl.full([], float("-inf"), tl.float32)
    top = tl.full([], float("-inf"), tl.float32)
    for s in tl.static_range(SHARDS):
        slot, holds, whole, stats = _block_part(gathered_ptr, s, row, batch, g, V, SPAN, BLOCK_V)
        block_max = tl.maximum(block_max, tl.where(holds, tl.load(stats).to(tl.float32), float("-inf")))
        mine = tl.load(gathered_ptr + (s * batch + row) * (2 * STATS * SPAN + _HEADER) + 2 * STATS * SPAN) == start
        top = tl.where(mine & holds, tl.load(stats + SPAN).to(tl.float32), top)
    cut = (lo < start) | (tl.minimum(lo + BLOCK_V, V) > end)
    count = tl.zeros([], tl.int32)
    if (held & (top > x_token)) | cut:
        cols = lo + tl.arange(0, BLOCK_V)
        row_ptr = logits_ptr + tl.multiple_of(row * row_stride, ROW_ALIGN) - start
        x = tl.load(row_ptr + cols, mask=(cols >= start) & (cols < end), other=float("-inf")).to(tl.float32)
        count = tl.sum((x > x_token).to(tl.int32), axis=0)
        if cut:
            temperature = load_temperature(temperature_ptr, row)
            inverse_t = tl.where(is_greedy(temperature), 1.0, 1.0 / temperature)
            d = tl.where(tl.abs(x) < float("inf"), x - block_max, float("-inf"))
            raw_sum, scaled_sum = _block_sums(d, inverse_t, FAST_MATH)
            at = record.to(tl.pointer_type(tl.int64)) + tl.where(j == 0, 0, 2)  # the first block's, or the last's
            tl.store(at, raw_sum)
            tl.store(at + 1, scaled_sum)
    tl.store(record + _PARTIAL + j, tl.where(held, count, 0))


@jit
def shard_logprobs_merge_kernel(
    gathered_stats_ptr,  # [SHARDS, B, stats_record_words(SPAN)] i32: round 1's records
    gathered_counts_ptr,  # [SHARDS, B, counts_record_words(SPAN)] i32: round 2's records
    tokens_ptr,  # [B] i32|i64
    temperature_ptr,
    V,  # the whole vocabulary
    num_blocks,  # the unsharded single read's blocks a row
    stats_ptr,  # [B, 2 * STATS, num_blocks] f32 scratch: the unsharded layout (f64 values)
    counts_ptr,  # [B, num_blocks] i32 scratch
    raw_ptr,  # [B] f32 outputs: raw, scaled, kept, log_kept_mass (logprobs_reduce_kernel's)
    scaled_ptr,
    kept_ptr,
    log_kept_mass_ptr,
    rank_ptr,  # [B] i32
    SHARDS: tl.constexpr,
    SPAN: tl.constexpr,
    BLOCK_V: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # the unsharded reduce's
):
    """Round 3 (the module's docstring), with logprobs_reduce_kernel's warps: the row's blocks' statistics as
    the unsharded read stores them (every part of a block combined: maxima by max, sums added), then that
    kernel's own reduction of them."""
    row = tl.program_id(0).to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    g = tl.arange(0, REDUCE_BLOCK)
    in_row = g < num_blocks
    stats = stats_ptr.to(tl.pointer_type(tl.float64)) + (row * STATS) * num_blocks + g
    counts = counts_ptr + row * num_blocks + g
    for k in tl.static_range(STATS):
        tl.store(stats + k * num_blocks, float("-inf") if k < 2 else 0.0, mask=in_row)
    tl.store(counts, 0, mask=in_row)
    for s in tl.static_range(SHARDS):
        tl.debug_barrier()  # the previous part's stores, by other threads, before these loads
        slot, holds, whole, part = _block_part(gathered_stats_ptr, s, row, batch, g, V, SPAN, BLOCK_V)
        holds = holds & in_row
        partial = gathered_counts_ptr + (s * batch + row) * (_PARTIAL + SPAN + SPAN % 2)
        last = tl.max(tl.where(holds, slot, 0), axis=0)
        sums = partial.to(tl.pointer_type(tl.int64)) + tl.where(slot == 0, 0, 2)  # a cut block's: round 2's
        cut_sums = holds & ~whole & ((slot == 0) | (slot == last))
        for k in tl.static_range(STATS):
            value = tl.load(part + k * SPAN, mask=holds, other=0.0)
            if k == 2 or k == 3:
                value = tl.where(whole, value, tl.load(sums + (k - 2), mask=cut_sums, other=0).to(tl.float64))
            now = tl.load(stats + k * num_blocks, mask=holds, other=0.0)
            combined = value + now if k == 2 or k == 3 else tl.maximum(value, now)
            tl.store(stats + k * num_blocks, combined, mask=holds)
        tl.store(counts, tl.load(counts, mask=holds, other=0) + tl.load(partial + _PARTIAL + slot, mask=holds,
                                                                         other=0), mask=holds)
    tl.debug_barrier()
    temperature = load_temperature(temperature_ptr, row)
    token = tl.load(tokens_ptr + row).to(tl.int64)
    m, larger, greedy, log_raw_sum, log_scaled_sum = _row_from_block_stats(stats_ptr, counts_ptr, row, num_blocks,
                                                                           temperature, REDUCE_BLOCK)
    x_token, held = _token_logit(gathered_stats_ptr, row, batch, SHARDS, SPAN)
    valid = held & (token >= 0) & (token < V) & (m > float("-inf"))
    store_row_logprobs(row, x_token, valid, temperature, m, larger, greedy, log_raw_sum, log_scaled_sum, rank_ptr,
                       rank_ptr, raw_ptr, raw_ptr, scaled_ptr, kept_ptr, log_kept_mass_ptr, rank_ptr, raw_ptr, False)


@functools.lru_cache(maxsize=512)
def plan_token_logprobs_shard(logits: ArgSpec, target: Target, *, vocab: int, starts: tuple,
                              start_align: int) -> ShardedPlan:
    """Vocab-parallel `token_logprobs` (no filters, no top list) of this device's shard `logits` [B, V_shard] of
    a `vocab`-column vocabulary whose shards start at `starts` (every shard's first column, in order; this one's
    is the input `vocab_start` [1] i32, a multiple of `start_align`): inputs `tokens` [B] (global columns),
    `temperature` [B] f32 (or one f32), `vocab_start`; outputs token_logprobs' (raw, scaled, kept,
    log_kept_mass, rank, top_ids, top_logprobs; the top ones [B, 0]), on every device."""
    batch, shard_vocab = logits.shape
    config = single_read_config(vocab, target)  # the unsharded call's blocks
    span = shard_span(starts, vocab, config.block_v)
    names = ("raw", "scaled", "kept", "log_kept_mass", "rank", "top_ids", "top_logprobs")
    outputs = tuple(Buffer(name, (batch,), "int32" if name == "rank" else "float32") for name in names[:5]) + (
        Buffer("top_ids", (batch, 0), "int32"), Buffer("top_logprobs", (batch, 0), "float32"))
    stats_record = Buffer("stats_record", (batch, stats_record_words(span)), "int32")
    counts_record = Buffer("counts_record", (batch, counts_record_words(span)), "int32")
    if batch == 0:
        return ShardedPlan((Plan((stats_record,), (), ("stats_record",), "empty"),
                            Plan((counts_record,), (), ("counts_record",), "empty"),
                            Plan(outputs, (), names, "empty")), "empty")
    row_stride = logits.strides[0]
    shards = len(starts)
    tiles = dict(SPAN=span, BLOCK_V=config.block_v, ROW_ALIGN=largest_power_of_two_dividing(row_stride, 16),
                 START_ALIGN=start_align, VOCAB_ALIGN=largest_power_of_two_dividing(shard_vocab, 16),
                 FAST_MATH=config.fast_math)
    stats = Plan((stats_record,), (launch(
        shard_logprobs_stats_kernel, (batch, span),
        ("logits", "tokens", "temperature", "vocab_start", shard_vocab, row_stride), ("stats_record",),
        num_warps=config.num_warps, **tiles),), ("stats_record",), "vocab shard logprobs stats")
    counts = Plan((counts_record,), (launch(
        shard_logprobs_count_kernel, (batch, span),
        ("logits", "temperature", "vocab_start", "gathered_stats_record", vocab, shard_vocab, row_stride),
        ("counts_record",), SHARDS=shards, num_warps=config.num_warps, **tiles),), ("counts_record",),
        "vocab shard logprobs counts")
    scratch = (Buffer("merged_stats", (batch, 2 * STATS.value, config.num_blocks), "float32"),
               Buffer("merged_counts", (batch, config.num_blocks), "int32"))
    merge = Plan(scratch + outputs, (launch(
        shard_logprobs_merge_kernel, (batch,),
        ("gathered_stats_record", "gathered_counts_record", "tokens", "temperature", vocab, config.num_blocks),
        ("merged_stats", "merged_counts") + names[:5], SHARDS=shards, SPAN=span, BLOCK_V=config.block_v,
        REDUCE_BLOCK=config.reduce_block, num_warps=4),), names, "vocab merge logprobs")
    return ShardedPlan((stats, counts, merge), "vocab shard logprobs")

