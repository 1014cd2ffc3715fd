"""The pending rows' kept set in one launch (token_logprobs with filters, issue 41): `pending_search_kernel`.

filtered_list_reduce_kernel flags the rows whose kept set lies past the 64-logit list (`pending`). Their
thresholds are vocab-parallel top_k_top_p_sample's searches with a single shard (the statistics, top-k's bound
from the tiles' maxima, top-k's then top-p's search steps of 16 pivots: _start_search, _chunk_above, _narrow,
as shard_filter_search_kernel takes them), and their kept mass kept_mass_kernel's sums. Run as launches (one a
search step: plan.single_shard_plan), those cost about 2 us each whether or not a row is pending (12 to 21 of
them); here they are the steps of one launch whose programs wait for each other at a barrier of the row's
programs (filtered.one_launch._row_barrier), as filtered_one_launch_kernel's steps do. A call without a
pending row is then one launch that reads the flags.

Grid (G, C): G groups of C programs, all resident at once (Target.resident_programs; in the interpreter one
program, G = C = 1). Group g takes rows g, g + G, ... one after another; a pending row's C programs take a
chunk of its columns each (`chunk`, a runtime argument: the tiling follows the batch without a compilation),
and the row's steps meet at barriers on its arrival counter. On a GPU only batches of one or two rows take it
(pending_search_tiling): a row's few programs read it far slower than a launch a step with every pending row's
programs on the whole GPU. Every sum is an integer sum over the chunks, in
any order, and every bracket the same as the rounds' (the same starting brackets, pivots and narrowing), so
the threshold, kept sum and finite count are the rounds' and kept_mass_kernel's bit for bit; the outputs are
those launches' (`kept_threshold`, `kept_sums`: the total in part 0, zeros in the others), which
filtered_finish_kernel reads.

Scratch a group: three slots of [C, WAYS] int64 partials (the steps alternate between slots 0 and 1: a slot is
written again two barriers later, when every program has read it; the kept sums take slot 2, read after the
row's last barrier by program 0, and written again only at the next row's last step), and its tiles' largest
keys (written in the statistics step, read in the searches, before the row's last barrier).
"""

import triton
import triton.language as tl

from jsample.kernels.common import aligned, load_temperature
from jsample.kernels.filtered.config import _ALL_FINITE, _TOP_K, _TOP_P, filtered_launch_config, _with_ways
from jsample.kernels.filtered.keys import _key, _key_value, _min_p, _tile_logits
from jsample.kernels.filtered.one_launch import _gather_partials, _row_barrier
from jsample.kernels.filtered.search import _chunk_above, _kth_largest_block_key, _narrow, _start_search
from jsample.kernels.host import jit
from jsample.kernels.logprobs import _finite, kept_sums
from jsample.kernels.plan import Buffer, Target, launch

SEARCH_WAYS = 16  # pivots a step: vocab-parallel top_k_top_p_sample's (SHARD_WAYS), so its brackets
MAX_SEARCH_CHUNKS = 64  # programs a row at most (a power of two: the partials' gather)
ONE_LAUNCH_MAX_BATCH = 2  # on a GPU: larger batches take the rounds (pending_search_tiling)


@jit
def _search_steps(PHASE: tl.constexpr, lo, hi, normalizer, passed, row_ptr, first, end, V, temperature, key_max, b64,
                  top_k_ptr, top_p_ptr, partials, arrivals, num_chunks, tile_max_ptr, num_tiles,
                  STEPS: tl.constexpr, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, THREADS: tl.constexpr,
                  VEC: tl.constexpr, WAYS: tl.constexpr, MAX_CHUNKS: tl.constexpr, FAST_MATH: tl.constexpr):
    """A search's STEPS steps (shard_filter_search_kernel's rounds with one shard): the chunk's count or mass at
    the bracket's pivots, the row's sums after a barrier, the bracket narrowed. A settled bracket takes no step
    (every program of the row holds the same bracket, so all skip alike). Returns (lo, hi, normaliser, barriers
    passed)."""
    ways = tl.arange(0, WAYS)
    for _ in range(STEPS):
        if hi - lo > 1:
            above = _chunk_above(row_ptr, first, end, V, lo, hi, temperature, key_max, PHASE, KEY_SHIFT, FP64, THREADS,
                                 VEC, WAYS, True, tile_max_ptr, num_tiles, THREADS * VEC, 1, FAST_MATH=FAST_MATH)
            slot = passed % 2
            tl.store(partials + (slot * num_chunks + tl.program_id(1)) * WAYS + ways, above)
            passed += 1
            _row_barrier(arrivals, passed * num_chunks)
            above = tl.sum(_gather_partials(partials, slot, num_chunks, MAX_CHUNKS, WAYS, WAYS), axis=0)
            lo, hi, normalizer = _narrow(PHASE, lo, hi, above, normalizer, True, b64, top_k_ptr, top_p_ptr, WAYS,
                                         KEY_SHIFT)
    return lo, hi, normalizer, passed


