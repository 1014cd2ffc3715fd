"""Keys, masses and the kept set: what every filtered launch computes of a logit.

- `_key`: an order-preserving integer key of a float32 logit (x < y iff key(x) < key(y)); the low
  KEY_SHIFTS bits are zero for bfloat16 / float16 logits, whose keys are then one value each.
- `_relative_probability`: e = exp(x / T - max / T) = p / p_max; `_fixed_point_mass`: floor(e * 2**24) as
  an integer. Every top-p sum adds these integers, so no order, tiling or batch changes a sum.
- `_kept_columns` / `store_filtered_block`: the kept test (key >= the threshold, and e >= min_p) and
  gumbel_sample's block partials of a row with every other logit masked: the same scores, fewer candidates.
"""

import triton.language as tl

from jsample.kernels.common import (
    block_noise,
    inverse_temperature,
    is_greedy,
    load_block,
    noisy_scores,
    store_block_best,
)
from jsample.kernels.host import jit
from jsample.kernels.filtered.config import _GREEDY_BELOW, _MASS_SCALE

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
def _filtered_row(temperature, count):
    """Whether the filters apply to the row: T >= 1e-5 (not greedy: gumbel.is_greedy) and a finite
    logit (rows that overflow are filtered too, and then sampled greedily by the reduce launch)."""
    return (temperature >= _GREEDY_BELOW) & (count > 0)


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
    the logits the filters drop (_kept_columns) set to -inf. Returns the block's unfiltered logits."""
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
    return unfiltered
