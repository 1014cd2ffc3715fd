"""Vocab-parallel `top_k_top_p_sample` (issue 42): each device holds a contiguous shard of the vocabulary; the
kept set is the unsharded call's exactly, and so is the token.

The kept set is decided by thresholds over order-preserving integer keys, found by searches whose every step is
an integer sum over the row (jsample/kernels/filtered: counts for top-k, fixed-point masses for top-p). A sum
over the row is the sum of the shards' sums, so a search splits over the shards with one all-gather a step:

1. `shard_filter_stats_kernel` (and, with top-k, `shard_top_k_bound_kernel`): each shard's record of each row,
   all-gathered: its largest finite key (the masses are relative to the row's), its k-th largest tile maximum
   (the largest of the shards' is a lower bound of top-k's threshold, where its search starts), and whether a
   finite logit's x / T overflows; each tile's largest key stays on the device, so that later rounds skip the
   tiles (and the sampling round the blocks) below their bracket unread. A row whose scaled logits overflow is
   searched like any other (its masses may be meaningless) and sampled greedily, as top_k_top_p_sample's: the
   searches never drop the largest logit, so the filters cannot change its argmax (its sampling round reads
   every block, for the overflow flag).
2. Top-k's search, then top-p's, `search_steps` rounds each (`shard_filter_search_kernel`): a round narrows the
   bracket by the previous round's all-gathered sums (summed over the shards: the row's sums), keeps the
   bracket as the device's state, and sums its shard's count (top-k) or mass (top-p) of the keys at or above
   each of the new bracket's WAYS pivots: [B, WAYS] int64, all-gathered. These are the launches' plan's
   searches (_start_search, _pivots, _narrow, _chunk_above): the same brackets, the same thresholds.
3. `shard_filtered_partial_kernel`: the final threshold, then gumbel_sample's block partials of the shard's
   columns with the dropped logits at -inf (store_filtered_block, at the global columns: the unsharded call's
   noise and scores), reduced to the shard's summary (vocab_parallel.shard_summary_kernel), all-gathered and
   combined (shard_combine_kernel) as vocab-parallel gumbel_sample's.

Data a row crosses devices: 6 int32 words, then 2 * WAYS int32 words a search round, then SUMMARY_WORDS; the
rounds are fixed by the dtype's key bits (16 ways: 4 a search for bfloat16, 5 for float16, 8 for float32), so
that a jitted program's collectives do not depend on the data. Min-p alone takes no search round.

Lists (top_k a Python int k <= SHARD_LIST_MAX_TOP_K: every row's k is known to be at most a capacity CAP, a
power of two >= k): one all-gather in all. The row's k largest keys (with multiplicity) are among the union of
each shard's own k largest, since the row's k-th largest key is at least every shard's k-th largest t_s. So each
shard finds t_s exactly, alone (its stats and its top-k search steps, each launch reading the previous one's
sums: the same kernels with one shard), and `shard_top_k_list_kernel` writes its record: the fewer than k keys
above t_s with their global columns, and one slot for its keys equal to t_s (their count, lowest column, and
Gumbel-max column). After the all-gather, `shard_list_merge_kernel` on every device reads top-k's threshold
from the slots (each weighing its keys' count), top-p's from their fixed-point masses (a tie slot's mass: count
times its key's), min-p's test per slot, as the one-GPU op's listed rows (_list_decision, _list_token), and the
token, the Gumbel-max of the kept slots' columns (a tie slot kept keeps all its keys, whose Gumbel-max is its
shard's: the same scores). Every key the filters keep is in a slot (the kept set is within top-k's), so the
kept set and the token are the unsharded call's. Greedy rows: each shard's slot of its largest keys, the lowest
column among the row's largest. A record is 2 * CAP + LIST_HEADER_WORDS + chunks * TIE_WORDS int32 words a row.

The plan is `plan_top_k_top_p_shard`: a `ShardedPlan` whose rounds the frontends run in order (plan.run_rounds),
all-gathering each round's first output over the shards (jax.lax.all_gather, torch.distributed.all_gather).
"""

import functools

import triton
import triton.language as tl

from jsample.kernels.common import aligned, load_temperature
from jsample.kernels.filtered.config import (
    PHASE_STATS,
    PHASE_TOP_K,
    PHASE_TOP_P,
    _ALL_FINITE,
    _SAMPLE,
    _TOP_K,
    filtered_launch_config,
    _with_ways,
)
from jsample.kernels.common import noisy_scores
from jsample.kernels.filtered.keys import (_filtered_row, _fixed_point_mass, _key, _key_value, _tile_logits,
                                           _tile_max_key, store_filtered_block)
from jsample.kernels.filtered.search import (_chunk_above, _kth_largest_block_key, _largest_reaching, _list_token,
                                             _narrow, _start_search)
from jsample.kernels.gumbel import many_rows_config
from jsample.kernels.host import jit
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.stream import gumbel_noise, load_seed, seed_word_count, uniform_at
from jsample.kernels.vocab_parallel import (START_MULTIPLE, SUMMARY_WORDS, plan_shard_combine, shard_summary_kernel,
                                            store_greedy_candidate)

