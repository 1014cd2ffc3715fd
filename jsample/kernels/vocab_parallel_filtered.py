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
shard finds t_s exactly, alone: `shard_filter_stats_kernel`, then `shard_top_k_collect_kernel` lists its
candidates, the keys at or above the k-th largest of its tiles' maxima (a lower bound of t_s: the tiles below it
unread), and `shard_top_k_record_kernel` takes t_s from them (a row with more than CANDIDATE_SLOTS candidates,
flat or tied, is searched and listed from its logits by its program alone) and writes the shard's record: the
fewer than k keys above t_s with their global columns, and a tie slot for its keys equal to t_s (their count,
lowest column, and Gumbel-max column). After the all-gather, `shard_list_merge_kernel` on every device reads
top-k's threshold from the slots (each weighing its keys' count), top-p's from their fixed-point masses (a tie
slot's mass: count times its key's), min-p's test per slot, as the one-GPU op's listed rows (_list_decision,
_list_token), and the token, the Gumbel-max of the kept slots' columns (a tie slot kept keeps all its keys, whose
Gumbel-max is its shard's: the same scores). Every key the filters keep is in a slot (the kept set is within
top-k's), so the kept set and the token are the unsharded call's. Greedy rows: each shard's slot of its largest
keys, the lowest column among the row's largest. A record is 2 * CAP + LIST_HEADER_WORDS int32 words a row.

