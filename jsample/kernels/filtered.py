"""Top-k / top-p / min-p sampling: the stream-0 Gumbel-max sample over the tokens the filters keep.

With s = x / T (FP32, as gumbel_sample) and e_k = exp(s_k - max s) = p_k / p_max, a row keeps
(temperature first, then the filters in Hugging Face's order, each on what the previous one kept):

* top-k (1 <= k < number of finite logits): the tokens whose logit is >= the k-th largest (ties at
  the boundary all kept);
* top-p (0 < p < 1): token k is kept iff the mass of the kept tokens with a strictly larger logit
  is < p times the mass of all kept tokens (so the boundary token, and tokens tied with it, stay);
  masses are sums of floor(e * 2**24), integers: a sum does not depend on its order, so neither
  the tiling nor the batch can change which tokens are kept (p <= 0 keeps the largest logit only).
  Tokens with e < 2**-24 weigh nothing: V of them shift the cumulative mass by < 1% of p_max at
  V = 151936, no more than FP32 sums of the probabilities would;
* min-p (0 < min_p): token k is kept iff e_k >= min_p.

Filter values outside their range are clamped (docs/STREAM.md, "Clarifications of version 1"):
top_k < 1 or >= the number of finite logits keeps all; top_p >= 1 or NaN keeps all, top_p <= 0
keeps only the tokens equal to the largest logit; min_p <= 0 or NaN keeps all, min_p >= 1 keeps only
the tokens equal to the largest logit (e = 1 exactly there).

The token is then `gumbel_sample` of the row with every other logit set to -inf, computed by the very
same code (block_noise, noisy_scores), so with no filter it is gumbel_sample's token bit for bit.
Greedy rows (T < 1e-5 or NaN, and rows whose scaled logits overflow: gumbel.py) are not filtered
(the largest logit is always kept, so nothing would change).

Every filter keeps the tokens whose logit is >= a threshold (e is non-decreasing in x), so each
threshold is found by searching an order-preserving integer key of the logits: 32 bits for float32,
the 16 significant bits of bfloat16 and 19 of float16 (key_shift). Launches, all shared by both
frontends (plan_top_k_top_p_sample lists them):

1. `filter_stats_kernel`, grid (B, num_blocks) in the sampling tiling: per block, the largest key of
   the finite logits, and gumbel_sample's block partials of the unfiltered row (stream 0).
2. `filter_row_kernel`, grid (B,): the row's statistics and unfiltered winner. The winner, when the
   filters keep it, is the token (the same scores, fewer candidates), so the row's status says
   whether it is (STATUS_DONE: also rows the filters do not apply to, and a winner at the largest
   logit, which every filter keeps), whether top-k and top-p decide it from the winner's sums
   (STATUS_CHECK: min-p keeps it), or whether the row is searched and its kept set sampled
   (STATUS_FILTER). With top-k, the k-th largest of the blocks' largest keys bounds its threshold
   from below: the search starts there, and a winner below it is dropped without sums.
3. With top-k or top-p, `filter_winner_sums_kernel`, a row's chunk a work item: for STATUS_CHECK rows,
   the count (and mass) of the keys above the winner's. With top-k, a row whose k is at most
   TOP_K_LIST (and at most its blocks with a finite logit) takes no sums: its chunks list the row's
   columns whose key is at or above top-k's bound instead (one atomic a tile).
4. `filter_decide_kernel`, grid (B,): every row's status, final from here on. A listed row's
   thresholds (top-k's, then top-p's) come from its list's keys (about k on language-model-like
   logits), and its winner is STATUS_DONE, or STATUS_SAMPLED, its token the Gumbel-max of the listed
   columns the filters keep (the noise of those columns only); a list that overflows leaves the row
   to the searches (STATUS_FILTER). A STATUS_CHECK row is decided from its winner's sums. Each
   STATUS_FILTER row's first search bracket is set, and the row is listed (an atomic counter) for the
   launches after it, which take only the listed rows' items.
5. `filter_compact_step_kernel` PHASE_TOP_K, then PHASE_TOP_P, search_steps launches each: each
   program first replays the row's state from the previous launch (state + partials: the bracket
   [lo, hi) of the threshold key), then evaluates `ways` pivots of it on its chunk (count, or mass,
   of the keys >= each pivot). Each launch narrows the bracket `ways`-fold, so search_steps launches
   pin it down (at large batches a search's first launch narrows it `ways / 2`-fold in keys, its
   other pivots splitting the bracket's values, which is where a bracket across binades has its
   logits: _pivots). A search the winner's sums bound starts above (or, top-k keeping it, at or
   below) the winner's key, and tiles whose largest key (the block statistics) is below the bracket
   are skipped unread: the same thresholds, sooner and with less reading. On 16-bit logits top-p's
   search starts with `filter_histogram_step_kernel`: the count of each of the bracket's top
   HISTOGRAM_BINS keys (a key is one value there, so count x mass is exact), from which
   `filter_histogram_bracket_kernel` (a program a listed row) takes the threshold, or, where it lies
   below those keys, the bracket left to the pivot launches. The bracket from the winner's sums spans a
   few hundred bfloat16 keys on language-model-like logits: one pass, where pivot launches took three.
6. `filtered_partial_kernel`, COMPACT_SAMPLE_BLOCKS blocks of a row a work item (SAMPLE_BLOCKS_PER_PROGRAM
   without a search): replays the final state and writes
   gumbel_sample's block partials of the row with the logits below the threshold (and, for min-p,
   e < min_p) masked, reusing the unfiltered partial of every block whose best column is kept or that
   keeps none; `filtered_reduce_kernel` reduces each row's filtered, or unfiltered, partials.

The search launches and the sampling launch run at most COMPACT_PROGRAMS (COMPACT_SAMPLE_PROGRAMS)
programs, which stride over the listed rows' items (item j: row active_rows[j // items a row], on
program j % P). Most rows' token is the unfiltered winner or comes from top-k's lists, so most of those
launches have few items or none: a program then reads a counter and stops (some 2 us a launch, against
5-7 us for a grid of every row's items that read their statuses). Without a search (min-p alone) the
sampling launch takes every row's items, and skips those of rows that are done (_program_items).

Where all B * num_chunks programs run at once (Target.resident_programs; in the interpreter, one
program a row), `filtered_one_launch_kernel` does all of this in one launch: the steps meet at a
barrier of the row's programs (an arrival counter) instead of at launch boundaries, and the last
program to arrive reduces the row; top-k's lists there are the row's programs' too (its step 1 in
place of the winner's sums). Same integer sums, same searches, same scores: the same token.

The chunking and the number of pivots follow the tiling, small batches or many rows (more chunks per
row for small batches, to fill the GPU; fewer pivots for large ones, whose launches are compute-bound),
never the batch size itself (no batch size costs a compilation: tests/test_compiles.py); the kept set
never depends on them: counts and fixed-point masses are integer sums, and the searches are exact.
"""

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Optional