STATE_WORDS = 3  # int64 a row: the search's bracket [lo, hi) and top-p's normaliser
_STATE_WORDS = tl.constexpr(STATE_WORDS)  # the kernels' copy: a kernel reads only constexpr globals
SHARD_WAYS = 16  # pivots a search round: 4 rounds a bfloat16 search, 8 a float32 one
_PHASE_STATS = tl.constexpr(PHASE_STATS)
_PHASE_TOP_K = tl.constexpr(PHASE_TOP_K)
SHARD_LIST_MAX_TOP_K = 256  # a top_k given as a Python int up to this is decided from the shards' lists
LIST_HEADER_WORDS = 4  # after a list record's 2 * capacity slot words: listed count, tie key, 0, overflow flag
TIE_WORDS = 6  # a chunk's ties at the shard's threshold: best score (f64), its column, lowest column, count, 0
_LIST_HEADER_WORDS = tl.constexpr(LIST_HEADER_WORDS)
_TIE_WORDS = tl.constexpr(TIE_WORDS)


def shard_list_capacity(top_k) -> int:
    """The list slots a shard's record has for a call's `top_k` (0: none, the search rounds decide): a Python
    int in [1, SHARD_LIST_MAX_TOP_K] takes the next power of two >= max(top_k, 16) (its slots hold the fewer
    than top_k keys above the shard's k-th largest, and one for the keys equal to it); per-row top_k arrays,
    whose values the host cannot see, take the search rounds."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= SHARD_LIST_MAX_TOP_K:
        return 0
    return triton.next_power_of_2(max(top_k, 16))


@jit
def shard_filter_stats_kernel(
    logits_ptr,  # [B, V_shard] f32|bf16|f16: this device's columns, rows `row_stride` elements apart
    row_valid_ptr,  # [B] u8|i32 (read with HAS_ROW_VALID): 0 for a padding row, whose logits are not read
    temperature_ptr,  # [B] f32
    V_shard,
    row_stride,
    chunk,  # columns a program (a multiple of THREADS * VEC)
    stats_ptr,  # [B, 3] i64 as i32 word pairs, zero on entry: word 0 the largest finite key + 2**31 (0: none),
    # word 2 1 where a finite logit's scaled value overflows
    tile_max_ptr,  # [B, cdiv(V_shard, THREADS * VEC)] i32: each tile's largest finite key (-2**31: none)
    KEY_SHIFT: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, chunks): the shard's largest finite key of the row, offset by 2**31 so that the zeroed output
    means "none" and the chunks' atomic maximum is the row's; whether some finite logit's x / T overflows
    (overflow_from_magnitude's test: such a row is greedy, and its sampling round reads every block, for the
    flag); and each tile's largest key, which lets the search rounds skip the tiles below their bracket unread
    (a padding row's are not written: never read)."""
    row = tl.program_id(0)
    valid = True
    if HAS_ROW_VALID:
        valid = tl.load(row_valid_ptr + row) != 0
    if valid:
        row_ptr = logits_ptr + row.to(tl.int64) * row_stride
        tiles_ptr = tile_max_ptr + row.to(tl.int64) * tl.cdiv(V_shard, THREADS * VEC)
        largest = tl.full([], float("-inf"), tl.float32)
        magnitude = tl.full([], 0.0, tl.float32)
        start = tl.program_id(1) * chunk
        end = tl.minimum(start + chunk, V_shard)
        while start < end:
            x = _tile_logits(row_ptr, start, end, THREADS, VEC)
            finite = tl.abs(x) < float("inf")
            tile_largest = tl.max(tl.max(tl.where(finite, x, float("-inf")), axis=1), axis=0)
            tl.store(tiles_ptr + start // (THREADS * VEC),
                     tl.where(tile_largest > float("-inf"), _key(tile_largest, KEY_SHIFT), -(2**31)))
            largest = tl.maximum(largest, tile_largest)
            magnitude = tl.maximum(magnitude, tl.max(tl.max(tl.where(finite, tl.abs(x), 0.0), axis=1), axis=0))
            start += THREADS * VEC
        inverse_t = 1.0 / load_temperature(temperature_ptr, row).to(tl.float32)
        if (inverse_t > 1.0) & (magnitude * inverse_t == float("inf")):
            tl.atomic_max(stats_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * 3 + 2, 1, sem="relaxed")
        if largest > float("-inf"):
            tl.atomic_max(stats_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * 3,
                          _key(largest, KEY_SHIFT).to(tl.int64) + 2**31, sem="relaxed")


