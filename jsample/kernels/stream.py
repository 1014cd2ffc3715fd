"""The jsample random stream (docs/STREAM.md, version 1) as Triton device functions.

A draw is keyed by the request's 64-bit `seed`; its Philox4x32-10 counter is
`(i, low32(position), high32(position), stream)`, where `i` is the call index. FP32 noise of
vocabulary column k uses word k % 4 of call k // 4; FP64 noise uses words (lo, hi) =
(w[2*(k%2)], w[2*(k%2)+1]) of call k // 2. The mapping depends on k alone, never on block sizes,
so tokens cannot depend on the launch configuration.

Only interpreter-safe operations are used (no libdevice externs), so CPU CI runs this very source.
"""

import triton.language as tl

from jsample.kernels.host import jit
from jsample.reference import stream as _stream_ids

# The stream ids (STREAM.md), defined once in the reference; constexprs so that kernels can use them.
STREAM_TOKEN = tl.constexpr(_stream_ids.STREAM_TOKEN)  # the emitted token: target sampling, residual, bonus token
STREAM_DRAFT = tl.constexpr(_stream_ids.STREAM_DRAFT)  # draft-token sampling, independent of the target's noise
STREAM_ACCEPT = tl.constexpr(_stream_ids.STREAM_ACCEPT)  # acceptance uniforms of rejection sampling

TWO_POW_M32 = tl.constexpr(2.3283064365386963e-10)  # 2**-32
TWO_POW_M33 = tl.constexpr(1.1641532182693481e-10)  # 2**-33
ONE_MINUS_TWO_POW_M24 = tl.constexpr(0.99999994039535522)  # 1 - 2**-24, largest fp32 below 1
TWO_POW_M64 = tl.constexpr(5.421010862427522e-20)  # 2**-64
TWO_POW_M53 = tl.constexpr(1.1102230246251565e-16)  # 2**-53
LN2 = tl.constexpr(0.6931471805599453)
LOG2E = tl.constexpr(1.4426950408889634)
NEG_LN_LN2 = tl.constexpr(0.36651292058166435)  # -ln(ln 2)


PHILOX_ROUND_A = tl.constexpr(0xD2511F53)
PHILOX_ROUND_B = tl.constexpr(0xCD9E8D57)
PHILOX_KEY_A = tl.constexpr(0x9E3779B9)
PHILOX_KEY_B = tl.constexpr(0xBB67AE85)


@jit
def _wide_multiply(a, MULTIPLIER: tl.constexpr, FAST_MATH: tl.constexpr):
    """(high, low) 32-bit halves of the 64-bit product a * MULTIPLIER (a uint32 block).

    FAST_MATH (a GPU) asks for one mul.wide.u32 (one IMAD.WIDE): compiled from separate high and low
    multiplies, ptxas issues two IMADs, and Philox's multiplies were a fifth of gumbel_sample's
    instructions. Same bits either way (tests/test_stream.py checks the words on the GPU)."""
    if FAST_MATH:
        return tl.inline_asm_elementwise(
            "{ .reg .b64 t; mul.wide.u32 t, $2, $3; mov.b64 {$1, $0}, t; }",
            "=r,=r,r,r", [a, tl.full(a.shape, MULTIPLIER, tl.uint32)], dtype=(tl.uint32, tl.uint32),
            is_pure=True, pack=1)
    else:
        return tl.umulhi(a, MULTIPLIER), tl.mul(a, MULTIPLIER, sanitize_overflow=False)


@jit
def philox(seed, c0, c1, c2, c3, FAST_MATH: tl.constexpr = False):
    """Philox4x32-10 of counter (c0, c1, c2, c3) (uint32 blocks) under the 64-bit key `seed` (an int64
    scalar, taken as two's complement): the words of Triton's tl.philox(seed, c0, c1, c2, c3, 10)."""
    seed = seed.to(tl.uint64)
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    for _ in tl.static_range(10):
        hi_b, lo_b = _wide_multiply(c2, PHILOX_ROUND_B, FAST_MATH)
        hi_a, lo_a = _wide_multiply(c0, PHILOX_ROUND_A, FAST_MATH)
        c0 = hi_b ^ c1 ^ k0
        c2 = hi_a ^ c3 ^ k1
        c1 = lo_b
        c3 = lo_a
        k0 = tl.add(k0, PHILOX_KEY_A, sanitize_overflow=False)
        k1 = tl.add(k1, PHILOX_KEY_B, sanitize_overflow=False)
    return c0, c1, c2, c3