The plan is `plan_top_k_top_p_shard`: a `ShardedPlan` whose rounds the frontends run in order (plan.run_rounds),
all-gathering each round's first output over the shards (jax.lax.all_gather, torch.distributed.all_gather).
"""

import functools

import triton
import triton.language as tl

from jsample.kernels.common import aligned, is_padding, load_temperature, noisy_scores
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
from jsample.kernels.filtered.keys import (_filtered_row, _fixed_point_mass, _key, _key_value, _tile_logits,
                                           _tile_max_key, store_filtered_block)
from jsample.kernels.filtered.search import (_chunk_above, _collect_candidates, _kth_largest_block_key,
                                             _largest_reaching, _list_token, _narrow, _start_search)
from jsample.kernels.gumbel import many_rows_config
from jsample.kernels.host import jit
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.stream import gumbel_noise, load_seed, seed_word_count, uniform_at
from jsample.kernels.vocab_parallel import (START_MULTIPLE, SUMMARY_WORDS, greedy_value, plan_shard_combine,
                                            shard_summary_kernel)

STATE_WORDS = 3  # int64 a row: the search's bracket [lo, hi) and top-p's normaliser
_STATE_WORDS = tl.constexpr(STATE_WORDS)  # the kernels' copy: a kernel reads only constexpr globals
SHARD_WAYS = 16  # pivots a search round: 4 rounds a bfloat16 search, 8 a float32 one
_PHASE_STATS = tl.constexpr(PHASE_STATS)
_PHASE_TOP_K = tl.constexpr(PHASE_TOP_K)
SHARD_LIST_MAX_TOP_K = 256  # a top_k given as a Python int up to this is decided from the shards' lists
# after a list record's 2 * capacity slot words: the listed count, the shard's threshold t, the count of its keys
# equal to t, their lowest and their Gumbel-max column, the overflow flag, 2 zeros
LIST_HEADER_WORDS = 8
_LIST_HEADER_WORDS = tl.constexpr(LIST_HEADER_WORDS)
CANDIDATE_SLOTS = 1024  # a shard's candidates of a row (keys at or above its tiles' bound) read from registers
SHORT_CANDIDATES = 256  # rows with at most these many (most rows) are decided on a block of this size


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
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's logits are not read
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
        valid = not is_padding(row_valid_ptr, row)
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
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's tiles were not written
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
        valid = not is_padding(row_valid_ptr, row)
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
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's programs read and write nothing
    gathered_stats_ptr,
    state_in_ptr,  # the last search round's (read unless PREV_PHASE is stats: min-p alone)
    gathered_sums_ptr,
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys, TILE columns a tile
    shards,
    V_shard,
    row_stride,
    partial_score_ptr,  # [B, num_blocks] f32 (FP64: f64 as f32 pairs), as shard_partial_kernel's
    partial_index_ptr,  # [B, num_blocks] i32: global columns (-1 - column: the row overflows)
    greedy_value_ptr,  # [B, num_blocks] f32: the block's largest finite logit (-inf: none, or the block skipped)
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
    block's greedy candidate's value from its unfiltered logits: shard_partial_kernel's outputs for the kept set. A
    block whose tiles' largest key is below the threshold keeps nothing: no candidate, its logits unread (its
    greedy candidate neither: the row's largest logit is kept, so such a block never holds the greedy token),
    unless the row's scaled logits overflow (the stats round's flag): there every block reads its logits, whose
    overflow flag makes the row greedy, as in top_k_top_p_sample."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
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
        return
    x = store_filtered_block(logits_ptr - start, b64, row_stride, end, first_col, load_seed(seeds_ptr, row, SEED_WORDS),
                             tl.load(positions_ptr + row).to(tl.int64), temperature, min_p_ptr, key_max, count,
                             threshold, partial_score_ptr, partial_index_ptr, out, HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V,
                             ROW_ALIGN, FAST_MATH).to(tl.float32)
    tl.store(greedy_value_ptr + out, greedy_value(x, temperature))  # its column: the summary's


@jit
def _tie_candidate(cols, x32, tie, seed, position, temperature, FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """(the best Gumbel-max score as float64, its lowest column) of the columns `cols` where `tie`, their FP32 logits
    `x32`: scored by the very code _list_token scores with (uniform_at's noise at the global columns,
    noisy_scores)."""
    x = tl.where(tie, x32, float("-inf"))
    if FP64:
        x = x.to(tl.float64)
    noise = gumbel_noise(uniform_at(seed, position, cols, 0, FP64, FAST_MATH), FP64, FAST_MATH)
    score, best, _overflow = noisy_scores(x, noise, temperature, FP64, FAST_MATH, x, False)
    return best.to(tl.float64), tl.min(tl.where(tie & (score == best), cols, 2**31 - 1), axis=0)


@jit
def _list_floor(top_k_ptr, b64, tiles_ptr, num_tiles, key_max, filtered, KEY_SHIFT: tl.constexpr,
                REDUCE_TILES: tl.constexpr):
    """The lowest key a shard's candidates of the row reach: where the filters apply, the k-th largest of its tiles'
    largest keys (a lower bound of its k-th largest key: _kth_largest_block_key), else its largest key (greedy)."""
    floor = key_max.to(tl.int64)
    if filtered:
        tiles = tl.arange(0, REDUCE_TILES)
        tile_max = tl.load(tiles_ptr + tiles, mask=tiles < num_tiles, other=-(2**31))
        lowest = _key(tl.full([], -3.4028234663852886e38, tl.float32), KEY_SHIFT).to(tl.int64)  # every finite key's
        floor = _kth_largest_block_key(tile_max, tl.load(top_k_ptr + b64).to(tl.int64), lowest, SORT=False)
    return floor


@jit
def shard_top_k_collect_kernel(
    logits_ptr,  # as shard_filter_stats_kernel's
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's programs read and write nothing
    stats_ptr,  # this shard's own statistics [B, 3] i64 (shard_filter_stats_kernel's)
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys
    V_shard,
    row_stride,
    chunk,  # columns a program (a multiple of THREADS * VEC)
    candidates_ptr,  # [B, 2 * SLOTS + 2] i32 output, zero on entry: SLOTS columns, their keys, the count
    KEY_SHIFT: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    SLOTS: tl.constexpr,
    REDUCE_TILES: tl.constexpr,  # a power of two >= the tiles a row
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, chunks): this shard's candidates of the row, its finite logits whose key reaches _list_floor (its
    k-th largest key is among them): (local) columns and keys in the row's first SLOTS slots, through one atomic a
    tile (_collect_candidates; past SLOTS only counted). Tiles below the floor are skipped unread."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    b64 = row.to(tl.int64)
    key_max, count, _, _ = _row_stats(stats_ptr, row, tl.num_programs(0), 1, 1)
    if count > 0:
        num_tiles = tl.cdiv(V_shard, THREADS * VEC)
        tiles_ptr = tile_max_ptr + b64 * num_tiles
        filtered = _filtered_row(load_temperature(temperature_ptr, row), count)
        floor = _list_floor(top_k_ptr, b64, tiles_ptr, num_tiles, key_max, filtered, KEY_SHIFT, REDUCE_TILES)
        candidates = candidates_ptr + b64 * (2 * SLOTS + 2)
        first = tl.program_id(1) * chunk
        _collect_candidates(logits_ptr + b64 * row_stride, first, tl.minimum(first + chunk, V_shard), V_shard, floor,
                            candidates, candidates + 2 * SLOTS, KEY_SHIFT, THREADS, VEC, tiles_ptr, num_tiles,
                            THREADS * VEC, 1, SLOTS)


@jit
def _list_tiles(row_ptr, V_shard, threshold, start_col, tiles_ptr, record, seed, position, temperature,
                KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr,
                CAP: tl.constexpr, FAST_MATH: tl.constexpr):
    """A row's list from its logits (where its candidates overflowed): the columns (global) and keys of the finite
    logits with a key above `threshold` into the record's slots (fewer than CAP), and (the best score of those equal
    to it, its column, their lowest column, their count). Tiles below the threshold are skipped unread."""
    num_tiles = tl.cdiv(V_shard, THREADS * VEC)
    best_score = tl.full([], float("-inf"), tl.float64)
    best_col = tl.full([], 2**31 - 1, tl.int32)
    lowest = tl.full([], 2**31 - 1, tl.int32)
    ties = tl.full([], 0, tl.int32)
    listed = tl.full([], 0, tl.int32)
    start = 0
    while start < V_shard:
        if _tile_max_key(tiles_ptr, start, num_tiles, THREADS * VEC, 1) >= threshold:
            x = tl.reshape(_tile_logits(row_ptr, start, V_shard, THREADS, VEC), [VEC * THREADS])
            cols = tl.reshape(start_col + start + tl.arange(0, VEC)[:, None] + tl.arange(0, THREADS)[None, :] * VEC,
                              [VEC * THREADS])
            finite = tl.abs(x) < float("inf")
            key = _key(x, KEY_SHIFT)
            above = (finite & (key > threshold)).to(tl.int32)
            slots = listed + tl.cumsum(above, 0) - above
            stored = (above > 0) & (slots < CAP - 1)
            tl.store(record + slots, cols, mask=stored)
            tl.store(record + CAP + slots, key, mask=stored)
            listed += tl.sum(above, axis=0)
            tie = finite & (key == threshold)
            tied = tl.sum(tie.to(tl.int32), axis=0)
            if tied > 0:
                ties += tied
                lowest = tl.minimum(lowest, tl.min(tl.where(tie, cols, 2**31 - 1), axis=0))
                tile_best, tile_col = _tie_candidate(cols, x, tie, seed, position, temperature, FP64, FAST_MATH)
                best_col = tl.where(tile_best > best_score, tile_col,
                                    tl.where(tile_best == best_score, tl.minimum(best_col, tile_col), best_col))
                best_score = tl.maximum(best_score, tile_best)
        start += THREADS * VEC
    tl.store(record + 2 * CAP, listed)
    return best_col, lowest, ties


@jit
def _record_from_candidates(candidates, found, SLOTS: tl.constexpr, start_col, key_max, threshold, filtered, top_k_ptr,
                            b64, record, seed, position, temperature, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr,
                            CAP: tl.constexpr, BLOCK: tl.constexpr, WAYS: tl.constexpr, FAST_MATH: tl.constexpr):
    """shard_top_k_record_kernel's record from the row's `found` (<= BLOCK) candidates: its threshold (the
    min(k, found)-th largest candidate key where `filtered`, else `threshold`), the keys above it into the record's
    slots and their count; returns (the tied keys' Gumbel-max column, lowest column, count, the threshold)."""
    slots = tl.arange(0, BLOCK)
    listed = slots < found
    keys = tl.load(candidates + SLOTS + slots, mask=listed, other=-(2**31))
    cols = start_col + tl.load(candidates + slots, mask=listed, other=0)
    if filtered:
        need = tl.minimum(tl.load(top_k_ptr + b64).to(tl.int64), found)
        lowest_key = tl.min(tl.where(listed, keys, 2**31 - 1), axis=0)
        threshold = _largest_reaching(keys, listed.to(tl.int32), need, lowest_key, key_max, WAYS).to(tl.int32)
    above = (listed & (keys > threshold)).to(tl.int32)
    at = tl.cumsum(above, 0) - above
    tl.store(record + at, cols, mask=(above > 0) & (at < CAP - 1))
    tl.store(record + CAP + at, keys, mask=(above > 0) & (at < CAP - 1))
    tl.store(record + 2 * CAP, tl.sum(above, axis=0))
    tie = listed & (keys == threshold)
    _best, best_col = _tie_candidate(cols, _key_value(keys, KEY_SHIFT), tie, seed, position, temperature, FP64,
                                     FAST_MATH)
    return best_col, tl.min(tl.where(tie, cols, 2**31 - 1), axis=0), tl.sum(tie.to(tl.int32), axis=0), threshold


@jit
def shard_top_k_record_kernel(
    logits_ptr,  # as shard_filter_stats_kernel's
    seeds_ptr,  # as top_k_top_p_sample's
    positions_ptr,
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    vocab_start_ptr,  # [1] i32: the global column of this shard's first column
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's record stays zero (nothing listed)
    stats_ptr,  # this shard's own statistics [B, 3] i64 (shard_filter_stats_kernel's)
    tile_max_ptr,  # shard_filter_stats_kernel's tiles' largest keys
    candidates_ptr,  # shard_top_k_collect_kernel's
    V_shard,
    row_stride,
    record_ptr,  # [B, 2 * CAP + LIST_HEADER_WORDS] i32 output, zero on entry
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    WAYS: tl.constexpr,
    WIDE_SUMS: tl.constexpr,
    CAP: tl.constexpr,
    SLOTS: tl.constexpr,
    SELECT_WAYS: tl.constexpr,  # _largest_reaching's pivots a step over SLOTS candidates
    SHORT_SLOTS: tl.constexpr,  # a power of two <= SLOTS: rows with at most these many candidates take a short block
    REDUCE_TILES: tl.constexpr,
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): this shard's list record of the row (the module's docstring, "Lists"). Its threshold t is its own
    k-th largest key where the filters apply (else its largest key), read from its candidates (all its keys at or
    above t); the record: the columns (global) and keys above t (fewer than k), then the header (LIST_HEADER_WORDS:
    their count, t, the count of keys equal to t, their lowest column and Gumbel-max column, the overflow flag of
    the shard's scaled logits). A row with more candidates than SLOTS (flat or tied rows) is searched and listed
    from its logits by this program alone (_chunk_above's counts, _narrow's bracket; _list_tiles)."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    b64 = row.to(tl.int64)
    record = record_ptr + b64 * (2 * CAP + _LIST_HEADER_WORDS)
    key_max, count, _, overflow = _row_stats(stats_ptr, row, tl.num_programs(0), 1, 1)
    temperature = load_temperature(temperature_ptr, row)
    filtered = _filtered_row(temperature, count)
    seed = load_seed(seeds_ptr, row, SEED_WORDS)
    position = tl.load(positions_ptr + row).to(tl.int64)
    start_col = tl.load(vocab_start_ptr)
    candidates = candidates_ptr + b64 * (2 * SLOTS + 2)
    found = tl.load(candidates + 2 * SLOTS)
    threshold = key_max.to(tl.int32)
    best_col = tl.full([], 2**31 - 1, tl.int32)
    lowest = tl.full([], 2**31 - 1, tl.int32)
    ties = tl.full([], 0, tl.int32)
    if count > 0:
        if found <= SHORT_SLOTS:  # (most rows: a short block, a search of more pivots a step)
            best_col, lowest, ties, threshold = _record_from_candidates(
                candidates, found, SLOTS, start_col, key_max, threshold, filtered, top_k_ptr, b64, record, seed,
                position, temperature, KEY_SHIFT, FP64, CAP, SHORT_SLOTS, 2048 // SHORT_SLOTS, FAST_MATH)
        elif found <= SLOTS:
            best_col, lowest, ties, threshold = _record_from_candidates(
                candidates, found, SLOTS, start_col, key_max, threshold, filtered, top_k_ptr, b64, record, seed,
                position, temperature, KEY_SHIFT, FP64, CAP, SLOTS, SELECT_WAYS, FAST_MATH)
        else:  # more candidates than slots: this row's own search, then its list from its logits
            row_ptr = logits_ptr + b64 * row_stride
            num_tiles = tl.cdiv(V_shard, THREADS * VEC)
            tiles_ptr = tile_max_ptr + b64 * num_tiles
            if filtered:
                lo = _list_floor(top_k_ptr, b64, tiles_ptr, num_tiles, key_max, filtered, KEY_SHIFT, REDUCE_TILES)
                hi = key_max.to(tl.int64) + 1
                while hi - lo > 1:
                    counts = _chunk_above(row_ptr, 0, V_shard, V_shard, lo, hi, temperature, key_max, _PHASE_TOP_K,
                                          KEY_SHIFT, FP64, THREADS, VEC, WAYS, WIDE_SUMS, tiles_ptr, num_tiles,
                                          THREADS * VEC, 1, FAST_MATH=FAST_MATH)
                    lo, hi, _normalizer = _narrow(_PHASE_TOP_K, lo, hi, counts, lo * 0, False, b64, top_k_ptr,
                                                  top_k_ptr, WAYS, KEY_SHIFT)
                threshold = lo.to(tl.int32)
            best_col, lowest, ties = _list_tiles(row_ptr, V_shard, threshold, start_col, tiles_ptr, record, seed,
                                                 position, temperature, KEY_SHIFT, FP64, THREADS, VEC, CAP, FAST_MATH)
    header = record + 2 * CAP
    tl.store(header + 1, threshold)
    tl.store(header + 2, ties)
    tl.store(header + 3, lowest)
    tl.store(header + 4, best_col)
    tl.store(header + 5, overflow.to(tl.int32))


@jit
def shard_list_merge_kernel(
    gathered_record_ptr,  # [shards, B, 2 * CAP + LIST_HEADER_WORDS] i32: every shard's shard_top_k_record_kernel's
    seeds_ptr,
    positions_ptr,
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's token is -1
    shards,
    tokens_ptr,  # [B] i32 output
    threshold_ptr,  # [B, 4] i32 output (with STORE_THRESHOLD): shard_threshold_kernel's words, for the filtered rows
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr,
    CAP: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    WAYS: tl.constexpr,  # _largest_reaching's pivots a step
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
    STORE_THRESHOLD: tl.constexpr = False,  # return_logprobs: the kept set, for vocab-parallel token_logprobs
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
        valid = not is_padding(row_valid_ptr, row)
    if valid:
        batch = tl.num_programs(0).to(tl.int64)
        s = tl.arange(0, SHARDS_BLOCK)
        present = s < shards
        records = gathered_record_ptr + (s.to(tl.int64) * batch + b64) * (2 * CAP + _LIST_HEADER_WORDS)
        header = records + 2 * CAP
        listed = tl.load(header, mask=present, other=0)
        tie_key = tl.load(header + 1, mask=present, other=0)
        ties = tl.load(header + 2, mask=present, other=0)
        tie_lowest = tl.load(header + 3, mask=present, other=0)
        tie_col = tl.load(header + 4, mask=present, other=0)
        overflow = tl.max(tl.load(header + 5, mask=present, other=0), axis=0) > 0
        # the slots: a shard's listed keys (weight 1), then, in its last slot, its tied keys (weight: their count)
        slot = tl.arange(0, CAP)
        is_tie = (slot == CAP - 1)[None, :]
        explicit = present[:, None] & (slot[None, :] < listed[:, None]) & ~is_tie
        in_list2 = explicit | (is_tie & (ties > 0)[:, None])
        keys2 = tl.load(records[:, None] + CAP + slot[None, :], mask=explicit, other=-(2**31))
        keys2 = tl.where(is_tie, tie_key[:, None], keys2)  # (slots not in the list: masked below)
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
                if STORE_THRESHOLD:  # (a logit past every list is below the threshold: the same kept set)
                    out = threshold_ptr + b64 * 4
                    tl.store(out.to(tl.pointer_type(tl.int64)), threshold.to(tl.int64) << KEY_SHIFT)
                    tl.store(out + 2, _key_value(key_max, KEY_SHIFT).to(tl.int32, bitcast=True))
                    tl.store(out + 3, 0)
            else:  # greedy: the largest logit's lowest column
                greedy_cols = tl.reshape(greedy_cols2, [SHARDS_BLOCK * CAP])
                token = tl.min(tl.where(in_list & (keys == key_max), greedy_cols, 2**31 - 1), axis=0)
    tl.store(tokens_ptr + row, token)


@functools.lru_cache(maxsize=512)
def plan_top_k_top_p_shard(logits: ArgSpec, seeds: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                           has_min_p: bool, fp64: bool, shards: int, start_align: int,
                           row_valid: bool = False, list_capacity: int = 0,
                           candidate_slots: int = CANDIDATE_SLOTS, store_threshold: bool = False) -> ShardedPlan:
    """A shard's rounds of vocab-parallel `top_k_top_p_sample` (the module's docstring): inputs `logits`
    [B, V_shard] (this device's columns), `seeds`, `positions`, `temperature` [B] f32, `top_k` / `top_p` /
    `min_p` where given (as top_k_top_p_sample's), `vocab_start` [1] i32 (the shard's first global column, a
    multiple of `start_align`) and, with `row_valid`, `row_valid` (common.is_padding: a padding row, token -1,
    its logits unread); the last round's output `tokens` [B] i32. `list_capacity` (shard_list_capacity of a call's
    top_k, with has_top_k; every row's k at most it) takes the lists' two rounds instead of the searches', a shard's
    candidates of a row in `candidate_slots` slots (a power of two; tests take a few, to run the rows that overflow
    them).
    `store_threshold` (return_logprobs): the last round outputs `kept_threshold` [B, 4] i32 after the tokens
    (shard_threshold_kernel's words: vocab-parallel token_logprobs then takes the kept set from it)."""
    if start_align < START_MULTIPLE or start_align & (start_align - 1):
        raise ValueError(f"start_align must be a power of two >= {START_MULTIPLE}, got {start_align}")
    if list_capacity and (not has_top_k or list_capacity & (list_capacity - 1) or list_capacity < 16):
        raise ValueError(f"list_capacity must be 0 or a power of two >= 16 with top_k, got {list_capacity}")
    batch, vocab = logits.shape
    if batch == 0:
        empty = (Buffer("tokens", (0,), "int32"), Buffer("kept_threshold", (0, 4), "int32"))
        return ShardedPlan((Plan(empty, (), ("tokens", "kept_threshold")[:1 + store_threshold], "empty"),), "empty")
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
    stats = _filter_stats_launches(config, batch, vocab, row_stride, tiles, top_k, valid, has_top_k=has_top_k,
                                   row_valid=row_valid)
    if list_capacity:
        return _list_rounds(config, stats, batch, vocab, row_stride, tiles, top_p, min_p, valid, has_top_p=has_top_p,
                            has_min_p=has_min_p, fp64=fp64, shards=shards, capacity=list_capacity,
                            seed_words=seed_word_count(seeds.shape), row_valid=row_valid, slots=candidate_slots,
                            store_threshold=store_threshold)
    rounds, prev_phase = _search_rounds(config, stats, batch, vocab, row_stride, tiles, top_k, top_p,
                                        has_top_k=has_top_k, has_top_p=has_top_p, fp64=fp64, shards=shards)
    combine = plan_shard_combine(target, batch=batch, shards=shards)
    if store_threshold:  # (the searches' last sums and state are still the later rounds' inputs)
        combine = Plan(combine.buffers + (Buffer("kept_threshold", (batch, 4), "int32"),),
                       combine.launches + (_threshold_launch(config, batch, prev_phase, top_k, top_p, valid, shards,
                                                             row_valid),),
                       combine.outputs + ("kept_threshold",), combine.variant + ", kept set")
    gumbel = config.gumbel
    if not target.large_programs:
        gumbel = many_rows_config(gumbel, vocab)
    blocks = gumbel.num_blocks
    searched = prev_phase != PHASE_STATS
    buffers = (Buffer("partial_score", (batch, blocks * (2 if fp64 else 1)), "float32"),
               Buffer("partial_index", (batch, blocks), "int32"), Buffer("greedy_value", (batch, blocks), "float32"),
               Buffer("summary", (batch, SUMMARY_WORDS), "int32"))
    rounds.append(Plan(buffers, (
        launch(shard_filtered_partial_kernel, (batch, blocks),
               ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, "vocab_start", valid,
                "gathered_stats", "state_in" if searched else "gathered_stats",
                "gathered_sums" if searched else "gathered_stats", "tile_max_in", shards, vocab, row_stride),
               ("partial_score", "partial_index", "greedy_value"),
               PREV_PHASE=prev_phase, HAS_MIN_P=has_min_p, KEY_SHIFT=config.key_shift, FP64=fp64,
               BLOCK_V=gumbel.block_v, ROW_ALIGN=gumbel.row_align, START_ALIGN=start_align,
               VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways,
               SHARDS_BLOCK=shards_block, TILE=config.threads * config.vec, SEED_WORDS=seed_word_count(seeds.shape),
               HAS_ROW_VALID=row_valid, num_warps=gumbel.num_warps),
        launch(shard_summary_kernel, (batch,),
               ("partial_score", "partial_index", "greedy_value", "logits", "vocab_start", valid, vocab, row_stride,
                blocks), ("summary",),
               FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block, BLOCK_V=gumbel.block_v, ROW_ALIGN=gumbel.row_align,
               START_ALIGN=start_align, HAS_ROW_VALID=row_valid, num_warps=1),
    ), ("summary",), "shard filtered sample"))
    return ShardedPlan(tuple(rounds) + (combine,), "vocab shard, filtered")


def _filter_stats_launches(config, batch, vocab, row_stride, tiles, top_k, valid, *, has_top_k, row_valid):
    """The statistics round's launches: shard_filter_stats_kernel, and with top-k shard_top_k_bound_kernel."""
    stats = (launch(shard_filter_stats_kernel, (batch, config.num_chunks),
                    ("logits", valid, "temperature", vocab, row_stride, config.chunk), ("stats", "tile_max"),
                    KEY_SHIFT=config.key_shift, THREADS=config.threads, VEC=config.vec, HAS_ROW_VALID=row_valid,
                    num_warps=config.num_warps),)
    if has_top_k:  # (the stats launch writes words 0 and 2 of each row's record, this word 1)
        stats += (launch(shard_top_k_bound_kernel, (batch,), (top_k, valid, "tile_max", "stats", tiles), ("stats",),
                         REDUCE_TILES=triton.next_power_of_2(tiles), HAS_ROW_VALID=row_valid, num_warps=4),)
    return stats


def _search_rounds(config, stats, batch, vocab, row_stride, tiles, top_k, top_p, *, has_top_k, has_top_p, fp64,
                   shards) -> tuple:
    """(the statistics round and the searches' rounds, the last round's phase): the module's steps 1 and 2."""
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
                SHARDS_BLOCK=triton.next_power_of_2(shards), FAST_MATH=config.gumbel.fast_math,
                num_warps=config.num_warps),),
                ("sums", "state"), "shard search"))
            prev_phase = phase
    return rounds, prev_phase


