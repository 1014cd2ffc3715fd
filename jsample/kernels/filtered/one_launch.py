"""filtered_one_launch_kernel: every step of the launches' plan in one launch, for batches whose programs are all
resident at once (Target.resident_programs): the steps meet at a barrier of the row's programs (an arrival
counter) instead of at launch boundaries, and the last program to arrive reduces the row. Same integer sums,
same searches, same scores: the same token as the launches' plan.
"""

import triton.language as tl

from jsample.kernels.common import (
    aligned,
    greedy_argmax_row,
    is_padding,
    load_temperature,
    reduce_block_best_flagged,
    store_sampled_block,
)
from jsample.kernels.host import jit
from jsample.kernels.stream import load_seed
from jsample.kernels.filtered.config import MAX_CHUNKS, _TOP_K, _TOP_P
from jsample.kernels.filtered.keys import (
    _extreme_keys,
    _filtered_row,
    _finite_extremes,
    _key,
    _min_p,
    _relative_probability,
    store_filtered_block,
)
from jsample.kernels.filtered.search import (
    _chunk_above,
    _chunk_winner_sums,
    _collect_candidates,
    _keeps_winner,
    _kth_largest_block_key,
    _list_decision,
    _narrow,
    _start_search,
    _top_k,
    _winner_bracket,
)

