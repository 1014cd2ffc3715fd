"""The threshold searches and a row's search state, shared by the launches' plan and the one-launch kernel.

A threshold is a key: top-k's the largest key with at least k finite logits at or above it, top-p's the
smallest kept key whose strictly larger kept logits weigh less than p times the kept mass. A search keeps a
bracket [lo, hi) holding it and narrows it by the count (or mass) of the keys at or above pivots
(`_pivots`, `_narrow`, `_advance_state`); top-k's candidate lists decide both thresholds from the listed keys
(`_list_decision`: a sort for short lists, a pivot search for long ones); 16-bit top-p brackets start from a
histogram of their top keys (`_chunk_histogram`, `_histogram_bracket`); the unfiltered winner's sums
(`_chunk_winner_sums`, `_keeps_winner`) settle rows whose winner the filters keep. Every step is exact (integer
counts and masses, exact comparisons), so every route gives the same threshold.
"""

import triton.language as tl

from jsample.kernels.common import load_temperature, noisy_scores
from jsample.kernels.host import jit
from jsample.kernels.stream import gumbel_noise, uniform_at
from jsample.kernels.filtered.config import (
    MAX_CHUNKS,
    SORTED_SLOTS,
    _CHECK,
    _DECIDED,
    _DONE,
    _FILTER,
    _SAMPLE,
    _STATE_WORDS,
    _TOP_K,
    _TOP_P,
    _WINNER,
)
from jsample.kernels.filtered.keys import (
    _filtered_row,
    _fixed_point_mass,
    _kept_columns,
    _key,
    _key_value,
    _tile_logits,
    _tile_max_key,
)

@jit
def _chunk_above(row_ptr, first, end, V, lo, hi, temperature, key_max, PHASE: tl.constexpr, KEY_SHIFT: tl.constexpr,
                 FP64: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr, WAYS: tl.constexpr,
                 WIDE_SUMS: tl.constexpr, block_stats_ptr=None, num_blocks=0, BLOCK_V: tl.constexpr = 0,
                 TILE_BLOCKS: tl.constexpr = 1, MIXED: tl.constexpr = False, FAST_MATH: tl.constexpr = False):
    """[WAYS] int64: the count (PHASE_TOP_K) or fixed-point mass (PHASE_TOP_P) of the keys in columns
    [first, end) that are >= each pivot (_pivots). With BLOCK_V (the launches' plan:
    filter_stats_kernel's block statistics of the row at `block_stats_ptr`), tiles whose largest key is
    below lo add nothing and are skipped unread."""
    ways = tl.arange(0, WAYS)
    pivot_values = _key_value(_pivots(lo, hi, KEY_SHIFT, WAYS, MIXED).to(tl.int32), KEY_SHIFT)[:, None, None]
    # per-thread accumulators, reduced once at the end (a reduction per tile cost a shuffle tree per
    # tile: 2 ms at B = 256 on an H200); int32: a thread adds at most MAX_COLUMNS_PER_THREAD counts,
    # or masses <= 2**24 (longer chunks: int64, WIDE_SUMS)
    above = tl.zeros([WAYS, THREADS], tl.int64 if WIDE_SUMS else tl.int32)
    start = first
    while start < end:
        relevant = True
        if BLOCK_V > 0:
            relevant = _tile_max_key(block_stats_ptr, start, num_blocks, BLOCK_V, TILE_BLOCKS) >= lo
        if relevant:
            x = _tile_logits(row_ptr, start, V, THREADS, VEC)
            if PHASE == _TOP_K:  # +inf is not counted (its key is below every pivot)
                x = tl.where(x < float("inf"), x, float("-inf"))
            is_above = x[None, :, :] >= pivot_values  # key(x) >= pivot (_tile_logits)
            if PHASE == _TOP_K:
                above += tl.sum(is_above.to(tl.int32), axis=1)
            else:
                mass = _fixed_point_mass(x, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH)
                above += tl.sum(tl.where(is_above, mass[None, :, :], 0), axis=1).to(above.dtype)
        start += THREADS * VEC
    return tl.sum(above.to(tl.int64), axis=1)


