"""Device helpers shared by several ops: block loads, the greedy and overflow rules, Gumbel-max
scores and their two-stage argmax (block partials, then the lowest best column per row).

Every Gumbel-max in jsample scores with `noisy_scores` and reduces with `reduce_block_best_flagged`
(large FP64 `gumbel_sample` plans: `store_fp64_block_interval` and `reduce_fp64_intervals`, the same
FP64 scores), so `gumbel_sample`, `top_k_top_p_sample` and `rejection_sample` pick tokens by the very
same code.
Greedy rows (docs/STREAM.md, "Clarifications of version 1"): a temperature below 1e-5 (negative
ones too, and NaN: unchecked device values) is greedy, and so is a row in which some finite x_k / T
overflows float32; a block that finds the overflow stores its column as -1 - column, and the reduce
step then takes the row's greedy argmax itself (`greedy_argmax_row`: only such rows pay for it).
"""

import triton.language as tl

from jsample.kernels.host import jit
from jsample.kernels.stream import (fp64_noise_estimate, fp64_noise_in_fp32, fp64_words_block, gumbel_noise, load_seed,
                                    philox_block, uniform_block, uniform_f64)

GREEDY_BELOW = 1e-5  # docs/STREAM.md: a temperature below this is greedy
_GREEDY_BELOW = tl.constexpr(GREEDY_BELOW)


def largest_power_of_two_dividing(n: int, cap: int) -> int:
    """The largest power of two <= cap that divides n (cap for n = 0)."""
    align = 1
    while align < cap and n % (align * 2) == 0:
        align *= 2
    return align


