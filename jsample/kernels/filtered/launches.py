"""The launches' plan's kernels (steps 1 to 6 of jsample.kernels.filtered's docstring): statistics, the row's
status, the winner's sums or top-k's lists, the decision, the compacted search launches, the sampling launch
and its reduce. The search and sampling launches stride over the rows filter_decide_kernel lists.
"""

import triton.language as tl

from jsample.kernels.common import (aligned, is_padding, load_temperature, reduce_block_best_flagged,
                                    store_sampled_block)
from jsample.kernels.gumbel import store_row_token
from jsample.kernels.host import jit
from jsample.kernels.stream import load_seed
from jsample.kernels.filtered.config import (
    MAX_CHUNKS,
    _ALL_FINITE,
    _CHECK,
    _DONE,
    _FILTER,
    _SAMPLE,
    _SAMPLED,
    _STATE_WORDS,
    _TOP_P,
    _WINNER,
)
from jsample.kernels.filtered.keys import (
    _filtered_row,
    _finite_extremes,
    _kept_columns,
    _key,
    _min_p,
    _relative_probability,
    store_filtered_block,
)
from jsample.kernels.filtered.search import (
    _advance_state,
    _chunk_histogram,
    _chunk_winner_sums,
    _collect_candidates,
    _histogram_bracket,
    _item_status,
    _kth_largest_block_key,
    _list_decision,
    _listed,
    _load_state,
    _program_items,
    _row_state,
    _search_item,
    _store_state,
    _top_k,
)