@jit
def philox_block(seed, position, calls, STREAM: tl.constexpr, FAST_MATH: tl.constexpr = False):
    """Four uint32 words per call index in `calls` (a uint32 block) for one (seed, position, stream).

    `seed` and `position` are int64 scalars (or `position` an int64 block shaped like `calls`); the key
    is the seed's 64-bit two's complement.
    """
    zero = tl.zeros_like(calls)
    position_lo = zero + (position & 0xFFFFFFFF).to(tl.uint32)
    position_hi = zero + ((position >> 32) & 0xFFFFFFFF).to(tl.uint32)
    stream = zero + STREAM
    return philox(seed, calls, position_lo, position_hi, stream, FAST_MATH)


def seed_word_count(seeds_shape) -> int:
    """The kernels' SEED_WORDS for a seeds array of this shape: 2 for [B, 2] (low, high) words, 1 for [B]."""
    return 2 if len(seeds_shape) == 2 else 1


@jit
def load_seed(seeds_ptr, row, SEED_WORDS: tl.constexpr):
    """The 64-bit seed of request `row` as an int64 scalar: element `row` of an [B] i32|u32|i64 array
    (its value), or with SEED_WORDS = 2 the (low, high) uint32 words of row `row` of a [B, 2] array
    (a full 64-bit seed without 64-bit arrays, e.g. JAX with x64 off)."""
    if SEED_WORDS == 2:
        words = seeds_ptr + row.to(tl.int64) * 2
        low = tl.load(words).to(tl.uint32, bitcast=True).to(tl.uint64)
        high = tl.load(words + 1).to(tl.uint32, bitcast=True).to(tl.uint64)
        return ((high << 32) | low).to(tl.int64, bitcast=True)
    else:
        return tl.load(seeds_ptr + row).to(tl.int64)


@jit
def uniform_f32(word):
    """uint32 word -> fp32 uniform in [2**-32, 1 - 2**-24]: round-to-nearest, exact scaling."""
    u = word.to(tl.float32) * TWO_POW_M32
    return tl.minimum(tl.maximum(u, TWO_POW_M32), ONE_MINUS_TWO_POW_M24)


@jit
def uniform_f64(lo, hi):
    """Two uint32 words -> fp64 uniform in [2**-64, 1 - 2**-53]."""
    return uniform_f64_of_bits((hi.to(tl.uint64) << 32) | lo.to(tl.uint64))


@jit
def uniform_f64_of_bits(bits):
    """uniform_f64 of the words as one uint64 (hi << 32 | lo)."""
    u = bits.to(tl.float64) * TWO_POW_M64
    # The upper clamp is built in FP64: a float constant is an FP32 value, and 1 - 2**-53 is 1.0 in
    # FP32 (2**-53 is exact in both).
    largest = (u * 0.0 + 1.0) - TWO_POW_M53
    return tl.minimum(tl.maximum(u, TWO_POW_M64), largest)


@jit
def log2_approx(x):
    """lg2.approx.ftz (GPU only, FAST_MATH): log2 of a positive *normal* FP32 x (relative error
    ~2**-22): 1.6x faster sampling than libdevice's logf (benchmarks/results/
    explore_gumbel_variants.txt); ftz drops the subnormal-input fix-up, three instructions per log,
    and every caller's argument is >= 2**-32. The interpreter cannot run inline assembly, so CPU runs
    use tl.log; STREAM.md allows fast approximations because both frontends launch the same kernel
    with the same FAST_MATH."""
    return tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@jit