@jit
def aligned(n, ALIGN: tl.constexpr):
    """`n` itself (a multiple of ALIGN), in a form the compiler knows is a multiple of ALIGN.

    torch's Triton launcher tells the compiler which integer arguments are multiples of 16;
    jax-triton does not, and then every masked load of a row (`cols < V`) is split into scalar loads
    (2-byte loads for bf16, 8x the instructions). tl.multiple_of has no effect on a scalar argument;
    this product does (checked in the PTX of both frontends' kernels, tests/test_compiled_kernels.py).
    """
    return (n // ALIGN) * ALIGN


@jit
def load_block(row_ptr, cols, V, FP64: tl.constexpr):
    """Logits of columns `cols` of one row, widened to FP32 (FP64 when FP64); -inf for padding."""
    x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    if FP64:
        x = x.to(tl.float64)
    return x


@jit
def is_padding(row_valid_ptr, row):
    """Whether request `row` is padding (num_valid). `row_valid` is either [B] uint8 row flags, 0 for a padding
    row (JAX: an array with the requests, which vmap and batch sharding split with them), or an int32 / int64
    count [1], num_valid itself: the rows at or past it (torch: the caller's scalar tensor, read on the device,
    no kernel a call to make flags). Told apart by the pointer's dtype, at compile time."""
    if row_valid_ptr.dtype.element_ty == tl.uint8:
        return tl.load(row_valid_ptr + row) == 0
    else:
        return row >= tl.load(row_valid_ptr)


@jit
def rows_to_visit(row_valid_ptr, num_rows):
    """The end of the rows a row-slot loop over num_rows (B) rows visits: B with row flags, num_valid with a
    count (clamped to [0, B]: the rows past it are padding, a slot past it has nothing to do)."""
    if row_valid_ptr.dtype.element_ty == tl.uint8:
        return num_rows
    else:
        return tl.minimum(tl.maximum(tl.load(row_valid_ptr), 0), num_rows).to(tl.int32)


@jit
def load_temperature(temperature, row):
    """Row `row`'s temperature: `temperature` is a pointer to [B] f32 values, or one f32 value for
    every row (an eager torch call with a Python number: no device array to fill; Triton compiles a
    variant per argument type, decided here at compile time)."""
    if temperature.dtype.is_ptr():
        return tl.load(temperature + row)
    else:
        return temperature


@jit
def inverse_temperature(temperature, FP64: tl.constexpr):
    """1 / T, in FP32 (FP64): x / T is computed as x * (1 / T), one division per program, not per column."""
    if FP64:
        return 1.0 / temperature.to(tl.float64)
    else:
        return 1.0 / temperature


@jit
def is_greedy(temperature):
    """Whether a row with this temperature is greedy: T < 1e-5, and NaN (an unchecked device value:
    STREAM.md allows -1 only for rows without a finite logit, and NaN scores would give it)."""
    return not (temperature >= _GREEDY_BELOW)


@jit
def overflow_from_magnitude(x, magnitude, temperature):
    """Whether some finite logit of the block `x` has |x| * (1 / T) beyond the FP32 range, with the
    product rounded in FP32 (as FP32 scores are; the same rule in FP64 mode), given `magnitude`, the
    block's largest |x| (reduced together with another max by the caller: max_and_magnitude).
    Rounding is monotonic, so the largest |x| decides, and only T < 1 (1 / T > 1) can overflow a
    finite logit; the masks run only in blocks where that largest |x| (which counts +-inf logits and
    padding too) times 1 / T is not finite."""
    inverse_t = 1.0 / temperature.to(tl.float32)
    overflow = False
    if (inverse_t > 1.0) & (not (magnitude.to(tl.float32) * inverse_t < float("inf"))):  # NaN: interpreter
        finite = tl.abs(x.to(tl.float32))
        finite_max = tl.max(tl.where(finite < float("inf"), finite, 0.0), axis=0)
        overflow = finite_max * inverse_t == float("inf")
    return overflow


@jit
def block_noise(seed, position, first_col, STREAM: tl.constexpr, BLOCK_V: tl.constexpr, FP64: tl.constexpr,
                FAST_MATH: tl.constexpr):
    """The Gumbel noise g of columns first_col .. first_col + BLOCK_V - 1 (STREAM.md)."""
    return gumbel_noise(uniform_block(seed, position, first_col, STREAM, BLOCK_V, FP64, FAST_MATH), FP64, FAST_MATH)


@jit
def _maximum_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@jit
def max_flagging_nan(x, FAST_MATH: tl.constexpr):
    """The largest element of a 1-D block, or NaN or +inf when an element is NaN, so that
    `max_flagging_nan(x) < inf` proves the block holds no NaN and no +inf. On a GPU (FAST_MATH) a
    NaN-propagating max, one max.NaN per column, the cost of a plain max; the interpreter runs a
    custom reduction 8x slower than tl.max, so there NaNs are mapped to +inf first."""
    if FAST_MATH:
        return tl.reduce(x, 0, _maximum_keeping_nan)
    else:
        return tl.max(tl.where(x != x, float("inf"), x), axis=0)


@jit
def _maximum_pair(a, b, c, d):
    return tl.maximum(a, c, propagate_nan=tl.PropagateNan.ALL), tl.maximum(b, d)


@jit
def largest_finite(y):
    """The largest finite element of a 1-D block (-inf when none is finite)."""
    return tl.max(tl.where(tl.abs(y) < float("inf"), y, float("-inf")), axis=0)


@jit
def max_and_magnitude(x, y, FAST_MATH: tl.constexpr):
    """(max_flagging_nan(x), the largest |y|) in one reduction on a GPU: a second reduction would add
    its own shuffles and barrier to every block (measured 6-14% of gumbel_sample)."""
    if FAST_MATH:
        return tl.reduce((x, tl.abs(y)), 0, _maximum_pair)
    else:
        return max_flagging_nan(x, False), tl.max(tl.abs(y), axis=0)


@jit
def noisy_scores(x, noise, temperature, FP64: tl.constexpr, FAST_MATH: tl.constexpr, unfiltered,
                 MAY_BE_GREEDY: tl.constexpr = True):
    """(scores, their max, whether the row overflows): the Gumbel-max scores x / T + g (x itself when
    T < 1e-5: greedy), where non-candidates (padding, non-finite logits, NaN scores) score -inf, and
    whether some finite logit of `unfiltered` (x before a filter dropped any) overflows
    when scaled (overflow_from_magnitude; never for greedy rows). Every Gumbel-max in jsample scores
    with this. FAST_MATH (FP32) fuses the multiply-add: one rounding instead of two.

    A +inf or NaN logit makes its raw score +inf, NaN or -inf (x * (1/T) + g with g finite), so
    when the block's raw scores hold no NaN or +inf, every raw score above -inf is a candidate and
    the raw scores are the answer: the masks below (3 instructions a column) run only for blocks
    with a NaN or +inf score, which max_flagging_nan finds at the cost of the plain max.
    MAY_BE_GREEDY=False: the caller has ruled greedy rows out (a greedy branch here is compiled even
    where never taken, and the compiler may run its max for every row)."""
    overflow = False
    if MAY_BE_GREEDY and is_greedy(temperature):
        score = x
        best = max_flagging_nan(score, FAST_MATH)
    else:
        if FAST_MATH and not FP64:
            score = tl.fma(x, inverse_temperature(temperature, FP64), noise)
        else:
            score = x * inverse_temperature(temperature, FP64) + noise
        best, magnitude = max_and_magnitude(score, unfiltered, FAST_MATH)
        overflow = overflow_from_magnitude(unfiltered, magnitude, temperature)
    if not (best < float("inf")):
        if MAY_BE_GREEDY and is_greedy(temperature):
            candidate = tl.abs(x) < float("inf")  # false for +-inf and NaN
        else:
            # x < inf drops +inf and NaN logits, score > -inf drops NaN scores (and -inf logits)
            candidate = (x < float("inf")) & (score > float("-inf"))
        score = tl.where(candidate, score, float("-inf"))
        best = tl.max(score, axis=0)
    return score, best, overflow


@jit
def store_block_best(partial_score_ptr, partial_index_ptr, out, score, best, first_col, FP64: tl.constexpr,
                     overflow=False):
    """The block's best score `best` (= tl.max(score)) and its lowest column, in the layout
    reduce_block_best reads; with `overflow` (noisy_scores) the column is stored as
    -1 - column, which tells the reduce launch that the row is greedy.

    `score` is never NaN (non-candidates score -inf), so the lowest offset holding the max is the
    argmax: 4 instructions per column against 7 for tl.max(return_indices=True), whose combine also
    orders NaNs and pairs of indices."""
    offsets = tl.arange(0, score.shape[0])
    best_offset = tl.min(tl.where(score == best, offsets, score.shape[0]), axis=0)
    if FP64:
        tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, best)
    else:
        tl.store(partial_score_ptr + out, best)
    column = (first_col + best_offset).to(tl.int32)
    tl.store(partial_index_ptr + out, tl.where(overflow, -1 - column, column))