@jit
def filter_stats_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 words (SEED_WORDS = 2)
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read or written
    V,
    row_stride,
    stats_ptr,  # [B, num_blocks] i32: per block, the largest finite key (-2**31 without one)
    unfiltered_score_ptr,  # [B, num_blocks] f32 (FP64: f64 as pairs of f32 words): gumbel_sample's partials
    unfiltered_index_ptr,  # [B, num_blocks] i32
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """The launches' plan's first launch, grid (B, num_blocks) in the sampling launch's tiling: each
    block's largest finite key, and its partials of the unfiltered Gumbel-max sample (stream 0,
    exactly gumbel_sample's), whose winner is the token wherever the filters keep it. (Neither the
    smallest key nor the finite count is needed: searches start below every finite key, and a top-k
    of at least the finite count finds the smallest finite key, keeping all, as top-k then must.)"""
    V = aligned(V, VOCAB_ALIGN)
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):  # padding: filter_row_kernel gives it token -1
            return
    block = tl.program_id(1)
    num_blocks = tl.num_programs(1)
    b64 = b.to(tl.int64)
    seed = load_seed(seeds_ptr, b, SEED_WORDS)
    position = tl.load(positions_ptr + b).to(tl.int64)
    temperature = load_temperature(temperature_ptr, b)
    out = b64 * num_blocks + block
    x = store_sampled_block(logits_ptr, b, row_stride, V, block * BLOCK_V, seed, position, temperature,
                            unfiltered_score_ptr, unfiltered_index_ptr, out, 0, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
    largest, _, _ = _finite_extremes(x)  # (the smallest and the count go unused: the compiler drops them)
    tl.store(stats_ptr + out, tl.where(largest > float("-inf"), _key(largest, KEY_SHIFT), -(2**31)))


@jit
def filter_row_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64 (read when HAS_TOP_K)
    min_p_ptr,  # [B] f32 (read when HAS_MIN_P)
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): STATUS_SAMPLED, token -1
    stats_ptr,  # from filter_stats_kernel
    unfiltered_score_ptr,
    unfiltered_index_ptr,
    V,
    row_stride,
    num_blocks,
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words
    SEARCH: tl.constexpr,  # top-k or top-p is given
    HAS_TOP_K: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= num_blocks
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): the row's key statistics and unfiltered winner from the first launch's block
    partials, whether min-p keeps the winner, and the row's status: the winner is the token
    (STATUS_DONE: also a winner at the row's largest logit, which every filter keeps), top-k and
    top-p decide from its sums (STATUS_CHECK), or the row is searched and its kept set sampled
    (STATUS_FILTER). With top-k, the search starts at a lower bound of its threshold from the block
    statistics (_kth_largest_block_key), and a winner below that bound is dropped without sums. A padding
    row (row_valid 0) is STATUS_SAMPLED with token -1: no later launch reads its logits."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            zero = b64 * 0
            _store_state(state_out_ptr, b64, zero, zero, zero, zero, zero + 1, zero, zero - 1, zero + _SAMPLED)
            return
    temperature = load_temperature(temperature_ptr, b)
    blocks = tl.arange(0, REDUCE_BLOCK)
    in_row = blocks < num_blocks
    block_max = tl.load(stats_ptr + b64 * num_blocks + blocks, mask=in_row, other=-(2**31))
    key_max = tl.max(block_max, axis=0).to(tl.int64)
    # The finite count stands in as _ALL_FINITE (rows with a finite logit) or 0: every use of it asks
    # whether top-k is active (k < count) or a finite logit exists, and a search that starts at or
    # below every finite key (key_min: here the key of the lowest finite float) keeps all where top-k
    # is at least the true count.
    count = tl.where(key_max > -(2**31), _ALL_FINITE, 0).to(tl.int64)
    key_min = _key(tl.full([], -3.4028234663852886e38, tl.float32), KEY_SHIFT).to(tl.int64)
    winner, overflow = reduce_block_best_flagged(unfiltered_score_ptr, unfiltered_index_ptr, b, num_blocks, FP64,
                                                 REDUCE_BLOCK, False)
    # Greedy rows, rows that overflow and rows without a finite logit are not filtered: their
    # unfiltered partials are their filtered ones.
    run = _filtered_row(temperature, count) & ~overflow
    x_w = tl.load(logits_ptr + b64 * row_stride + tl.maximum(winner, 0)).to(tl.float32)
    key_w = _key(x_w, KEY_SHIFT).to(tl.int64)
    keeps = run
    if HAS_MIN_P:
        keeps = keeps & (_relative_probability(x_w, temperature, key_max, KEY_SHIFT, FP64) >= _min_p(min_p_ptr, b64))
    lo = tl.where(count > 0, key_min, 0)  # no finite logit: nothing to search (the row gives -1)
    if HAS_TOP_K:
        k, top_k_active = _top_k(top_k_ptr, b64, count)
        if run & top_k_active:  # its search starts at the bound
            lo = _kth_largest_block_key(block_max, k, lo)
            keeps = keeps & (key_w >= lo)
    status = tl.where(run & ~keeps, _FILTER, _CHECK if SEARCH else _DONE)
    # a winner at the largest logit is kept by every filter (top-k keeps ties at its boundary, top-p the
    # tokens with no mass above them, min-p e = 1)
    status = tl.where(run & (key_w < key_max), status, _DONE).to(tl.int64)
    _store_state(state_out_ptr, b64, key_max, key_min, count, lo, lo + 1, count * 0, key_w, status)


@jit
def filter_winner_sums_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64 (read when HAS_TOP_K)
    state_ptr,  # from filter_row_kernel
    block_stats_ptr,  # filter_stats_kernel's
    V,
    row_stride,
    num_chunks,
    chunk,  # columns per chunk
    num_blocks,
    partial_out_ptr,  # [B, num_chunks, WAYS] i64 as i32 words: the chunk's winner sums (STATUS_CHECK rows)
    list_ptr,  # [B, 2 * LIST] i32: the row's candidate columns, then their keys, in no particular order
    list_count_ptr,  # [B] i32 counters: how many candidates the row has (past LIST: not all stored)
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    WAYS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    TILE_BLOCKS: tl.constexpr,
    WIDE_SUMS: tl.constexpr = False,
    ITEMS: tl.constexpr = 1,
    LIST: tl.constexpr = 0,  # the plan's TOP_K_LIST with top-k (0: no lists)
    FAST_MATH: tl.constexpr = False,
):
    """Grid (B * num_chunks / ITEMS,), ITEMS dividing B * num_chunks (the batch comes from the grid), a
    row's chunk an item (_program_items): for STATUS_CHECK rows,
    the chunk's counts (and, with HAS_TOP_P, masses) that decide whether top-k and top-p keep the
    unfiltered winner (_chunk_winner_sums). Where top-k is active, _keeps_winner reads no mass of the
    keys below the winner's, so tiles below it are skipped unread (lane 3 is then not all the mass);
    top-p alone needs all the mass, and reads every tile.

    With LIST > 0, rows whose top-k is active with k <= LIST and a bound above the floor (_listed;
    STATUS_CHECK or STATUS_FILTER) take no sums: their chunks append the keys at or above the row's lower
    bound of top-k's threshold to the row's candidate list instead (_collect_candidates), from which
    filter_decide_kernel finds the thresholds and decides the winner."""
    V = aligned(V, VOCAB_ALIGN)
    chunk = aligned(chunk, THREADS * VEC)
    items, statuses = _program_items(state_ptr, num_chunks, tl.num_programs(0) * ITEMS, ITEMS)
    for i in range(ITEMS):
        item, status = _item_status(items, statuses, i, ITEMS)
        b = item // num_chunks
        b64 = b.to(tl.int64)
        state = state_ptr.to(tl.pointer_type(tl.int64)) + b64 * _STATE_WORDS
        listed = False
        if LIST > 0:
            if (status == _CHECK) | (status == _FILTER):
                _, listed = _listed(top_k_ptr, b64, tl.load(state + 2), tl.load(state + 3), tl.load(state + 1), LIST)
        if listed:
            _collect_candidates(logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN), (item % num_chunks) * chunk,
                                (item % num_chunks + 1) * chunk, V, tl.load(state + 3).to(tl.int32),
                                list_ptr + b64 * (2 * LIST), list_count_ptr + b, KEY_SHIFT, THREADS, VEC,
                                block_stats_ptr + b64 * num_blocks, num_blocks, BLOCK_V, TILE_BLOCKS, LIST)
        elif status == _CHECK:
            c = item % num_chunks
            temperature = load_temperature(temperature_ptr, b)
            first = c * chunk
            key_w = tl.load(state + 6).to(tl.int32)
            tiles_from = key_w + 1  # counts alone: the keys above the winner's
            if HAS_TOP_P:
                tiles_from = -(2**31)  # all the mass: every tile
                if HAS_TOP_K:
                    # an active top-k (_keeps_winner reads then only the masses of the keys >= the winner's)
                    _, top_k_active = _top_k(top_k_ptr, b64, tl.load(state + 2))
                    tiles_from = tl.where(top_k_active, key_w, tiles_from)
            sums = _chunk_winner_sums(logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN), first, first + chunk,
                                      V, key_w, temperature, tl.load(state), KEY_SHIFT, FP64, THREADS, VEC, WAYS,
                                      WIDE_SUMS, HAS_TOP_P, HAS_TOP_K, tiles_from, block_stats_ptr + b64 * num_blocks,
                                      num_blocks, BLOCK_V, TILE_BLOCKS, FAST_MATH)
            tl.store(partial_out_ptr.to(tl.pointer_type(tl.int64)) + (b64 * num_chunks + c) * WAYS
                     + tl.arange(0, WAYS), sums)