import triton
import triton.language as tl

from jsample.kernels.host import jit
from jsample.kernels.common import (
    GREEDY_BELOW,
    aligned,
    block_noise,
    greedy_argmax_row,
    inverse_temperature,
    is_greedy,
    load_block,
    load_temperature,
    noisy_scores,
    reduce_block_best_flagged,
    store_block_best,
    store_sampled_block,
)
from jsample.kernels.gumbel import GumbelLaunchConfig, gumbel_launch_config, many_rows_config, store_row_token
from jsample.kernels.plan import ArgSpec, Buffer, Plan, Target, launch
from jsample.kernels.stream import gumbel_noise, load_seed, seed_word_count, uniform_at

MAX_CHUNKS = 64  # chunks per row in the search launches (a power of two)
# blocks a program of the launches' plan's sampling launch takes: a row whose token is the unfiltered
# winner costs its programs one state load, and fewer programs make fewer waves of them
SAMPLE_BLOCKS_PER_PROGRAM = 4
# the compacted sampling launch (plans with a search): its items, the listed rows' blocks, are few, and each
# is a chain of latencies (loads, the kept test, the noise of a block whose best column is dropped): two
# blocks an item, on up to 2048 programs (flat top_p at B = 256: 179.8 -> 175.8 us on an H200; lab INDEX)
COMPACT_SAMPLE_BLOCKS = 2
COMPACT_SAMPLE_PROGRAMS = 2048
SMALL_BATCH_CHUNKS = 16  # the least chunks a row in the launches' plan's small-batch tiling
MANY_ROWS_ELEMENTS = 2**22  # B * V from which the launches' plan takes its large-batch tiling
MASS_SCALE = 2.0**24  # fixed-point unit of the top-p masses, relative to the largest token's
MAX_COLUMNS_PER_THREAD = 64  # per chunk: int32 mass sums stay below 64 * 2**24 = 2**30 (int64 beyond)
PHASE_STATS = 0
PHASE_TOP_K = 1
PHASE_TOP_P = 2
PHASE_SAMPLE = 3
PHASE_WINNER = 4
# a search launch's PREV_PHASE after filter_decide_kernel or filter_histogram_bracket_kernel: they set its bracket
PREV_PHASE_DECIDED = 5
# int64 per row: key max, key min, finite count, lo, hi, top-p normaliser, winner key, status (the launches'
# plan keeps a search floor below every finite key as key min, and ALL_FINITE or 0 as the count)
STATE_WORDS = 8
# a row's status in the launches' plan (state word 7): whether the unfiltered winner is the token
STATUS_DONE = 0  # it is (or the row is not filtered: greedy, overflowing, no finite logit)
STATUS_CHECK = 1  # min-p keeps it; filter_decide_kernel decides top-k and top-p from the winner's sums
STATUS_FILTER = 2  # the filters drop it (or may): search, then sample the kept set
STATUS_SAMPLED = 3  # filter_decide_kernel sampled its kept set from its candidate list: state word 6 is the token
# the launches' plan's top-k candidate lists (filter_winner_sums_kernel, filter_decide_kernel): rows whose
# k is at most this (a power of two; 0: none) list their keys >= the search's lower bound, and where those
# fit, their thresholds come from the list instead of the searches
TOP_K_LIST = 1024
SHORT_TOP_K_LIST = 128  # lists no longer than this (most: about k) are sorted in this many slots
SORTED_SLOTS = tl.constexpr(SHORT_TOP_K_LIST)  # _list_decision sorts lists of this many slots, searches longer ones
# pivots a search launch of the large-batch tiling takes when the plan lists top-k's candidates or starts
# top-p's search with a histogram: its searches then run only for the few rows (or brackets) those leave,
# and most of their launches are idle, so take fewer of them (16 ways: 4 launches a bfloat16 search, 8 a
# float32 one, against 6 and 11)
LISTED_WAYS = 16
# programs of the search launches and of the sampling launch in the launches' plan: they take the items
# of the rows filter_decide_kernel lists (a load a program where none is listed)
COMPACT_PROGRAMS = 1024
# keys filter_histogram_step_kernel counts, the top ones of a top-p search's first bracket (a power of two:
# bfloat16 logits between the winner and the largest span a few hundred keys)
HISTOGRAM_BINS = 1024
# int32 words from one bin's count to the next's: a row's atomics then spread over more 16-byte pieces of
# the L2, which serialises adds to one piece (a bin a word: 22.9 us on flat logits, 4 words: 13.0; lab INDEX)
HISTOGRAM_BIN_STRIDE = 4
HISTOGRAM_BRACKET_WARPS = 4  # filter_histogram_bracket_kernel's: a program a row, BINS keys at once
KEY_SHIFTS = {"float32": 0, "bfloat16": 16, "float16": 13}  # low key bits that are zero for the dtype
ALL_FINITE = 2**62  # the launches' plan's finite count of a row with a finite logit (filter_row_kernel)

