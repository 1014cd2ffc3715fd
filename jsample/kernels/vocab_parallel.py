"""Vocab-parallel sampling (issue 42): logits split along the vocabulary over devices (tensor
parallelism), sampled without gathering them: the unsharded call's tokens, bit for bit.

gumbel_sample's noise is keyed by the global column (STREAM.md), and its token is the lowest column
among the best scores: an argmax, which splits over any partition of the columns. So each device
scores its own columns with gumbel_sample's own code (`store_sampled_block`, given the shard's global
columns: the same noise, the same scores, FP32 or FP64) and reduces them to a summary of its row:

    words 0-1  the shard's best score (float64; an FP32 score is exact in it)
    word 2     its lowest column among that score (global), as store_block_best stores it
    word 3     1 if a block of the shard found the row's scaled logits overflowing (the row is greedy)
    word 4     the shard's largest finite logit (float32 bits): the greedy argmax's candidate (-inf where
               the row's temperature is at least 1: no finite logit overflows, the combine never reads it)
    word 5     its lowest column (global; -1 when the shard has no finite logit): the blocks store only
               their largest finite logit, and the summary looks the column up in the first block holding
               the largest (greedy_column_in_block)

Only these SUMMARY_WORDS int32 words a row cross devices (one all-gather, done by the frontends with
their framework's collective); `shard_combine_kernel` then takes the token on every device: the best
score, lowest column among equal ones (the shards lie in column order), or, where any shard saw the
row overflow, the greedy argmax over the shards' candidates (gumbel_sample's rule for such rows):
exactly argmax_reduce_kernel's decision over the unsharded row's blocks. A row with no finite logit
anywhere gives -1.

A shard's columns start at `vocab_start` (a device scalar: under jit the shard's index is not known on
the host), a multiple of 4 (the stream generates the noise of four columns at a time); the batch is
the grid and the start a runtime value, so neither costs a compilation.
"""

import functools

import triton
import triton.language as tl

from jsample.kernels.common import aligned, is_padding, largest_finite, load_temperature, store_sampled_block
from jsample.kernels.gumbel import ONE_LAUNCH_MAX_PROGRAMS, gumbel_launch_config, many_rows_config
from jsample.kernels.host import jit
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.stream import STREAM_DRAFT, STREAM_TOKEN, load_seed, seed_word_count

SUMMARY_WORDS = 6
_WORDS = tl.constexpr(SUMMARY_WORDS)  # the kernels' copy: a kernel reads only constexpr globals
START_MULTIPLE = 4  # a shard's first global column is a multiple of this (the stream's four columns a call)