@jit
def shard_threshold_kernel(
    temperature_ptr,  # [B] f32
    top_k_ptr,
    top_p_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): a padding row's words are not written
    gathered_stats_ptr,  # as shard_filtered_partial_kernel's
    state_in_ptr,
    gathered_sums_ptr,
    shards,
    threshold_ptr,  # [B, 4] i32 output: the kept set's threshold over the 32-bit keys (_key(x, 0)), i64; the row's
    # largest finite logit (f32 bits; -inf where none), a zero word
    PREV_PHASE: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    WAYS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): the row's final threshold, as shard_filtered_partial_kernel takes it (its last search round's
    bracket narrowed), for vocab-parallel token_logprobs with filters (vocab_parallel_logprobs.py): the kept set
    is the logits whose key is at or above it (and, with min-p, whose e reaches min_p), the sampler's exactly."""
    row = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, row):
            return
    b64 = row.to(tl.int64)
    batch = tl.num_programs(0)
    temperature = load_temperature(temperature_ptr, row)
    key_max, count, bound, overflow = _row_stats(gathered_stats_ptr, row, batch, shards, SHARDS_BLOCK)
    threshold, _, _ = _shard_state(b64, batch, shards, temperature, key_max, count, bound, top_k_ptr, top_p_ptr,
                                   state_in_ptr, gathered_sums_ptr, _SAMPLE, PREV_PHASE, KEY_SHIFT, WAYS,
                                   SHARDS_BLOCK)
    out = threshold_ptr + b64 * 4
    tl.store(out.to(tl.pointer_type(tl.int64)), threshold.to(tl.int64) << KEY_SHIFT)  # key >> s >= t: key >= t << s
    # (a dtype's keys lose nothing to KEY_SHIFT: the largest logit's value exactly)
    largest = tl.where(key_max > -(2**31), _key_value(key_max, KEY_SHIFT), float("-inf"))
    tl.store(out + 2, largest.to(tl.int32, bitcast=True))
    tl.store(out + 3, 0)