@jit
def shard_top_k_bound_kernel(
    top_k_ptr,  # [B] i32|i64
    row_valid_ptr,  # [B] u8|i32 (read with HAS_ROW_VALID): a padding row's tiles were not written
    tile_max_ptr,  # shard_filter_stats_kernel's
    stats_in_ptr,  # shard_filter_stats_kernel's [B, 3] i64 (its words 0 and 2)
    num_tiles,
    stats_ptr,  # [B, 3] i64 output: words 0 and 2 stats_in's, word 1 the bound + 2**31 (0: none)
    REDUCE_TILES: tl.constexpr,  # a power of two >= num_tiles
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): the k-th largest of the shard's tile maxima, a lower bound of the row's top-k threshold (k
    tiles hold k keys at or above it, and the shard's keys are some of the row's: _kth_largest_block_key), so
    that the largest of the shards' bounds can start top-k's search: a narrower first bracket, and every tile
    below it skipped unread."""
    row = tl.program_id(0)
    valid = True
    if HAS_ROW_VALID:
        valid = tl.load(row_valid_ptr + row) != 0
    bound = tl.full([], -(2**31), tl.int64)
    if valid:
        tiles = tl.arange(0, REDUCE_TILES)
        tile_max = tl.load(tile_max_ptr + row.to(tl.int64) * num_tiles + tiles, mask=tiles < num_tiles,
                           other=-(2**31))
        bound = _kth_largest_block_key(tile_max, tl.load(top_k_ptr + row).to(tl.int64), bound, SORT=False)
    # (words 0 and 2 copied: in JAX the output is a new array; in torch the same memory, read before written)
    out = stats_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * 3
    stats_in = stats_in_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * 3
    key_max, overflow = tl.load(stats_in), tl.load(stats_in + 2)
    tl.store(out, key_max)
    tl.store(out + 1, bound + 2**31)
    tl.store(out + 2, overflow)


@jit
def _row_stats(gathered_stats_ptr, row, batch, shards, SHARDS_BLOCK: tl.constexpr):
    """(the row's largest finite key, its finite count as the launches' plan keeps it: ALL_FINITE where it has a
    finite logit, else 0, the largest of the shards' lower bounds of top-k's threshold: -2**31 where none,
    whether its scaled logits overflow)."""
    s = tl.arange(0, SHARDS_BLOCK)
    stats = gathered_stats_ptr.to(tl.pointer_type(tl.int64)) + (s.to(tl.int64) * batch + row) * 3
    key_max = tl.max(tl.load(stats, mask=s < shards, other=0), axis=0) - 2**31
    bound = tl.max(tl.load(stats + 1, mask=s < shards, other=0), axis=0) - 2**31
    overflow = tl.max(tl.load(stats + 2, mask=s < shards, other=0), axis=0) > 0
    return key_max, tl.where(key_max > -(2**31), _ALL_FINITE, 0).to(tl.int64), bound, overflow


@jit
def _shard_state(b64, batch, shards, temperature, key_max, count, bound, top_k_ptr, top_p_ptr, state_in_ptr,
                 gathered_sums_ptr, PHASE: tl.constexpr, PREV_PHASE: tl.constexpr, KEY_SHIFT: tl.constexpr,
                 WAYS: tl.constexpr, SHARDS_BLOCK: tl.constexpr):
    """The row's bracket [lo, hi) and top-p normaliser for a PHASE round: the previous round's bracket narrowed
    by its sums over every shard, and where PHASE starts a search, its first bracket (at the previous
    threshold, below every finite key at first as in filter_row_kernel; top-k's at the shards' `bound`)."""
    if PREV_PHASE == _PHASE_STATS:
        lo = tl.where(count > 0, _key(tl.full([], -3.4028234663852886e38, tl.float32), KEY_SHIFT), 0).to(tl.int64)
        hi = lo + 1
        normalizer = lo * 0
    else:
        state = state_in_ptr.to(tl.pointer_type(tl.int64)) + b64 * _STATE_WORDS
        lo, hi, normalizer = tl.load(state), tl.load(state + 1), tl.load(state + 2)
        if hi - lo > 1:
            ways = tl.arange(0, WAYS)
            s = tl.arange(0, SHARDS_BLOCK)
            sums = gathered_sums_ptr.to(tl.pointer_type(tl.int64)) + (s[:, None].to(tl.int64) * batch + b64) * WAYS
            above = tl.sum(tl.load(sums + ways[None, :], mask=(s < shards)[:, None], other=0), axis=0)
            lo, hi, normalizer = _narrow(PREV_PHASE, lo, hi, above, normalizer, True, b64, top_k_ptr, top_p_ptr,
                                         WAYS, KEY_SHIFT)
    if PHASE != PREV_PHASE:
        if PHASE != _SAMPLE:
            lo, hi = _start_search(PHASE, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
            if PHASE == _TOP_K:  # a searched row starts at the shards' bound (<= its threshold <= key_max)
                lo = tl.where(hi - lo > 1, tl.maximum(lo, bound), lo)
    return lo, hi, normalizer


@jit
def shard_filter_search_kernel(
    logits_ptr,  # as shard_filter_stats_kernel's
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64 (read in top-k rounds)
    top_p_ptr,  # [B] f32 (read in top-p rounds)
    gathered_stats_ptr,  # [shards, B, 3] i64 as i32 word pairs: every shard's statistics
    state_in_ptr,  # [B, STATE_WORDS] i64 as i32 words: the previous round's (read unless PREV_PHASE is stats)
    gathered_sums_ptr,  # [shards, B, WAYS] i64 as i32 words: every shard's sums of the previous round
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys
    shards,
    V_shard,
    row_stride,
    chunk,  # columns a program (a multiple of THREADS * VEC)
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words output
    sums_out_ptr,  # [B, WAYS] i64 as i32 words output, zero on entry: this shard's sums at the round's pivots
    PHASE: tl.constexpr,
    PREV_PHASE: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    WAYS: tl.constexpr,
    WIDE_SUMS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    """Grid (B, chunks): a search round of the row (the module's docstring): its state, then the count (top-k)
    or fixed-point mass (top-p) of the keys in this program's columns at or above each pivot, added to the
    row's sums (integer atomics: the sums do not depend on their order). Rows whose bracket is settled (and
    rows the filters do not apply to: greedy, padding) read no logits, nor do tiles whose largest key is below
    the bracket (they add nothing)."""
    row = tl.program_id(0)
    b64 = row.to(tl.int64)
    batch = tl.num_programs(0)
    temperature = load_temperature(temperature_ptr, row)
    key_max, count, bound, overflow = _row_stats(gathered_stats_ptr, row, batch, shards, SHARDS_BLOCK)
    lo, hi, normalizer = _shard_state(b64, batch, shards, temperature, key_max, count, bound, top_k_ptr, top_p_ptr,
                                      state_in_ptr, gathered_sums_ptr, PHASE, PREV_PHASE, KEY_SHIFT, WAYS,
                                      SHARDS_BLOCK)
    if tl.program_id(1) == 0:
        state = state_out_ptr.to(tl.pointer_type(tl.int64)) + b64 * _STATE_WORDS
        tl.store(state, lo)
        tl.store(state + 1, hi)
        tl.store(state + 2, normalizer)
    if hi - lo > 1:
        first = tl.program_id(1) * chunk
        end = tl.minimum(first + chunk, V_shard)
        num_tiles = tl.cdiv(V_shard, THREADS * VEC)
        above = _chunk_above(logits_ptr + b64 * row_stride, first, end, V_shard, lo, hi, temperature, key_max, PHASE,
                             KEY_SHIFT, FP64, THREADS, VEC, WAYS, WIDE_SUMS, tile_max_ptr + b64 * num_tiles, num_tiles,
                             THREADS * VEC, 1, FAST_MATH=FAST_MATH)
        tl.atomic_add(sums_out_ptr.to(tl.pointer_type(tl.int64)) + b64 * WAYS + tl.arange(0, WAYS), above,
                      sem="relaxed")


@jit
def shard_filtered_partial_kernel(
    logits_ptr,  # as shard_filter_stats_kernel's
    seeds_ptr,  # as top_k_top_p_sample's
    positions_ptr,
    temperature_ptr,  # [B] f32
    top_k_ptr,
    top_p_ptr,
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column (a multiple of START_ALIGN)
    row_valid_ptr,  # [B] u8|i32 (read with HAS_ROW_VALID): a padding row's programs read and write nothing
    gathered_stats_ptr,
    state_in_ptr,  # the last search round's (read unless PREV_PHASE is stats: min-p alone)
    gathered_sums_ptr,
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys, TILE columns a tile
    shards,
    V_shard,
    row_stride,
    partial_score_ptr,  # [B, num_blocks] f32 (FP64: f64 as f32 pairs), as shard_partial_kernel's
    partial_index_ptr,  # [B, num_blocks] i32: global columns (-1 - column: the row overflows)
    greedy_value_ptr,  # [B, num_blocks] f32: the block's largest finite logit
    greedy_index_ptr,  # [B, num_blocks] i32: its lowest global column (-1: none finite)
    PREV_PHASE: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    WAYS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    TILE: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, num_blocks): the row's final threshold (its last search round's bracket narrowed), then
    store_filtered_block over this shard's global columns (the row pointer moved back by vocab_start), and each
    block's greedy candidate from its unfiltered logits: shard_partial_kernel's outputs for the kept set. A
    block whose tiles' largest key is below the threshold keeps nothing: no candidate, its logits unread (its
    greedy candidate neither: the row's largest logit is kept, so such a block never holds the greedy token),
    unless the row's scaled logits overflow (the stats round's flag): there every block reads its logits, whose
    overflow flag makes the row greedy, as in top_k_top_p_sample."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if tl.load(row_valid_ptr + row) == 0:
            return
    b64 = row.to(tl.int64)
    batch = tl.num_programs(0)
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    temperature = load_temperature(temperature_ptr, row)
    key_max, count, bound, overflow = _row_stats(gathered_stats_ptr, row, batch, shards, SHARDS_BLOCK)
    threshold, _, _ = _shard_state(b64, batch, shards, temperature, key_max, count, bound, top_k_ptr, top_p_ptr,
                                   state_in_ptr, gathered_sums_ptr, _SAMPLE, PREV_PHASE, KEY_SHIFT, WAYS,
                                   SHARDS_BLOCK)
    start = aligned(tl.load(vocab_start_ptr), START_ALIGN)
    end = start + aligned(V_shard, VOCAB_ALIGN)
    first_col = start + block * BLOCK_V
    out = b64 * num_blocks + block
    num_tiles = tl.cdiv(V_shard, TILE)
    block_max = _tile_max_key(tile_max_ptr + b64 * num_tiles, block * BLOCK_V, num_tiles, TILE,
                              max(BLOCK_V // TILE, 1))
    if (block_max < threshold) & ~overflow:
        if FP64:
            tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, float("-inf"))
        else:
            tl.store(partial_score_ptr + out, float("-inf"))
        tl.store(partial_index_ptr + out, first_col)
        tl.store(greedy_value_ptr + out, float("-inf"))
        tl.store(greedy_index_ptr + out, -1)
        return
    x = store_filtered_block(logits_ptr - start, b64, row_stride, end, first_col, load_seed(seeds_ptr, row, SEED_WORDS),
                             tl.load(positions_ptr + row).to(tl.int64), temperature, min_p_ptr, key_max, count,
                             threshold, partial_score_ptr, partial_index_ptr, out, HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V,
                             ROW_ALIGN, FAST_MATH).to(tl.float32)
    store_greedy_candidate(x, first_col, greedy_value_ptr, greedy_index_ptr, out, BLOCK_V)


@jit
def shard_top_k_list_kernel(
    logits_ptr,  # as shard_filter_stats_kernel's
    seeds_ptr,  # as top_k_top_p_sample's
    positions_ptr,
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column
    row_valid_ptr,  # [B] u8|i32 (read with HAS_ROW_VALID): a padding row's programs read and write nothing
    stats_ptr,  # this shard's own statistics [B, 3] i64 (shard_filter_stats_kernel's and the bound's)
    state_in_ptr,  # this shard's last top-k search step's state
    sums_in_ptr,  # and sums
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys
    V_shard,
    row_stride,
    chunk,  # columns a program (a multiple of THREADS * VEC)
    record_ptr,  # [B, 2 * CAP + LIST_HEADER_WORDS + chunks * TIE_WORDS] i32 output, zero on entry
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    WAYS: tl.constexpr,
    CAP: tl.constexpr,
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, chunks): this shard's list record of the row (the module's docstring, "Lists"). Its threshold t is
    its own k-th largest key (its top-k search, run on the shard alone, narrowed by the last step's sums), or its
    largest key where the filters do not apply (greedy rows). Slots 0 .. CAP - 2 get the columns (global) and keys
    of the finite logits with a key above t (fewer than k: at most CAP - 1), through one atomic a tile; the keys
    equal to t are counted, by chunk: their lowest column and their Gumbel-max column (scored by the very code
    _list_token scores with: noise at the global columns, noisy_scores), as the chunk's tie words. Tiles whose
    largest key is below t hold none: skipped unread."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if tl.load(row_valid_ptr + row) == 0:
            return
    b64 = row.to(tl.int64)
    batch = tl.num_programs(0)
    c = tl.program_id(1)
    temperature = load_temperature(temperature_ptr, row)
    key_max, count, bound, overflow = _row_stats(stats_ptr, row, batch, 1, 1)
    threshold, _, _ = _shard_state(b64, batch, 1, temperature, key_max, count, bound, top_k_ptr, top_k_ptr,
                                   state_in_ptr, sums_in_ptr, _SAMPLE, _PHASE_TOP_K, KEY_SHIFT, WAYS, 1)
    threshold = tl.where(_filtered_row(temperature, count), threshold, key_max).to(tl.int32)
    record_words = 2 * CAP + _LIST_HEADER_WORDS + tl.num_programs(1) * _TIE_WORDS
    record = record_ptr + b64 * record_words
    if c == 0:
        tl.store(record + 2 * CAP + 1, threshold)
        tl.store(record + 2 * CAP + 3, overflow.to(tl.int32))
    seed = load_seed(seeds_ptr, row, SEED_WORDS)
    position = tl.load(positions_ptr + row).to(tl.int64)
    start_col = tl.load(vocab_start_ptr)
    row_ptr = logits_ptr + b64 * row_stride
    num_tiles = tl.cdiv(V_shard, THREADS * VEC)
    best_score = tl.full([], float("-inf"), tl.float64)
    best_col = tl.full([], 2**31 - 1, tl.int32)
    lowest = tl.full([], 2**31 - 1, tl.int32)
    ties = tl.full([], 0, tl.int32)
    start = c * chunk
    end = tl.minimum(start + chunk, V_shard)
    while start < end:
        if _tile_max_key(tile_max_ptr + b64 * num_tiles, start, num_tiles, THREADS * VEC, 1) >= threshold:
            x = _tile_logits(row_ptr, start, V_shard, THREADS, VEC)
            finite = tl.abs(x) < float("inf")
            key = _key(x, KEY_SHIFT)
            cols = start_col + start + tl.arange(0, VEC)[:, None] + tl.arange(0, THREADS)[None, :] * VEC
            above = tl.reshape((finite & (key > threshold)).to(tl.int32), [VEC * THREADS])
            taken = tl.sum(above, axis=0)
            if taken > 0:
                base = tl.atomic_add(record + 2 * CAP, taken, sem="relaxed")
                slots = base + tl.cumsum(above, 0) - above
                stored = (above > 0) & (slots < CAP - 1)
                tl.store(record + slots, tl.reshape(cols, [VEC * THREADS]), mask=stored)
                tl.store(record + CAP + slots, tl.reshape(key, [VEC * THREADS]), mask=stored)
            tie = tl.reshape(finite & (key == threshold), [VEC * THREADS])
            tied = tl.sum(tie.to(tl.int32), axis=0)
            if tied > 0:
                flat_cols = tl.reshape(cols, [VEC * THREADS])
                ties += tied
                lowest = tl.minimum(lowest, tl.min(tl.where(tie, flat_cols, 2**31 - 1), axis=0))
                xt = tl.where(tie, tl.reshape(x, [VEC * THREADS]), float("-inf"))
                if FP64:
                    xt = xt.to(tl.float64)
                noise = gumbel_noise(uniform_at(seed, position, flat_cols, 0, FP64, FAST_MATH), FP64, FAST_MATH)
                score, tile_best, _overflow = noisy_scores(xt, noise, temperature, FP64, FAST_MATH, xt, False)
                tile_col = tl.min(tl.where(tie & (score == tile_best), flat_cols, 2**31 - 1), axis=0)
                tile_best = tile_best.to(tl.float64)
                best_col = tl.where(tile_best > best_score, tile_col,
                                    tl.where(tile_best == best_score, tl.minimum(best_col, tile_col), best_col))
                best_score = tl.maximum(best_score, tile_best)
        start += THREADS * VEC
    tie_words = record + 2 * CAP + _LIST_HEADER_WORDS + c * _TIE_WORDS
    tl.store(tie_words.to(tl.pointer_type(tl.float64)), best_score)
    tl.store(tie_words + 2, best_col)
    tl.store(tie_words + 3, lowest)
    tl.store(tie_words + 4, ties)


@jit
def shard_list_merge_kernel(
    gathered_record_ptr,  # [shards, B, record words] i32: every shard's shard_top_k_list_kernel record
    seeds_ptr,
    positions_ptr,
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    row_valid_ptr,  # [B] u8|i32 (read with HAS_ROW_VALID): a padding row's token is -1
    shards,
    num_chunks,  # the list launch's chunks a row
    tokens_ptr,  # [B] i32 output
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr,
    CAP: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    WAYS: tl.constexpr,  # _largest_reaching's pivots a step
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,), on every device alike: the row's token from the shards' lists (the module's docstring, "Lists"):
    top-k's threshold, the min(k, listed)-th largest listed key counted with multiplicity (a tie slot weighs its
    count), then top-p's over the keys it keeps (each slot's fixed-point mass times its weight), as
    _list_decision's, then _list_token's Gumbel-max over the kept slots (a tie slot stands for its shard's tied
    columns by their Gumbel-max column). Greedy rows, and rows whose scaled logits overflow on some shard, take
    their largest logit's lowest column."""
    row = tl.program_id(0)
    b64 = row.to(tl.int64)
    token = tl.full([], -1, tl.int32)
    valid = True
    if HAS_ROW_VALID:
        valid = tl.load(row_valid_ptr + row) != 0
    if valid:
        batch = tl.num_programs(0).to(tl.int64)
        record_words = 2 * CAP + _LIST_HEADER_WORDS + num_chunks * _TIE_WORDS
        s = tl.arange(0, SHARDS_BLOCK)
        present = s < shards
        records = gathered_record_ptr + (s.to(tl.int64) * batch + b64) * record_words  # [SHARDS_BLOCK]
        listed = tl.load(records + 2 * CAP, mask=present, other=0)
        tie_key = tl.load(records + 2 * CAP + 1, mask=present, other=0)
        overflow = tl.max(tl.load(records + 2 * CAP + 3, mask=present, other=0), axis=0) > 0
        # each shard's ties, from its chunks' tie words
        c = tl.arange(0, CHUNKS_BLOCK)
        in_chunks = present[:, None] & (c < num_chunks)[None, :]
        tie_words = records[:, None] + 2 * CAP + _LIST_HEADER_WORDS + c[None, :] * _TIE_WORDS
        chunk_ties = tl.load(tie_words + 4, mask=in_chunks, other=0)
        chunk_score = tl.load(tie_words.to(tl.pointer_type(tl.float64)), mask=in_chunks & (chunk_ties > 0),
                              other=float("-inf"))
        ties = tl.sum(chunk_ties, axis=1)
        tie_score = tl.max(chunk_score, axis=1)
        tie_col = tl.min(tl.where((chunk_ties > 0) & (chunk_score == tie_score[:, None]),
                                  tl.load(tie_words + 2, mask=in_chunks, other=0), 2**31 - 1), axis=1)
        tie_lowest = tl.min(tl.where(chunk_ties > 0, tl.load(tie_words + 3, mask=in_chunks, other=0), 2**31 - 1),
                            axis=1)
        # the slots: a shard's listed keys (weight 1), then, in its last slot, its tied keys (weight: their count)
        slot = tl.arange(0, CAP)
        is_tie = (slot == CAP - 1)[None, :]
        explicit = present[:, None] & (slot[None, :] < listed[:, None]) & ~is_tie
        in_list2 = explicit | (is_tie & (ties > 0)[:, None])
        keys2 = tl.load(records[:, None] + CAP + slot[None, :], mask=explicit, other=-(2**31))
        keys2 = tl.where(is_tie, tl.where(ties > 0, tie_key, -(2**31))[:, None], keys2)
        cols2 = tl.load(records[:, None] + slot[None, :], mask=explicit, other=0)
        cols2 = tl.where(is_tie, tie_col[:, None], cols2)
        greedy_cols2 = tl.where(is_tie, tie_lowest[:, None], cols2)
        weights2 = tl.where(is_tie, ties[:, None], 1)
        in_list = tl.reshape(in_list2, [SHARDS_BLOCK * CAP])
        keys = tl.reshape(tl.where(in_list2, keys2, -(2**31)), [SHARDS_BLOCK * CAP])
        cols = tl.reshape(cols2, [SHARDS_BLOCK * CAP])
        weights = tl.reshape(tl.where(in_list2, weights2, 0), [SHARDS_BLOCK * CAP]).to(tl.int64)
        key_max = tl.max(keys, axis=0).to(tl.int64)
        total = tl.sum(weights, axis=0)
        temperature = load_temperature(temperature_ptr, row)
        if total > 0:
            if _filtered_row(temperature, total) & ~overflow:
                k = tl.load(top_k_ptr + row).to(tl.int64)
                need = tl.where(k >= 1, tl.minimum(k, total), total)
                lowest_key = tl.min(tl.where(in_list, keys, 2**31 - 1), axis=0)
                threshold = _largest_reaching(keys, weights, need, lowest_key, key_max, WAYS)
                x32 = tl.where(in_list, _key_value(keys, KEY_SHIFT), float("-inf"))
                if HAS_TOP_P:
                    p = tl.load(top_p_ptr + row)
                    kept = in_list & (keys >= threshold)
                    mass = tl.where(kept, weights * _fixed_point_mass(x32, temperature, key_max, KEY_SHIFT, FP64,
                                                                      FAST_MATH).to(tl.int64), 0)
                    limit = p.to(tl.float64) * tl.sum(mass, axis=0).to(tl.float64)
                    u = _largest_reaching(keys, mass, limit, threshold, key_max, WAYS)
                    top_p_threshold = tl.min(tl.where(kept & (keys >= u), keys, 2**31 - 1), axis=0).to(tl.int64)
                    threshold = tl.where((p > 0) & (p < 1), top_p_threshold, threshold)
                    threshold = tl.where(p <= 0, key_max, threshold)  # p <= 0 keeps the largest logit only
                token = _list_token(cols, x32, in_list, threshold, load_seed(seeds_ptr, row, SEED_WORDS),
                                    tl.load(positions_ptr + row).to(tl.int64), temperature, key_max, min_p_ptr, b64,
                                    HAS_MIN_P, KEY_SHIFT, FP64, FAST_MATH)
            else:  # greedy: the largest logit's lowest column
                greedy_cols = tl.reshape(greedy_cols2, [SHARDS_BLOCK * CAP])
                token = tl.min(tl.where(in_list & (keys == key_max), greedy_cols, 2**31 - 1), axis=0)
    tl.store(tokens_ptr + row, token)


