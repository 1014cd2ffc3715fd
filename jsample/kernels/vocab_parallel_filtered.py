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
from jsample.kernels.filtered.keys import _key, _tile_logits, _tile_max_key, store_filtered_block
from jsample.kernels.filtered.search import _chunk_above, _kth_largest_block_key, _narrow, _start_search
from jsample.kernels.gumbel import many_rows_config
from jsample.kernels.host import jit
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.stream import load_seed, seed_word_count
from jsample.kernels.vocab_parallel import (START_MULTIPLE, SUMMARY_WORDS, plan_shard_combine, shard_summary_kernel,
                                            store_greedy_candidate)

STATE_WORDS = 3  # int64 a row: the search's bracket [lo, hi) and top-p's normaliser
_STATE_WORDS = tl.constexpr(STATE_WORDS)  # the kernels' copy: a kernel reads only constexpr globals
SHARD_WAYS = 16  # pivots a search round: 4 rounds a bfloat16 search, 8 a float32 one
_PHASE_STATS = tl.constexpr(PHASE_STATS)


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


@functools.lru_cache(maxsize=512)
def plan_top_k_top_p_shard(logits: ArgSpec, seeds: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                           has_min_p: bool, fp64: bool, shards: int, start_align: int,
                           row_valid: bool = False) -> ShardedPlan:
    """A shard's rounds of vocab-parallel `top_k_top_p_sample` (the module's docstring): inputs `logits`
    [B, V_shard] (this device's columns), `seeds`, `positions`, `temperature` [B] f32, `top_k` / `top_p` /
    `min_p` where given (as top_k_top_p_sample's), `vocab_start` [1] i32 (the shard's first global column, a
    multiple of `start_align`) and, with `row_valid`, `row_valid` [B] (0: a padding row, token -1, its logits
    unread); the last round's output `tokens` [B] i32."""
    if start_align < START_MULTIPLE or start_align & (start_align - 1):
        raise ValueError(f"start_align must be a power of two >= {START_MULTIPLE}, got {start_align}")
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