@jit
def shard_partial_kernel(
    logits_ptr,  # [B, V_shard] f32|bf16|f16: this device's columns, rows `row_stride` elements apart
    seeds_ptr,  # as gumbel_partial_kernel's
    positions_ptr,
    temperature_ptr,
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column (a multiple of 4)
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): its logits unread
    V_shard,
    row_stride,
    partial_score_ptr,  # [B, num_blocks] f32 (FP64: f64 as f32 pairs)
    partial_index_ptr,  # [B, num_blocks] i32: global columns (-1 - column: the row overflows)
    greedy_value_ptr,  # [B, num_blocks] f32: the block's largest finite logit (-inf: none finite)
    STREAM: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,  # a power of two >= 4 dividing vocab_start (both frontends know it)
    VOCAB_ALIGN: tl.constexpr,  # a power of two dividing V_shard
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, num_blocks): gumbel_partial_kernel's blocks over this shard's global columns (the row
    pointer moved back by vocab_start, so column c of the row is global column c: store_sampled_block's
    noise, scores, FP64 shortlist and stored columns are the unsharded call's), and each block's greedy
    candidate's value (greedy_value; the summary finds its column, greedy_column_in_block). A padding row's
    programs read nothing (its summary says: no token)."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    start = aligned(tl.load(vocab_start_ptr), START_ALIGN)
    end = start + aligned(V_shard, VOCAB_ALIGN)
    first_col = start + block * BLOCK_V
    out = row.to(tl.int64) * num_blocks + block
    temperature = load_temperature(temperature_ptr, row)
    x = store_sampled_block(logits_ptr - start, row, row_stride, end, first_col, load_seed(seeds_ptr, row, SEED_WORDS),
                            tl.load(positions_ptr + row).to(tl.int64), temperature, partial_score_ptr,
                            partial_index_ptr, out, STREAM, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
    tl.store(greedy_value_ptr + out, greedy_value(x, temperature))


@jit
def greedy_value(x, temperature):
    """A block's greedy candidate's value: its largest finite logit, where the row's temperature lets a finite logit
    overflow when scaled (T < 1: common.overflow_from_magnitude's rule), on this shard or another; else -inf, which
    the combine never reads (it reads the candidates of overflowing rows only). That spares the most common rows
    (T = 1) the reduction, a tenth of the block's time."""
    value = float("-inf")
    if 1.0 / temperature.to(tl.float32) > 1.0:
        value = largest_finite(x)
    return value


@jit
def store_greedy_candidate(x, first_col, greedy_value_ptr, greedy_index_ptr, out, BLOCK_V: tl.constexpr):
    """The block's greedy candidate, from its unfiltered logits `x` (columns first_col ..): its largest finite
    logit and that logit's lowest global column (-1: none finite)."""
    largest = largest_finite(x)
    cols = first_col + tl.arange(0, BLOCK_V)
    column = tl.min(tl.where(x == largest, cols, 2147483647), axis=0)  # (finite where largest is: else unread)
    tl.store(greedy_value_ptr + out, largest)
    tl.store(greedy_index_ptr + out, tl.where(largest > float("-inf"), column, -1))


@jit
def shard_summary_kernel(
    partial_score_ptr,  # shard_partial_kernel's
    partial_index_ptr,
    greedy_value_ptr,
    logits_ptr,  # shard_partial_kernel's (the greedy candidate's column is looked up in its block)
    vocab_start_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's summary says no token
    V_shard,
    row_stride,
    num_blocks,
    summary_ptr,  # [B, SUMMARY_WORDS] i32 output
    FP64: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= num_blocks
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): the shard's summary of a row (the module's docstring), from its blocks as
    reduce_block_best_flagged reduces them."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            _store_no_token(summary_ptr, row)
            return
    _summarize_row(partial_score_ptr, partial_index_ptr, greedy_value_ptr, logits_ptr, vocab_start_ptr, V_shard,
                   row_stride, row, num_blocks, summary_ptr, FP64, REDUCE_BLOCK, BLOCK_V, ROW_ALIGN, START_ALIGN)


@jit
def _store_no_token(summary_ptr, row):
    """A padding row's summary: no finite score, no greedy candidate, no overflow (the combine's token: -1)."""
    out = summary_ptr + row.to(tl.int64) * _WORDS
    tl.store(out.to(tl.pointer_type(tl.float64)), float("-inf"))
    tl.store(out + 2, -1)
    tl.store(out + 3, 0)
    tl.store((out + 4).to(tl.pointer_type(tl.float32)), float("-inf"))
    tl.store(out + 5, -1)


@jit
def greedy_column_in_block(logits_ptr, row, row_stride, V_shard, block, largest, BLOCK_V: tl.constexpr,
                           ROW_ALIGN: tl.constexpr):
    """The lowest shard column of block `block` of row `row` whose logit (as FP32) is `largest` (a finite
    value the block holds): the column of the block's greedy candidate, whose value alone the block's
    program stored. One block of one row is read again, in chunks of at most 1024 columns."""
    CHUNK: tl.constexpr = min(BLOCK_V, 1024)
    row_ptr = logits_ptr + tl.multiple_of(row.to(tl.int64) * row_stride, ROW_ALIGN)
    column = 2147483647
    for offset in tl.static_range(0, BLOCK_V, CHUNK):
        cols = block * BLOCK_V + offset + tl.arange(0, CHUNK)
        x = tl.load(row_ptr + cols, mask=cols < V_shard, other=float("-inf")).to(tl.float32)
        column = tl.minimum(column, tl.min(tl.where(x == largest, cols, 2147483647), axis=0))
    return column


@jit
def _summarize_row(partial_score_ptr, partial_index_ptr, greedy_value_ptr, logits_ptr, vocab_start_ptr, V_shard,
                   row_stride, row, num_blocks, summary_ptr, FP64: tl.constexpr, REDUCE_BLOCK: tl.constexpr,
                   BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, START_ALIGN: tl.constexpr):
    row = row.to(tl.int64)
    blocks = tl.arange(0, REDUCE_BLOCK)
    in_row = blocks < num_blocks
    offsets = row * num_blocks + blocks
    score_ptr = partial_score_ptr.to(tl.pointer_type(tl.float64)) if FP64 else partial_score_ptr
    scores = tl.load(score_ptr + offsets, mask=in_row, other=float("-inf")).to(tl.float64)
    columns = tl.load(partial_index_ptr + offsets, mask=in_row, other=0)
    best = tl.max(scores, axis=0)
    column = tl.min(tl.where(scores == best, columns, 2147483647), axis=0)
    values = tl.load(greedy_value_ptr + offsets, mask=in_row, other=float("-inf"))
    largest = tl.max(values, axis=0)
    first_block = tl.min(tl.where(values == largest, blocks, REDUCE_BLOCK), axis=0)  # blocks hold rising columns
    greedy_column = aligned(tl.load(vocab_start_ptr), START_ALIGN) + greedy_column_in_block(
        logits_ptr, row, row_stride, V_shard, first_block, largest, BLOCK_V, ROW_ALIGN)
    out = summary_ptr + row * _WORDS
    tl.store(out.to(tl.pointer_type(tl.float64)), best)
    tl.store(out + 2, tl.where(best > float("-inf"), column, -1))
    tl.store(out + 3, (tl.min(columns, axis=0) < 0).to(tl.int32))
    tl.store((out + 4).to(tl.pointer_type(tl.float32)), largest)
    tl.store(out + 5, tl.where(largest > float("-inf"), greedy_column, -1))


@jit
def shard_one_launch_kernel(
    logits_ptr,  # as shard_partial_kernel's
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    vocab_start_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's summary says no token, nothing read
    V_shard,
    row_stride,
    partial_score_ptr,  # scratch, as shard_partial_kernel's outputs
    partial_index_ptr,
    greedy_value_ptr,
    arrivals_ptr,  # [B] i32, zero on entry, left zero (one self-resetting counter per row)
    summary_ptr,  # [B, SUMMARY_WORDS] i32 output
    STREAM: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """The two launches in one for small batches (as gumbel_one_launch_kernel): shard_partial_kernel's
    programs, then the last of a row's programs to arrive summarizes the row with shard_summary_kernel's code.
    The count's release / acquire orders the blocks' stores before the summary. A padding row: its first
    program writes the no-token summary, no program arrives (the counter stays zero)."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            if tl.program_id(1) == 0:
                _store_no_token(summary_ptr, row)
            return
    shard_partial_kernel(logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, vocab_start_ptr, row_valid_ptr,
                         V_shard, row_stride, partial_score_ptr, partial_index_ptr, greedy_value_ptr, STREAM, FP64,
                         BLOCK_V, ROW_ALIGN, START_ALIGN, VOCAB_ALIGN, FAST_MATH, SEED_WORDS, False)
    num_blocks = tl.num_programs(1)
    tl.debug_barrier()  # every thread's stores before the one release
    if tl.atomic_add(arrivals_ptr + row, 1, sem="acq_rel", scope="gpu") == num_blocks - 1:
        _summarize_row(partial_score_ptr, partial_index_ptr, greedy_value_ptr, logits_ptr, vocab_start_ptr, V_shard,
                       row_stride, row, num_blocks, summary_ptr, FP64, REDUCE_BLOCK, BLOCK_V, ROW_ALIGN, START_ALIGN)
        tl.atomic_xchg(arrivals_ptr + row, 0, sem="relaxed", scope="gpu")


@jit
def shard_combine_kernel(
    gathered_ptr,  # [SHARDS, B, SUMMARY_WORDS] i32: every shard's summaries, the shards in column order
    tokens_ptr,  # [B] i32 output
    SHARDS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,  # a power of two >= SHARDS
):
    """Grid (B,): the row's token from the shards' summaries (the module's docstring)."""
    row = tl.program_id(0).to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    shards = tl.arange(0, SHARDS_BLOCK)
    present = shards < SHARDS
    base = gathered_ptr + (shards * batch + row) * _WORDS
    scores = tl.load(base.to(tl.pointer_type(tl.float64)), mask=present, other=float("-inf"))
    columns = tl.load(base + 2, mask=present, other=-1)
    overflow = tl.max(tl.load(base + 3, mask=present, other=0), axis=0) > 0
    values = tl.load((base + 4).to(tl.pointer_type(tl.float32)), mask=present, other=float("-inf"))
    value_columns = tl.load(base + 5, mask=present, other=-1)
    best = tl.max(scores, axis=0)
    token = tl.min(tl.where((scores == best) & (columns >= 0), columns, 2147483647), axis=0)
    token = tl.where(best > float("-inf"), token, -1)
    if overflow:  # gumbel_sample's rule: a row whose scaled logits overflow is greedy
        largest = tl.max(values, axis=0)
        token = tl.min(tl.where((values == largest) & (value_columns >= 0), value_columns, 2147483647), axis=0)
        token = tl.where(largest > float("-inf"), token, -1)
    tl.store(tokens_ptr + row, token)


def start_alignment(starts) -> int:
    """The largest power of two (at most 16) dividing every one of `starts`."""
    align = 16
    for value in starts:
        while value % align:
            align //= 2
    return align


@functools.lru_cache(maxsize=512)
def plan_gumbel_shard(logits: ArgSpec, seeds: ArgSpec, target: Target, *, fp64: bool, draft: bool,
                      start_align: int, row_valid: bool = False) -> Plan:
    """A shard's part of vocab-parallel `gumbel_sample`: inputs `logits` [B, V_shard] (this device's
    columns), `seeds`, `positions`, `temperature` as gumbel_sample's, `vocab_start` [1] i32 (the shard's
    first global column, a multiple of `start_align`, a power of two >= 4) and, with `row_valid`, `row_valid`
    (common.is_padding: a padding row, its logits unread, its summary no token); output `summary`
    [B, SUMMARY_WORDS] i32, for the all-gather."""
    if start_align < START_MULTIPLE or start_align & (start_align - 1):
        raise ValueError(f"start_align must be a power of two >= {START_MULTIPLE}, got {start_align}")
    batch, vocab = logits.shape
    summary = Buffer("summary", (batch, SUMMARY_WORDS), "int32")
    if batch == 0:
        return Plan((summary,), (), ("summary",), "empty")
    row_stride = logits.strides[0]
    config = gumbel_launch_config(vocab, row_stride, fp64, fast_math=not target.interpreter,
                                  large_programs=target.large_programs)
    # gumbel_sample's choice: one launch for few programs (small batches: a launch costs more than the wait)
    one_launch = target.arrival_counters and batch * config.num_blocks <= ONE_LAUNCH_MAX_PROGRAMS
    if not one_launch and not target.large_programs:
        config = many_rows_config(config, vocab)
    blocks = config.num_blocks
    valid = "row_valid" if row_valid else "positions"  # the stand-in is never read
    buffers = (Buffer("partial_score", (batch, blocks * (2 if fp64 else 1)), "float32"),
               Buffer("partial_index", (batch, blocks), "int32"), Buffer("greedy_value", (batch, blocks), "float32"),
               summary)
    if one_launch:
        return Plan(buffers + (Buffer("arrivals", (batch,), "int32", counters=True),), (launch(
            shard_one_launch_kernel, (batch, blocks),
            ("logits", "seeds", "positions", "temperature", "vocab_start", valid, vocab, row_stride),
            ("partial_score", "partial_index", "greedy_value", "arrivals", "summary"),
            STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, FP64=fp64, BLOCK_V=config.block_v,
            ROW_ALIGN=config.row_align, START_ALIGN=start_align, VOCAB_ALIGN=config.vocab_align,
            FAST_MATH=config.fast_math, REDUCE_BLOCK=config.reduce_block, SEED_WORDS=seed_word_count(seeds.shape),
            HAS_ROW_VALID=row_valid, num_warps=config.num_warps),), ("summary",), "vocab shard, one launch")
    launches = (
        launch(shard_partial_kernel, (batch, blocks),
               ("logits", "seeds", "positions", "temperature", "vocab_start", valid, vocab, row_stride),
               ("partial_score", "partial_index", "greedy_value"),
               STREAM=(STREAM_DRAFT if draft else STREAM_TOKEN).value, FP64=fp64, BLOCK_V=config.block_v,
               ROW_ALIGN=config.row_align, START_ALIGN=start_align, VOCAB_ALIGN=config.vocab_align,
               FAST_MATH=config.fast_math,
               SEED_WORDS=seed_word_count(seeds.shape), HAS_ROW_VALID=row_valid, num_warps=config.num_warps),
        launch(shard_summary_kernel, (batch,),
               ("partial_score", "partial_index", "greedy_value", "logits", "vocab_start", valid, vocab, row_stride,
                blocks), ("summary",),
               FP64=fp64, REDUCE_BLOCK=config.reduce_block, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
               START_ALIGN=start_align, HAS_ROW_VALID=row_valid, num_warps=1),
    )
    return Plan(buffers, launches, ("summary",), "vocab shard")


@functools.lru_cache(maxsize=512)
def plan_gumbel_sample_shard(logits: ArgSpec, seeds: ArgSpec, target: Target, *, fp64: bool, draft: bool, shards: int,
                             start_align: int, row_valid: bool = False) -> ShardedPlan:
    """Vocab-parallel `gumbel_sample`'s rounds (plan.run_rounds): this shard's summary (plan_gumbel_shard), then,
    after its all-gather, the token (plan_shard_combine)."""
    return ShardedPlan((plan_gumbel_shard(logits, seeds, target, fp64=fp64, draft=draft, start_align=start_align,
                                          row_valid=row_valid),
                        plan_shard_combine(target, batch=logits.shape[0], shards=shards)), "vocab shard")


@functools.lru_cache(maxsize=512)
def plan_shard_combine(target: Target, *, batch: int, shards: int) -> Plan:
    """The token of vocab-parallel `gumbel_sample` from the all-gathered summaries: input `gathered_summary`
    [shards, B, SUMMARY_WORDS] i32, output `tokens` [B] i32."""
    tokens = Buffer("tokens", (batch,), "int32")
    if batch == 0:
        return Plan((tokens,), (), ("tokens",), "empty")
    return Plan((tokens,), (launch(shard_combine_kernel, (batch,), ("gathered_summary",), ("tokens",), SHARDS=shards,
                                   SHARDS_BLOCK=triton.next_power_of_2(shards), num_warps=1),),
                ("tokens",), "vocab combine")