@jit
def _program_items(state_ptr, items_per_row, total, ITEMS: tl.constexpr):
    """This program's work items, `ITEMS` of the launch's `total` (items_per_row a row), as (their ids,
    their rows' statuses: STATUS_DONE past the end): program p takes p, p + P, p + 2P... (P programs),
    so that a row's items run side by side; the statuses are read at once, so an item whose row is
    done costs no wait of its own."""
    items = tl.program_id(0) + tl.arange(0, ITEMS) * tl.num_programs(0)
    rows = (items // items_per_row).to(tl.int64)
    status = tl.load(state_ptr.to(tl.pointer_type(tl.int64)) + rows * _STATE_WORDS + 7, mask=items < total,
                     other=_DONE)
    return items, status


@jit
def _item_status(items, status, i, ITEMS: tl.constexpr):
    """Item i of _program_items (its id, its row's status)."""
    lanes = tl.arange(0, ITEMS)
    return tl.sum(tl.where(lanes == i, items, 0), axis=0), tl.sum(tl.where(lanes == i, status, 0), axis=0)


@jit
def _top_k(top_k_ptr, b64, count):
    """(row b64's k as int64, whether its top-k filters: 1 <= k < count, the row's finite logits; any
    other k keeps them all)."""
    k = tl.load(top_k_ptr + b64).to(tl.int64)
    return k, (k >= 1) & (k < count)


@jit
def _start_search(phase: tl.constexpr, b64, lo0, key_max, count, temperature, top_k_ptr, top_p_ptr):
    """The first bracket [lo, hi) of a search: the threshold key is in [lo, hi - 1]; hi = lo + 1
    means settled (threshold lo). lo0: the lowest key still kept (the previous threshold)."""
    run = _filtered_row(temperature, count)
    if phase == _TOP_K:
        _, top_k_active = _top_k(top_k_ptr, b64, count)
        active = run & top_k_active
        lo = lo0
    else:
        p = tl.load(top_p_ptr + b64)
        active = run & (p > 0) & (p < 1)
        lo = tl.where(run & (p <= 0), key_max, lo0)  # p <= 0 keeps the largest logit only
    return lo, tl.where(active, key_max + 1, lo + 1)


@jit
def _pivots(lo, hi, KEY_SHIFT: tl.constexpr, WAYS: tl.constexpr, MIXED: tl.constexpr):
    """[WAYS] int64 pivots in the bracket [lo, hi), lane 0 at lo: lo + (hi - lo) * i // WAYS; with MIXED
    (a search's first launch at large batches), the even lanes at lo + (hi - lo) * j // (WAYS / 2) and
    the odd ones where the logits' values split [value of lo, value of hi - 1] evenly. Key-uniform
    pivots of a bracket that spans binades (or zero) mostly fall among the keys of tiny values, where
    few logits are; the value pivots land where the logits are, and the key-uniform half still
    narrows the bracket WAYS / 2-fold, which the plan's search steps allow for (mixed_first_pivots).
    The pivots only choose the path: every bracket holds the same threshold."""
    ways = tl.arange(0, WAYS)
    if MIXED:
        half: tl.constexpr = WAYS // 2
        j = ways // 2
        uniform = lo + ((hi - lo) * j) // half
        fraction = (j.to(tl.float32) + 0.5) / half
        value = _key_value(lo, KEY_SHIFT) * (1.0 - fraction) + _key_value(hi - 1, KEY_SHIFT) * fraction
        by_value = tl.minimum(tl.maximum(_key(value, KEY_SHIFT).to(tl.int64), lo), hi - 1)
        return tl.where(ways % 2 == 0, uniform, by_value)
    return lo + ((hi - lo) * ways) // WAYS


@jit
def _narrow(PHASE: tl.constexpr, lo, hi, above, normalizer, capture_normalizer, b64, top_k_ptr, top_p_ptr,
            WAYS: tl.constexpr, KEY_SHIFT: tl.constexpr = 0, MIXED: tl.constexpr = False):
    """The bracket [lo, hi) narrowed by `above` [WAYS], the row's count (top-k) or mass (top-p) of the
    keys >= each pivot (_pivots, MIXED as the launch that summed them); with `capture_normalizer` (the
    first top-p step: pivot 0 is the previous threshold), the mass of all kept tokens is `above[0]`.
    Returns (lo, hi, normaliser)."""
    ways = tl.arange(0, WAYS)
    pivots = _pivots(lo, hi, KEY_SHIFT, WAYS, MIXED)
    if PHASE == _TOP_K:
        below_limit = above < tl.load(top_k_ptr + b64).to(tl.int64)
    else:
        # (a normaliser already known, from the winner's sums, stays)
        normalizer = tl.where(capture_normalizer & (normalizer == 0), tl.sum(tl.where(ways == 0, above, 0), axis=0),
                              normalizer)
        limit = tl.load(top_p_ptr + b64).to(tl.float64) * normalizer.to(tl.float64)
        below_limit = above.to(tl.float64) < limit
    below_limit = below_limit & (ways > 0)  # lo itself is above the limit by construction
    lo_next = tl.max(tl.where(below_limit, lo, pivots), axis=0)
    hi_next = tl.min(tl.where(below_limit, pivots, hi), axis=0)
    return lo_next, hi_next, normalizer


@jit
def _row_state(b64, state_ptr, partial_ptr, num_chunks, temperature, top_k_ptr, top_p_ptr,
               PHASE: tl.constexpr, PREV_PHASE: tl.constexpr, HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr,
               WAYS: tl.constexpr, MAX_CHUNKS: tl.constexpr, KEY_SHIFT: tl.constexpr = 0,
               NARROW_MIXED: tl.constexpr = False):
    """The row's state for a PHASE launch (NARROW_MIXED: the previous launch's pivots were _pivots'
    mixed ones): the previous launch's state advanced by its partials (_advance_state), or after a
    launch that set the bracket (PREV_PHASE_DECIDED: the decide and histogram-bracket launches) its
    state as it is. Returns (key max, key min, finite count, lo, hi, top-p normaliser, winner key,
    status)."""
    key_max, key_min, count, lo, hi, normalizer, key_w, status = _load_state(state_ptr, b64)
    if PREV_PHASE != _DECIDED:
        key_max, key_min, count, lo, hi, normalizer, key_w, status = _advance_state(
            b64, key_max, key_min, count, lo, hi, normalizer, key_w, status, partial_ptr, num_chunks, temperature,
            top_k_ptr, top_p_ptr, PHASE, PREV_PHASE, HAS_TOP_K, HAS_TOP_P, WAYS, MAX_CHUNKS, KEY_SHIFT, NARROW_MIXED)
    return key_max, key_min, count, lo, hi, normalizer, key_w, status


@jit
def _advance_state(b64, key_max, key_min, count, lo, hi, normalizer, key_w, status, partial_ptr, num_chunks,
                   temperature, top_k_ptr, top_p_ptr, PHASE: tl.constexpr, PREV_PHASE: tl.constexpr,
                   HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, WAYS: tl.constexpr, MAX_CHUNKS: tl.constexpr,
                   KEY_SHIFT: tl.constexpr, NARROW_MIXED: tl.constexpr):
    """A row's state (key max, ..., status) for a PHASE launch, advanced by the partials of the PREV_PHASE
    launch before it: after the winner's sums, whether top-k and top-p keep the unfiltered winner (and
    the first search's bracket); after a search launch, its bracket narrowed by its pivots' sums."""
    chunks = tl.arange(0, MAX_CHUNKS)
    ways = tl.arange(0, WAYS)
    in_row = chunks < num_chunks
    partials = partial_ptr.to(tl.pointer_type(tl.int64)) + (b64 * num_chunks + chunks) * WAYS
    checked = status == _CHECK  # the winner launch summed the counts above the winner
    above_winner = count * 0
    mass_all = count * 0
    if PREV_PHASE == _WINNER:
        if checked:
            sums = tl.sum(tl.load(partials[:, None] + ways[None, :], mask=in_row[:, None], other=0), axis=0)
            kept = _keeps_winner(sums, key_w, key_max, count, b64, top_k_ptr, top_p_ptr, HAS_TOP_K, HAS_TOP_P, WAYS)
            status = tl.where(kept, _DONE, _FILTER).to(tl.int64)
            above_winner = tl.sum(tl.where(ways == 0, sums, 0), axis=0)
            mass_all = tl.sum(tl.where(ways == 3, sums, 0), axis=0)
    elif hi - lo > 1:  # the previous launch evaluated its pivots: narrow the bracket
        above = tl.sum(tl.load(partials[:, None] + ways[None, :], mask=in_row[:, None], other=0), axis=0)
        # a top-p normaliser still unknown (0: no winner's sums, no histogram) is the first top-p launch's
        # pivot 0, the search's start; a known one (>= 2**24, the largest key's mass) stays
        lo, hi, normalizer = _narrow(PREV_PHASE, lo, hi, above, normalizer, True, b64, top_k_ptr, top_p_ptr, WAYS,
                                     KEY_SHIFT, NARROW_MIXED)
    if PHASE != PREV_PHASE:
        if PHASE != _SAMPLE:
            if status == _FILTER:
                # a new search starts at the previous threshold (hi - lo == 1: every search is settled)
                lo, hi = _start_search(PHASE, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
                if PREV_PHASE == _WINNER:
                    if checked:  # top-p follows the winner launch only without top-k
                        lo, hi, normalizer = _winner_bracket(PHASE, lo, hi, normalizer, key_w, above_winner, mass_all,
                                                             b64, top_k_ptr, PHASE == _TOP_P)
    return key_max, key_min, count, lo, hi, normalizer, key_w, status


@jit
def _winner_bracket(PHASE: tl.constexpr, lo, hi, normalizer, key_w, above_winner, mass_all, b64, top_k_ptr,
                    TOP_P_ALONE: tl.constexpr):
    """A search's first bracket [lo, hi) narrowed by the unfiltered winner's sums (above_winner: the
    count of keys above its key; mass_all: all the fixed-point mass), for a row whose winner the
    filters drop: the same threshold, found in fewer steps. Top-k: its threshold (the largest key t
    with count(keys >= t) >= k) is above the winner's key iff k keys or more exceed it, else at or
    below it. Top-p without top-k (TOP_P_ALONE: _keeps_winner is then exact, so top-p dropped it):
    the mass above the winner reaches the limit, so the threshold is above its key, and the search's
    normaliser, all the mass, is the sums' (_narrow then captures none). Returns (lo, hi, normaliser)."""
    key_w = key_w.to(tl.int64)
    if hi - lo > 1:
        if PHASE == _TOP_K:
            k = tl.load(top_k_ptr + b64).to(tl.int64)
            lo = tl.where(above_winner >= k, tl.maximum(lo, key_w + 1), lo)
            hi = tl.where(above_winner < k, tl.minimum(hi, key_w + 1), hi)
        elif TOP_P_ALONE:
            lo = key_w + 1
            normalizer = mass_all
    return lo, hi, normalizer


@jit
def _load_state(state_ptr, b64):
    """Row b64's state (_store_state's words): (key max, key min, finite count, lo, hi, top-p
    normaliser, winner key, status)."""
    state = state_ptr.to(tl.pointer_type(tl.int64)) + b64 * _STATE_WORDS
    return (tl.load(state), tl.load(state + 1), tl.load(state + 2), tl.load(state + 3), tl.load(state + 4),
            tl.load(state + 5), tl.load(state + 6), tl.load(state + 7))


@jit
def _store_state(state_ptr, b64, key_max, key_min, count, lo, hi, normalizer, key_w, status):
    state = state_ptr.to(tl.pointer_type(tl.int64)) + b64 * _STATE_WORDS
    words = tl.arange(0, _STATE_WORDS)
    values = tl.where(words == 0, key_max, tl.where(words == 1, key_min, tl.where(words == 2, count, key_w)))
    values = tl.where(words == 3, lo, tl.where(words == 4, hi, tl.where(words == 5, normalizer, values)))
    tl.store(state + words, tl.where(words == 7, status, values))


@jit
def _largest_reaching(keys, weights, need, lo, hi, WAYS: tl.constexpr):
    """The largest t in [lo, hi] such that the `weights` of the `keys` >= t sum to at least `need`
    (lo when no t above lo does): a search of WAYS pivots a step, each step one reduction. It stands
    where a sort of the long lists' LIST keys stood: the same key, and a far smaller kernel to compile
    (issue 39: the sort of 1024 keys was about 3 s of a first call). (Every key's reach at once, one [n, n]
    reduction for n <= 128, measured slower to run and to compile: lab INDEX.)"""
    ways = tl.arange(0, WAYS).to(tl.int64)
    lo = lo.to(tl.int64)
    hi = hi.to(tl.int64)
    while lo < hi:
        pivots = lo + 1 + (ways * (hi - lo)) // WAYS  # non-decreasing, in (lo, hi]
        reach = tl.sum(tl.where(keys[:, None] >= pivots[None, :], weights[:, None], 0), axis=0)
        reaches = reach >= need  # true on a prefix of the pivots
        lo = tl.max(tl.where(reaches, pivots, lo), axis=0)
        hi = tl.min(tl.where(reaches, hi, pivots - 1), axis=0)
    return lo


@jit
def _kth_largest_block_key(block_max, k, lo, SORT: tl.constexpr = True):
    """The largest key t in [lo, key_max] that at least k of the blocks' largest keys `block_max`
    reach (lo if fewer do): a lower bound of top-k's threshold, since those blocks hold k keys >= t
    (and its search skips the tiles below it). That t is the k-th largest block maximum (with
    multiplicity), or lo above it. With SORT, one sort, where a bisection over the keys took a
    reduction a step (lab INDEX; a search of 4 pivots a step measured 4-7% slower on float32 top-k at
    B = 64-256); without, a search of 16 pivots a step between the smallest and largest block maxima
    (the one-launch kernel: a far smaller kernel to compile, issue 39)."""
    if SORT:
        ranks = tl.arange(0, block_max.shape[0])
        kth = tl.max(tl.where(ranks == k - 1, tl.sort(block_max, descending=True), -(2**31)), axis=0)
    else:
        # (-2**31: padding and blocks without a finite logit; they reach only -2**31)
        finite = block_max > -(2**31)
        lowest = tl.min(tl.where(finite, block_max, 2**31 - 1), axis=0)
        kth = _largest_reaching(block_max, finite.to(tl.int32), k, lowest, tl.max(block_max, axis=0), 16)
        kth = tl.where(tl.sum(finite.to(tl.int32), axis=0) >= k, kth, -(2**31))
    # -2**31: fewer than k blocks with a finite logit (or k beyond the blocks): lo
    return tl.where(kth > -(2**31), tl.maximum(lo, kth.to(tl.int64)), lo)


@jit
def _listed(top_k_ptr, b64, count, lo, key_min, LIST: tl.constexpr):
    """(row b64's k, whether the row lists its top-k candidates: top-k filters it, k <= LIST, and its
    search starts at a bound above the floor (lo > key_min: k blocks have a finite logit,
    _kth_largest_block_key), without which every finite key would be a candidate)."""
    k, top_k_active = _top_k(top_k_ptr, b64, count)
    return k, top_k_active & (k <= LIST) & (lo > key_min)


@jit
def _collect_candidates(row_ptr, first, end, V, lo, list_ptr, count_ptr, KEY_SHIFT: tl.constexpr,
                        THREADS: tl.constexpr, VEC: tl.constexpr, block_stats_ptr, num_blocks, BLOCK_V: tl.constexpr,
                        TILE_BLOCKS: tl.constexpr, LIST: tl.constexpr):
    """Appends the columns in [first, end) whose logit is finite with a key >= lo to the row's candidate
    list at `list_ptr` (their keys LIST slots further: the list's readers need no load of the logits): a
    tile adds its count to the row's at `count_ptr` (one atomic), which gives its columns their slots
    (slots from LIST on are counted, not stored). Tiles whose largest key is below lo hold none and
    are skipped unread."""
    lo_value = _key_value(lo, KEY_SHIFT)
    start = first
    while start < end:
        if _tile_max_key(block_stats_ptr, start, num_blocks, BLOCK_V, TILE_BLOCKS) >= lo:
            x = _tile_logits(row_ptr, start, V, THREADS, VEC)
            take = tl.reshape(((x >= lo_value) & (x < float("inf"))).to(tl.int32), [VEC * THREADS])  # key >= lo, finite
            taken = tl.sum(take, axis=0)
            if taken > 0:
                base = tl.atomic_add(count_ptr, taken, sem="relaxed")
                if base < LIST:
                    slots = base + tl.cumsum(take, 0) - take
                    cols = start + tl.arange(0, VEC)[:, None] + tl.arange(0, THREADS)[None, :] * VEC  # _tile_logits'
                    stored = (take > 0) & (slots < LIST)
                    tl.store(list_ptr + slots, tl.reshape(cols, [VEC * THREADS]), mask=stored)
                    tl.store(list_ptr + LIST + slots, tl.reshape(_key(x, KEY_SHIFT), [VEC * THREADS]), mask=stored)
        start += THREADS * VEC


@jit
def _list_decision(list_ptr, listed_count, k, key_max, key_w, winner_may_stay, seed, position, temperature,
                   top_p_ptr, min_p_ptr, b64, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr,
                   KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, FAST_MATH: tl.constexpr, SLOTS: tl.constexpr,
                   LIST: tl.constexpr, PAST_L1: tl.constexpr, SORT: tl.constexpr = True):
    """(threshold key, token) of a row from the first `listed_count` (<= SLOTS) columns of its candidate
    list (and their keys, LIST slots further): the threshold is top-k's, then, with HAS_TOP_P, top-p's
    after it (filter_decide_kernel); the token is -1 where the unfiltered winner is kept
    (`winner_may_stay`: min-p keeps it, and its key reaches the threshold), else _list_token's. PAST_L1:
    other programs of this launch wrote the list."""
    slots = tl.arange(0, SLOTS)
    in_list = slots < listed_count
    if PAST_L1:
        cols = tl.load(list_ptr + slots, mask=in_list, other=0, cache_modifier=".cg")
        listed_keys = tl.load(list_ptr + LIST + slots, mask=in_list, other=-(2**31), cache_modifier=".cg")
    else:
        cols = tl.load(list_ptr + slots, mask=in_list, other=0)
        listed_keys = tl.load(list_ptr + LIST + slots, mask=in_list, other=-(2**31))
    # a listed logit is its key's value (_tile_logits: the only finite value of the dtype with that key;
    # -0.0 comes back as +0.0, which scores the same)
    x32 = tl.where(in_list, _key_value(listed_keys, KEY_SHIFT), float("-inf"))
    if SORT and SLOTS <= SORTED_SLOTS:  # the short lists (most rows): one sort, the fastest at run time
        keys = tl.sort(listed_keys, descending=True)
        threshold = tl.sum(tl.where(slots == tl.minimum(k, listed_count) - 1, keys, 0), axis=0).to(tl.int64)
        if HAS_TOP_P:
            p = tl.load(top_p_ptr + b64)
            kept = in_list & (keys >= threshold)
            mass = tl.where(kept, _fixed_point_mass(_key_value(keys, KEY_SHIFT), temperature, key_max, KEY_SHIFT,
                                                    FP64, FAST_MATH), 0).to(tl.int64)
            limit = p.to(tl.float64) * tl.sum(mass, axis=0).to(tl.float64)
            # the kept keys (a prefix) up to the first whose running sum reaches the limit, which every
            # kept key after it also reaches (masses >= 0; it exists for 0 < p < 1: the sum of them all
            # is above the limit): the smallest of them is its key
            before = tl.cumsum(mass, 0) - mass  # the mass of the keys ahead of each
            short = kept & (before.to(tl.float64) < limit)
            top_p_threshold = tl.min(tl.where(short, keys, 2**31 - 1), axis=0).to(tl.int64)
            threshold = tl.where((p > 0) & (p < 1), top_p_threshold, threshold)
            threshold = tl.where(p <= 0, key_max, threshold)  # p <= 0 keeps the largest logit only
    else:  # the long lists (rare): searches over the keys, no sort of LIST slots (8 s of a first call's compile)
        # top-k's threshold: the min(k, listed_count)-th largest listed key (with multiplicity)
        lowest = tl.min(tl.where(in_list, listed_keys, 2**31 - 1), axis=0)  # every listed key reaches it
        need = tl.minimum(k, listed_count)
        # 2048 // SLOTS pivots a step: [SLOTS, pivots] values in registers, no spills
        threshold = _largest_reaching(listed_keys, in_list.to(tl.int32), need, lowest, key_max, 2048 // SLOTS)
        threshold = tl.where(need >= 1, threshold, 0)  # (a listed row has k >= 1 keys)
        if HAS_TOP_P:
            p = tl.load(top_p_ptr + b64)
            kept = in_list & (listed_keys >= threshold)
            mass = tl.where(kept, _fixed_point_mass(x32, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH),
                            0).to(tl.int64)
            limit = p.to(tl.float64) * tl.sum(mass, axis=0).to(tl.float64)
            # the smallest kept key t whose kept keys above it weigh < limit (it exists for 0 < p < 1: the
            # largest key has none above it): u, the largest key whose keys at or above it weigh >= limit
            # (the threshold's do), has those above it weigh less, and t is the smallest kept key >= u
            u = _largest_reaching(listed_keys, mass, limit, threshold, key_max, 2048 // SLOTS)
            top_p_threshold = tl.min(tl.where(kept & (listed_keys >= u), listed_keys, 2**31 - 1),
                                     axis=0).to(tl.int64)
            threshold = tl.where((p > 0) & (p < 1), top_p_threshold, threshold)
            threshold = tl.where(p <= 0, key_max, threshold)  # p <= 0 keeps the largest logit only
    token = (threshold * 0 - 1).to(tl.int32)
    if ~(winner_may_stay & (key_w >= threshold)):
        token = _list_token(cols, x32, in_list, threshold, seed, position, temperature, key_max, min_p_ptr, b64,
                            HAS_MIN_P, KEY_SHIFT, FP64, FAST_MATH)
    return threshold, token


@jit
def _list_token(cols, x32, in_list, threshold, seed, position, temperature, key_max, min_p_ptr, b64,
                HAS_MIN_P: tl.constexpr, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """The token of a filtered row (not greedy, not overflowing) whose kept set lies in its candidate list
    (`cols`, their FP32 logits `x32`, where `in_list`): the Gumbel-max of the columns the filters keep
    (_kept_columns), scored as store_filtered_block scores them (the same noise, uniform_at's, the same
    noisy_scores), the lowest column on ties: the sampling launches' token, whose other columns the
    filters drop, without reading the row."""
    keep = in_list & _kept_columns(x32, threshold, temperature, key_max, min_p_ptr, b64, HAS_MIN_P, KEY_SHIFT, FP64)
    x = x32
    if FP64:
        x = x32.to(tl.float64)
    x = tl.where(keep, x, float("-inf"))
    noise = gumbel_noise(uniform_at(seed, position, cols, 0, FP64, FAST_MATH), FP64, FAST_MATH)
    score, best, _ = noisy_scores(x, noise, temperature, FP64, FAST_MATH, x, False)
    return tl.min(tl.where(score == best, cols, 2**31 - 1), axis=0)


@jit
def _search_item(b, c, logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, state_in_ptr, partial_in_ptr,
                 block_stats_ptr, V, row_stride, num_chunks, chunk, num_blocks, state_out_ptr, partial_out_ptr,
                 PHASE: tl.constexpr, PREV_PHASE: tl.constexpr,
                 HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr,
                 THREADS: tl.constexpr, VEC: tl.constexpr, ROW_ALIGN: tl.constexpr, WAYS: tl.constexpr,
                 MAX_CHUNKS: tl.constexpr, BLOCK_V: tl.constexpr, TILE_BLOCKS: tl.constexpr, WIDE_SUMS: tl.constexpr,
                 MIXED_PIVOTS: tl.constexpr, NARROW_MIXED: tl.constexpr, FAST_MATH: tl.constexpr):
    """A search launch's work on chunk c of row b: the row's state replayed (_row_state: the previous
    launch's partials narrow its bracket), stored by chunk 0, and while the bracket is unsettled the
    chunk's count or mass of the keys >= each pivot."""
    b64 = b.to(tl.int64)
    temperature = load_temperature(temperature_ptr, b)
    row_ptr = logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN)
    first = c * chunk
    key_max, key_min, count, lo, hi, normalizer, key_w, status = _row_state(
        b64, state_in_ptr, partial_in_ptr, num_chunks, temperature, top_k_ptr, top_p_ptr,
        PHASE, PREV_PHASE, HAS_TOP_K, HAS_TOP_P, WAYS, MAX_CHUNKS, KEY_SHIFT, NARROW_MIXED)
    if c == 0:
        _store_state(state_out_ptr, b64, key_max, key_min, count, lo, hi, normalizer, key_w, status)
    if hi - lo > 1:
        above = _chunk_above(row_ptr, first, first + chunk, V, lo, hi, temperature, key_max, PHASE, KEY_SHIFT,
                             FP64, THREADS, VEC, WAYS, WIDE_SUMS, block_stats_ptr + b64 * num_blocks,
                             num_blocks, BLOCK_V, TILE_BLOCKS, MIXED_PIVOTS, FAST_MATH)
        tl.store(partial_out_ptr.to(tl.pointer_type(tl.int64)) + (b64 * num_chunks + c) * WAYS
                 + tl.arange(0, WAYS), above)


@jit
def _chunk_histogram(row_ptr, first, end, V, lo, base, hi, with_below, temperature, key_max, histogram_ptr,
                     KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, THREADS: tl.constexpr, VEC: tl.constexpr,
                     WIDE_SUMS: tl.constexpr, block_stats_ptr, num_blocks, BLOCK_V: tl.constexpr,
                     TILE_BLOCKS: tl.constexpr, BIN_STRIDE: tl.constexpr, FAST_MATH: tl.constexpr):
    """Adds the count of each finite key in [base, hi) of columns [first, end) to
    histogram_ptr[(key - base) * BIN_STRIDE]; returns, where `with_below`, the fixed-point mass of the
    keys in [lo, base) (else 0). Tiles whose largest key is below lo hold none and are skipped unread."""
    below = tl.zeros([VEC, THREADS], tl.int64 if WIDE_SUMS else tl.int32)
    start = first
    while start < end:
        if _tile_max_key(block_stats_ptr, start, num_blocks, BLOCK_V, TILE_BLOCKS) >= lo:
            x = _tile_logits(row_ptr, start, V, THREADS, VEC)
            key = _key(x, KEY_SHIFT)
            finite = tl.abs(x) < float("inf")
            tl.atomic_add(histogram_ptr + (key - base) * BIN_STRIDE, 1, mask=finite & (key >= base) & (key < hi),
                          sem="relaxed")
            if with_below:
                mass = _fixed_point_mass(x, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH)
                below += tl.where(finite & (key >= lo) & (key < base), mass, 0).to(below.dtype)
        start += THREADS * VEC
    return tl.sum(tl.sum(below.to(tl.int64), axis=1), axis=0)


@jit
def _histogram_bracket(counts, below, lo, hi, normalizer, temperature, key_max, p, KEY_SHIFT: tl.constexpr,
                       FP64: tl.constexpr, BINS: tl.constexpr, FAST_MATH: tl.constexpr):
    """(lo, hi, normaliser) of a top-p bracket [lo, hi) from the row's `counts` of each key in [base, hi)
    (base = max(lo, hi - BINS)) and the mass of its keys in [lo, base) (`below`, counted where the
    normaliser was unknown). hi is key_max + 1 (a search's first launch): the mass of the keys >= t is
    that of the keys in [t, hi). As _narrow with a pivot at lo and at every key of [base, hi): the
    largest key whose mass at or above it is not below the limit (lo is not, by construction) is the
    threshold; where no key of the histogram is, the bracket narrows to [lo, base)."""
    base = tl.maximum(lo, hi - BINS)
    keys = base + tl.arange(0, BINS)
    in_bracket = keys < hi
    x = _key_value(tl.where(in_bracket, keys, lo), KEY_SHIFT)
    mass = _fixed_point_mass(x, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH)  # each key's, as its logits have
    weight = tl.where(in_bracket, counts.to(tl.int64) * mass.to(tl.int64), 0)
    in_histogram = tl.sum(weight, axis=0)
    normalizer = tl.where(normalizer == 0, below + in_histogram, normalizer)
    limit = p.to(tl.float64) * normalizer.to(tl.float64)
    at_or_above = in_histogram - tl.cumsum(weight, 0) + weight  # the mass of the keys >= each
    reaches = in_bracket & ~(at_or_above.to(tl.float64) < limit)
    threshold = tl.max(tl.where(reaches, keys, lo - 1), axis=0)
    settled = threshold >= base
    return tl.where(settled, threshold, lo), tl.where(settled, threshold + 1, base), normalizer


@jit
def _chunk_winner_sums(row_ptr, first, end, V, key_w, temperature, key_max, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr,
                       THREADS: tl.constexpr, VEC: tl.constexpr, WAYS: tl.constexpr, WIDE_SUMS: tl.constexpr,
                       MASSES: tl.constexpr = True, COUNTS: tl.constexpr = True, tiles_from=-(2**31),
                       block_stats_ptr=None, num_blocks=0, BLOCK_V: tl.constexpr = 0, TILE_BLOCKS: tl.constexpr = 1,
                       FAST_MATH: tl.constexpr = False):
    """[WAYS] int64 over columns [first, end), lanes 0-3 (0 beyond): the count of the keys > key_w, the fixed-point mass
    (_chunk_above's) of the keys > key_w, of the keys >= key_w, and of all finite keys (the counts and the mass of the
    keys >= key_w only with COUNTS: top-k is given; the masses only with MASSES: top-p is given). With BLOCK_V (the
    block statistics at `block_stats_ptr`), tiles whose largest key is below `tiles_from` are skipped unread: they add
    nothing to lanes 0-2 where tiles_from <= key_w (+ 1 for lane 0 alone), and lane 3 is then the mass of the tiles
    read only."""
    # key > key_w iff x >= the value of key_w + 1, and key >= key_w iff x >= the value of key_w (_tile_logits)
    above_w = _key_value(key_w + 1, KEY_SHIFT)
    from_w = _key_value(key_w, KEY_SHIFT)
    above = tl.zeros([VEC, THREADS], tl.int32)
    mass_above = tl.zeros([VEC, THREADS], tl.int64 if WIDE_SUMS else tl.int32)
    mass_from = tl.zeros_like(mass_above)
    mass_all = tl.zeros_like(mass_above)
    start = first
    while start < end:
        relevant = True
        if BLOCK_V > 0:
            if tiles_from > -(2**31):
                relevant = _tile_max_key(block_stats_ptr, start, num_blocks, BLOCK_V, TILE_BLOCKS) >= tiles_from
        if relevant:
            x = _tile_logits(row_ptr, start, V, THREADS, VEC)
            if COUNTS:
                above += ((x >= above_w) & (x < float("inf"))).to(tl.int32)  # +inf is not counted
            if MASSES:  # (non-finite logits have no mass)
                mass = _fixed_point_mass(x, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH)
                mass_above += tl.where(x >= above_w, mass, 0).to(mass_above.dtype)
                if COUNTS:
                    mass_from += tl.where(x >= from_w, mass, 0).to(mass_above.dtype)
                mass_all += mass.to(mass_above.dtype)
        start += THREADS * VEC
    lanes = tl.arange(0, WAYS)
    sums = tl.where(lanes == 0, tl.sum(tl.sum(above, axis=1), axis=0).to(tl.int64),
                    tl.sum(tl.sum(mass_above.to(tl.int64), axis=1), axis=0))
    sums = tl.where(lanes == 2, tl.sum(tl.sum(mass_from.to(tl.int64), axis=1), axis=0), sums)
    sums = tl.where(lanes == 3, tl.sum(tl.sum(mass_all.to(tl.int64), axis=1), axis=0), sums)
    return tl.where(lanes < 4, sums, 0)


@jit
def _keeps_winner(sums, key_w, key_max, count, b64, top_k_ptr, top_p_ptr, HAS_TOP_K: tl.constexpr,
                  HAS_TOP_P: tl.constexpr, WAYS: tl.constexpr):
    """Whether top-k and top-p surely keep the token with key key_w, from the row's _chunk_winner_sums
    (lanes 0-3 of `sums` [WAYS]). The searches keep key_w iff fewer than k keys exceed it (top-k), and
    iff the mass above it is below top_p times the mass N of what top-k keeps (top-p, by the same
    comparison in float64 as _narrow). Without an active top-k N is all the mass; with one, N is at
    least the mass of the keys >= key_w, which then stands in for it: True means kept, False means
    kept or not, and the search decides."""
    ways = tl.arange(0, WAYS)
    above = tl.sum(tl.where(ways == 0, sums, 0), axis=0)
    mass_above = tl.sum(tl.where(ways == 1, sums, 0), axis=0)
    mass_from = tl.sum(tl.where(ways == 2, sums, 0), axis=0)
    mass_all = tl.sum(tl.where(ways == 3, sums, 0), axis=0)
    kept = key_w == key_w
    top_k_active = kept & False
    if HAS_TOP_K:
        k, top_k_active = _top_k(top_k_ptr, b64, count)
        kept = ~top_k_active | (above < k)
    if HAS_TOP_P:
        p = tl.load(top_p_ptr + b64)
        normalizer = tl.where(top_k_active, mass_from, mass_all)
        below = mass_above.to(tl.float64) < p.to(tl.float64) * normalizer.to(tl.float64)
        kept_p = tl.where(p <= 0, key_w >= key_max, tl.where((p > 0) & (p < 1), below, True))
        kept = kept & kept_p
    return kept