FP64_SHORTLIST_MAX = tl.constexpr(8)  # more candidates than this (adversarial logits): the block in chunks
_FP64_CHUNK = tl.constexpr(128)


@jit
def _fp64_scores(row_ptr, first_col, V, seed, position, inverse_t, STREAM: tl.constexpr, BLOCK: tl.constexpr,
                 FAST_MATH: tl.constexpr):
    """FP64 Gumbel-max scores of columns first_col .. first_col + BLOCK - 1 (a multiple of 4), by
    noisy_scores' operations: -inf for padding and non-finite logits (rows that overflow never get
    here)."""
    cols = first_col + tl.arange(0, BLOCK)
    x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    lo, hi = fp64_words_block(seed, position, first_col, STREAM, BLOCK, FAST_MATH)
    return _fp64_score(x, lo, hi, inverse_t)


@jit
def _fp64_score(x, lo, hi, inverse_t):
    """The FP64 Gumbel-max score of logits x (FP32) whose uniforms have the words (lo, hi), by
    noisy_scores' operations; -inf for a non-finite logit. Every FP64 score of a column runs this."""
    score = x.to(tl.float64) * inverse_t + gumbel_noise(uniform_f64(lo, hi), True)
    return tl.where(tl.abs(x) < float("inf"), score, float("-inf"))


@jit
def _fp64_column_score(row_ptr, column, V, seed, position, inverse_t, STREAM: tl.constexpr, FAST_MATH: tl.constexpr):
    """_fp64_scores of one column (scored with the three others of its call pair, 4-aligned)."""
    quad = column - column % 4
    scores = _fp64_scores(row_ptr, quad, V, seed, position, inverse_t, STREAM, 4, FAST_MATH)
    return tl.max(tl.where(tl.arange(0, 4) == column - quad, scores, float("-inf")), axis=0)