@functools.lru_cache(maxsize=512)
def plan_top_k_top_p_shard(logits: ArgSpec, seeds: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                           has_min_p: bool, fp64: bool, shards: int, start_align: int,
                           row_valid: bool = False, list_capacity: int = 0) -> ShardedPlan:
    """A shard's rounds of vocab-parallel `top_k_top_p_sample` (the module's docstring): inputs `logits`
    [B, V_shard] (this device's columns), `seeds`, `positions`, `temperature` [B] f32, `top_k` / `top_p` /
    `min_p` where given (as top_k_top_p_sample's), `vocab_start` [1] i32 (the shard's first global column, a
    multiple of `start_align`) and, with `row_valid`, `row_valid` [B] (0: a padding row, token -1, its logits
    unread); the last round's output `tokens` [B] i32. `list_capacity` (shard_list_capacity of a call's top_k, with
    has_top_k; every row's k at most it) takes the lists' two rounds instead of the searches'."""
    if start_align < START_MULTIPLE or start_align & (start_align - 1):
        raise ValueError(f"start_align must be a power of two >= {START_MULTIPLE}, got {start_align}")
    if list_capacity and (not has_top_k or list_capacity & (list_capacity - 1) or list_capacity < 16):
        raise ValueError(f"list_capacity must be 0 or a power of two >= 16 with top_k, got {list_capacity}")
    batch, vocab = logits.shape
    if batch == 0:
        return ShardedPlan((Plan((Buffer("tokens", (0,), "int32"),), (), ("tokens",), "empty"),), "empty")
    row_stride = logits.strides[0]
    config = _with_ways(filtered_launch_config(batch, vocab, row_stride, logits.dtype, fp64,
                                               fast_math=not target.interpreter, large_programs=target.large_programs),
                        SHARD_WAYS)
    unused = "positions"  # stands in for an absent input, never read
    top_k, top_p, min_p, valid = (name if given else unused for name, given in
                                  (("top_k", has_top_k), ("top_p", has_top_p), ("min_p", has_min_p),
                                   ("row_valid", row_valid)))
    shards_block = triton.next_power_of_2(shards)
    tiles = triton.cdiv(vocab, config.threads * config.vec)
    stats = (launch(shard_filter_stats_kernel, (batch, config.num_chunks),
                    ("logits", valid, "temperature", vocab, row_stride, config.chunk), ("stats", "tile_max"),
                    KEY_SHIFT=config.key_shift, THREADS=config.threads, VEC=config.vec, HAS_ROW_VALID=row_valid,
                    num_warps=config.num_warps),)
    if has_top_k:  # (the stats launch writes words 0 and 2 of each row's record, this word 1)
        stats += (launch(shard_top_k_bound_kernel, (batch,), (top_k, valid, "tile_max", "stats", tiles), ("stats",),
                         REDUCE_TILES=triton.next_power_of_2(tiles), HAS_ROW_VALID=row_valid, num_warps=4),)
    if list_capacity:
        return _list_rounds(config, stats, batch, vocab, row_stride, tiles, top_p, min_p, valid, has_top_p=has_top_p,
                            has_min_p=has_min_p, fp64=fp64, shards=shards, capacity=list_capacity,
                            seed_words=seed_word_count(seeds.shape), row_valid=row_valid)
    rounds = [Plan((Buffer("stats", (batch, 6), "int32", zeroed=True), Buffer("tile_max", (batch, tiles), "int32")),
                   stats, ("stats", "tile_max"), "shard stats")]
    phases = [PHASE_TOP_K] * has_top_k + [PHASE_TOP_P] * has_top_p
    prev_phase = PHASE_STATS
    for phase in phases:
        for _ in range(config.search_steps):
            first = prev_phase == PHASE_STATS
            buffers = (Buffer("sums", (batch, 2 * config.ways), "int32", zeroed=True),
                       Buffer("state", (batch, 2 * STATE_WORDS), "int32"))
            rounds.append(Plan(buffers, (launch(
                shard_filter_search_kernel, (batch, config.num_chunks),
                ("logits", "temperature", top_k, top_p, "gathered_stats", "gathered_stats" if first else "state_in",
                 "gathered_stats" if first else "gathered_sums", "tile_max_in", shards, vocab, row_stride,
                 config.chunk),
                ("state", "sums"), PHASE=phase, PREV_PHASE=prev_phase, KEY_SHIFT=config.key_shift, FP64=fp64,
                THREADS=config.threads, VEC=config.vec, WAYS=config.ways, WIDE_SUMS=config.wide_sums,
                SHARDS_BLOCK=shards_block, FAST_MATH=config.gumbel.fast_math, num_warps=config.num_warps),),
                ("sums", "state"), "shard search"))
            prev_phase = phase
    gumbel = config.gumbel
    if not target.large_programs:
        gumbel = many_rows_config(gumbel, vocab)
    blocks = gumbel.num_blocks
    searched = prev_phase != PHASE_STATS
    buffers = (Buffer("partial_score", (batch, blocks * (2 if fp64 else 1)), "float32"),
               Buffer("partial_index", (batch, blocks), "int32"), Buffer("greedy_value", (batch, blocks), "float32"),
               Buffer("greedy_index", (batch, blocks), "int32"), Buffer("summary", (batch, SUMMARY_WORDS), "int32"))
    rounds.append(Plan(buffers, (
        launch(shard_filtered_partial_kernel, (batch, blocks),
               ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, "vocab_start", valid,
                "gathered_stats", "state_in" if searched else "gathered_stats",
                "gathered_sums" if searched else "gathered_stats", "tile_max_in", shards, vocab, row_stride),
               ("partial_score", "partial_index", "greedy_value", "greedy_index"),
               PREV_PHASE=prev_phase, HAS_MIN_P=has_min_p, KEY_SHIFT=config.key_shift, FP64=fp64,
               BLOCK_V=gumbel.block_v, ROW_ALIGN=gumbel.row_align, START_ALIGN=start_align,
               VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways,
               SHARDS_BLOCK=shards_block, TILE=config.threads * config.vec, SEED_WORDS=seed_word_count(seeds.shape), HAS_ROW_VALID=row_valid,
               num_warps=gumbel.num_warps),
        launch(shard_summary_kernel, (batch,),
               ("partial_score", "partial_index", "greedy_value", "greedy_index", valid, blocks), ("summary",),
               FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block, HAS_ROW_VALID=row_valid, num_warps=1),
    ), ("summary",), "shard filtered sample"))
    return ShardedPlan(tuple(rounds) + (plan_shard_combine(target, batch=batch, shards=shards),),
                       "vocab shard, filtered")