def plan_kept_threshold_shard(logits: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool, fp64: bool,
                              shards: int, row_valid: bool = False) -> tuple:
    """(the rounds that find the kept set's thresholds of vocab-parallel top_k_top_p_sample, the statistics round
    and the searches', for vocab-parallel token_logprobs with filters to run first; the launch that takes each
    row's threshold from them, its output `kept_threshold` [B, 4] i32: shard_threshold_kernel's). Inputs:
    `logits` [B, V_shard], `temperature`, `top_k` / `top_p` where given, `row_valid` with row_valid."""
    batch, vocab = logits.shape
    row_stride = logits.strides[0]
    config = _with_ways(filtered_launch_config(batch, vocab, row_stride, logits.dtype, fp64,
                                               fast_math=not target.interpreter, large_programs=target.large_programs),
                        SHARD_WAYS)
    unused = "temperature"  # stands in for an absent input, never read
    top_k, top_p, valid = (name if given else unused for name, given in
                           (("top_k", has_top_k), ("top_p", has_top_p), ("row_valid", row_valid)))
    tiles = triton.cdiv(vocab, config.threads * config.vec)
    stats = _filter_stats_launches(config, batch, vocab, row_stride, tiles, top_k, valid, has_top_k=has_top_k,
                                   row_valid=row_valid)
    rounds, prev_phase = _search_rounds(config, stats, batch, vocab, row_stride, tiles, top_k, top_p,
                                        has_top_k=has_top_k, has_top_p=has_top_p, fp64=fp64, shards=shards)
    return tuple(rounds), _threshold_launch(config, batch, prev_phase, top_k, top_p, valid, shards, row_valid)