_TOP_K = tl.constexpr(PHASE_TOP_K)
_TOP_P = tl.constexpr(PHASE_TOP_P)
_SAMPLE = tl.constexpr(PHASE_SAMPLE)
_WINNER = tl.constexpr(PHASE_WINNER)
_DECIDED = tl.constexpr(PREV_PHASE_DECIDED)
_DONE = tl.constexpr(STATUS_DONE)
_CHECK = tl.constexpr(STATUS_CHECK)
_FILTER = tl.constexpr(STATUS_FILTER)
_SAMPLED = tl.constexpr(STATUS_SAMPLED)
_MASS_SCALE = tl.constexpr(MASS_SCALE)
_STATE_WORDS = tl.constexpr(STATE_WORDS)
_GREEDY_BELOW = tl.constexpr(GREEDY_BELOW)
_ALL_FINITE = tl.constexpr(ALL_FINITE)


@dataclass(frozen=True)
class FilteredLaunchConfig:
    """How both frontends launch the filtered-sampling kernels (the kept set never depends on it)."""

    gumbel: GumbelLaunchConfig  # the sampling launch: exactly gumbel_sample's tiling
    key_shift: int
    ways: int  # pivots per search launch (a power of two >= 4: the stats launch writes 3 lanes)
    search_steps: int  # launches per search: ceil(key bits / log2(ways))
    num_chunks: int  # programs per row in the stats and search launches
    chunk: int  # columns per chunk, a multiple of threads * vec
    vec: int  # contiguous columns a thread loads at once: 16 bytes
    threads: int  # the tiles' second dimension: 32 * num_warps (more: large_programs; float32 at many rows)
    wide_sums: bool  # chunk > MAX_COLUMNS_PER_THREAD per thread (V > 524288): int64 per-thread mass sums
    mixed_first_pivots: bool = False  # a search's first launch takes _pivots' mixed pivots
    num_warps: int = 4
    num_stages: int = 1
    enable_fp_fusion: bool = False  # no FMA contraction: the same rounding as the NumPy reference