@jit
def fp64_sampled_best(x, lo, hi, row_ptr, first_col, V, seed, position, temperature, STREAM: tl.constexpr,
                      FAST_MATH: tl.constexpr):
    """(best score, its lowest offset, whether the row overflows) of the FP64 Gumbel-max scores
    x / T + g(u) of one block (T >= 1e-5; x the block's logits in FP32, (lo, hi) its uniforms'
    words, row_ptr + first_col its first column): exactly noisy_scores' FP64 answer, at nearly FP32
    cost. Every column is scored in FP32 with a bound on the distance to its FP64 score
    (fp64_noise_in_fp32's, plus |x / T| * 2**-20 for the FP32 product and sum); only the columns
    whose upper bound reaches the block's best lower bound can hold the FP64 maximum (every other
    one is below it), and only those (one, nearly always) are scored in FP64, lowest column first.
    More than FP64_SHORTLIST_MAX of them (logits beyond ~1e5 * T) score the whole block in FP64, in
    chunks; a row that overflows is greedy, its scores unused."""
    noise, bound = fp64_noise_in_fp32(lo, hi, FAST_MATH)
    score, best, overflow = noisy_scores(x, noise, temperature, False, FAST_MATH, x)
    bound += tl.abs(x) * inverse_temperature(temperature, False) * 9.5367431640625e-07  # 2**-20
    lower = tl.max(score - bound, axis=0)
    shortlist = (score > float("-inf")) & (score >= lower - bound)
    count = tl.sum(shortlist.to(tl.int32), axis=0)
    offsets = tl.arange(0, x.shape[0])
    inverse_t = inverse_temperature(temperature, True)
    best64 = inverse_t * 0.0 + float("-inf")
    best_offset = first_col * 0
    if overflow:
        count = 0
    if count <= FP64_SHORTLIST_MAX:
        taken = 0
        while taken < count:  # in column order: a later column must score higher to win a tie
            offset = tl.min(tl.where(shortlist, offsets, x.shape[0]), axis=0)
            shortlist = shortlist & (offsets != offset)
            value = _fp64_column_score(row_ptr, first_col + offset, V, seed, position, inverse_t, STREAM, FAST_MATH)
            best_offset = tl.where(value > best64, offset, best_offset)
            best64 = tl.maximum(best64, value)
            taken += 1
    else:
        best64, best_offset = fp64_block_best(row_ptr, first_col, V, seed, position, inverse_t, STREAM, x.shape[0],
                                              FAST_MATH)
    return best64, best_offset, overflow


@jit
def fp64_block_best(row_ptr, first_col, V, seed, position, inverse_t, STREAM: tl.constexpr, BLOCK_V: tl.constexpr,
                    FAST_MATH: tl.constexpr):
    """(best FP64 score, its lowest offset) of columns first_col .. first_col + BLOCK_V - 1 of a row
    that does not overflow, every column scored in FP64, in chunks (-inf, 0: no candidate)."""
    best64 = inverse_t * 0.0 + float("-inf")
    best_offset = first_col * 0
    for chunk in tl.range(0, BLOCK_V, _FP64_CHUNK):
        scores = _fp64_scores(row_ptr, first_col + chunk, V, seed, position, inverse_t, STREAM, _FP64_CHUNK, FAST_MATH)
        chunk_best = tl.max(scores, axis=0)
        chunk_offset = chunk + tl.min(tl.where(scores == chunk_best, tl.arange(0, _FP64_CHUNK), _FP64_CHUNK), axis=0)
        best_offset = tl.where(chunk_best > best64, chunk_offset, best_offset)
        best64 = tl.maximum(best64, chunk_best)
    return best64, best_offset


@jit
def _opaque(value, FAST_MATH: tl.constexpr):
    """`value` (an int32 scalar), which the compiler cannot see through on a GPU: what is computed from
    it is computed again, not reused from earlier values kept live (registers)."""
    if FAST_MATH:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [value], dtype=tl.int32, is_pure=True, pack=1)
    else:
        return value


