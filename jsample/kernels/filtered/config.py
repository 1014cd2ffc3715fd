"""The filtered plans' tilings and constants (host side, and the constexpr copies the kernels read).

The tiling (chunks a row, pivots a search launch, the one-launch plan's chunk and steps) follows the
vocabulary, the dtype and whether a batch is small or many rows, never the batch size itself: no batch size
costs a compilation (tests/test_compiles.py). The kept set never depends on the tiling: counts and
fixed-point masses are integer sums, and the searches are exact.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import triton
import triton.language as tl

from jsample.kernels.common import GREEDY_BELOW
from jsample.kernels.gumbel import GumbelLaunchConfig, gumbel_launch_config, many_rows_config
from jsample.kernels.plan import Target

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