def filtered_launch_config(batch: int, vocab_size: int, row_stride: int, dtype_name: str,
                           fp64: bool, fast_math: bool = None, large_programs: bool = False) -> FilteredLaunchConfig:
    """The launch configuration of `top_k_top_p_sample` for [B, V] logits of this dtype
    (`large_programs`: Target.large_programs, one chunk a row, in tiles of up to 16384 columns)."""
    key_shift = KEY_SHIFTS[dtype_name]
    vec = 4 if dtype_name == "float32" else 8
    many_rows = batch * vocab_size >= MANY_ROWS_ELEMENTS and not large_programs
    num_warps = max(1, min(4, triton.next_power_of_2(vocab_size) // (32 * vec)))  # fewer for short rows
    if many_rows:
        num_warps = 2
    threads = 32 * num_warps
    if many_rows:  # tiles of 512 columns: float32's take two 16-byte loads a thread (7-9% faster: lab INDEX)
        threads = max(threads, 512 // vec)
    if large_programs:
        threads = max(threads, min(16384, triton.next_power_of_2(vocab_size)) // vec)
    tile = threads * vec  # the loops' step: the kernels assume chunk is a multiple of it
    tiles = triton.cdiv(vocab_size, tile)
    # chunks of at most 4096 columns: programs that loop over fewer tiles hide their load latency by
    # occupancy (2 chunks a row at B = 256 took 2 ms). The chunking is one per tiling, never a function of
    # the batch (each chunking is a compilation in JAX, which bakes integers in): at least
    # SMALL_BATCH_CHUNKS a row in the small-batch tiling, to fill the GPU with few rows
    least = 1 if many_rows else SMALL_BATCH_CHUNKS
    chunks = max(1, min(MAX_CHUNKS, tiles, max(triton.cdiv(vocab_size, 4096), least)))
    if large_programs:
        chunks = 1
    chunk = triton.cdiv(tiles, chunks) * tile
    # Each pivot costs a compare and an add per column: large launches are compute-bound, where 8
    # pivots on two-warp programs (many resident per SM) beat 4 on four warps and 16 on any
    # (benchmarks/lab/INDEX.md, ab_filtered_tiling); small ones pay each launch in latency, so take
    # 16. The kept set is exact either way.
    ways = 8 if many_rows else 16
    gumbel = gumbel_launch_config(vocab_size, row_stride, fp64, fast_math, large_programs)
    if many_rows:  # the sampling launch: gumbel_sample's two-launch tiling
        gumbel = many_rows_config(gumbel, vocab_size)
    search_steps = math.ceil((32 - key_shift) / math.log2(ways))
    return FilteredLaunchConfig(
        gumbel=gumbel,
        key_shift=key_shift,
        ways=ways,
        search_steps=search_steps,
        num_chunks=triton.cdiv(vocab_size, chunk),
        chunk=chunk,
        vec=vec,
        threads=threads,
        wide_sums=chunk > MAX_COLUMNS_PER_THREAD * threads,
        # where the steps have room for a first one that narrows only ways / 2-fold in keys (8 ways: every
        # dtype; the one-launch plan's 16 have none for bfloat16 and float32)
        mixed_first_pivots=many_rows and (ways // 2) * ways ** (search_steps - 1) >= 2 ** (32 - key_shift),
        num_warps=num_warps,
    )


ONE_LAUNCH_MAX_CHUNK = 8192  # filtered_one_launch_kernel: at most this many columns a program on a GPU
ONE_LAUNCH_COLLECT_TILE = 2048  # and at most this many in a tile of its top-k lists' step


def filtered_one_launch_config(batch: int, vocab_size: int, row_stride: int, dtype_name: str, fp64: bool,
                               target: Target) -> Optional[FilteredLaunchConfig]:
    """The configuration of filtered_one_launch_kernel, or None where its programs may not wait for each
    other: in the interpreter (large_programs) one program a row; on a GPU, chunks of a power of two
    tiles (a multiple of the sampling block, or one), as few as keep all B * num_chunks programs
    resident (Target.resident_programs), and of at most ONE_LAUNCH_MAX_CHUNK columns."""
    config = filtered_launch_config(batch, vocab_size, row_stride, dtype_name, fp64, fast_math=not target.interpreter,
                                    large_programs=target.large_programs)
    tile = config.threads * config.vec
    tiles = triton.cdiv(vocab_size, tile)
    gumbel = config.gumbel
    if target.large_programs:
        step = max(tile, gumbel.block_v)  # powers of two: a multiple of both
        chunk = triton.cdiv(vocab_size, step) * step
    else:
        # two tilings, so that no batch size costs a compilation: a row alone on every resident program, and
        # every other batch on the tiling of two rows, where all its programs are resident at once (larger
        # batches take the launches' plan: on an H200 it was as fast as this kernel's wider chunks from B = 8
        # on, and faster at V = 32000, B = 32; lab INDEX, ab_compile_once)
        per_row = target.resident_programs // min(max(batch, 1), 2)
        if target.interpreter or per_row < 1:
            return None
        chunk = tile * triton.next_power_of_2(triton.cdiv(tiles, per_row))
        if chunk > max(ONE_LAUNCH_MAX_CHUNK, tile) or batch * triton.cdiv(vocab_size, chunk) > \
                target.resident_programs:
            return None
    block_v = min(gumbel.block_v, chunk)
    num_blocks = triton.cdiv(vocab_size, block_v)
    gumbel = GumbelLaunchConfig(block_v=block_v, num_blocks=num_blocks, reduce_block=triton.next_power_of_2(num_blocks),
                                row_align=gumbel.row_align, vocab_align=gumbel.vocab_align, num_warps=config.num_warps,
                                fast_math=gumbel.fast_math)
    ways = 16  # 32 or 64 pivots a step were slower (benchmarks/lab/INDEX.md)
    return dataclasses.replace(config, gumbel=gumbel, ways=ways,
                               search_steps=math.ceil((32 - config.key_shift) / math.log2(ways)),
                               num_chunks=triton.cdiv(vocab_size, chunk), chunk=chunk,
                               wide_sums=chunk > MAX_COLUMNS_PER_THREAD * config.threads)


def _with_ways(config: FilteredLaunchConfig, ways: int) -> FilteredLaunchConfig:
    """`config` with `ways` pivots a search launch, and the search steps and mixed first pivots that go with them."""
    bits = 32 - config.key_shift
    search_steps = math.ceil(bits / math.log2(ways))
    return dataclasses.replace(config, ways=ways, search_steps=search_steps,
                               mixed_first_pivots=config.mixed_first_pivots
                               and (ways // 2) * ways ** (search_steps - 1) >= 2**bits)


@jit
def _key(x, KEY_SHIFT: tl.constexpr):
    """Order-preserving int32 key of FP32 values (-0.0 as +0.0), without its KEY_SHIFT zero bits."""
    bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF) >> KEY_SHIFT


@jit
def _key_value(key, KEY_SHIFT: tl.constexpr):
    """The FP32 value of a key (the inverse of _key)."""
    key = key.to(tl.int32)
    full = (key << KEY_SHIFT) | tl.where(key < 0, (1 << KEY_SHIFT) - 1, 0)
    return tl.where(full >= 0, full, full ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@jit
def _exp_flushing_subnormals(z):
    """tl.exp(z) of FP32 z on a GPU (ex2.approx of z * log2(e) rounded to FP32, as Triton lowers it), with
    subnormal results flushed to zero: one instruction, where tl.exp's guard of the subnormal range
    takes four."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [z * 1.4426950408889634],
                                     dtype=tl.float32, is_pure=True, pack=1)


@jit
def _relative_probability(x, temperature, key_max, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr,
                          FLUSH_SUBNORMALS: tl.constexpr = False):
    """e = exp(x / T - max(x) / T) = p / p_max of logits x (FP32, FP64 when FP64); 0 for non-finite x.
    FLUSH_SUBNORMALS (a GPU, FP32): subnormal e flushed to zero (_exp_flushing_subnormals)."""
    x_max = _key_value(key_max, KEY_SHIFT)
    if FP64:
        inverse_t = inverse_temperature(temperature, True)
        e = tl.exp(x.to(tl.float64) * inverse_t - x_max.to(tl.float64) * inverse_t)
    else:
        inverse_t = inverse_temperature(temperature, False)
        if FLUSH_SUBNORMALS:
            e = _exp_flushing_subnormals(x * inverse_t - x_max * inverse_t)
        else:
            e = tl.exp(x * inverse_t - x_max * inverse_t)
    return tl.where(tl.abs(x) < float("inf"), e, 0.0)


@jit
def _fixed_point_mass(x, temperature, key_max, KEY_SHIFT: tl.constexpr, FP64: tl.constexpr,
                      FAST_MATH: tl.constexpr = False):
    """int32 floor(e * MASS_SCALE) of logits x (e: _relative_probability, 0 for non-finite x), the
    fixed-point mass every top-p sum adds, whichever launch adds it. FAST_MATH (a GPU) flushes subnormal
    e to zero (one instruction an exponential, not four): the same mass, since e < 2**-126 gives 0. (min-p,
    which compares e itself, keeps them.)"""
    e = _relative_probability(x, temperature, key_max, KEY_SHIFT, FP64, FAST_MATH)
    return (e * _MASS_SCALE).to(tl.int32)


@jit
def _tile_logits(row_ptr, start, V, THREADS: tl.constexpr, VEC: tl.constexpr):
    """The [VEC, THREADS] logits from column `start` (VEC contiguous columns a thread: 16-byte loads),
    widened to FP32 (-inf past V). Threads run along the last dimension: the compiler gives the lanes
    to the last dimension of the [WAYS, VEC, THREADS] comparisons too, so that each thread compares
    its own columns (with THREADS first, lanes went to VEC and WAYS, and every tile crossed shared
    memory).

    The kernels compare these values with _key_value(t) instead of comparing their keys with t (fewer
    instructions a column): for the values of the logits' dtype, key(x) >= t iff x >= _key_value(t),
    for finite x. _key_value(t) is a value with key t (for t >= 0 the smallest, for t < 0 the largest:
    the only one of the dtype, since the KEY_SHIFT dropped bits of a widened value are zero, so no
    other value of the dtype shares its key); -0.0 and +0.0 compare equal, as their keys are. NaN and
    -inf are below every finite value; +inf, whose key stands below every pivot, must be masked where
    it is counted."""
    cols = start + tl.arange(0, VEC)[:, None] + tl.arange(0, THREADS)[None, :] * VEC
    return tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)


@jit
def _finite_extremes(x):
    """(largest finite value, smallest finite value, count of finite values) of a block of logits
    (-inf, +inf and 0 without one)."""
    finite = tl.abs(x) < float("inf")
    return (tl.max(tl.where(finite, x, float("-inf")), axis=0), tl.min(tl.where(finite, x, float("inf")), axis=0),
            tl.sum(finite.to(tl.int32), axis=0))


@jit
def _extreme_keys(largest, smallest, count, KEY_SHIFT: tl.constexpr):
    """The keys of the largest and smallest finite logits (_key is monotone: two keys, not one a
    column), or -2**31 and 2**31 - 1 without a finite logit."""
    return (tl.where(count > 0, _key(largest, KEY_SHIFT), -(2**31)),
            tl.where(count > 0, _key(smallest, KEY_SHIFT), 2**31 - 1))


@jit
def _tile_max_key(block_stats_ptr, start, num_blocks, BLOCK_V: tl.constexpr, TILE_BLOCKS: tl.constexpr):
    """The largest finite key of the tile at column `start` from filter_stats_kernel's block
    statistics of the row (-2**31 without one): the blocks it covers (TILE_BLOCKS of them; a tile lies
    in one block when it is no wider). A tile whose keys are all below the pivots is never loaded.
    (Reading a chunk's tile maxima at once, before its tiles, was no faster: lab INDEX.)"""
    blocks = start // BLOCK_V + tl.arange(0, TILE_BLOCKS)
    return tl.max(tl.load(block_stats_ptr + blocks, mask=blocks < num_blocks, other=-(2**31)), axis=0)


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
def _filtered_row(temperature, count):
    """Whether the filters apply to the row: T >= 1e-5 (not greedy: gumbel.is_greedy) and a finite
    logit (rows that overflow are filtered too, and then sampled greedily by the reduce launch)."""
    return (temperature >= _GREEDY_BELOW) & (count > 0)


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
def filter_stats_kernel(
    logits_ptr,  # [B, V] f32|bf16|f16, rows `row_stride` elements apart, columns contiguous
    seeds_ptr,  # [B] i32|u32|i64, or [B, 2] u32 words (SEED_WORDS = 2)
    positions_ptr,  # [B] i32|i64
    temperature_ptr,  # [B] f32
    row_valid_ptr,  # [B] i32, 0 for a padding row (read with HAS_ROW_VALID): nothing read or written
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
        if tl.load(row_valid_ptr + b) == 0:  # padding: filter_row_kernel gives it token -1
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
    row_valid_ptr,  # [B] i32, 0 for a padding row (read with HAS_ROW_VALID): STATUS_SAMPLED, token -1
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
        if tl.load(row_valid_ptr + b) == 0:
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
def _largest_reaching(keys, weights, need, lo, hi, WAYS: tl.constexpr):
    """The largest t in [lo, hi] such that the `weights` of the `keys` >= t sum to at least `need`
    (lo when no t above lo does): a search of WAYS pivots a step, each step one reduction. It stands
    where a sort of the long lists' LIST keys stood: the same key, and a far smaller kernel to compile
    (issue 39: the sort of 1024 keys was about 3 s of a first call)."""
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
def _kth_largest_block_key(block_max, k, lo):
    """The largest key t in [lo, key_max] that at least k of the blocks' largest keys `block_max`
    reach (lo if fewer do): a lower bound of top-k's threshold, since those blocks hold k keys >= t
    (and its search skips the tiles below it). That t is the k-th largest block maximum (with
    multiplicity), or lo above it: one sort, where a bisection over the keys took a reduction a
    step (lab INDEX; a search of 4 pivots a step measured 4-7% slower on float32 top-k at B = 64-256)."""
    ranks = tl.arange(0, block_max.shape[0])
    kth = tl.max(tl.where(ranks == k - 1, tl.sort(block_max, descending=True), -(2**31)), axis=0)
    # -2**31: fewer than k blocks with a finite logit (or k beyond the blocks): lo
    return tl.where(kth > -(2**31), tl.maximum(lo, kth.to(tl.int64)), lo)


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
def _list_decision(list_ptr, listed_count, k, key_max, key_w, winner_may_stay, seed, position, temperature,
                   top_p_ptr, min_p_ptr, b64, HAS_TOP_P: tl.constexpr, HAS_MIN_P: tl.constexpr,
                   KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, FAST_MATH: tl.constexpr, SLOTS: tl.constexpr,
                   LIST: tl.constexpr, PAST_L1: tl.constexpr):
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
    if SLOTS <= SORTED_SLOTS:  # the short lists (most rows): one sort, the fastest at run time
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


@jit
def _min_p(min_p_ptr, b64):
    """Row b64's min_p as every kept-set test reads it: at most 1, and 0 (keeps all) for NaN."""
    min_p = tl.load(min_p_ptr + b64)
    return tl.where(min_p == min_p, tl.minimum(min_p, 1.0), 0.0)


@jit
def _kept_columns(x32, threshold, temperature, key_max, min_p_ptr, b64, HAS_MIN_P: tl.constexpr,
                  KEY_SHIFT: tl.constexpr, FP64: tl.constexpr):
    """Which of the FP32 logits `x32` of a filtered row the filters keep: key >= `threshold` (the
    top-k and top-p searches'), and with HAS_MIN_P, e >= min_p (clamped; NaN keeps all)."""
    keep = _key(x32, KEY_SHIFT) >= threshold
    if HAS_MIN_P:
        keep = keep & (_relative_probability(x32, temperature, key_max, KEY_SHIFT, FP64) >= _min_p(min_p_ptr, b64))
    return keep


@jit
def store_filtered_block(logits_ptr, b64, row_stride, V, first_col, seed, position, temperature, min_p_ptr, key_max,
                         count, threshold, partial_score_ptr, partial_index_ptr, out, HAS_MIN_P: tl.constexpr,
                         KEY_SHIFT: tl.constexpr, FP64: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr,
                         FAST_MATH: tl.constexpr):
    """store_sampled_block (stream 0) of columns first_col .. first_col + BLOCK_V - 1 of row b64, with
    the logits the filters drop (_kept_columns) set to -inf."""
    cols = first_col + tl.arange(0, BLOCK_V)
    x = load_block(logits_ptr + tl.multiple_of(b64 * row_stride, ROW_ALIGN), cols, V, FP64)
    unfiltered = x
    if _filtered_row(temperature, count):
        keep = _kept_columns(x.to(tl.float32), threshold, temperature, key_max, min_p_ptr, b64, HAS_MIN_P, KEY_SHIFT,
                             FP64)
        x = tl.where(keep, x, float("-inf"))
    if is_greedy(temperature):
        noise = tl.zeros_like(x)
    else:
        noise = block_noise(seed, position, first_col, 0, BLOCK_V, FP64, FAST_MATH)
    score, best, overflow = noisy_scores(x, noise, temperature, FP64, FAST_MATH, unfiltered)
    store_block_best(partial_score_ptr, partial_index_ptr, out, score, best, first_col, FP64, overflow)


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
    row_valid_ptr,  # [B] i32, 0 for a padding row (read with HAS_ROW_VALID): token -1, nothing read
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
    LIST: tl.constexpr = 0,  # the plan's TOP_K_LIST with top-k (0: no lists)
    SHORT_LIST: tl.constexpr = 1,  # filter_decide_kernel's
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
    the row to the searches, from the bound."""
    V = aligned(V, VOCAB_ALIGN)
    b = tl.program_id(0)
    c = tl.program_id(1)
    if HAS_ROW_VALID:
        if tl.load(row_valid_ptr + b) == 0:  # padding: no barrier, no arrival (its counters stay zero)
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
                bound = _kth_largest_block_key(block_max, k, key_min)
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
                    if listed_count <= SHORT_LIST:
                        threshold, listed_token = _list_decision(
                            list_ptr + b64 * (2 * LIST), listed_count, k, key_max, key_w, kept, seed, position,
                            temperature, top_p_ptr, min_p_ptr, b64, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64, FAST_MATH,
                            SHORT_LIST, LIST, True)
                    else:
                        threshold, listed_token = _list_decision(
                            list_ptr + b64 * (2 * LIST), listed_count, k, key_max, key_w, kept, seed, position,
                            temperature, top_p_ptr, min_p_ptr, b64, HAS_TOP_P, HAS_MIN_P, KEY_SHIFT, FP64, FAST_MATH,
                            LIST, LIST, True)
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


@functools.lru_cache(maxsize=512)
def plan_top_k_top_p_sample(logits: ArgSpec, seeds: ArgSpec, target: Target, *, has_top_k: bool, has_top_p: bool,
                            has_min_p: bool, fp64: bool, row_valid: bool = False, return_logprobs: bool = False,
                            num_top: int = 0) -> Plan:
    """The launches of `top_k_top_p_sample` on inputs `logits` [B, V] (rows `logits.strides[0]` apart,
    columns contiguous), `seeds`, `positions`, `temperature` [B] f32 and, where present, `top_k` [B]
    int32|int64, `top_p` and `min_p` [B] f32, `row_valid` [B] i32 (0: a padding row, token -1, its logits
    unread); output `tokens` [B] i32. With `return_logprobs`, input `num_top` [1] i32 and the outputs
    `sampled` (the tokens) and token_logprobs' (logprobs.with_logprobs)."""
    if return_logprobs:
        from jsample.kernels.logprobs import with_logprobs

        sampling = plan_top_k_top_p_sample(logits, seeds, target, has_top_k=has_top_k, has_top_p=has_top_p,
                                           has_min_p=has_min_p, fp64=fp64, row_valid=row_valid)
        return with_logprobs(sampling, logits, target, has_top_k=has_top_k, has_top_p=has_top_p, has_min_p=has_min_p,
                             fp64=fp64, num_top=num_top, row_valid=row_valid)
    batch, vocab = logits.shape
    tokens = Buffer("tokens", (batch,), "int32")
    if batch == 0:
        return Plan((tokens,), (), ("tokens",), "empty")
    row_stride = logits.strides[0]
    config = filtered_launch_config(batch, vocab, row_stride, logits.dtype, fp64, fast_math=not target.interpreter,
                                    large_programs=target.large_programs)
    top_k_list = TOP_K_LIST if has_top_k else 0
    # top-p's search starts with a histogram of the bracket's top keys where keys are coarse (16-bit floats:
    # float32's top HISTOGRAM_BINS keys are a sliver of any bracket)
    histogram = has_top_p and config.key_shift > 0
    if (top_k_list or histogram) and config.ways < LISTED_WAYS:
        config = _with_ways(config, LISTED_WAYS)
    gumbel = config.gumbel
    unused = "positions"  # stands in for absent filters, never read ([B], where temperature may be a number)
    top_k, top_p, min_p, valid = (name if given else unused for name, given in
                                  (("top_k", has_top_k), ("top_p", has_top_p), ("min_p", has_min_p),
                                   ("row_valid", row_valid)))
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    one = filtered_one_launch_config(batch, vocab, row_stride, logits.dtype, fp64, target)
    if one is not None:
        max_steps = 2 + one.search_steps * (has_top_k + has_top_p)  # stats, the winner's sums, the searches
        words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
        listing = top_k_list > 0
        # step 1 lists a chunk in tiles of up to 2048 columns (at small batches, one: a tile's load and
        # atomic are latency; chunk and tile are powers of two, the tile a multiple of threads * vec)
        collect_tile = max(min(one.chunk, ONE_LAUNCH_COLLECT_TILE), one.threads * one.vec)
        buffers = (Buffer("partials", (batch, 2 * max_steps * one.num_chunks * one.ways), "int32"),
                   Buffer("partial_score", (batch, one.gumbel.num_blocks * words), "float32"),
                   Buffer("partial_index", (batch, one.gumbel.num_blocks), "int32"),
                   # the rows' arrival counters, and with lists their list counts
                   Buffer("arrivals", ((1 + listing) * batch,), "int32", counters=True),
                   Buffer("block_stats", (batch, one.gumbel.num_blocks) if listing else (1,), "int32"),
                   Buffer("top_k_list", (batch, 2 * top_k_list) if listing else (1,), "int32"), tokens)
        launches = (launch(
            filtered_one_launch_kernel, (batch, one.num_chunks),
            ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, valid, vocab, row_stride,
             one.gumbel.num_blocks),
            ("partials", "partial_score", "partial_index", "arrivals", "block_stats", "top_k_list", "tokens"),
            HAS_ROW_VALID=row_valid, HAS_TOP_K=has_top_k, HAS_TOP_P=has_top_p, HAS_MIN_P=has_min_p,
            KEY_SHIFT=one.key_shift, FP64=fp64,
            CHUNK=one.chunk, BLOCK_V=one.gumbel.block_v, THREADS=one.threads, VEC=one.vec,
            ROW_ALIGN=one.gumbel.row_align, VOCAB_ALIGN=one.gumbel.vocab_align, FAST_MATH=one.gumbel.fast_math,
            WAYS=one.ways, MAX_STEPS=max_steps, MAX_CHUNKS=triton.next_power_of_2(one.num_chunks),
            REDUCE_BLOCK=one.gumbel.reduce_block, WIDE_SUMS=one.wide_sums, SEED_WORDS=seed_word_count(seeds.shape),
            LIST=top_k_list, SHORT_LIST=min(max(1, top_k_list), SHORT_TOP_K_LIST),
            COLLECT_VEC=collect_tile // one.threads, TILE_BLOCKS=max(1, collect_tile // one.gumbel.block_v),
            num_warps=one.num_warps, **options),)
        return Plan(buffers, launches, ("tokens",), "one launch")
    # int64 state and partials as pairs of int32 words (no jax_enable_x64 needed); the search
    # launches alternate between two of each (each reads the one before's)
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    buffers = [Buffer("block_stats", (batch, gumbel.num_blocks), "int32"),
               Buffer("unfiltered_score", (batch, gumbel.num_blocks * words), "float32"),
               Buffer("unfiltered_index", (batch, gumbel.num_blocks), "int32")]
    buffers += [Buffer(f"state_{i}", (batch, 2 * STATE_WORDS), "int32") for i in (0, 1, "decided")]
    buffers += [Buffer(f"partials_{i}", (batch, 2 * config.ways * config.num_chunks), "int32") for i in (0, 1)]
    buffers += [Buffer("partial_score", (batch, gumbel.num_blocks * words), "float32"),
                Buffer("partial_index", (batch, gumbel.num_blocks), "int32"), tokens,
                Buffer("top_k_list", (batch, max(1, 2 * top_k_list)), "int32"),
                Buffer("top_k_list_count", (batch,), "int32", counters=True),
                # the rows filter_decide_kernel leaves searching, for the launches after it
                Buffer("active_rows", (batch,), "int32"), Buffer("active_count", (1,), "int32", counters=True),
                # filter_histogram_step_kernel's key counts (filter_histogram_bracket_kernel leaves them zero)
                Buffer("histogram", (batch, HISTOGRAM_BINS * HISTOGRAM_BIN_STRIDE), "int32", counters=True)]
    seed_words = seed_word_count(seeds.shape)
    filters = dict(HAS_TOP_K=has_top_k, HAS_TOP_P=has_top_p)
    searches = dict(KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=config.threads, VEC=config.vec,
                    ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align, WAYS=config.ways,
                    WIDE_SUMS=config.wide_sums, FAST_MATH=gumbel.fast_math, num_warps=config.num_warps, **options)
    unfiltered = ("unfiltered_score", "unfiltered_index")
    # the search tiles' blocks of block_stats (both powers of two: a tile lies in one block, or covers whole ones)
    tiles = dict(BLOCK_V=gumbel.block_v, TILE_BLOCKS=max(1, config.threads * config.vec // gumbel.block_v))
    search = has_top_k or has_top_p
    launches = [
        launch(filter_stats_kernel, (batch, gumbel.num_blocks),
               ("logits", "seeds", "positions", "temperature", valid, vocab, row_stride), ("block_stats",) + unfiltered,
               HAS_ROW_VALID=row_valid, KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v,
               ROW_ALIGN=gumbel.row_align,
               VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, SEED_WORDS=seed_words,
               num_warps=gumbel.num_warps, **options),
        launch(filter_row_kernel, (batch,),
               ("logits", "temperature", top_k, min_p, valid, "block_stats") + unfiltered
               + (vocab, row_stride, gumbel.num_blocks), ("state_0",), HAS_ROW_VALID=row_valid, SEARCH=search,
               HAS_TOP_K=has_top_k,
               HAS_MIN_P=has_min_p, KEY_SHIFT=config.key_shift, FP64=fp64,
               REDUCE_BLOCK=gumbel.reduce_block, num_warps=4, **options)]
    state, partials = "state_0", unused  # no sums without a search: the status is never STATUS_CHECK
    if search:
        launches.append(launch(
            filter_winner_sums_kernel, (batch * config.num_chunks,),
            ("logits", "temperature", top_k, "state_0", "block_stats", vocab, row_stride, config.num_chunks,
             config.chunk, gumbel.num_blocks), ("partials_0", "top_k_list", "top_k_list_count"), **filters, ITEMS=1,
            LIST=top_k_list, **searches, **tiles))
        partials = "partials_0"
        # every row's status, final from here on, and the list of the rows searched
        launches.append(launch(
            filter_decide_kernel, (batch,),
            ("seeds", "positions", "temperature", top_k, top_p, min_p, "state_0", "partials_0", "top_k_list",
             "top_k_list_count", config.num_chunks), ("state_decided", "top_k_list_count", "active_rows",
                                                      "active_count"),
            PHASE=PHASE_TOP_K if has_top_k else PHASE_TOP_P, **filters, HAS_MIN_P=has_min_p,
            KEY_SHIFT=config.key_shift, FP64=fp64,
            FAST_MATH=gumbel.fast_math, WAYS=config.ways, MAX_CHUNKS=MAX_CHUNKS, LIST=top_k_list,
            SHORT_LIST=min(max(1, top_k_list), SHORT_TOP_K_LIST), SEED_WORDS=seed_words, num_warps=4, **options))
        state = "state_decided"

    statuses = state  # the state whose statuses are final (the decide launch's, with searches)
    compact_programs = min(batch * config.num_chunks, COMPACT_PROGRAMS)
    compact = ("active_rows", "active_count", vocab, row_stride, config.num_chunks, config.chunk, gumbel.num_blocks)
    # the listed rows' items only: each search's pivot launches, top-p's after a histogram launch; a launch
    # after filter_decide_kernel or the histogram launch starts from their state (PREV_PHASE_DECIDED)
    prev_phase, prev_mixed, launched = PREV_PHASE_DECIDED, False, 0
    for phase in [PHASE_TOP_K] * has_top_k + [PHASE_TOP_P] * has_top_p:
        kinds = ["histogram"] * (phase == PHASE_TOP_P and histogram) + ["pivots"] * config.search_steps
        for j, kind in enumerate(kinds):
            launched += 1
            new_state, new_partials = "state_1" if state == "state_0" else "state_0", f"partials_{launched % 2}"
            args = ("logits", "temperature", top_k, top_p, state, partials, "block_stats") + compact
            if kind == "histogram":  # the counts, then the bracket from them (the listed rows' state)
                launches.append(launch(
                    filter_histogram_step_kernel, (compact_programs,), args, (new_state, new_partials, "histogram"),
                    PREV_PHASE=prev_phase, **filters, MAX_CHUNKS=MAX_CHUNKS, BINS=HISTOGRAM_BINS,
                    BIN_STRIDE=HISTOGRAM_BIN_STRIDE, NARROW_MIXED=prev_mixed, **searches, **tiles))
                state, partials = new_state, new_partials
                new_state = "state_1" if state == "state_0" else "state_0"
                launches.append(launch(
                    filter_histogram_bracket_kernel, (min(batch, COMPACT_PROGRAMS),),
                    ("temperature", top_p, state, partials, "histogram", "active_rows", "active_count",
                     config.num_chunks), (new_state, "histogram"), KEY_SHIFT=config.key_shift, FP64=fp64,
                    WAYS=config.ways, MAX_CHUNKS=MAX_CHUNKS, BINS=HISTOGRAM_BINS, BIN_STRIDE=HISTOGRAM_BIN_STRIDE,
                    FAST_MATH=gumbel.fast_math, num_warps=HISTOGRAM_BRACKET_WARPS,
                    **options))
                new_partials = partials  # (unread by the launch after: it starts from the bracket's state)
                prev_phase, prev_mixed = PREV_PHASE_DECIDED, False
            else:
                mixed = config.mixed_first_pivots and kinds[j - 1:j] != ["pivots"]  # a first pivot launch
                launches.append(launch(
                    filter_compact_step_kernel, (compact_programs,), args, (new_state, new_partials), PHASE=phase,
                    PREV_PHASE=prev_phase, **filters, MAX_CHUNKS=MAX_CHUNKS, MIXED_PIVOTS=mixed,
                    NARROW_MIXED=prev_mixed, **searches, **tiles))
                prev_phase, prev_mixed = phase, mixed
            state, partials = new_state, new_partials
    blocks_per_program = COMPACT_SAMPLE_BLOCKS if search else SAMPLE_BLOCKS_PER_PROGRAM
    sample_items = batch * triton.cdiv(gumbel.num_blocks, blocks_per_program)
    launches.append(launch(
        filtered_partial_kernel, (min(sample_items, COMPACT_SAMPLE_PROGRAMS) if search else sample_items,),
        ("logits", "seeds", "positions", "temperature", top_k, top_p, min_p, state, partials) + unfiltered
        + ("block_stats",) + (("active_rows", "active_count") if search else (unused, unused))
        + (vocab, row_stride, config.num_chunks, gumbel.num_blocks),
        ("partial_score", "partial_index"),
        PREV_PHASE=prev_phase if search else PHASE_WINNER, **filters, HAS_MIN_P=has_min_p,
        KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v, BLOCKS_PER_PROGRAM=blocks_per_program,
        ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways,
        MAX_CHUNKS=MAX_CHUNKS, SEED_WORDS=seed_words, ITEMS=1, NARROW_MIXED=prev_mixed, COMPACT=search,
        num_warps=gumbel.num_warps, **options))
    launches.append(launch(
        filtered_reduce_kernel, (batch,),
        (statuses,) + unfiltered + ("partial_score", "partial_index", "logits", vocab, row_stride, gumbel.num_blocks),
        ("tokens", "active_count"), FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block, num_warps=1, **options))
    used = {name for step in launches for name in step.args + step.outputs}
    return Plan(tuple(b for b in buffers if b.name in used), tuple(launches), ("tokens",),
                f"{len(launches)} launches")