@jit
def _fp64_columns_best(row_ptr, first_col, columns, V, seed, position, inverse_t, STREAM: tl.constexpr,
                       FAST_MATH: tl.constexpr):
    """(best FP64 score, its lowest column) of the columns first_col + `columns` (an int32 block; -1:
    none), scored side by side (_fp64_score; the words of a column: call column // 2, words (w0, w1)
    for an even column and (w2, w3) for an odd one, as fp64_words_block interleaves them)."""
    cols = first_col + columns
    x = tl.load(row_ptr + cols, mask=(columns >= 0) & (cols < V), other=float("-inf")).to(tl.float32)
    w0, w1, w2, w3 = philox_block(seed, position, (cols // 2).to(tl.uint32), STREAM, FAST_MATH)
    odd = (cols % 2) == 1
    score = _fp64_score(x, tl.where(odd, w2, w0), tl.where(odd, w3, w1), inverse_t)
    best = tl.max(score, axis=0)
    return best, tl.min(tl.where(score == best, columns, 2147483647), axis=0)


@jit
def _fp64_near_best(row_ptr, first_col, V, seed, position, temperature, STREAM: tl.constexpr,
                    BLOCK_V: tl.constexpr, FAST_MATH: tl.constexpr):
    """store_fp64_block_interval's rare blocks (T >= 1e-5, the row does not overflow): (the block's best
    FP64 score, its lowest offset). The block's FP32 scores are computed again as there (+inf: an
    extreme column); with M the best non-extreme score and c its bound, a non-extreme column below
    M - 2c is strictly below M's column in FP64, so only M's column, its near ties and the extreme
    columns can hold the FP64 best. Up to four of them (nearly always two: M's and one extreme column)
    are scored in FP64 side by side; more: the whole block (fp64_block_best). Scoring the whole block
    in FP64 every time made these blocks (0.4% of them) ~4x slower than the others, a 5-7 us tail on
    the partial launch at B = 64-256 (benchmarks/lab/INDEX.md)."""
    offsets = tl.arange(0, BLOCK_V)
    # The words are drawn again, not the hot path's kept live through its reductions (registers). So
    # are 16-bit logits; fp32 logits are reused (fewer registers on sm_90 either way, triton 3.6:
    # benchmarks/lab/INDEX.md).
    again = _opaque(first_col, FAST_MATH)
    if row_ptr.dtype.element_ty != tl.float32:
        first_col = again
    x = load_block(row_ptr, first_col + offsets, V, False)
    lo, hi = fp64_words_block(seed, position, again, STREAM, BLOCK_V, FAST_MATH)
    g, extreme = fp64_noise_estimate(lo, hi, FAST_MATH)
    # noisy_scores' scores, +inf for the extreme columns (the masks run: the block holds +inf scores)
    noise = tl.where(extreme, float("inf"), g)
    if FAST_MATH:
        score = tl.fma(x, inverse_temperature(temperature, False), noise)
    else:
        score = x * inverse_temperature(temperature, False) + noise
    score = tl.where((x < float("inf")) & (score > float("-inf")), score, float("-inf"))
    best = tl.max(tl.where(score < float("inf"), score, float("-inf")), axis=0)
    bound = 2.44140625e-04 + (tl.abs(best) + 12.0) * 3.814697265625e-06  # store_fp64_block_interval's c
    near = score >= tl.where(best > float("-inf"), best - 2.0 * bound, float("inf"))  # and every +inf (extreme)
    count, lowest, highest = _count_lowest_highest(near, offsets, FAST_MATH)
    inverse_t = inverse_temperature(temperature, True)
    # up to four near columns: the lowest and highest, then the lowest and highest between them (a
    # block with two extreme columns, one in ~4 calls at B = 64, V = 262144, would otherwise take
    # fp64_block_best and hold the whole launch up: benchmarks/lab/INDEX.md); -1: no column
    slots = tl.arange(0, 4)
    columns = tl.where(slots == 0, tl.where(count > 0, lowest, -1), tl.where(slots == 1, highest, -1))
    if count > 2:
        inner = near & (offsets > lowest) & (offsets < highest)
        _, second_lowest, second_highest = _count_lowest_highest(inner, offsets, FAST_MATH)
        columns = tl.where(slots == 2, second_lowest, tl.where(slots == 3, tl.where(count > 3, second_highest, -1),
                                                                 columns))
    if count <= 4:
        best64, best_offset = _fp64_columns_best(row_ptr, first_col, columns, V, seed, position, inverse_t, STREAM,
                                                 FAST_MATH)
    else:
        best64, best_offset = fp64_block_best(row_ptr, first_col, V, seed, position, inverse_t, STREAM, BLOCK_V,
                                              FAST_MATH)
    return best64, best_offset


@jit
def store_fp64_block_interval(logits_ptr, row, row_stride, V, first_col, seed, position, temperature,
                              partial_score_ptr, partial_bound_ptr, partial_index_ptr, out, STREAM: tl.constexpr,
                              BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr):
    """gumbel_sample's FP64 block partial, nearly always without FP64 arithmetic: reduce_fp64_intervals
    scores in FP64 only the few blocks (one, nearly always) that can hold the row's maximum, so the
    FP64 logs run once a row, not once a block. Stores, at `out`, a score s (f64), a bound c (f32)
    and a column (-1 - column: the row overflows), one of:
      c == 0: s is the block's FP64 best score and the column its lowest column (greedy rows, and the
              rare blocks below, scored exactly); s = -inf: no candidate;
      c > 0:  the column is the block's only FP64 argmax (every other column scores strictly less in
              FP64), and its FP64 score lies in [s - c, s + c].

    Every column is scored in FP32 with fp64_noise_estimate's noise. Outside its extremes (u < 2**-17
    or 1 - u < 2**-20) a column's FP32 score is within e_k = 2**-13 + (|g_k| + |x_k / T|) * 2**-20 of
    its FP64 score (fp64_noise_in_fp32's bound, plus the FP32 product and sum), and |g_k| < 11.8.
    With M the best FP32 score of the block's non-extreme columns and c = 2**-12 + (|M| + 12) * 2**-18:
    e_k <= c for the best column, and a column scoring below M - 2c in FP32 is strictly below the best
    column in FP64 (for |score_k| <= 2|M| + 12, e_k + e_best <= 2**-12 + (3|M| + 60) * 2**-20, which
    2c exceeds by far more than the FP32 rounding of M - 2c; below that, score_k + e_k < M - 11).
    So a block whose only column within 2c of M is M's own, and which has no extreme column, stores
    (M, c, that column); any other block (an extreme column, which scores +inf here: 0.4% of blocks
    of 512 columns; or a near tie) stores its exact FP64 best, from FP64 scores of the columns that
    can hold it (_fp64_near_best). tests/test_gumbel.py forces both kinds."""
    cols = first_col + tl.arange(0, BLOCK_V)
    row_ptr = logits_ptr + tl.multiple_of(row.to(tl.int64) * row_stride, ROW_ALIGN)
    x = load_block(row_ptr, cols, V, False)
    offsets = tl.arange(0, BLOCK_V)
    if is_greedy(temperature):  # exact scores, the logits, compared in FP32 as in FP64 (widening keeps their order)
        score, best, overflow = noisy_scores(x, tl.zeros_like(x), temperature, False, FAST_MATH, x)
        best_offset = tl.min(tl.where(score == best, offsets, BLOCK_V), axis=0)
        best64 = best.to(tl.float64)
        bound = 0.0
    else:
        lo, hi = fp64_words_block(seed, position, first_col, STREAM, BLOCK_V, FAST_MATH)
        g, extreme = fp64_noise_estimate(lo, hi, FAST_MATH)
        # An extreme column scores +inf (a finite logit plus +inf noise): a best of +inf in a row that
        # does not overflow says that the block has one, with no flag kept past the max (-inf and NaN
        # logits stay no candidate: -inf + inf is NaN).
        score, best, overflow = noisy_scores(x, tl.where(extreme, float("inf"), g), temperature, False, FAST_MATH, x,
                                             MAY_BE_GREEDY=False)
        bound = 2.44140625e-04 + (tl.abs(best) + 12.0) * 3.814697265625e-06  # 2**-12 + (|M| + 12) * 2**-18
        threshold = tl.where(best > float("-inf"), best - 2.0 * bound, float("inf"))
        # One sum counts and locates: 2**16 + offset for each column within 2c of M (M's own
        # included). A count of 1 is M's column alone, and the low bits are its offset.
        packed = tl.where(score >= threshold, 65536 + offsets, 0)
        if BLOCK_V > 2048:  # the interpreter's large blocks: 64-bit sums
            packed = packed.to(tl.int64)
        packed = tl.sum(packed, axis=0)
        best_offset = (packed & 65535).to(tl.int32)
        best64 = best.to(tl.float64)
        bound = tl.where(tl.abs(best) < float("inf"), bound, 0.0)
        if ((packed >= 131072) | (best == float("inf"))) & (not overflow):  # overflow: greedy, scores unused
            # rare (an extreme column or a near tie): FP64 scores for a few columns, none of the values
            # above kept for them (fewer live registers)
            best64, best_offset = _fp64_near_best(row_ptr, first_col, V, seed, position, temperature, STREAM, BLOCK_V,
                                                  FAST_MATH)
            bound = 0.0
    tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, best64)
    tl.store(partial_bound_ptr + out, bound)
    column = (first_col + best_offset).to(tl.int32)
    tl.store(partial_index_ptr + out, tl.where(overflow, -1 - column, column))


@jit
def reduce_fp64_intervals(partial_score_ptr, partial_bound_ptr, partial_index_ptr, row, num_blocks, row_ptr, V,
                          seeds_ptr, positions_ptr, temperature_ptr, STREAM: tl.constexpr, FAST_MATH: tl.constexpr,
                          REDUCE_BLOCK: tl.constexpr, SEED_WORDS: tl.constexpr):
    """reduce_block_best_flagged for store_fp64_block_interval's partials: (row `row`'s FP64 Gumbel-max
    token, -1 when no score is finite; whether a block flagged the row as overflowing). The row's FP64
    best lies at or above L = max(s - c) over its blocks, so only blocks with s + c >= L can hold it:
    exact blocks (c == 0) give their score, the others (one, nearly always) are scored in FP64 at their
    column, in column order (the lowest column wins a tie). f64 rounding of s +- c is far inside c's
    slack (store_fp64_block_interval)."""
    blocks = tl.arange(0, REDUCE_BLOCK)
    offsets = row.to(tl.int64) * num_blocks + blocks
    score_ptr = partial_score_ptr.to(tl.pointer_type(tl.float64))
    scores = tl.load(score_ptr + offsets, mask=blocks < num_blocks, other=float("-inf"))
    bounds = tl.load(partial_bound_ptr + offsets, mask=blocks < num_blocks, other=0.0)
    columns = tl.load(partial_index_ptr + offsets, mask=blocks < num_blocks, other=0)
    # the candidates' inputs, loaded with the partials: no round trip to memory after them but the logits'
    seed = load_seed(seeds_ptr, row, SEED_WORDS)
    position = tl.load(positions_ptr + row).to(tl.int64)
    inverse_t = inverse_temperature(load_temperature(temperature_ptr, row), True)
    bounds = bounds.to(tl.float64)
    # two reductions (each a round of shuffles and a barrier, a serial chain in this one-row program):
    # the floor with the lowest column (negative: the row overflows), then the exact blocks' best with
    # its lowest column, the count of the other candidates and the lowest of them
    floor, lowest = tl.reduce((scores - bounds, columns), 0, _max_and_min)
    candidate = (scores > float("-inf")) & (scores + bounds >= floor)
    exact = candidate & (bounds == 0.0)
    pending = candidate & (bounds > 0.0) & (lowest >= 0)
    best, token, remaining, column = tl.reduce(
        (tl.where(exact, scores, float("-inf")), tl.where(exact, columns, 2147483647), pending.to(tl.int32),
         tl.where(pending, columns, 2147483647)), 0, _best_lowest_count_min)
    while remaining > 0:
        value = _fp64_column_score(row_ptr, column, V, seed, position, inverse_t, STREAM, FAST_MATH)
        better = (value > best) | ((value == best) & (column < token))
        token = tl.where(better, column, token)
        best = tl.where(better, value, best)
        remaining -= 1
        if remaining > 0:  # rare: the next candidate, in column order
            pending = pending & (columns > column)
            column = tl.min(tl.where(pending, columns, 2147483647), axis=0)
    return tl.where(best > float("-inf"), token, -1), lowest < 0


@jit
def _count_lowest_highest(mask, offsets, FAST_MATH: tl.constexpr):
    """(how many of `mask` are set, the lowest offset set (offsets.shape[0]: none), the highest (-1: none)):
    on a GPU (FAST_MATH) one custom reduction, one shuffle chain; in the interpreter, which runs a custom
    reduction 8x slower, three plain ones."""
    if FAST_MATH:
        return tl.reduce((mask.to(tl.int32), tl.where(mask, offsets, offsets.shape[0]), tl.where(mask, offsets, -1)),
                         0, _sum_min_max)
    return (tl.sum(mask.to(tl.int32), axis=0), tl.min(tl.where(mask, offsets, offsets.shape[0]), axis=0),
            tl.max(tl.where(mask, offsets, -1), axis=0))


@jit
def _sum_min_max(count_a, low_a, high_a, count_b, low_b, high_b):
    return count_a + count_b, tl.minimum(low_a, low_b), tl.maximum(high_a, high_b)


@jit
def _max_and_min(a, b, c, d):
    return tl.maximum(a, c), tl.minimum(b, d)


@jit
def _best_lowest_count_min(score_a, column_a, count_a, pending_a, score_b, column_b, count_b, pending_b):
    """The higher score with its column (the lower column on a tie), the sum of the counts, the lower
    pending column."""
    first = (score_a > score_b) | ((score_a == score_b) & (column_a < column_b))
    return (tl.where(first, score_a, score_b), tl.where(first, column_a, column_b), count_a + count_b,
            tl.minimum(pending_a, pending_b))


@jit
def store_sampled_block(logits_ptr, row, row_stride, V, first_col, seed, position, temperature, partial_score_ptr,
                        partial_index_ptr, out, STREAM: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr,
                        FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """Block partials (store_block_best, at `out`) of the Gumbel-max sample of row `row`'s columns
    first_col .. first_col + BLOCK_V - 1, flagged when the row's scaled logits overflow: every
    unfiltered Gumbel-max in jsample (gumbel_sample, and rejection_sample's sampled rows) runs this.
    Returns the block's logits as FP32 (-inf for padding)."""
    cols = first_col + tl.arange(0, BLOCK_V)
    row_ptr = logits_ptr + tl.multiple_of(row.to(tl.int64) * row_stride, ROW_ALIGN)
    x32 = load_block(row_ptr, cols, V, False)
    if FP64 and not is_greedy(temperature):  # FP64 scores only for a shortlist (fp64_sampled_best)
        lo, hi = fp64_words_block(seed, position, first_col, STREAM, BLOCK_V, FAST_MATH)
        best64, best_offset, overflow64 = fp64_sampled_best(x32, lo, hi, row_ptr, first_col, V, seed, position,
                                                            temperature, STREAM, FAST_MATH)
        tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, best64)
        column = (first_col + best_offset).to(tl.int32)
        tl.store(partial_index_ptr + out, tl.where(overflow64, -1 - column, column))
    else:
        x = x32
        if FP64:
            x = x32.to(tl.float64)
        if is_greedy(temperature):
            noise = tl.zeros_like(x)
        else:
            noise = block_noise(seed, position, first_col, STREAM, BLOCK_V, FP64, FAST_MATH)
        score, best, overflow = noisy_scores(x, noise, temperature, FP64, FAST_MATH, x)
        store_block_best(partial_score_ptr, partial_index_ptr, out, score, best, first_col, FP64, overflow)
    return x32


@jit
def greedy_argmax_row(row_ptr, V, BLOCK: tl.constexpr):
    """argmax_k x_k over the finite logits of one row (lowest column on ties; -1 if none), by one
    program looping over the row: the reduce launch's fallback for rows that overflow."""
    best = float("-inf")
    column = -1
    start = 0
    while start < V:  # a while loop: the interpreter cannot range() over a runtime bound
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        x = tl.where(tl.abs(x) < float("inf"), x, float("-inf"))
        block_best = tl.max(x, axis=0)
        if block_best > best:  # strictly: an earlier block keeps a tie
            best = block_best
            column = tl.min(tl.where(x == block_best, cols, 2147483647), axis=0)
        start += BLOCK
    return column


@jit
def reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, row, num_blocks, FP64: tl.constexpr,
                              REDUCE_BLOCK: tl.constexpr, BYPASS_L1: tl.constexpr):
    """Second stage of every argmax in jsample: (the lowest column among row `row`'s best block
    scores (lowest block on ties, and each block holds its lowest best column), -1 when no score is
    finite; whether a block flagged the row as overflowing (store_block_best)). BYPASS_L1: load past
    L1 (".cg"), where other programs of the same launch wrote the partials."""
    blocks = tl.arange(0, REDUCE_BLOCK)
    offsets = row.to(tl.int64) * num_blocks + blocks
    score_ptr = partial_score_ptr.to(tl.pointer_type(tl.float64)) if FP64 else partial_score_ptr
    if BYPASS_L1:
        scores = tl.load(score_ptr + offsets, mask=blocks < num_blocks, other=float("-inf"), cache_modifier=".cg")
        columns = tl.load(partial_index_ptr + offsets, mask=blocks < num_blocks, other=0, cache_modifier=".cg")
    else:
        scores = tl.load(score_ptr + offsets, mask=blocks < num_blocks, other=float("-inf"))
        columns = tl.load(partial_index_ptr + offsets, mask=blocks < num_blocks, other=0)
    # the columns are loaded with the scores, not after the argmax: one dependent load less, the
    # latency of the small-batch launches. Blocks hold increasing column ranges, so the lowest column
    # among the best blocks is the best block's own.
    best = tl.max(scores, axis=0)
    column = tl.min(tl.where(scores == best, columns, 2147483647), axis=0)
    return tl.where(best > float("-inf"), column, -1), tl.min(columns, axis=0) < 0


@jit
def reduce_block_best(partial_score_ptr, partial_index_ptr, row, num_blocks, FP64: tl.constexpr,
                      REDUCE_BLOCK: tl.constexpr):
    """reduce_block_best_flagged's token, for partials that carry no overflow flag."""
    token, flagged = reduce_block_best_flagged(partial_score_ptr, partial_index_ptr, row, num_blocks, FP64,
                                               REDUCE_BLOCK, False)
    return token