@jit
def pending_search_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    temperature_ptr,  # [B] f32, or one f32 for all rows
    top_k_ptr,  # [B] i32|i64 (read with HAS_TOP_K)
    top_p_ptr,  # [B] f32 (read with HAS_TOP_P)
    min_p_ptr,  # [B] f32 (read with HAS_MIN_P)
    pending_ptr,  # [B] u8: filtered_list_reduce_kernel's rows to search (filtered, not greedy, not padding)
    list_values_ptr,  # [B, LIST] f32: top_list_kernel's (the first: the row's largest finite logit m)
    V,
    row_stride,
    num_rows_ptr,  # [1] i32: B (a buffer, not an integer argument, which Triton would specialise: B == 1, 16 | B)
    chunk,  # columns a program: a multiple of THREADS * VEC
    partial_ptr,  # scratch [G, 3, C, WAYS] i64 as i32 pairs (the module docstring's slots)
    tile_max_ptr,  # scratch [G, cdiv(V, THREADS * VEC)] i32: the group's row's tiles' largest keys
    arrivals_ptr,  # [B] i32 counters, zero on entry, left zero
    threshold_ptr,  # [B, 4] i32 output (pending rows): shard_threshold_kernel's words
    sums_ptr,  # [B, 2, PARTS] i64 output as i32 pairs (pending rows): kept_mass_kernel's, the totals in part 0
    KEY_SHIFT: tl.constexpr,
    FP64: tl.constexpr,
    THREADS: tl.constexpr,
    VEC: tl.constexpr,
    WAYS: tl.constexpr,
    STEPS: tl.constexpr,  # steps a search: its bracket settled after them (16 ways: 8 for 32-bit keys)
    MAX_CHUNKS: tl.constexpr,  # a power of two >= C
    REDUCE_TILES: tl.constexpr,  # a power of two >= the tiles of a row
    LIST: tl.constexpr,
    PARTS: tl.constexpr,  # kept_mass_kernel's programs a row (filtered_finish_kernel reads PARTS partials)
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    """Grid (G, C): the pending rows' kept-set thresholds and kept sums (the module docstring)."""
    group = tl.program_id(0)
    c = tl.program_id(1)
    num_chunks = tl.num_programs(1)
    TILE: tl.constexpr = THREADS * VEC
    V = aligned(V, VOCAB_ALIGN)
    num_tiles = tl.cdiv(V, TILE)
    first = c * chunk
    end = tl.minimum(first + chunk, V)
    ways = tl.arange(0, WAYS)
    chunks = tl.arange(0, MAX_CHUNKS)
    partials = partial_ptr.to(tl.pointer_type(tl.int64)) + group.to(tl.int64) * (3 * num_chunks * WAYS)
    tiles_ptr = tile_max_ptr + group.to(tl.int64) * num_tiles
    for row in tl.range(group, tl.load(num_rows_ptr), tl.num_programs(0), num_stages=1):
        b64 = tl.cast(row, tl.int64)  # (a Python int in the interpreter)
        if tl.load(pending_ptr + b64) != 0:
            row_ptr = logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN)
            arrivals = arrivals_ptr + b64
            temperature = load_temperature(temperature_ptr, b64)
            # the statistics (shard_filter_stats_kernel's): each tile's largest finite key, the chunk's
            largest = tl.full([], float("-inf"), tl.float32)
            start = first
            while start < end:
                x = _tile_logits(row_ptr, start, end, THREADS, VEC)
                tile_largest = tl.max(tl.max(tl.where(_finite(x), x, float("-inf")), axis=1), axis=0)
                tl.store(tiles_ptr + start // TILE,
                         tl.where(tile_largest > float("-inf"), _key(tile_largest, KEY_SHIFT), -(2**31)))
                largest = tl.maximum(largest, tile_largest)
                start += TILE
            tl.store(partials + c * WAYS,
                     tl.where(largest > float("-inf"), _key(largest, KEY_SHIFT), -(2**31)).to(tl.int64))
            passed = b64.to(tl.int32) * 0 + 1  # barriers passed (a tensor: the steps change it)
            _row_barrier(arrivals, num_chunks)
            key_max = tl.max(tl.load(partials + chunks * WAYS, mask=chunks < num_chunks, other=-(2**31),
                                     cache_modifier=".cg"), axis=0)
            count = tl.where(key_max > -(2**31), _ALL_FINITE, 0).to(tl.int64)
            # _shard_state's first bracket, below every finite key
            lo = tl.where(count > 0, _key(tl.full([], -3.4028234663852886e38, tl.float32), KEY_SHIFT), 0).to(tl.int64)
            hi = lo + 1
            normalizer = lo * 0
            if HAS_TOP_K:
                # top-k's search starts at the k-th largest tile maximum (shard_top_k_bound_kernel's bound)
                all_tiles = tl.arange(0, REDUCE_TILES)
                tile_max = tl.load(tiles_ptr + all_tiles, mask=all_tiles < num_tiles, other=-(2**31),
                                   cache_modifier=".cg")
                bound = _kth_largest_block_key(tile_max, tl.load(top_k_ptr + b64).to(tl.int64),
                                               tl.full([], -(2**31), tl.int64), SORT=False)
                lo, hi = _start_search(_TOP_K, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
                lo = tl.where(hi - lo > 1, tl.maximum(lo, bound), lo)
                lo, hi, normalizer, passed = _search_steps(
                    _TOP_K, lo, hi, normalizer, passed, row_ptr, first, end, V, temperature, key_max, b64, top_k_ptr,
                    top_p_ptr, partials, arrivals, num_chunks, tiles_ptr, num_tiles, STEPS, KEY_SHIFT, FP64, THREADS,
                    VEC, WAYS, MAX_CHUNKS, FAST_MATH)
            if HAS_TOP_P:
                lo, hi = _start_search(_TOP_P, b64, lo, key_max, count, temperature, top_k_ptr, top_p_ptr)
                lo, hi, normalizer, passed = _search_steps(
                    _TOP_P, lo, hi, normalizer, passed, row_ptr, first, end, V, temperature, key_max, b64, top_k_ptr,
                    top_p_ptr, partials, arrivals, num_chunks, tiles_ptr, num_tiles, STEPS, KEY_SHIFT, FP64, THREADS,
                    VEC, WAYS, MAX_CHUNKS, FAST_MATH)
            # the kept mass (kept_mass_kernel's terms and finite count) over the chunk, at the 32-bit keys' threshold
            threshold = lo.to(tl.int64) << KEY_SHIFT  # key >> s >= t: key >= t << s
            m = tl.load(list_values_ptr + b64 * LIST)
            min_p = 0.0
            if HAS_MIN_P:
                min_p = _min_p(min_p_ptr, b64)
            kept_sum, count_finite = kept_sums(row_ptr, first, end, threshold, temperature, m, min_p, HAS_MIN_P, FP64,
                                               TILE)
            tl.store(partials + (2 * num_chunks + c) * WAYS + ways, tl.where(ways == 0, kept_sum, count_finite),
                     mask=ways < 2)
            passed += 1
            _row_barrier(arrivals, passed * num_chunks)
            if c == 0:
                sums = tl.sum(_gather_partials(partials, 2, num_chunks, MAX_CHUNKS, WAYS, 2), axis=0)
                parts = tl.arange(0, PARTS)
                out = sums_ptr.to(tl.pointer_type(tl.int64)) + b64 * 2 * PARTS + parts
                lanes = tl.arange(0, 2)
                tl.store(out, tl.where(parts == 0, tl.sum(tl.where(lanes == 0, sums, 0), axis=0), 0))
                tl.store(out + PARTS, tl.where(parts == 0, tl.sum(tl.where(lanes == 1, sums, 0), axis=0), 0))
                words = threshold_ptr + b64 * 4
                tl.store(words.to(tl.pointer_type(tl.int64)), threshold)
                largest_value = tl.where(key_max > -(2**31), _key_value(key_max, KEY_SHIFT), float("-inf"))
                tl.store(words + 2, largest_value.to(tl.int32, bitcast=True))
                tl.store(words + 3, 0)
            # every program is past the barrier's wait: the last to say so leaves the counter zero
            tl.debug_barrier()
            if tl.atomic_add(arrivals, 1, sem="acq_rel", scope="gpu") == (passed + 1) * num_chunks - 1:
                tl.atomic_xchg(arrivals, 0, sem="relaxed", scope="gpu")


def pending_search_tiling(batch: int, vocab: int, dtype_name: str, fp64: bool, target: Target):
    """(groups G, chunk columns, programs a row C) of pending_search_kernel's grid, or None for the rounds' route:
    in the interpreter one program (every batch); on a GPU, batches of at most ONE_LAUNCH_MAX_BATCH rows, a group a
    row, each of as many programs as are resident (up to MAX_SEARCH_CHUNKS). Larger batches take the rounds (a
    launch a step): their steps run every pending row at once on the whole GPU, where a group's programs take its
    rows one after another (on an H200, 1.1x the rounds at B = 8 with every row pending, 2-3x at B = 64-256; a
    call with no pending row 0.5-0.7x at every batch: lab INDEX, ab_pending_search_one_launch)."""
    config = _search_config(vocab, dtype_name, fp64, target)
    tile = config.threads * config.vec
    tiles = triton.cdiv(vocab, tile)
    if target.large_programs:
        return 1, tiles * tile, 1
    if target.interpreter or batch > ONE_LAUNCH_MAX_BATCH or target.resident_programs < batch:
        return None
    chunk = tile * triton.cdiv(tiles, min(target.resident_programs // batch, MAX_SEARCH_CHUNKS))
    return batch, chunk, triton.cdiv(vocab, chunk)


def _search_config(vocab: int, dtype_name: str, fp64: bool, target: Target):
    """The searches' threads, vector width, warps and steps: vocab-parallel top_k_top_p_sample's (SHARD_WAYS) at
    one row (the same at every batch: no compilation follows it)."""
    return _with_ways(filtered_launch_config(1, vocab, vocab, dtype_name, fp64, fast_math=not target.interpreter,
                                             large_programs=target.large_programs), SEARCH_WAYS)


def pending_search_launch(batch: int, vocab: int, row_stride: int, dtype_name: str, fp64: bool, target: Target, *,
                          row_align: int, vocab_align: int, args: tuple, parts: int, list_size: int, has_top_k: bool,
                          has_top_p: bool, has_min_p: bool):
    """(scratch buffers, pending_search_kernel's launch) for plan_token_logprobs, or None (pending_search_tiling).
    `args`: the names of logits, temperature, top_k, top_p, min_p, pending, list_values; the launch reads B from
    plan.num_rows_buffer's "num_rows" (the caller's to add)."""
    tiling = pending_search_tiling(batch, vocab, dtype_name, fp64, target)
    if tiling is None:
        return None
    groups, chunk, num_chunks = tiling
    config = _search_config(vocab, dtype_name, fp64, target)
    tiles = triton.cdiv(vocab, config.threads * config.vec)
    scratch = (Buffer("search_partials", (groups, 3, num_chunks, 2 * SEARCH_WAYS), "int32"),
               Buffer("search_tile_max", (groups, tiles), "int32"),
               Buffer("search_arrivals", (batch,), "int32", counters=target.arrival_counters,
                      zeroed=not target.arrival_counters))
    step = launch(pending_search_kernel, (groups, num_chunks), args + (vocab, row_stride, "num_rows", chunk),
                  tuple(b.name for b in scratch) + ("kept_threshold", "kept_sums"), KEY_SHIFT=config.key_shift,
                  FP64=fp64, THREADS=config.threads, VEC=config.vec, WAYS=SEARCH_WAYS, STEPS=config.search_steps,
                  MAX_CHUNKS=MAX_SEARCH_CHUNKS, REDUCE_TILES=triton.next_power_of_2(tiles), LIST=list_size,
                  PARTS=parts, ROW_ALIGN=row_align, VOCAB_ALIGN=vocab_align, HAS_TOP_K=has_top_k,
                  HAS_TOP_P=has_top_p, HAS_MIN_P=has_min_p, FAST_MATH=not target.interpreter,
                  num_warps=config.num_warps)
    return scratch, step