@jit
def _row_barrier(arrivals_ptr, expected):
    """Waits until the row's counter reaches `expected` (this program's arrival included): a barrier of
    the row's programs, which the plan only asks of programs that run at once. The release orders this
    program's partials before its arrival, the acquire the others' before what follows."""
    tl.debug_barrier()  # every thread's stores before the one release
    tl.atomic_add(arrivals_ptr, 1, sem="release", scope="gpu")
    seen = tl.load(arrivals_ptr, volatile=True)
    while seen < expected:
        seen = tl.load(arrivals_ptr, volatile=True)
    tl.atomic_add(arrivals_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@jit
def _gather_partials(partial_ptr, slot, num_chunks, MAX_CHUNKS: tl.constexpr, WAYS: tl.constexpr,
                     LANES: tl.constexpr):
    """[MAX_CHUNKS, LANES] int64: the first LANES (<= WAYS) of the chunks' WAYS partials in `slot` (0 past
    num_chunks), read past L1 (written by other programs of this launch)."""
    chunks = tl.arange(0, MAX_CHUNKS)
    ways = tl.arange(0, LANES)
    offsets = (slot * num_chunks + chunks[:, None]) * WAYS + ways[None, :]
    return tl.load(partial_ptr + offsets, mask=(chunks < num_chunks)[:, None], other=0, cache_modifier=".cg")


@jit
def _search_in_step(PHASE: tl.constexpr, lo, hi, normalizer, step, row_ptr, first, end, V, temperature, key_max, b64,
                    top_k_ptr, top_p_ptr, partial_ptr, arrivals_ptr, num_chunks, KEY_SHIFT: tl.constexpr,
                    FP64: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr, WAYS: tl.constexpr,
                    MAX_CHUNKS: tl.constexpr, WIDE_SUMS: tl.constexpr, FAST_MATH: tl.constexpr):
    """One search of filtered_one_launch_kernel (PHASE_TOP_K or PHASE_TOP_P) from the bracket [lo, hi):
    the steps of the search launches, each ending at a barrier. Returns (threshold key, hi,
    normaliser, slots used)."""
    ways = tl.arange(0, WAYS)
    first_step = step
    while hi - lo > 1:
        above = _chunk_above(row_ptr, first, end, V, lo, hi, temperature, key_max, PHASE, KEY_SHIFT, FP64, THREADS,
                             VEC, WAYS, WIDE_SUMS, FAST_MATH=FAST_MATH)
        tl.store(partial_ptr + (step * num_chunks + tl.program_id(1)) * WAYS + ways, above)
        _row_barrier(arrivals_ptr, (step + 1) * num_chunks)
        above = tl.sum(_gather_partials(partial_ptr, step, num_chunks, MAX_CHUNKS, WAYS, WAYS), axis=0)
        lo, hi, normalizer = _narrow(PHASE, lo, hi, above, normalizer, step == first_step, b64, top_k_ptr, top_p_ptr,
                                     WAYS)
        step += 1
    return lo, hi, normalizer, step


@jit
def filtered_one_launch_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 words (SEED_WORDS = 2)
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32, or one f32 for all rows (load_temperature)
    top_k_ptr,  # [B] i32|i64 (read when HAS_TOP_K)
    top_p_ptr,  # [B] f32 (read when HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read when HAS_MIN_P)
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): token -1, nothing read
    V,
    row_stride,
    num_blocks,  # sampling blocks of BLOCK_V columns per row
    partial_ptr,  # scratch [B, MAX_STEPS, num_chunks, WAYS] i64 as i32 words, a slot a barrier (slot 0 i32 [3, chunks])
    partial_score_ptr,  # scratch [B, num_blocks] f32 (FP64: f64 as pairs of f32 words)
    partial_index_ptr,  # scratch [B, num_blocks] i32
    arrivals_ptr,  # [B] i32 counters, zero on entry, left zero (with LIST > 0 [2 * B]: then the rows' list counts)
    block_max_ptr,  # scratch [B, num_blocks] i32 (LIST > 0): each block's largest finite key
    list_ptr,  # scratch [B, 2 * LIST] i32 (LIST > 0): the row's top-k candidate columns, then their keys
    tokens_ptr,  # [B] i32 output
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    CHUNK: tl.constexpr,  # columns a program searches and samples: a multiple of THREADS * VEC and of BLOCK_V
    BLOCK_V: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    WAYS: tl.constexpr,
    MAX_STEPS: tl.constexpr,  # slots: 2 + the most search steps
    MAX_CHUNKS: tl.constexpr,  # a power of two >= num_chunks
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= num_blocks
    WIDE_SUMS: tl.constexpr = False,
    SEED_WORDS: tl.constexpr = 1,
    LIST: tl.constexpr = 0,  # with top-k, the plan's SHORT_TOP_K_LIST (0: no lists)
    COLLECT_VEC: tl.constexpr = 1,  # columns a thread lists at once: a program's chunk in one or a few tiles
    TILE_BLOCKS: tl.constexpr = 1,  # blocks such a tile covers (1 when it is no wider than a block)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Every launch of the filtered plan in one, grid (B, num_chunks), for launches whose programs all
    run at once (the plan's condition; the interpreter: one program a row). The row's programs do the
    stats launch's and each search launch's work on their chunks, with a barrier of the row's programs
    (a counter) where the launches ended; every program then narrows the bracket from all chunks'
    partials, as _row_state does, so all take the same steps. Then each samples its blocks as
    filtered_partial_kernel does, and the last to arrive reduces the row as argmax_reduce_kernel does
    and resets the counter. Same integer sums, same searches, same scores: the same token.

    Before searching, step 0 also writes the chunks' unfiltered Gumbel-max partials, and step 1 the
    counts and masses that say whether the filters keep the unfiltered winner (_keeps_winner): where
    they surely do, the winner is the token (the same scores, fewer candidates) and the row skips
    the search and the second sampling pass.

    With LIST > 0, a row whose top-k is active with k <= LIST and whose k-th largest block maximum is
    above its smallest key (_kth_largest_block_key: a lower bound of top-k's threshold) takes no
    winner's sums: step 1 lists its columns whose key is at or above that bound, as
    filter_winner_sums_kernel does, and every program then finds the thresholds, and where the winner
    is dropped the token, from the list, as filter_decide_kernel does (_list_decision: the same list,
    the same thresholds and token), with no search and no sampling pass. A list that overflows leaves
    the row to the searches, from the bound.

    Compile time (issue 39: a first call in seconds) shapes this kernel: lists of at most
    SHORT_TOP_K_LIST slots, decided by searches over their keys rather than sorts (as is the k-th
    largest block maximum)."""
    V = aligned(V, VOCAB_ALIGN)
    b = tl.program_id(0)
    c = tl.program_id(1)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):  # padding: no barrier, no arrival (its counters stay zero)
            if c == 0:
                tl.store(tokens_ptr + b, -1)
            return
    num_chunks = tl.num_programs(1)
    b64 = b.to(tl.int64)
    temperature = load_temperature(temperature_ptr, b)
    row_ptr = logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN)
    arrivals = arrivals_ptr + b
    list_count = arrivals_ptr + tl.num_programs(0) + b  # (LIST > 0) how many candidates the row listed
    partials = partial_ptr.to(tl.pointer_type(tl.int64)) + b64 * (MAX_STEPS * num_chunks * WAYS)
    first = c * CHUNK
    end = tl.minimum(first + CHUNK, V)
    ways = tl.arange(0, WAYS)
    seed = load_seed(seeds_ptr, b, SEED_WORDS)
    position = tl.load(positions_ptr + b).to(tl.int64)
    # step 0: the chunk's unfiltered Gumbel-max partials (gumbel_sample's, stream 0), and its stats from
    # the same loads (the chunk is whole blocks)
    largest = tl.full([], float("-inf"), tl.float32)
    smallest = tl.full([], float("inf"), tl.float32)
    chunk_count = tl.zeros([], tl.int32)
    block = first // BLOCK_V
    while block * BLOCK_V < end:
        x = store_sampled_block(logits_ptr, b, row_stride, V, block * BLOCK_V, seed, position, temperature,
                                partial_score_ptr, partial_index_ptr, b64 * num_blocks + block, 0, BLOCK_V, ROW_ALIGN,
                                FP64, FAST_MATH)
        block_largest, block_smallest, block_count = _finite_extremes(x)
        if LIST > 0:
            tl.store(block_max_ptr + b64 * num_blocks + block,
                     _extreme_keys(block_largest, block_smallest, block_count, KEY_SHIFT)[0])
        largest = tl.maximum(largest, block_largest)
        smallest = tl.minimum(smallest, block_smallest)
        chunk_count += block_count
        block += 1
    # slot 0 as int32 words [3, num_chunks]: the chunks' largest keys, smallest keys and counts (three
    # short vectors to reduce: a [chunks, WAYS] int64 gather of them took most of the barrier's step)
    stats_ptr = partials.to(tl.pointer_type(tl.int32))
    chunk_max, chunk_min = _extreme_keys(largest, smallest, chunk_count, KEY_SHIFT)
    lanes = tl.arange(0, 4)
    tl.store(stats_ptr + lanes * num_chunks + c,
             tl.where(lanes == 0, chunk_max, tl.where(lanes == 1, chunk_min, chunk_count)), mask=lanes < 3)
    _row_barrier(arrivals, num_chunks)
    chunks = tl.arange(0, MAX_CHUNKS)
    in_row = chunks < num_chunks
    chunk_maxes = tl.load(stats_ptr + chunks, mask=in_row, other=-(2**31), cache_modifier=".cg")
    chunk_mins = tl.load(stats_ptr + num_chunks + chunks, mask=in_row, other=2**31 - 1, cache_modifier=".cg")
    chunk_counts = tl.load(stats_ptr + 2 * num_chunks + chunks, mask=in_row, other=0, cache_modifier=".cg")
    if LIST > 0:  # loaded with the stats, not after the winner's logit: one latency less
        blocks = tl.arange(0, REDUCE_BLOCK)
        block_max = tl.load(block_max_ptr + b64 * num_blocks + blocks, mask=blocks < num_blocks, other=-(2**31),
                            cache_modifier=".cg")
    key_max = tl.max(chunk_maxes, axis=0).to(tl.int64)
    count = tl.sum(chunk_counts, axis=0).to(tl.int64)
    key_min = tl.min(chunk_mins, axis=0).to(tl.int64)
    winner, overflow = reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, b, num_blocks, FP64,
                                                 REDUCE_BLOCK, True)
    step = b * 0 + 1  # barriers passed (a tensor: branches below change it)
    # The unfiltered winner, when the filters keep it, is the filtered token (the same scores, fewer
    # candidates). Greedy rows, rows that overflow and rows without a finite logit are not filtered.
    run = _filtered_row(temperature, count) & ~overflow
    kept = step == 1
    key_w = b * 0
    above_winner = count * 0  # the winner's sums (step 2 only): they also bound the searches
    mass_all = count * 0
    summed = kept & False  # the winner's sums were taken
    listed = kept & False  # the row listed its top-k candidates
    settled = kept & False  # and found its thresholds (and, the winner dropped, its token) from it
    bound = key_min  # with a list: the lower bound of top-k's threshold
    k = count * 0
    listed_token = winner  # with a settled list and the winner dropped: the token (_list_decision)
    if run:
        x_w = tl.load(row_ptr + tl.maximum(winner, 0)).to(tl.float32)
        key_w = _key(x_w, KEY_SHIFT)
        if HAS_MIN_P:
            kept = _relative_probability(x_w, temperature, key_max, KEY_SHIFT, FP64) >= _min_p(min_p_ptr, b64)
        if LIST > 0:
            k, top_k_active = _top_k(top_k_ptr, b64, count)
            if top_k_active & (k <= LIST) & (~kept | (key_w < key_max)):
                bound = _kth_largest_block_key(block_max, k, key_min, False)
                listed = bound > key_min  # (at key_min every finite key would be a candidate)
        if listed:
            if LIST > 0:  # (the compiler drops the lists without LIST)
                # step 1: the keys >= bound, listed; then every program decides from the same list
                _collect_candidates(row_ptr, first, end, V, bound.to(tl.int32), list_ptr + b64 * (2 * LIST),
                                    list_count, KEY_SHIFT, THREADS, COLLECT_VEC, block_max_ptr + b64 * num_blocks,
                                    num_blocks, BLOCK_V, TILE_BLOCKS, LIST)
                _row_barrier(arrivals, 2 * num_chunks)
                step = 2
                listed_count = tl.atomic_add(list_count, 0, sem="relaxed", scope="gpu")
                if listed_count <= LIST:
                    threshold, listed_token = _list_decision(
                        list_ptr + b64 * (2 * LIST), listed_count, k, key_max, key_w, kept, seed, position,
                        temperature, top_p_ptr, min_p_ptr, b64, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64, FAST_MATH,
                        LIST, LIST, True, False)
                    settled = listed
                    kept = listed_token < 0
                else:  # no sums were taken: the search decides, and the kept set is sampled
                    kept = kept & False
        elif HAS_TOP_K or HAS_TOP_P:
            # step 1: the counts and masses that decide whether top-k and top-p keep the winner (a winner at
            # the largest logit they always keep)
            summed = kept & (key_w < key_max)
            if summed:
                sums = _chunk_winner_sums(row_ptr, first, end, V, key_w, temperature, key_max, KEY_SHIFT, FP64, THREADS,
                                          VEC, WAYS, WIDE_SUMS, HAS_TOP_P, HAS_TOP_K, FAST_MATH=FAST_MATH)
                tl.store(partials + (num_chunks + c) * WAYS + ways, sums)
                _row_barrier(arrivals, 2 * num_chunks)
                # lanes 0-3 only (_chunk_winner_sums leaves the others 0)
                sums = tl.sum(_gather_partials(partials, 1, num_chunks, MAX_CHUNKS, WAYS, 4), axis=0)
                step = 2
                kept = _keeps_winner(sums, key_w, key_max, count, b64, top_k_ptr, top_p_ptr, HAS_TOP_K, HAS_TOP_P, 4)
                above_winner = tl.sum(tl.where(lanes == 0, sums, 0), axis=0)
                mass_all = tl.sum(tl.where(lanes == 3, sums, 0), axis=0)
    if run & ~kept & ~settled:  # (a settled row's token is its listed_token)
        normalizer = count * 0
        lo = key_min
        if HAS_TOP_K:
            lo, hi = _start_search(_TOP_K, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
            if summed:
                lo, hi, normalizer = _winner_bracket(_TOP_K, lo, hi, normalizer, key_w, above_winner, mass_all,
                                                     b64, top_k_ptr, False)
            if listed:  # its list overflowed: search from the bound
                lo = tl.maximum(lo, bound)
            lo, hi, normalizer, step = _search_in_step(_TOP_K, lo, hi, normalizer, step, row_ptr, first, end, V,
                                                       temperature, key_max, b64, top_k_ptr, top_p_ptr, partials,
                                                       arrivals, num_chunks, KEY_SHIFT, FP64, THREADS, VEC, WAYS,
                                                       MAX_CHUNKS, WIDE_SUMS, FAST_MATH)
        if HAS_TOP_P:
            lo, hi = _start_search(_TOP_P, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
            if summed:
                lo, hi, normalizer = _winner_bracket(_TOP_P, lo, hi, normalizer, key_w, above_winner, mass_all,
                                                     b64, top_k_ptr, not HAS_TOP_K)
            lo, hi, normalizer, step = _search_in_step(_TOP_P, lo, hi, normalizer, step, row_ptr, first, end, V,
                                                       temperature, key_max, b64, top_k_ptr, top_p_ptr, partials,
                                                       arrivals, num_chunks, KEY_SHIFT, FP64, THREADS, VEC, WAYS,
                                                       MAX_CHUNKS, WIDE_SUMS, FAST_MATH)
        if step == 1:  # no barrier since the unfiltered partials were read: one before overwriting them
            _row_barrier(arrivals, 2 * num_chunks)
            step += 1
        block = first // BLOCK_V
        while block * BLOCK_V < end:
            store_filtered_block(logits_ptr, b64, row_stride, V, block * BLOCK_V, seed, position, temperature,
                                 min_p_ptr, key_max, count, lo, partial_score_ptr, partial_index_ptr,
                                 b64 * num_blocks + block, HAS_MIN_P, KEY_SHIFT, FP64, BLOCK_V, ROW_ALIGN, FAST_MATH)
            block += 1
    tl.debug_barrier()  # every thread's stores before the one release
    if tl.atomic_add(arrivals, 1, sem="acq_rel", scope="gpu") == (step + 1) * num_chunks - 1:
        token = winner
        if run & ~kept:
            if settled:
                token = listed_token
            else:
                token, overflow = reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, b, num_blocks, FP64,
                                                            REDUCE_BLOCK, True)
        if overflow:
            token = greedy_argmax_row(row_ptr, V, 1024)
        tl.store(tokens_ptr + b, token)
        tl.atomic_xchg(arrivals, 0, sem="relaxed", scope="gpu")
        if LIST > 0:  # every program of the row has read it
            tl.atomic_xchg(list_count, 0, sem="relaxed", scope="gpu")