def exp2_approx(x):
    """ex2.approx.ftz (GPU only, FAST_MATH): 2**x in FP32. tl.exp's ex2 also fixes up subnormal
    results, three more instructions per call for values below 2**-126 that nobody needs here."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                     pack=1)


@jit
def neg_log1p_neg(u, FP64: tl.constexpr):
    """-log1p(-u) for 0 < u < 1, accurate for small u where log(1 - u) would lose all bits.

    Small u uses the series u + u^2/2 + ...; its truncation error is below the format's epsilon:
    FP32: u < 2**-6 with 4 terms (relative error < u^4/5 < 2**-26);
    FP64: u < 2**-8 with 7 terms (relative error < u^7/8 < 2**-59).
    """
    if FP64:
        series = u * (1.0 + u * (0.5 + u * (1.0 / 3.0 + u * (0.25 + u * (0.2 + u * (1.0 / 6.0 + u * (1.0 / 7.0)))))))
        return tl.where(u < 0.00390625, series, -tl.log(1.0 - u))
    else:
        series = u * (1.0 + u * (0.5 + u * (0.3333333432674408 + u * 0.25)))
        return tl.where(u < 0.015625, series, -tl.log(1.0 - u))


@jit
def fp64_words_block(seed, position, first_col, STREAM: tl.constexpr, BLOCK_V: tl.constexpr,
                     FAST_MATH: tl.constexpr = False):
    """The (lo, hi) words of the FP64 uniforms of columns first_col .. first_col + BLOCK_V - 1, in
    column order (`first_col` a multiple of 4)."""
    calls = (first_col // 2 + tl.arange(0, BLOCK_V // 2)).to(tl.uint32)
    w0, w1, w2, w3 = philox_block(seed, position, calls, STREAM, FAST_MATH)
    # column 2i takes (lo, hi) = (w0, w1) of call i, column 2i + 1 takes (w2, w3)
    return tl.interleave(w0, w2), tl.interleave(w1, w3)


@jit
def uniform_at(seed, position, cols, STREAM: tl.constexpr, FP64: tl.constexpr, FAST_MATH: tl.constexpr = False):
    """uniform_block's uniforms at the columns `cols` (a block of int32 columns >= 0, in any order): a
    Philox call per column, for a few scattered columns (filtered.py's candidate lists)."""
    if FP64:  # column 2i takes (lo, hi) = (w0, w1) of call i, column 2i + 1 takes (w2, w3)
        w0, w1, w2, w3 = philox_block(seed, position, (cols // 2).to(tl.uint32), STREAM, FAST_MATH)
        odd = cols % 2 == 1
        return uniform_f64(tl.where(odd, w2, w0), tl.where(odd, w3, w1))
    else:  # column 4i + j takes word j of call i
        w0, w1, w2, w3 = philox_block(seed, position, (cols // 4).to(tl.uint32), STREAM, FAST_MATH)
        j = cols % 4
        return uniform_f32(tl.where(j == 0, w0, tl.where(j == 1, w1, tl.where(j == 2, w2, w3))))


@jit
def uniform_block(seed, position, first_col, STREAM: tl.constexpr, BLOCK_V: tl.constexpr, FP64: tl.constexpr,
                  FAST_MATH: tl.constexpr = False):
    """Uniforms of columns first_col .. first_col + BLOCK_V - 1, in column order.

    `first_col` must be a multiple of 4 (a multiple of BLOCK_V in practice). fp32, or fp64 when FP64.
    """
    if FP64:
        lo, hi = fp64_words_block(seed, position, first_col, STREAM, BLOCK_V, FAST_MATH)
        return uniform_f64(lo, hi)
    else:
        calls = (first_col // 4 + tl.arange(0, BLOCK_V // 4)).to(tl.uint32)
        w0, w1, w2, w3 = philox_block(seed, position, calls, STREAM, FAST_MATH)
        # column 4i + j takes word j of call i
        return uniform_f32(tl.interleave(tl.interleave(w0, w2), tl.interleave(w1, w3)))


@jit
def gumbel_noise(u, FP64: tl.constexpr, FAST_MATH: tl.constexpr = False):
    """g(u) = -log(-log1p(-u)): the large-noise tail (small u) keeps full resolution.
    FAST_MATH applies to FP32 only (FP64 always uses the accurate log)."""
    if FAST_MATH and not FP64:
        # In base 2, with the constants folded: m = -log2(1 - u) = -log1p(-u) * log2(e) (the series'
        # coefficients times log2(e) for small u), then g = -ln(m * ln 2) = -ln 2 * log2(m) - ln(ln 2),
        # one fused multiply-add: two multiplications fewer per column than -log(-log1p(-u)).
        series = u * tl.fma(u, tl.fma(u, tl.fma(u, LOG2E * 0.25, LOG2E / 3.0), LOG2E * 0.5), LOG2E)
        m = tl.where(u < 0.015625, series, -log2_approx(1.0 - u))
        return tl.fma(log2_approx(m), -LN2, NEG_LN_LN2)
    else:
        return -tl.log(neg_log1p_neg(u, FP64))


@jit
def fp64_noise_in_fp32(lo, hi, FAST_MATH: tl.constexpr = False):
    """(g, bound): the FP64 noise g(u) of the uniform with words (lo, hi) (gumbel_noise(uniform_f64(lo,
    hi), FP64=True)), evaluated in FP32, and a bound on its error: |g - g64| <= bound. A shortlist
    for FP64 sampling (common.fp64_sampled_best): FP32 logs cost a few instructions, FP64 logs ~40.

    From the high word alone (one conversion each): u = (hi + 1/2) * 2**-32 and 1 - u = (~hi + 1/2)
    * 2**-32, both within 2**-33 (+ a relative 2**-24 for the FP32 rounding, and 2**-54 for FP64's
    rounding of u) of the values the FP64 noise uses. -log1p(-u) =: L is the series below u = 2**-6
    (relative error < 2**-33 / u + 2**-21: < 2**-15.9 for u >= 2**-17) and -log(1 - u) above it,
    where L > 0.0155 and the log's absolute error (2**-33 / (1 - u) + 2**-24, and 2**-21.9 with
    lg2.approx) is a relative error of L below 2**-15 for 1 - u >= 2**-20. Then g = -log(L) is within
    2**-14.9 + |g| * 2**-23; the bound takes 2**-13 + |g| * 2**-20, and +inf for u < 2**-17 or
    1 - u < 2**-20 (hi < 2**15 or ~hi < 2**12: a few columns in 2**17, always shortlisted). On a
    GPU the same steps run in gumbel_noise's fused base-2 form (fewer roundings, lg2.approx).
    tests/test_stream.py checks it at its edges on the CPU and the GPU."""
    g, extreme = fp64_noise_estimate(lo, hi, FAST_MATH)
    bound = 1.220703125e-04 + tl.abs(g) * 9.5367431640625e-07  # 2**-13 + |g| * 2**-20
    return g, tl.where(extreme, float("inf"), bound)


@jit
def fp64_noise_estimate(lo, hi, FAST_MATH: tl.constexpr = False):
    """(g, extreme): fp64_noise_in_fp32's noise, and where its bound is +inf (u < 2**-17 or
    1 - u < 2**-20). Elsewhere |g| < 11.8 (g(2**-17) = 11.78, g(1 - 2**-20) = -2.63), so the bound is
    below 2**-13 + 11.8 * 2**-20: common.store_fp64_block_interval takes one bound for a whole block."""
    if FAST_MATH:  # gumbel_noise's FP32 form (fused, in base 2), from u and 1 - u as below
        u = tl.fma(hi.to(tl.float32), TWO_POW_M32, TWO_POW_M33)
        one_minus_u = tl.fma((~hi).to(tl.float32), TWO_POW_M32, TWO_POW_M33)
        series = u * tl.fma(u, tl.fma(u, tl.fma(u, LOG2E * 0.25, LOG2E / 3.0), LOG2E * 0.5), LOG2E)
        m = tl.where(hi < 67108864, series, -log2_approx(one_minus_u))  # u < 2**-6
        g = tl.fma(log2_approx(m), -LN2, NEG_LN_LN2)
    else:
        u = hi.to(tl.float32) * TWO_POW_M32 + TWO_POW_M33
        # ~hi as hi ^ 0xFFFFFFFF: Triton 3.6's interpreter inverts by a Python -1, which NumPy 2 refuses for uint32
        one_minus_u = (hi ^ 0xFFFFFFFF).to(tl.float32) * TWO_POW_M32 + TWO_POW_M33
        series = u * (1.0 + u * (0.5 + u * (0.3333333432674408 + u * 0.25)))
        big = -tl.log(one_minus_u)
        g = -tl.log(tl.where(hi < 67108864, series, big))
    return g, (hi < 32768) | (hi >= 4294963200)


@jit
def philox_words_kernel(
    seeds_ptr,  # [N] i64, the key of each draw
    positions_ptr,  # [N] i64
    streams_ptr,  # [N] i32
    calls_ptr,  # [N] i32, call index i
    words_ptr,  # [N, 4] u32 output
    FAST_MATH: tl.constexpr = False,
):
    """Test kernel: the four Philox words of one draw per program (checked against the NumPy twin)."""
    n = tl.program_id(0)
    seed = tl.load(seeds_ptr + n).to(tl.int64)
    position = tl.load(positions_ptr + n).to(tl.int64)
    stream = tl.load(streams_ptr + n).to(tl.uint32)
    call = tl.load(calls_ptr + n).to(tl.uint32)
    zero = tl.zeros([1], tl.uint32)
    w0, w1, w2, w3 = philox(
        seed, zero + call, zero + (position & 0xFFFFFFFF).to(tl.uint32),
        zero + ((position >> 32) & 0xFFFFFFFF).to(tl.uint32), zero + stream, FAST_MATH)
    out = words_ptr + n.to(tl.int64) * 4 + tl.arange(0, 1)
    tl.store(out, w0)
    tl.store(out + 1, w1)
    tl.store(out + 2, w2)
    tl.store(out + 3, w3)


@jit
def uniforms_kernel(
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64
    V,
    noise_ptr,  # [B, V] f32 (f64 when FP64) output: the Gumbel noise of every column
    uniforms_ptr,  # [B, V] f32 (f64 when FP64) output: the uniforms behind it
    STREAM: tl.constexpr,
    BLOCK_V: tl.constexpr,
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr = False,
):
    """Test kernel: materialises the stream's uniforms and noise of a [B, V] grid (never on a hot path)."""
    row = tl.program_id(0)
    block = tl.program_id(1)
    seed = tl.load(seeds_ptr + row).to(tl.int64)
    position = tl.load(positions_ptr + row).to(tl.int64)
    first_col = block * BLOCK_V
    cols = first_col + tl.arange(0, BLOCK_V)
    u = uniform_block(seed, position, first_col, STREAM, BLOCK_V, FP64, FAST_MATH)
    noise = gumbel_noise(u, FP64, FAST_MATH)
    offsets = row.to(tl.int64) * V + cols
    tl.store(uniforms_ptr + offsets, u, mask=cols < V)
    tl.store(noise_ptr + offsets, noise, mask=cols < V)


@jit
def scattered_uniforms_kernel(
    seeds_ptr,  # [B] i64
    positions_ptr,  # [B] i64
    cols_ptr,  # [B, N] i32 columns, any order
    N,
    uniforms_ptr,  # [B, N] f32 (f64 when FP64) output: uniform_at's uniforms of those columns
    STREAM: tl.constexpr,
    BLOCK: tl.constexpr,  # a power of two >= N
    FP64: tl.constexpr,
    FAST_MATH: tl.constexpr = False,
):
    """Test kernel: uniform_at's uniforms of scattered columns (checked against the stream's)."""
    row = tl.program_id(0)
    offsets = row.to(tl.int64) * N + tl.arange(0, BLOCK)
    inside = tl.arange(0, BLOCK) < N
    cols = tl.load(cols_ptr + offsets, mask=inside, other=0)
    u = uniform_at(tl.load(seeds_ptr + row).to(tl.int64), tl.load(positions_ptr + row).to(tl.int64), cols, STREAM,
                   FP64, FAST_MATH)
    tl.store(uniforms_ptr + offsets, u, mask=inside)


@jit
def fp64_noise_bound_kernel(
    lo_ptr,  # [N] u32 words
    hi_ptr,  # [N] u32 words
    N,
    noise_ptr,  # [N] f32 output: fp64_noise_in_fp32's noise
    bound_ptr,  # [N] f32 output: its bound
    exact_ptr,  # [N] f64 output: the FP64 noise the kernels compute
    BLOCK: tl.constexpr,
    FAST_MATH: tl.constexpr = False,
):
    """Test kernel: fp64_noise_in_fp32 next to the FP64 noise of the same words."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    lo = tl.load(lo_ptr + offsets, mask=mask, other=0).to(tl.uint32, bitcast=True)
    hi = tl.load(hi_ptr + offsets, mask=mask, other=0).to(tl.uint32, bitcast=True)
    noise, bound = fp64_noise_in_fp32(lo, hi, FAST_MATH)
    tl.store(noise_ptr + offsets, noise, mask=mask)
    tl.store(bound_ptr + offsets, bound, mask=mask)
    tl.store(exact_ptr + offsets, gumbel_noise(uniform_f64(lo, hi), True), mask=mask)