@jit
def filter_decide_kernel(
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 words (SEED_WORDS = 2)
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64 (read when HAS_TOP_K)
    top_p_ptr,  # [B] f32 (read when HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read when HAS_MIN_P)
    state_in_ptr,  # [B, STATE_WORDS] i64 as i32 words, from filter_row_kernel
    partial_in_ptr,  # [B, num_chunks, WAYS] i64 as i32 words: filter_winner_sums_kernel's sums
    list_ptr,  # [B, 2 * LIST] i32: filter_winner_sums_kernel's candidate columns, then their keys
    list_count_in_ptr,  # [B] i32: and their count
    num_chunks,
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words: every row's decided state
    list_count_out_ptr,  # [B] i32 counters: left zero
    active_rows_ptr,  # [B] i32: the rows that search on, in no particular order (the first active_count)
    active_count_ptr,  # [1] i32 counter, zero on entry (filtered_reduce_kernel leaves it zero)
    PHASE: tl.constexpr,  # the first search launch's
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    LIST: tl.constexpr,  # the lists' length (a power of two; 0: the plan lists no candidates)
    SHORT_LIST: tl.constexpr,  # a power of two <= LIST: lists no longer than this sort only that many slots
    SEED_WORDS: tl.constexpr = 1,
):
    """Grid (B,), after filter_winner_sums_kernel: every row's status, final from here on, and where the
    row is searched the first search launch's bracket; the rows searched are listed for the search and
    sampling launches, which take only their items.

    With LIST > 0, first top-k's threshold, and top-p's after it, from the candidate list of each row
    whose top-k is active with k <= LIST, and the row's token. The list holds every column whose logit
    is finite with a key >= lo, the row launch's lower bound of top-k's threshold
    (_kth_largest_block_key: k blocks reach it, so at least k keys do; _listed), so its k-th largest key
    (with multiplicity) is the threshold the top-k search finds: the largest t with at least k keys >=
    t. Top-p then keeps the keys >= the largest listed key t with mass(keys >= t) >= top_p * N, N the
    mass of what top-k keeps (every larger key has less mass at or above it): from one sort of a short
    list, or _largest_reaching's searches over a long one. Same integer masses, same float64
    comparison as the search (_narrow): the same thresholds. The row's winner is then kept iff its
    key reaches them (STATUS_DONE); else
    every column the filters keep is in the list, and the token is their Gumbel-max (_list_token:
    STATUS_SAMPLED). A list that overflowed sends the row to the search (STATUS_FILTER: it took no
    winner's sums). Every row's count is reset to zero.

    Then every other STATUS_CHECK row is decided from its winner's sums (_advance_state), and each
    STATUS_FILTER row's search starts."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    key_max, key_min, count, lo, hi, normalizer, key_w, status = _load_state(state_in_ptr, b64)
    if LIST > 0:
        listed_count = tl.load(list_count_in_ptr + b)
        # torch passes one counter as both pointers: every warp's load before any warp's reset (a warp that
        # read the reset count would take another branch than the others)
        tl.debug_barrier()
        tl.store(list_count_out_ptr + b, 0)
        k, listed = _listed(top_k_ptr, b64, count, lo, key_min, LIST)
        if ((status == _CHECK) | (status == _FILTER)) & listed:
            if listed_count <= LIST:
                temperature = load_temperature(temperature_ptr, b)
                seed = load_seed(seeds_ptr, b, SEED_WORDS)
                position = tl.load(positions_ptr + b).to(tl.int64)
                if listed_count <= SHORT_LIST:  # most rows: a short list
                    threshold, token = _list_decision(list_ptr + b64 * (2 * LIST), listed_count, k, key_max, key_w,
                                                      status == _CHECK, seed, position, temperature, top_p_ptr,
                                                      min_p_ptr, b64, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64,
                                                      FAST_MATH, SHORT_LIST, LIST, False)
                else:
                    threshold, token = _list_decision(list_ptr + b64 * (2 * LIST), listed_count, k, key_max, key_w,
                                                      status == _CHECK, seed, position, temperature, top_p_ptr,
                                                      min_p_ptr, b64, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64,
                                                      FAST_MATH, LIST, LIST, False)
                status = tl.where(token < 0, _DONE, _SAMPLED).to(tl.int64)
                key_w = tl.where(token < 0, key_w, token.to(tl.int64))  # a sampled row's word 6: its token
                lo = threshold
                hi = threshold + 1
            else:
                status = (status * 0 + _FILTER).to(tl.int64)
    key_max, key_min, count, lo, hi, normalizer, key_w, status = _advance_state(
        b64, key_max, key_min, count, lo, hi, normalizer, key_w, status, partial_in_ptr, num_chunks,
        load_temperature(temperature_ptr, b), top_k_ptr, top_p_ptr, PHASE, _WINNER, HAS_TOP_K, HAS_TOP_P, WAYS,
        MAX_CHUNKS, KEY_SHIFT, False)
    _store_state(state_out_ptr, b64, key_max, key_min, count, lo, hi, normalizer, key_w, status)
    if status == _FILTER:  # the row searches on (and is sampled): the later launches' list
        tl.store(active_rows_ptr + tl.atomic_add(active_count_ptr, 1, sem="relaxed"), b)


@jit
def filter_compact_step_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32 (read by top-k launches only)
    top_p_ptr,  # [B] f32 (read by top-p launches only)
    state_in_ptr,  # [B, STATE_WORDS] i64 as i32 words, from the previous launch (its listed rows)
    partial_in_ptr,  # [B, num_chunks, WAYS] i64 as i32 words, from the previous launch
    block_stats_ptr,  # filter_stats_kernel's: tiles below the bracket are skipped unread
    active_rows_ptr,  # filter_decide_kernel's list of the rows that search on
    active_count_ptr,  # and their number
    V,
    row_stride,
    num_chunks,
    chunk,  # columns per chunk
    num_blocks,  # of block_stats
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words: the listed rows' state (written by chunk 0)
    partial_out_ptr,  # [B, num_chunks, WAYS] i64 as i32 words
    PHASE: tl.constexpr,
    PREV_PHASE: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    TILE_BLOCKS: tl.constexpr,
    WIDE_SUMS: tl.constexpr = False,
    MIXED_PIVOTS: tl.constexpr = False,
    NARROW_MIXED: tl.constexpr = False,
    FAST_MATH: tl.constexpr = False,
):
    """A search launch, grid (P,): the search's work (_search_item) on the chunks of the rows
    filter_decide_kernel listed, item j (row active_rows[j // num_chunks], its chunk j % num_chunks) on
    program j % P. Rows that do not search have no item: once the filters' searches are settled (most
    launches, with the winner's sums and top-k's lists) a launch costs a load a program. Only the listed
    rows' state is written: the later launches read no other (filtered_reduce_kernel reads every row's
    status from the decide launch's state)."""
    V = aligned(V, VOCAB_ALIGN)
    chunk = aligned(chunk, THREADS * VEC)
    total = tl.load(active_count_ptr) * num_chunks
    item = tl.program_id(0)
    while item < total:
        b = tl.load(active_rows_ptr + item // num_chunks)
        _search_item(b, item % num_chunks, logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, state_in_ptr,
                     partial_in_ptr, block_stats_ptr, V, row_stride, num_chunks, chunk, num_blocks, state_out_ptr,
                     partial_out_ptr, PHASE, PREV_PHASE, HAS_TOP_K, HAS_TOP_P, KEY_SHIFT, FP64,
                     THREADS, VEC, ROW_ALIGN, WAYS, MAX_CHUNKS, BLOCK_V, TILE_BLOCKS, WIDE_SUMS, MIXED_PIVOTS,
                     NARROW_MIXED, FAST_MATH)
        item += tl.num_programs(0)


@jit
def filter_histogram_step_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64 (read where the previous launch was top-k's)
    top_p_ptr,  # [B] f32
    state_in_ptr,  # [B, STATE_WORDS] i64 as i32 words, from the previous launch (its listed rows)
    partial_in_ptr,  # [B, num_chunks, WAYS] i64 as i32 words, from the previous launch
    block_stats_ptr,  # filter_stats_kernel's: tiles below the bracket are skipped unread
    active_rows_ptr,  # filter_decide_kernel's list of the rows that search on
    active_count_ptr,  # and their number
    V,
    row_stride,
    num_chunks,
    chunk,  # columns per chunk
    num_blocks,  # of block_stats
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words: the listed rows' state (written by chunk 0)
    partial_out_ptr,  # [B, num_chunks, WAYS] i64 as i32 words: lane 0, the chunk's mass below the histogram
    histogram_ptr,  # [B, BINS * BIN_STRIDE] i32 counters, zero on entry: the count of each key of the histogram
    PREV_PHASE: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    TILE_BLOCKS: tl.constexpr,
    BINS: tl.constexpr,  # a power of two
    BIN_STRIDE: tl.constexpr,  # words from a bin's count to the next's
    WIDE_SUMS: tl.constexpr = False,
    NARROW_MIXED: tl.constexpr = False,
    FAST_MATH: tl.constexpr = False,
):
    """The top-p search's first launch, grid (P,) over the listed rows' chunks (as filter_compact_step_kernel
    takes them): the row's bracket [lo, hi) (_row_state: the search starts, hi = key_max + 1), stored by chunk
    0, counted at every key of its top BINS, [base, hi) with base = max(lo, hi - BINS), in one pass: one
    atomic add a logit in range. A key is one value of the dtype, so all its logits have the same fixed-point
    mass (_chunk_above's): filter_histogram_bracket_kernel then has the mass of the keys >= each of them
    exactly. Where the normaliser (the mass of the keys >= lo) is not yet known, each chunk also sums the
    masses of its keys in [lo, base). On language-model-like logits the bracket from the winner's sums spans a
    few hundred bfloat16 keys: one pass settles it, where pivot launches took three."""
    V = aligned(V, VOCAB_ALIGN)
    chunk = aligned(chunk, THREADS * VEC)
    total = tl.load(active_count_ptr) * num_chunks
    item = tl.program_id(0)
    while item < total:
        b = tl.load(active_rows_ptr + item // num_chunks)
        c = item % num_chunks
        b64 = b.to(tl.int64)
        temperature = load_temperature(temperature_ptr, b)
        key_max, key_min, count, lo, hi, normalizer, key_w, status = _row_state(
            b64, state_in_ptr, partial_in_ptr, num_chunks, temperature, top_k_ptr, top_p_ptr, _TOP_P, PREV_PHASE,
            HAS_TOP_K, HAS_TOP_P, WAYS, MAX_CHUNKS, KEY_SHIFT, NARROW_MIXED)
        if c == 0:
            _store_state(state_out_ptr, b64, key_max, key_min, count, lo, hi, normalizer, key_w, status)
        if hi - lo > 1:
            first = c * chunk
            below = _chunk_histogram(logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN), first, first + chunk,
                                     V, lo, tl.maximum(lo, hi - BINS), hi, normalizer == 0, temperature, key_max,
                                     histogram_ptr + b64 * (BINS * BIN_STRIDE), KEY_SHIFT, FP64, THREADS, VEC,
                                     WIDE_SUMS, block_stats_ptr + b64 * num_blocks, num_blocks, BLOCK_V, TILE_BLOCKS,
                                     BIN_STRIDE, FAST_MATH)
            tl.store(partial_out_ptr.to(tl.pointer_type(tl.int64)) + (b64 * num_chunks + c) * WAYS, below)
        item += tl.num_programs(0)


@jit
def filter_histogram_bracket_kernel(
    temperature_ptr,  # [B] f32
    top_p_ptr,  # [B] f32
    state_in_ptr,  # [B, STATE_WORDS] i64 as i32 words, from filter_histogram_step_kernel (its listed rows)
    partial_in_ptr,  # [B, num_chunks, WAYS] i64 as i32 words: lane 0, the chunks' masses below the histogram
    histogram_in_ptr,  # [B, BINS * BIN_STRIDE] i32: the histogram's key counts
    active_rows_ptr,  # filter_decide_kernel's list of the rows that search on
    active_count_ptr,  # and their number
    num_chunks,
    state_out_ptr,  # [B, STATE_WORDS] i64 as i32 words: the listed rows' state
    histogram_out_ptr,  # [B, BINS * BIN_STRIDE] i32 counters: left zero
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    BINS: tl.constexpr,
    BIN_STRIDE: tl.constexpr,
    FAST_MATH: tl.constexpr = False,
):
    """Grid (P,), listed row j on program j % P: the top-p bracket after filter_histogram_step_kernel
    (_histogram_bracket), and the row's counts reset to zero."""
    j = tl.program_id(0)
    while j < tl.load(active_count_ptr):
        b = tl.load(active_rows_ptr + j)
        b64 = b.to(tl.int64)
        key_max, key_min, count, lo, hi, normalizer, key_w, status = _load_state(state_in_ptr, b64)
        if hi - lo > 1:
            bins = b64 * (BINS * BIN_STRIDE) + tl.arange(0, BINS) * BIN_STRIDE
            counts = tl.load(histogram_in_ptr + bins)
            # torch passes one buffer as both pointers: every warp's load before any warp's reset
            tl.debug_barrier()
            tl.store(histogram_out_ptr + bins, tl.zeros_like(counts))
            chunks = tl.arange(0, MAX_CHUNKS)
            below = tl.sum(tl.load(partial_in_ptr.to(tl.pointer_type(tl.int64)) + (b64 * num_chunks + chunks) * WAYS,
                                   mask=chunks < num_chunks, other=0), axis=0)
            lo, hi, normalizer = _histogram_bracket(counts, below, lo, hi, normalizer,
                                                    load_temperature(temperature_ptr, b), key_max,
                                                    tl.load(top_p_ptr + b64), KEY_SHIFT, FP64, BINS,
                                                    FAST_MATH)
        _store_state(state_out_ptr, b64, key_max, key_min, count, lo, hi, normalizer, key_w, status)
        j += tl.num_programs(0)


@jit
def filtered_partial_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 words (SEED_WORDS = 2)
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32
    top_k_ptr,  # [B] i32|i64
    top_p_ptr,  # [B] f32
    min_p_ptr,  # [B] f32 (read when HAS_MIN_P)
    state_in_ptr,  # from the last search launch (or filter_row_kernel: no search)
    partial_in_ptr,
    unfiltered_score_ptr,  # filter_stats_kernel's partials
    unfiltered_index_ptr,
    block_stats_ptr,  # and block statistics
    active_rows_ptr,  # with COMPACT: filter_decide_kernel's list of the rows that search on (STATUS_FILTER)
    active_count_ptr,  # and their number
    V,
    row_stride,
    num_chunks,
    num_blocks,
    partial_score_ptr,  # [B, num_blocks] f32; with FP64, f64 as [B, 2 * num_blocks] f32 words
    partial_index_ptr,  # [B, num_blocks] i32
    PREV_PHASE: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCKS_PER_PROGRAM: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    ITEMS: tl.constexpr = 1,
    NARROW_MIXED: tl.constexpr = False,  # the previous launch's pivots were _pivots' mixed ones
    COMPACT: tl.constexpr = False,  # items of the listed rows only (a plan with search launches)
):
    """Grid (B * groups / ITEMS,) (ITEMS dividing it: the batch comes from the grid), groups =
    cdiv(num_blocks, BLOCKS_PER_PROGRAM) a row, a row's
    group of blocks an item (_program_items); with COMPACT, grid (P,) and only the listed rows' items,
    item j (row active_rows[j // groups], its group j % groups) on program j % P (as
    filter_compact_step_kernel takes them): the block partials of gumbel_partial_kernel
    (stream 0) on each STATUS_FILTER row with the logits the filters drop set to -inf (the other
    rows' token is their unfiltered winner, whose unfiltered partials filtered_reduce_kernel reads, or
    a STATUS_SAMPLED row's from its list). The
    unfiltered partials answer wherever they can: a block whose largest key is below the threshold
    keeps nothing (no candidate, and its logits are not read); a block whose unfiltered best column
    is kept, or that has no candidate, has the same best (the same scores, fewer candidates); a block
    that keeps no column has no candidate; only the other blocks draw their noise again
    (store_filtered_block)."""
    V = aligned(V, VOCAB_ALIGN)
    groups = tl.cdiv(num_blocks, BLOCKS_PER_PROGRAM)
    if COMPACT:
        total = tl.load(active_count_ptr) * groups
        item = tl.program_id(0)
        while item < total:
            _partial_item(tl.load(active_rows_ptr + item // groups), item % groups, logits_ptr, seeds_ptr,
                          positions_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr, state_in_ptr,
                          partial_in_ptr, unfiltered_score_ptr, unfiltered_index_ptr, block_stats_ptr, V, row_stride,
                          num_chunks, num_blocks, partial_score_ptr, partial_index_ptr, PREV_PHASE,
                          HAS_TOP_K, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V,
                          BLOCKS_PER_PROGRAM, ROW_ALIGN, FAST_MATH, WAYS, MAX_CHUNKS, SEED_WORDS, NARROW_MIXED)
            item += tl.num_programs(0)
    else:
        items, statuses = _program_items(state_in_ptr, groups, tl.num_programs(0) * ITEMS, ITEMS)
        for item_i in range(ITEMS):
            item, status = _item_status(items, statuses, item_i, ITEMS)
            if status == _FILTER:
                _partial_item(item // groups, item % groups, logits_ptr, seeds_ptr, positions_ptr, temperature_ptr,
                              top_k_ptr, top_p_ptr, min_p_ptr, state_in_ptr, partial_in_ptr, unfiltered_score_ptr,
                              unfiltered_index_ptr, block_stats_ptr, V, row_stride, num_chunks, num_blocks,
                              partial_score_ptr, partial_index_ptr, PREV_PHASE, HAS_TOP_K,
                              HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V, BLOCKS_PER_PROGRAM, ROW_ALIGN,
                              FAST_MATH, WAYS, MAX_CHUNKS, SEED_WORDS, NARROW_MIXED)


@jit
def _partial_item(b, group, logits_ptr, seeds_ptr, positions_ptr, temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr,
                  state_in_ptr, partial_in_ptr, unfiltered_score_ptr, unfiltered_index_ptr, block_stats_ptr, V,
                  row_stride, num_chunks, num_blocks, partial_score_ptr, partial_index_ptr, PREV_PHASE: tl.constexpr,
                  HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr,
                  HAS_MIN_P: tl.constexpr, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr,
                  BLOCKS_PER_PROGRAM: tl.constexpr, ROW_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr,
                  WAYS: tl.constexpr, MAX_CHUNKS: tl.constexpr, SEED_WORDS: tl.constexpr, NARROW_MIXED: tl.constexpr):
    """filtered_partial_kernel's work on a group of blocks of STATUS_FILTER row b: its final state
    replayed, then each block's filtered partial."""
    b64 = b.to(tl.int64)
    temperature = load_temperature(temperature_ptr, b)
    key_max, key_min, count, threshold, hi, normalizer, key_w, status = _row_state(
        b64, state_in_ptr, partial_in_ptr, num_chunks, temperature, top_k_ptr, top_p_ptr,
        _SAMPLE, PREV_PHASE, HAS_TOP_K, HAS_TOP_P, WAYS, MAX_CHUNKS, KEY_SHIFT, NARROW_MIXED)
    for i in range(BLOCKS_PER_PROGRAM):
        block = group * BLOCKS_PER_PROGRAM + i
        if block < num_blocks:
            out = b64 * num_blocks + block
            first_col = block * BLOCK_V
            if tl.load(block_stats_ptr + out) < threshold:  # no kept column: no candidate, unread
                _store_partial(partial_score_ptr, partial_index_ptr, out, float("-inf"), first_col, FP64)
            else:
                _filtered_block_partial(logits_ptr, seeds_ptr, positions_ptr, min_p_ptr, unfiltered_score_ptr,
                                        unfiltered_index_ptr, partial_score_ptr, partial_index_ptr, b, b64,
                                        out, first_col, V, row_stride, temperature, key_max, count, threshold,
                                        HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V, ROW_ALIGN, FAST_MATH, SEED_WORDS)


@jit
def _filtered_block_partial(logits_ptr, seeds_ptr, positions_ptr, min_p_ptr, unfiltered_score_ptr,
                            unfiltered_index_ptr, partial_score_ptr, partial_index_ptr, b, b64, out, first_col, V,
                            row_stride, temperature, key_max, count, threshold, HAS_MIN_P: tl.constexpr,
                            KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr,
                            ROW_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr, SEED_WORDS: tl.constexpr):
    """filtered_partial_kernel's block `out` of a STATUS_FILTER row whose largest key is kept."""
    if FP64:
        score = tl.load(unfiltered_score_ptr.to(tl.pointer_type(tl.float64)) + out)
    else:
        score = tl.load(unfiltered_score_ptr + out)
    column = tl.load(unfiltered_index_ptr + out)
    cols = first_col + tl.arange(0, BLOCK_V)
    x = tl.load(logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN) + cols, mask=cols < V,
                other=float("-inf")).to(tl.float32)
    keep = _kept_columns(x, threshold, temperature, key_max, min_p_ptr, b64, HAS_MIN_P, KEY_SHIFT, FP64)
    if (score == float("-inf")) | (tl.sum((keep & (cols == column)).to(tl.int32), axis=0) > 0):
        _store_partial(partial_score_ptr, partial_index_ptr, out, score, column, FP64)
    elif tl.max(keep.to(tl.int32), axis=0) > 0:
        seed = load_seed(seeds_ptr, b, SEED_WORDS)
        position = tl.load(positions_ptr + b).to(tl.int64)
        store_filtered_block(logits_ptr, b64, row_stride, V, first_col, seed, position, temperature, min_p_ptr,
                             key_max, count, threshold, partial_score_ptr, partial_index_ptr, out, HAS_MIN_P,
                             KEY_SHIFT, FP64, BLOCK_V, ROW_ALIGN, FAST_MATH)
    else:  # no kept column: no candidate (what store_filtered_block stores for it)
        _store_partial(partial_score_ptr, partial_index_ptr, out, float("-inf"), first_col, FP64)


@jit
def _store_partial(partial_score_ptr, partial_index_ptr, out, score, column, FP64: tl.constexpr):
    if FP64:
        tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, score)
    else:
        tl.store(partial_score_ptr + out, score)
    tl.store(partial_index_ptr + out, column)