def _list_rounds(config, stats, batch, vocab, row_stride, tiles, top_p, min_p, valid, *, has_top_p, has_min_p, fp64,
                 shards, capacity, seed_words, row_valid) -> ShardedPlan:
    """The lists' two rounds (the module's docstring, "Lists"): this shard's statistics, its own top-k search
    (search_steps launches, each reading its own sums: no collective) and its list record, all-gathered; then every
    device's token from the records."""
    steps = []
    state, sums = "stats", "stats"  # (the first step reads neither)
    for step in range(config.search_steps):
        steps.append(launch(
            shard_filter_search_kernel, (batch, config.num_chunks),
            ("logits", "temperature", "top_k", top_p, "stats", state, sums, "tile_max", 1, vocab, row_stride,
             config.chunk),
            (f"state_{step}", f"sums_{step}"), PHASE=PHASE_TOP_K, PREV_PHASE=PHASE_STATS if step == 0 else PHASE_TOP_K,
            KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=config.threads, VEC=config.vec, WAYS=config.ways,
            WIDE_SUMS=config.wide_sums, SHARDS_BLOCK=1, FAST_MATH=config.gumbel.fast_math,
            num_warps=config.num_warps))
        state, sums = f"state_{step}", f"sums_{step}"
    record_words = 2 * capacity + LIST_HEADER_WORDS + config.num_chunks * TIE_WORDS
    steps.append(launch(
        shard_top_k_list_kernel, (batch, config.num_chunks),
        ("logits", "seeds", "positions", "temperature", "top_k", "vocab_start", valid, "stats", state, sums,
         "tile_max", vocab, row_stride, config.chunk),
        ("record",), KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=config.threads, VEC=config.vec, WAYS=config.ways,
        CAP=capacity, FAST_MATH=config.gumbel.fast_math, SEED_WORDS=seed_words, HAS_ROW_VALID=row_valid,
        num_warps=config.num_warps))
    buffers = [Buffer("record", (batch, record_words), "int32", zeroed=True),
               Buffer("stats", (batch, 6), "int32", zeroed=True), Buffer("tile_max", (batch, tiles), "int32")]
    for step in range(config.search_steps):
        buffers += [Buffer(f"state_{step}", (batch, 2 * STATE_WORDS), "int32"),
                    Buffer(f"sums_{step}", (batch, 2 * config.ways), "int32", zeroed=True)]
    lists = Plan(tuple(buffers), stats + tuple(steps), ("record",), "shard top-k lists")
    shards_block = triton.next_power_of_2(shards)
    merge = Plan((Buffer("tokens", (batch,), "int32"),), (launch(
        shard_list_merge_kernel, (batch,),
        ("gathered_record", "seeds", "positions", "temperature", "top_k", top_p, min_p, valid, shards,
         config.num_chunks),
        ("tokens",), KEY_SHIFT=config.key_shift, FP64=fp64, FAST_MATH=config.gumbel.fast_math, CAP=capacity,
        SHARDS_BLOCK=shards_block, CHUNKS_BLOCK=triton.next_power_of_2(config.num_chunks), HAS_TOP_P=has_top_p,
        HAS_MIN_P=has_min_p, WAYS=max(2048 // (shards_block * capacity), 2), SEED_WORDS=seed_words,
        HAS_ROW_VALID=row_valid, num_warps=4),), ("tokens",), "shard lists merged")
    return ShardedPlan((lists, merge), "vocab shard, filtered, lists")