def _threshold_launch(config, batch, prev_phase, top_k, top_p, valid, shards, row_valid):
    """shard_threshold_kernel's launch after the searches' rounds (any later round: it reads their outputs)."""
    searched = prev_phase != PHASE_STATS
    return launch(shard_threshold_kernel, (batch,),
                  ("temperature", top_k, top_p, valid, "gathered_stats", "state_in" if searched else
                   "gathered_stats", "gathered_sums" if searched else "gathered_stats", shards),
                  ("kept_threshold",), PREV_PHASE=prev_phase, KEY_SHIFT=config.key_shift, WAYS=config.ways,
                  SHARDS_BLOCK=triton.next_power_of_2(shards), HAS_ROW_VALID=row_valid, num_warps=1)


def _list_rounds(config, stats, batch, vocab, row_stride, tiles, top_p, min_p, valid, *, has_top_p, has_min_p, fp64,
                 shards, capacity, seed_words, row_valid, slots, store_threshold) -> ShardedPlan:
    """The lists' two rounds (the module's docstring, "Lists"): this shard's statistics, candidates and list record,
    all-gathered; then every device's token from the records."""
    reduce_tiles = triton.next_power_of_2(tiles)
    steps = stats[:1] + (  # (shard_filter_stats_kernel; the candidates' floor replaces the bound's launch)
        launch(shard_top_k_collect_kernel, (batch, config.num_chunks),
               ("logits", "temperature", "top_k", valid, "stats", "tile_max", vocab, row_stride, config.chunk),
               ("candidates",), KEY_SHIFT=config.key_shift, THREADS=config.threads, VEC=config.vec, SLOTS=slots,
               REDUCE_TILES=reduce_tiles, HAS_ROW_VALID=row_valid, num_warps=config.num_warps),
        launch(shard_top_k_record_kernel, (batch,),
               ("logits", "seeds", "positions", "temperature", "top_k", "vocab_start", valid, "stats", "tile_max",
                "candidates", vocab, row_stride),
               ("record",), KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=config.threads, VEC=config.vec,
               WAYS=config.ways, WIDE_SUMS=config.wide_sums, CAP=capacity, SLOTS=slots,
               SELECT_WAYS=max(2048 // slots, 2), SHORT_SLOTS=min(SHORT_CANDIDATES, slots),
               REDUCE_TILES=reduce_tiles, FAST_MATH=config.gumbel.fast_math,
               SEED_WORDS=seed_words, HAS_ROW_VALID=row_valid, num_warps=config.num_warps))
    buffers = (Buffer("record", (batch, 2 * capacity + LIST_HEADER_WORDS), "int32", zeroed=True),
               Buffer("stats", (batch, 6), "int32", zeroed=True), Buffer("tile_max", (batch, tiles), "int32"),
               Buffer("candidates", (batch, 2 * slots + 2), "int32", zeroed=True))
    lists = Plan(buffers, steps, ("record",), "shard top-k lists")
    shards_block = triton.next_power_of_2(shards)
    outputs = ("tokens", "kept_threshold") if store_threshold else ("tokens",)
    merge = Plan((Buffer("tokens", (batch,), "int32"), Buffer("kept_threshold", (batch, 4), "int32")), (launch(
        shard_list_merge_kernel, (batch,),
        ("gathered_record", "seeds", "positions", "temperature", "top_k", top_p, min_p, valid, shards),
        ("tokens", "kept_threshold"), KEY_SHIFT=config.key_shift, FP64=fp64, FAST_MATH=config.gumbel.fast_math,
        CAP=capacity, SHARDS_BLOCK=shards_block, HAS_TOP_P=has_top_p, HAS_MIN_P=has_min_p,
        WAYS=max(2048 // (shards_block * capacity), 2), SEED_WORDS=seed_words, HAS_ROW_VALID=row_valid,
        STORE_THRESHOLD=store_threshold, num_warps=4),), outputs, "shard lists merged")
    return ShardedPlan((lists, merge), "vocab shard, filtered, lists")