@jit
def filtered_reduce_kernel(
    state_ptr,  # the rows' statuses (with a search, filter_decide_kernel's state)
    unfiltered_score_ptr,  # filter_stats_kernel's partials (STATUS_DONE rows)
    unfiltered_index_ptr,
    partial_score_ptr,  # filtered_partial_kernel's (STATUS_FILTER rows)
    partial_index_ptr,
    logits_ptr,  # [B, V]: read only for rows that overflow
    V,
    row_stride,
    num_blocks,
    tokens_ptr,  # [B] i32 output
    active_count_ptr,  # [1] i32: filter_decide_kernel's counter of listed rows, left zero here
    FP64: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= num_blocks
):
    """Grid (B,): argmax_reduce_kernel on the row's filtered partials, or on its unfiltered ones where
    its token is the unfiltered winner; a STATUS_SAMPLED row's token is in its state (word 6). Row 0
    resets the launches' counter of listed rows (every launch that reads it has run)."""
    row = tl.program_id(0)
    if row == 0:
        tl.store(active_count_ptr, 0)
    state = state_ptr.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * _STATE_WORDS
    status = tl.load(state + 7)
    if status == _SAMPLED:
        tl.store(tokens_ptr + row, tl.load(state + 6).to(tl.int32))
    elif status == _FILTER:
        store_row_token(partial_score_ptr, partial_index_ptr, logits_ptr, V, row_stride, num_blocks, tokens_ptr, row,
                        FP64, REDUCE_BLOCK)
    else:
        store_row_token(unfiltered_score_ptr, unfiltered_index_ptr, logits_ptr, V, row_stride, num_blocks, tokens_ptr,
                        row, FP64, REDUCE_BLOCK)
