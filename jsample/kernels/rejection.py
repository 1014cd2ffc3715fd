"""Speculative-decoding verification: rejection sampling of K draft tokens against K+1 target rows.

Request b has target rows j = 0..K (row j scores the token after draft j-1) and n_b <= K drafts
d_j. Row j is drawn at position P_b + j (STREAM.md, "Rejection sampling"):

* probabilistic, T > 0: p = softmax(x_j / T), q = softmax(y_j / T) (one-hot on d_j without draft
  logits); accept d_j iff u_j < p(d_j) / q(d_j), u_j the stream-2 uniform (call 0) of row j;
* strict (any T), and greedy rows (T < 1e-5) of either method: accept iff d_j equals the row's
  stream-0 Gumbel-max sample (the argmax when T < 1e-5);
* a = the first rejected row (a = n_b when all drafts are accepted). Row a emits, with the stream-0
  noise g of row a: after a probabilistic rejection argmax_k (log r_k + g_k), r = max(p - q, 0)
  (p with d_a removed for one-hot drafts), falling back to p when r is all zero; otherwise the
  Gumbel-max sample of row a, computed by the very code of `gumbel_sample` (`noisy_scores` of
  `block_noise`, as gumbel_partial_kernel), so the bonus token equals `gumbel_sample` of
  that row with position P_b + n_b bit for bit.

Launches (plan_rejection_sample decides; no host synchronisation between them):

1. `rejection_stats_kernel`, grid (B, max(K, 1), NUM_BLOCKS), rows j < n_b only: per vocabulary
   block the Gumbel-max partials (best score, its column) of strict and greedy rows and the
   online-softmax partials (max, sum of exp) of x_j / T and y_j / T of the others. At K <= 1
   (config.bonus_in_stats) its row-0 programs also reduce row n_b's Gumbel-max partials. With padding
   requests (num_valid), grid dimension 0 is padded_row_slots(B) slots, each looping over every
   slots-th request (a padding request costs a flag, not max(K, 1) x NUM_BLOCKS programs).
2. `rejection_decide_kernel`, grid (B,): merges the partials of a request's rows, decides every
   row, and writes a_b, what row a_b emits (EMIT_STATS_ROW, EMIT_RESIDUAL, EMIT_SAMPLE,
   EMIT_GREEDY) and row a_b's log-normalisers.
3. `rejection_emit_kernel`, grid (B, NUM_BLOCKS), requests with EMIT_RESIDUAL or EMIT_SAMPLE only:
   block partials of row a_b's Gumbel-max scores and, for EMIT_RESIDUAL, its residual scores, from
   one evaluation of its stream-0 noise (the Gumbel-max sample is the residual's fallback).
4. `rejection_finish_kernel`, grid (B,): reduces the emitted token's partials (lowest column on
   ties) and writes tokens [B, K+1] = accepted drafts, the emitted token, -1; num_sampled = a_b + 1.

Small batches (decide_in_emit) run three launches: 2 and 3 become `rejection_decide_emit_kernel`,
whose every program makes its request's decision itself (the same `_decide`, so the same a_b
everywhere) before its block of the emit step (the same `_emit_block`); the stats launch reduces the
bonus row on programs of its own (BONUS_PROGRAMS), and the fused launch copies row a_b's stats
partials into its emit partials (STATS_ROW_IN_EMIT). Where the target has programmatic dependent
launch the three form a chain (`dependent_launch`): each launch reads what it needs of the op's own
inputs before it waits for the previous one, and nothing written by a previous launch
(tests/test_compiled_kernels.py checks the PTX). Where every launch costs host time (JAX) and K <= 1,
`rejection_one_launch_kernel` runs the three as one launch, ordered by an atomic ticket counter.
Invariants: tokens never depend on the plan (the same program bodies run in every plan, with the
same warps: the normalisers' sums are reduced in an order the layout could change), nor on the
batch (the tiling is a function of V, K, fp64 and the strides' alignment only). Measurements behind
these choices: benchmarks/lab/INDEX.md.

`synthetic_rejection_kernel` (one launch, grid (B,)) accepts draft j iff the stream-2 uniform of row
j is below conditional_rates[j] and emits target_tokens[b, a_b].

All maths is FP32 (FP64 when FP64): logits are widened and scaled by 1 / T (x * (1 / T), as the
Gumbel scores; on a GPU the softmax terms fold 1 / T and log2 e into one fused multiply-add), and the
softmax statistics, ratios and residual logs use that precision. The residual
score log r_k + g_k is computed as (s_k - log Z_p) + log(1 - q_k / p_k) from the row's Gumbel score
s_k = x_k / T + g_k, with q_k / p_k = exp((y_k - x_k) / T + log Z_p - log Z_q): one exp and one log per
column (the hardware's ex2 and lg2 on a GPU, where the row's constant log Z_p is left out: the argmax
does not change). Non-finite (NaN, +inf) logits have probability 0, as -inf ones; only the vocabulary
blocks that hold one pay for the masks (common.max_flagging_nan).
"""

import functools
import math
from dataclasses import dataclass

import triton
import triton.language as tl

from jsample.kernels.host import jit
from jsample.kernels.common import (
    aligned,
    block_noise,
    inverse_temperature,
    is_greedy,
    is_padding,
    rows_to_visit,
    largest_power_of_two_dividing,
    load_block,
    load_temperature,
    max_and_magnitude,
    noisy_scores,
    overflow_from_magnitude,
    greedy_argmax_row,
    reduce_block_best,
    reduce_block_best_flagged,
    store_block_best,
    store_sampled_block,
)
from jsample.kernels.gumbel import gumbel_launch_config
from jsample.kernels.plan import ArgSpec, Buffer, Plan, Target, launch, num_rows_buffer, padded_row_slots
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from jsample.kernels.stream import (LN2, LOG2E, STREAM_ACCEPT, STREAM_TOKEN, exp2_approx, load_seed, log2_approx,
                                    philox_block, seed_word_count, uniform_f32, uniform_f64)

# Globals used inside kernels must be constexpr (the compiler rejects plain Python globals).
STATS_PER_BLOCK = 4  # per row and block: target max, target sum of exp, draft max, draft sum of exp
NUM_STATS = tl.constexpr(STATS_PER_BLOCK)
# What row a_b emits, written by rejection_decide_kernel for the emit and finish kernels
EMIT_STATS_ROW = tl.constexpr(0)  # row a_b's Gumbel-max sample, reduced by rejection_stats_kernel
EMIT_RESIDUAL = tl.constexpr(1)  # the residual sample (the row's Gumbel-max sample if the residual is zero)
EMIT_SAMPLE = tl.constexpr(2)  # row a_b's Gumbel-max sample, reduced by rejection_emit_kernel
EMIT_GREEDY = tl.constexpr(3)  # row a_b's scaled logits overflow: its greedy argmax, taken by the finish launch
# The FAST_MATH folds (1 / T and log2 e into one fused multiply-add, against a per-row constant) err by
# about 2**-23 of that constant's size: harmless (< 2e-5 relative in p or q / p) while the row's
# largest scaled logit, or the log-normalisers' difference, stays below this; beyond it the exact
# formulas run (a 1e30 logit made the folded terms of its own column inf or 0: a wrong decision).
FOLD_LIMIT = tl.constexpr(64.0)


@dataclass(frozen=True)
class RejectionLaunchConfig:
    """How both frontends launch the rejection kernels: a function of V, K, fp64 and the strides'
    alignment only, never of the batch size or a request's place in the batch. Argmaxes are exact
    whatever the tiling; the softmax normalisers' rounding follows the tiling, which is why the
    tiling must not depend on the batch."""

    block_v: int  # the vocabulary tile of the two row kernels
    num_blocks: int
    reduce_block: int  # next power of two >= num_blocks
    block_k: int  # next power of two >= K + 1: the rows of one request in the per-request kernels
    row_align: int  # power of two dividing every row and batch stride of the logits (<= 16)
    vocab_align: int  # power of two (<= 16) dividing V (gumbel.aligned)
    num_warps: int  # the row kernels (stats, emit)
    fast_math: bool  # gumbel_sample's FAST_MATH: the bonus token must use the very same noise code
    bonus_in_stats: bool  # the stats launch's row-0 programs also reduce row n_b's Gumbel-max sample (K <= 1)
    stats_rows: int  # the stats launch's second grid dimension: max(K, 1)
    decide_num_warps: int  # the decision's launches (decide, decide_emit): one warp per request row, 4-16
    num_stages: int = 1
    enable_fp_fusion: bool = False  # no FMA contraction: the same rounding as the NumPy reference
    per_request_num_warps: int = 1  # the finish and synthetic kernels: a few values per request


def rejection_launch_config(vocab_size: int, num_speculative_tokens: int, strides, fp64: bool,
                            fast_math: bool = None) -> RejectionLaunchConfig:
    """The launch configuration of `rejection_sample` / `synthetic_rejection_sample`.

    Args:
        vocab_size: V.
        num_speculative_tokens: K (the target has K + 1 rows per request).
        strides: the batch and row strides (in elements) of the target and draft logits; zeros are
            ignored (a broadcast dimension).
        fp64: FP64 mode (halves the vocabulary tile, as in gumbel_sample).
        fast_math: compiled code (not the interpreter); by default, whether the interpreter is off.
    """
    stride_gcd = 0
    for stride in strides:
        stride_gcd = math.gcd(stride_gcd, int(stride))
    gumbel = gumbel_launch_config(vocab_size, stride_gcd, fp64, fast_math)
    # At most 2048 columns (1024 FP64) and 4 warps, half gumbel_sample's largest tile: smaller programs
    # pack the SMs better (lab INDEX: explore_rejection_variants). Argmaxes are exact under any
    # tiling, so the bonus token still equals gumbel_sample's.
    block_v = min(gumbel.block_v, 1024 if fp64 else 2048)
    num_blocks = triton.cdiv(vocab_size, block_v)
    return RejectionLaunchConfig(
        block_v=block_v,
        num_blocks=num_blocks,
        reduce_block=triton.next_power_of_2(num_blocks),
        block_k=triton.next_power_of_2(num_speculative_tokens + 1),
        row_align=largest_power_of_two_dividing(stride_gcd, 16) if stride_gcd else 16,
        vocab_align=gumbel.vocab_align,
        num_warps=4,
        fast_math=gumbel.fast_math,
        # K <= 1: the bonus row's noise overlaps the draft row's memory-bound softmax pass in the same
        # programs (a gain unless most requests reject their draft); with more draft rows the noise's
        # registers cost the softmax programs occupancy (lab INDEX: rejection_k1_before_bonus_in_stats).
        bonus_in_stats=num_speculative_tokens <= 1,
        stats_rows=max(num_speculative_tokens, 1),
        # Every row of a request's decision on a warp of its own (4 to 16): each thread works through
        # its warp's rows one after another, and that chain is the decision's latency (lab INDEX:
        # explore_decide_emit_warps). Every plan uses the same count: the normalisers' sums are
        # reduced in an order that the layout, and so the warps, could change.
        decide_num_warps=min(16, max(4, triton.next_power_of_2(num_speculative_tokens + 1))),
        num_stages=gumbel.num_stages,
        enable_fp_fusion=gumbel.enable_fp_fusion,
    )


# decide_in_emit: at most this many emit programs (B * NUM_BLOCKS) run the decision themselves
DECIDE_IN_EMIT_MAX_PROGRAMS = 300


def decide_in_emit(batch: int, config: RejectionLaunchConfig) -> bool:
    """Whether a batch runs rejection_decide_emit_kernel (three launches) rather than the decide and
    emit launches (four): a launch costs more than the repeated decisions up to a few hundred emit
    programs; beyond, the decision's chain of dependent loads runs B * NUM_BLOCKS times over (lab
    INDEX: explore_small_batch_plans). Tokens never depend on it."""
    return batch * config.num_blocks <= DECIDE_IN_EMIT_MAX_PROGRAMS


@jit
def dependent_launch(PDL: tl.constexpr, WAIT: tl.constexpr):
    """With PDL (torch on Hopper and newer, small batches: the three launches of decide_in_emit), the
    launches form a programmatic dependent launch chain: each lets the next one start launching at
    once, and the next one waits (griddepcontrol.wait: the previous grid complete and its writes
    visible) before it reads anything a launch of the chain wrote, or writes anything; what it reads
    of the op's own inputs comes before the wait (test_compiled_kernels checks that order in the
    compiled code). The launch latency between them overlaps the previous launch's work. Without
    PDL nothing happens; tokens never depend on it."""
    if PDL:
        if WAIT:
            gdc_wait()
        gdc_launch_dependents()


@jit
def _scaled(x, inverse_t):
    """x / T (as x * (1 / T), the Gumbel scores' rounding); -inf for non-finite logits (probability 0)."""
    return tl.where(tl.abs(x) < float("inf"), x * inverse_t, float("-inf"))


@jit
def _gather(row_ptrs, cols, mask, FP64: tl.constexpr):
    """The logit at column cols[i] of row row_ptrs[i] where mask[i], widened; -inf elsewhere."""
    x = tl.load(row_ptrs + cols, mask=mask, other=float("-inf")).to(tl.float32)
    if FP64:
        x = x.to(tl.float64)
    return x


@jit
def _softmax_partials(x, inverse_t, FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """(max, sum of exp(s - max), largest |x|, max_flagging_nan(x)) of a block's scaled logits s = x / T, where
    NaN and +inf logits have probability 0, as -inf ones; (-inf, 0) when the block has no candidate. The largest
    |x| (of every logit, padding included) is what gumbel.overflow_from_magnitude needs, reduced
    with the max (gumbel.max_and_magnitude); the last, the raw logits' max (NaN where one is NaN: the
    vocab-parallel stats' greedy candidate; the one-GPU kernels leave it unused).

    x * (1/T) rounds monotonically (1/T > 0), so max s = (max x) * (1/T), and when that is below
    +inf the block holds no NaN or +inf logit (max_flagging_nan says so, at the cost of the plain
    max): only the other blocks run the mask, 3 instructions a column. Both branches compute a
    finite logit's term alike, so a NaN elsewhere in its block cannot change it."""
    x_max, magnitude = max_and_magnitude(x, x, FAST_MATH)
    block_max = x_max * inverse_t
    if (block_max < float("inf")) & (inverse_t > 0):
        # exp(-inf - shift) = 0 covers -inf logits; the shift keeps an all -inf block at sum 0, not NaN
        shift = tl.where(block_max > float("-inf"), block_max, 0.0)
        terms = _softmax_terms(x, inverse_t, shift, FP64, FAST_MATH)
    else:
        # Two whole branches: masking x before one shared tail cost the common path registers
        # (69 or 85, not 64, and 1 block in 8 of its occupancy).
        x = tl.where(tl.abs(x) < float("inf"), x, float("-inf"))
        block_max = tl.max(x * inverse_t, axis=0)
        shift = tl.where(block_max > float("-inf"), block_max, 0.0)
        terms = _softmax_terms(x, inverse_t, shift, FP64, FAST_MATH)
    return block_max, tl.sum(terms, axis=0), magnitude, x_max


@jit
def _softmax_terms(x, inverse_t, shift, FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """exp(x / T - shift) of finite or -inf logits x."""
    if FAST_MATH and not FP64:
        if tl.abs(shift) < FOLD_LIMIT:
            # ex2.approx.ftz of one fused multiply-add, 1 / T folded into it: 2 instructions a column,
            # not 6 for tl.exp; the flushed terms (< 2**-126) are far below the sum's rounding (sum >= 1)
            terms = exp2_approx(tl.fma(x, inverse_t * LOG2E, -shift * LOG2E))
        else:
            terms = tl.exp(x * inverse_t - shift)
        return terms
    else:
        return tl.exp(x * inverse_t - shift)


@jit
def _merge_log_normalizer(block_max, block_sum):
    """log sum exp of rows of [R, NUM_BLOCKS] softmax partials -> [R] (-inf for an empty row)."""
    row_max = tl.max(block_max, axis=1)
    scale = tl.where(block_max > float("-inf"), tl.exp(block_max - row_max[:, None]), 0.0)
    return row_max + tl.log(tl.sum(block_sum * scale, axis=1))


@jit
def _acceptance_uniforms(seed, positions, FP64: tl.constexpr):
    """The acceptance uniform of each position in `positions` (int64 [N]): call 0 of stream 2."""
    calls = tl.zeros(positions.shape, tl.uint32)
    w0, w1, w2, w3 = philox_block(seed, positions, calls, STREAM_ACCEPT)
    if FP64:
        return uniform_f64(w0, w1)
    else:
        return uniform_f32(w0)


@jit
def _first_rejection(accept, rows, num_drafts):
    """a = the first row < num_drafts whose draft is rejected, num_drafts when all are accepted."""
    return tl.min(tl.where(rows < num_drafts, tl.where(accept, num_drafts, rows), num_drafts), axis=0)


@jit
def _store_sampled_partials(target_row_ptr, row, target_row_stride, V, first_col, seed, position, temperature,
                            partial_score_ptr, partial_index_ptr, out, BLOCK_V: tl.constexpr,
                            ROW_ALIGN: tl.constexpr, FP64: tl.constexpr, FAST_MATH: tl.constexpr):
    """The block partials of target row `row`'s Gumbel-max sample: gumbel_sample's code exactly."""
    store_sampled_block(target_row_ptr, row, target_row_stride, V, first_col, seed, position, temperature,
                        partial_score_ptr, partial_index_ptr, out, STREAM_TOKEN, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)


@jit
def rejection_stats_kernel(
    target_logits_ptr,  # [B, K+1, V] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V] f32, columns contiguous (unused when ONE_HOT)
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64, position of row 0
    temperature_ptr,  # [B] f32, 0 = greedy
    num_draft_tokens_ptr,  # [B] i32|i64, n_b (clamped to [0, K])
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read or written
    num_rows_ptr,  # [1] i32, B (read with ROW_SLOTS)
    V,
    K,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    stats_ptr,  # [B * K, NUM_STATS * NUM_BLOCKS] f32; with FP64, f64 stored as twice as many f32 words
    partial_score_ptr,  # [B * (K+1), NUM_BLOCKS] f32; with FP64, f64 as [B * (K+1), 2 * NUM_BLOCKS] f32 words
    partial_index_ptr,  # [B * (K+1), NUM_BLOCKS] i32
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    BONUS_IN_STATS: tl.constexpr,  # config.bonus_in_stats
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,  # config.vocab_align
    FAST_MATH: tl.constexpr,  # gumbel_sample's noise log (config.fast_math)
    BONUS_PROGRAMS: tl.constexpr = False,  # BONUS_IN_STATS on programs of their own (grid dimension 1: K rows + 1)
    PDL: tl.constexpr = False,  # the first launch of a programmatic dependent launch chain (dependent_launch)
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
    HAS_ROW_VALID: tl.constexpr = False,
    ROW_SLOTS: tl.constexpr = False,  # (with HAS_ROW_VALID) grid dimension 0 is row slots: padded_row_slots
):
    """Per (request, draft row j < n_b, vocabulary block): the Gumbel-max partials (best score, its
    column) of strict and greedy rows, the softmax partials of the others. With BONUS_IN_STATS, the
    programs of row 0 also reduce the Gumbel-max partials of row n_b (the bonus row), between
    issuing their loads and using them; with BONUS_PROGRAMS the last programs of grid dimension 1
    do it instead (small batches, where the GPU has idle SMs and each program's latency counts).
    Rows j >= n_b are skipped (nothing reads them)."""
    dependent_launch(PDL, False)  # its inputs come from ordinary launches: no wait
    if ROW_SLOTS:
        for slot_row in tl.range(tl.program_id(0), rows_to_visit(row_valid_ptr, tl.load(num_rows_ptr)),
                                 tl.num_programs(0), num_stages=1):
            b = tl.cast(slot_row, tl.int32)  # (a Python int in the interpreter)
            if not is_padding(row_valid_ptr, b):  # padding: the finish launch writes its outputs
                _stats_program_in_loop(
                    target_logits_ptr, draft_logits_ptr, seeds_ptr, positions_ptr, temperature_ptr,
                    num_draft_tokens_ptr, V, K, target_batch_stride, target_row_stride, draft_batch_stride,
                    draft_row_stride, stats_ptr, partial_score_ptr, partial_index_ptr, b, tl.program_id(1),
                    tl.program_id(2), tl.num_programs(1), tl.num_programs(2), STRICT, ONE_HOT, BONUS_IN_STATS, FP64,
                    BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, BONUS_PROGRAMS, SEED_WORDS)
    else:
        if HAS_ROW_VALID:
            if is_padding(row_valid_ptr, tl.program_id(0)):  # padding: the finish launch writes its outputs
                return
        _stats_program(target_logits_ptr, draft_logits_ptr, seeds_ptr, positions_ptr, temperature_ptr,
                       num_draft_tokens_ptr, V, K, target_batch_stride, target_row_stride, draft_batch_stride,
                       draft_row_stride, stats_ptr, partial_score_ptr, partial_index_ptr, tl.program_id(0),
                       tl.program_id(1), tl.program_id(2), tl.num_programs(1), tl.num_programs(2), STRICT, ONE_HOT,
                       BONUS_IN_STATS, FP64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, BONUS_PROGRAMS, SEED_WORDS)


@jit
def _stats_program(target_logits_ptr, draft_logits_ptr, seeds_ptr, positions_ptr, temperature_ptr,
                   num_draft_tokens_ptr, V, K, target_batch_stride, target_row_stride, draft_batch_stride,
                   draft_row_stride, stats_ptr, partial_score_ptr, partial_index_ptr, b, j, block, num_rows,
                   num_blocks, STRICT: tl.constexpr, ONE_HOT: tl.constexpr, BONUS_IN_STATS: tl.constexpr,
                   FP64: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr,
                   FAST_MATH: tl.constexpr, BONUS_PROGRAMS: tl.constexpr, SEED_WORDS: tl.constexpr):
    """Program (b, j, block) of rejection_stats_kernel, whose grid dimension 1 has num_rows."""
    V = aligned(V, VOCAB_ALIGN)
    b64 = b.to(tl.int64)
    num_drafts = tl.minimum(tl.maximum(tl.load(num_draft_tokens_ptr + b), 0), K)
    temperature = load_temperature(temperature_ptr, b)
    first_col = block * BLOCK_V
    target_row_ptr = target_logits_ptr + tl.multiple_of(b64 * target_batch_stride, ROW_ALIGN)
    seed = load_seed(seeds_ptr, b, SEED_WORDS)
    position = tl.load(positions_ptr + b).to(tl.int64)
    bonus_out = (b64 * (K + 1) + num_drafts) * num_blocks + block
    if STRICT:
        sampled_row = j < num_drafts  # every row
    else:
        sampled_row = is_greedy(temperature)
    if j < num_drafts:
        if sampled_row:
            _store_sampled_partials(target_row_ptr, j, target_row_stride, V, first_col, seed, position + j,
                                    temperature, partial_score_ptr, partial_index_ptr,
                                    (b64 * (K + 1) + j) * num_blocks + block, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
        else:
            cols = first_col + tl.arange(0, BLOCK_V)
            out = (b64 * K + j) * (NUM_STATS * num_blocks) + block
            if FP64:
                stats = stats_ptr.to(tl.pointer_type(tl.float64))
            else:
                stats = stats_ptr
            row_offset = tl.multiple_of(j.to(tl.int64) * target_row_stride, ROW_ALIGN)
            x = load_block(target_row_ptr + row_offset, cols, V, FP64)
            if not ONE_HOT:
                draft_row_ptr = (draft_logits_ptr + tl.multiple_of(b64 * draft_batch_stride, ROW_ALIGN)
                                 + tl.multiple_of(j.to(tl.int64) * draft_row_stride, ROW_ALIGN))
                y = load_block(draft_row_ptr, cols, V, FP64)
            if BONUS_IN_STATS:  # j == 0 < n_b: the noise's compute while x and y arrive
                _store_sampled_partials(target_row_ptr, num_drafts, target_row_stride, V, first_col, seed,
                                        position + num_drafts, temperature, partial_score_ptr, partial_index_ptr,
                                        bonus_out, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
            inverse_t = inverse_temperature(temperature, FP64)
            target_max, target_sum, magnitude, _ = _softmax_partials(x, inverse_t, FP64, FAST_MATH)
            overflow = overflow_from_magnitude(x, magnitude, temperature)
            if not ONE_HOT:
                draft_max, draft_sum, magnitude, _ = _softmax_partials(y, inverse_t, FP64, FAST_MATH)
                overflow = overflow | overflow_from_magnitude(y, magnitude, temperature)
                tl.store(stats + out + 2 * num_blocks, draft_max)
                tl.store(stats + out + 3 * num_blocks, draft_sum)
            tl.store(stats + out, target_max)
            tl.store(stats + out + num_blocks, tl.where(overflow, -1.0, target_sum))  # -1: the row is greedy
    if BONUS_PROGRAMS:
        if j == num_rows - 1:  # > K - 1 >= n_b - 1: no draft row above
            _store_sampled_partials(target_row_ptr, num_drafts, target_row_stride, V, first_col, seed,
                                    position + num_drafts, temperature, partial_score_ptr, partial_index_ptr,
                                    bonus_out, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
    if BONUS_IN_STATS:
        if (j == 0) & ((num_drafts == 0) | sampled_row):  # the requests the softmax branch did not serve
            _store_sampled_partials(target_row_ptr, num_drafts, target_row_stride, V, first_col, seed,
                                    position + num_drafts, temperature, partial_score_ptr, partial_index_ptr,
                                    bonus_out, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)


# _stats_program as a function of its own, for rejection_stats_kernel's row-slot loop: inlined there, the loop
# keeps 80 registers a thread live (63 so, as the plain grid's 64), fewer programs fit an SM
_stats_program_in_loop = jit(_stats_program.fn, noinline=True)


@jit
def _greedy_where_flagged(tokens, flagged, rows, num_drafts, target_row_ptr, target_row_stride, V, greedy_rows,
                          MERGED_GREEDY: tl.constexpr):
    """`tokens` [BLOCK_K] with each flagged row's greedy argmax (rows whose scaled logits overflow:
    STREAM.md's clarifications make them greedy), found by looping over those rows' logits here:
    only requests with such a row pay for it. MERGED_GREEDY (vocab-parallel): the rows' argmaxes are given,
    `greedy_rows` [BLOCK_K], merged from the shards' candidates."""
    if MERGED_GREEDY:
        tokens = tl.where(flagged, greedy_rows, tokens)
    elif tl.max(flagged.to(tl.int32), axis=0) > 0:
        j = tl.zeros([], tl.int32)
        while j < num_drafts:
            if tl.max(tl.where(rows == j, flagged.to(tl.int32), 0), axis=0) > 0:
                greedy = greedy_argmax_row(target_row_ptr + tl.cast(j, tl.int64) * target_row_stride, V, 1024)
                tokens = tl.where(rows == j, greedy, tokens)
            j += 1
    return tokens


@jit
def _target_tokens(partial_score_ptr, partial_index_ptr, b64, K, num_blocks, rows, num_drafts, target_row_ptr,
                   target_row_stride, V, greedy_rows, FP64: tl.constexpr, REDUCE_BLOCK: tl.constexpr,
                   MERGED_GREEDY: tl.constexpr):
    """The Gumbel-max (argmax) token of each draft row < n_b from the stats launch's partials (the
    greedy argmax where a row's partials are flagged as overflowing)."""
    active = rows < num_drafts
    flat_rows = b64 * (K + 1) + rows  # row index into the [B * (K+1), NUM_BLOCKS] partials
    blocks = tl.arange(0, REDUCE_BLOCK)
    offsets = flat_rows[:, None] * num_blocks + blocks[None, :]
    mask = active[:, None] & (blocks[None, :] < num_blocks)
    if FP64:
        scores = tl.load(partial_score_ptr.to(tl.pointer_type(tl.float64)) + offsets, mask=mask, other=float("-inf"))
    else:
        scores = tl.load(partial_score_ptr + offsets, mask=mask, other=float("-inf"))
    # the lowest column among the best block partials, as reduce_block_best (columns loaded with the scores)
    columns = tl.load(partial_index_ptr + offsets, mask=mask, other=0)
    best = tl.max(scores, axis=1)
    column = tl.min(tl.where(scores == best[:, None], columns, 2147483647), axis=1)
    tokens = tl.where(best > float("-inf"), column, -1)
    flagged = tl.min(columns, axis=1) < 0
    return _greedy_where_flagged(tokens, flagged, rows, num_drafts, target_row_ptr, target_row_stride, V, greedy_rows,
                                 MERGED_GREEDY)


@jit
def _decision_inputs(target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, b64, num_drafts, seed, position,
                     temperature, V, K, target_batch_stride, target_row_stride, draft_batch_stride, draft_row_stride,
                     STRICT: tl.constexpr, ONE_HOT: tl.constexpr, FP64: tl.constexpr, BLOCK_K: tl.constexpr,
                     values_ptr=0, VALUES_GIVEN: tl.constexpr = False):
    """What a request's decision reads from the op's own inputs, apart from the stats launch's partials:
    the drafts, the target and draft logits at the drafts (scaled by 1 / T) and the acceptance
    uniforms. Under PDL (rejection_decide_emit_kernel) it runs before the wait for the stats launch,
    so its chain of dependent loads overlaps that launch. -> (drafts, valid, scaled target logit,
    scaled draft logit, u), each [BLOCK_K] (the logits and u unused by strict and greedy rows).
    VALUES_GIVEN (vocab-parallel): the logits at the drafts come from `values_ptr` ([B * K, 2] f32: target,
    draft), gathered from the shards holding them, not from the logits."""
    rows = tl.arange(0, BLOCK_K)
    active = rows < num_drafts
    drafts = tl.load(draft_tokens_ptr + b64 * K + rows, mask=active, other=-1)
    valid = active & (drafts >= 0) & (drafts < V)  # an out-of-range draft has probability 0: rejected
    if STRICT:
        if FP64:
            target_at_draft = tl.zeros([BLOCK_K], tl.float64)
        else:
            target_at_draft = tl.zeros([BLOCK_K], tl.float32)
        draft_at_draft = target_at_draft
        u = target_at_draft
    else:
        inverse_t = inverse_temperature(temperature, FP64)
        # greedy requests (T < 1e-5) gather too, and never use it: cheaper than a branch around the loads
        if VALUES_GIVEN:
            values = values_ptr + (b64 * K + rows) * 2
            target_at_draft = _scaled(_gather(values, 0, valid, FP64), inverse_t)
        else:
            target_rows = target_logits_ptr + b64 * target_batch_stride + rows.to(tl.int64) * target_row_stride
            target_at_draft = _scaled(_gather(target_rows, drafts, valid, FP64), inverse_t)
        if ONE_HOT:
            draft_at_draft = target_at_draft  # unused
        elif VALUES_GIVEN:
            draft_at_draft = _scaled(_gather(values, 1, valid, FP64), inverse_t)
        else:
            draft_rows = draft_logits_ptr + b64 * draft_batch_stride + rows.to(tl.int64) * draft_row_stride
            draft_at_draft = _scaled(_gather(draft_rows, drafts, valid, FP64), inverse_t)
        u = _acceptance_uniforms(seed, position + rows.to(tl.int64), FP64)
    return drafts, valid, target_at_draft, draft_at_draft, u


@jit
def _decide(stats_ptr, partial_score_ptr, partial_index_ptr, b64, num_drafts, temperature, K, num_blocks, drafts,
            valid, target_at_draft, draft_at_draft, u, target_logits_ptr, target_batch_stride, target_row_stride, V,
            STRICT: tl.constexpr, ONE_HOT: tl.constexpr, FP64: tl.constexpr, BLOCK_K: tl.constexpr,
            REDUCE_BLOCK: tl.constexpr, greedy_rows=0, MERGED_GREEDY: tl.constexpr = False):
    """Every draft row's decision for one request, from _decision_inputs and the stats launch's
    partials -> (a_b, whether row a_b resamples the residual, whether row a_b is greedy because its
    scaled logits overflow (EMIT_GREEDY), and the log-normalisers of x / T and y / T of row a_b,
    used only when it resamples). A probabilistic row whose target or draft logits overflow when
    scaled (the stats launch flags it) is decided greedily: accept iff the draft is its argmax."""
    target_row_ptr = target_logits_ptr + b64 * target_batch_stride
    rows = tl.arange(0, BLOCK_K)
    active = rows < num_drafts
    if FP64:
        stats = stats_ptr.to(tl.pointer_type(tl.float64))
        no_normalizer = tl.zeros([BLOCK_K], tl.float64)  # for requests that never resample
    else:
        stats = stats_ptr
        no_normalizer = tl.zeros([BLOCK_K], tl.float32)
    if STRICT or is_greedy(temperature):
        # by the target token; rows that overflow are flagged in their partials: the finish launch takes
        # row a_b's greedy argmax from those flags
        target_tokens = _target_tokens(partial_score_ptr, partial_index_ptr, b64, K, num_blocks, rows, num_drafts,
                                       target_row_ptr, target_row_stride, V, greedy_rows, FP64, REDUCE_BLOCK,
                                       MERGED_GREEDY)
        emit_row = _first_rejection(valid & (drafts == target_tokens), rows, num_drafts)
        resample = emit_row < 0  # never
        greedy_emit = resample
        target_lse = no_normalizer
        draft_lse = no_normalizer
    else:
        blocks = tl.arange(0, REDUCE_BLOCK)
        mask = active[:, None] & (blocks[None, :] < num_blocks)
        offsets = (b64 * K + rows)[:, None] * (NUM_STATS * num_blocks) + blocks[None, :]
        target_sums = tl.load(stats + offsets + num_blocks, mask=mask, other=0.0)
        overflow = active & (tl.min(target_sums, axis=1) < 0)  # the stats launch's flag: the row is greedy
        target_lse = _merge_log_normalizer(tl.load(stats + offsets, mask=mask, other=float("-inf")), target_sums)
        log_ratio = target_at_draft - target_lse  # log p(d)
        if ONE_HOT:
            draft_lse = no_normalizer
        else:
            draft_lse = _merge_log_normalizer(
                tl.load(stats + offsets + 2 * num_blocks, mask=mask, other=float("-inf")),
                tl.load(stats + offsets + 3 * num_blocks, mask=mask, other=0.0))
            log_ratio = log_ratio - (draft_at_draft - draft_lse)
        accept = valid & (u < tl.exp(log_ratio))  # NaN ratios reject
        greedy_tokens = _greedy_where_flagged(drafts, overflow, rows, num_drafts, target_row_ptr,
                                              target_row_stride, V, greedy_rows, MERGED_GREEDY)
        accept = tl.where(overflow, valid & (drafts == greedy_tokens), accept)
        emit_row = _first_rejection(accept, rows, num_drafts)
        greedy_emit = tl.max(tl.where(rows == emit_row, overflow.to(tl.int32), 0), axis=0) > 0
        resample = (emit_row < num_drafts) & ~greedy_emit
    chosen = rows == emit_row
    return (emit_row, resample, greedy_emit, tl.sum(tl.where(chosen, target_lse, 0.0), axis=0),
            tl.sum(tl.where(chosen, draft_lse, 0.0), axis=0))


@jit
def _emit_mode(emit_row, resample, greedy_emit, num_drafts, BONUS_IN_STATS: tl.constexpr):
    """What row a_b emits: the stats launch reduced the Gumbel-max partials of every strict or greedy
    row < n_b, and of row n_b with BONUS_IN_STATS; the emit launch computes the others."""
    if BONUS_IN_STATS:
        in_stats = emit_row <= num_drafts
    else:
        in_stats = emit_row < num_drafts
    return tl.where(greedy_emit, EMIT_GREEDY,
                    tl.where(resample, EMIT_RESIDUAL, tl.where(in_stats, EMIT_STATS_ROW, EMIT_SAMPLE)))


@jit
def rejection_decide_kernel(
    target_logits_ptr,  # [B, K+1, V] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V] f32, columns contiguous (unused when ONE_HOT)
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    num_draft_tokens_ptr,  # [B] i32|i64, n_b (clamped to [0, K])
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64, position of row 0
    temperature_ptr,  # [B] f32
    stats_ptr,  # [B * K, NUM_STATS * NUM_BLOCKS] f32 (f64 words when FP64), from rejection_stats_kernel
    row_score_ptr,  # [B * (K+1), NUM_BLOCKS] f32 (f64 words when FP64), from rejection_stats_kernel
    row_index_ptr,  # [B * (K+1), NUM_BLOCKS] i32, from rejection_stats_kernel
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): emit mode EMIT_STATS_ROW (no emit)
    V,
    K,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    num_blocks,
    emit_row_ptr,  # [B] i32 output: a_b, the number of accepted drafts (= the emitted row)
    emit_mode_ptr,  # [B] i32 output: EMIT_STATS_ROW, EMIT_RESIDUAL or EMIT_SAMPLE
    log_normalizer_ptr,  # [B, 2] f32 output (f64 as [B, 4] words): log sum exp of x / T and y / T of row a_b
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    BONUS_IN_STATS: tl.constexpr,  # config.bonus_in_stats
    FP64: tl.constexpr,
    BLOCK_K: tl.constexpr,  # next power of two >= K + 1
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= NUM_BLOCKS
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Per request: every draft row's decision, then a_b and what row a_b emits."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):  # padding: nothing to emit (the finish launch writes its outputs)
            tl.store(emit_row_ptr + b, 0)
            tl.store(emit_mode_ptr + b, EMIT_STATS_ROW)
            return
    num_drafts = tl.minimum(tl.maximum(tl.load(num_draft_tokens_ptr + b), 0), K)
    temperature = load_temperature(temperature_ptr, b)
    drafts, valid, target_at_draft, draft_at_draft, u = _decision_inputs(
        target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, b64, num_drafts, load_seed(seeds_ptr, b, SEED_WORDS),
        tl.load(positions_ptr + b).to(tl.int64), temperature, V, K, target_batch_stride, target_row_stride,
        draft_batch_stride, draft_row_stride, STRICT, ONE_HOT, FP64, BLOCK_K)
    emit_row, resample, greedy_emit, target_lse, draft_lse = _decide(
        stats_ptr, row_score_ptr, row_index_ptr, b64, num_drafts, temperature, K, num_blocks, drafts, valid,
        target_at_draft, draft_at_draft, u, target_logits_ptr, target_batch_stride, target_row_stride, V, STRICT,
        ONE_HOT, FP64, BLOCK_K, REDUCE_BLOCK)
    tl.store(emit_row_ptr + b, emit_row)
    tl.store(emit_mode_ptr + b, _emit_mode(emit_row, resample, greedy_emit, num_drafts, BONUS_IN_STATS))
    if FP64:
        log_normalizer = log_normalizer_ptr.to(tl.pointer_type(tl.float64))
    else:
        log_normalizer = log_normalizer_ptr
    tl.store(log_normalizer + b64 * 2, target_lse)
    tl.store(log_normalizer + b64 * 2 + 1, draft_lse)


@jit
def _fast_residual_scores(x, y, score, temperature, target_lse, draft_lse):
    """FAST_MATH FP32 residual scores from finite or -inf draft logits y: log2(q / p) with log2(e)
    folded into the per-row constants (one fused multiply-add), and log r + g + log Z_p =
    score + ln 2 * log2(1 - q / p) (one more): the row's constant log Z_p is dropped (argmax-invariant).
    max(1 - q / p, 0) sends q >= p, and NaN ratios (x = y = -inf, p = 0), to lg2(0) = -inf with no
    mask: a GPU's max returns the non-NaN operand. `score` is never NaN, so neither is the result."""
    log_ratio = tl.fma(y - x, inverse_temperature(temperature, False) * LOG2E, (target_lse - draft_lse) * LOG2E)
    return tl.fma(log2_approx(tl.maximum(1.0 - exp2_approx(log_ratio), 0.0)), LN2, score)


@jit
def _emit_inputs(target_logits_ptr, draft_logits_ptr, b64, block, seed, position, temperature, emit_row, residual, V,
                 target_batch_stride, target_row_stride, draft_batch_stride, draft_row_stride, ONE_HOT: tl.constexpr,
                 FP64: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, FAST_MATH: tl.constexpr):
    """What block `block` of row a_b's emit step reads and draws: (x, y, g) = its target logits, its
    draft logits (when `residual` and not ONE_HOT; -inf otherwise: no memory is read) and its stream-0
    noise at position `position` = P_b + a_b. `V` must be aligned (gumbel.aligned)."""
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    target_row_ptr = (target_logits_ptr + tl.multiple_of(b64 * target_batch_stride, ROW_ALIGN)
                      + tl.multiple_of(tl.cast(emit_row, tl.int64) * target_row_stride, ROW_ALIGN))
    x = load_block(target_row_ptr, cols, V, FP64)
    if ONE_HOT:
        y = x  # unused
    else:
        draft_row_ptr = (draft_logits_ptr + tl.multiple_of(b64 * draft_batch_stride, ROW_ALIGN)
                         + tl.multiple_of(tl.cast(emit_row, tl.int64) * draft_row_stride, ROW_ALIGN))
        # V or 0 (every column masked, nothing read: row a_b = n_b = K has no draft row); a multiple of
        # V's alignment either way, so the load stays vectorised
        y = load_block(draft_row_ptr, cols, V * residual.to(tl.int32), FP64)
    if is_greedy(temperature):
        noise = tl.zeros_like(x)
    else:
        noise = block_noise(seed, position, block * BLOCK_V, STREAM_TOKEN, BLOCK_V, FP64, FAST_MATH)
    return x, y, noise


@jit
def _emit_block(x, y, noise, draft_tokens_ptr, b64, block, num_blocks, temperature, emit_row, emit_mode, target_lse,
                draft_lse, K, B, partial_score_ptr, partial_index_ptr, ONE_HOT: tl.constexpr, FP64: tl.constexpr,
                BLOCK_V: tl.constexpr, FAST_MATH: tl.constexpr):
    """One vocabulary block of row a_b (EMIT_RESIDUAL or EMIT_SAMPLE), from _emit_inputs: the block
    partials of its Gumbel-max scores (rows B..2B-1 of the partials) and, for EMIT_RESIDUAL, of its
    residual scores (rows < B), from one evaluation of the row's stream-0 noise."""
    _emit_scores(x, y, noise, draft_tokens_ptr, b64, block * BLOCK_V, temperature, emit_row, emit_mode, target_lse,
                 draft_lse, K, partial_score_ptr, partial_index_ptr, (B + b64) * num_blocks + block,
                 b64 * num_blocks + block, ONE_HOT, FP64, BLOCK_V, FAST_MATH)


@jit
def _emit_scores(x, y, noise, draft_tokens_ptr, b64, first_col, temperature, emit_row, emit_mode, target_lse,
                 draft_lse, K, partial_score_ptr, partial_index_ptr, sample_out, residual_out, ONE_HOT: tl.constexpr,
                 FP64: tl.constexpr, BLOCK_V: tl.constexpr, FAST_MATH: tl.constexpr):
    """_emit_block's scores of the columns first_col .. first_col + BLOCK_V - 1 (any multiple of 4: the
    vocab-parallel emit scores a shard's own columns), their partials stored at `sample_out` and, for
    EMIT_RESIDUAL, `residual_out`."""
    cols = first_col + tl.arange(0, BLOCK_V)
    # exactly gumbel_sample's scores of this row (block_scores): the bonus token, or the fallback; flagged
    # when the row's scaled logits overflow (only a sampled row a_b = n_b can: the decision made the
    # others greedy)
    score, best, overflow = noisy_scores(x, noise, temperature, FP64, FAST_MATH, x)
    store_block_best(partial_score_ptr, partial_index_ptr, sample_out, score, best, first_col, FP64, overflow)
    if emit_mode == EMIT_RESIDUAL:
        if ONE_HOT:
            draft = tl.load(draft_tokens_ptr + b64 * K + emit_row)
            residual = tl.where(cols == draft, float("-inf"), score)  # r = p with the draft removed
        else:
            # log(q / p) = (y - x) / T + log Z_p - log Z_q; a +inf or NaN draft logit means q = 0 there
            # (NaN where both logits are -inf, p = 0 there: compared below as false). log r + g =
            # log p + log(1 - q / p) + g = (score - log Z_p) + log(1 - q / p) where q < p; only the
            # absolute error of log(1 - q / p) matters next to the score, so no log1p series is needed
            if FAST_MATH and not FP64 and (tl.abs(target_lse - draft_lse) < FOLD_LIMIT):
                # q = 0 where a draft logit is NaN or +inf (masking only the blocks that hold one, as
                # noisy_scores does, saved 2 instructions a column but cost 6 registers)
                residual = _fast_residual_scores(x, tl.where(tl.abs(y) < float("inf"), y, float("-inf")),
                                                 score, temperature, target_lse, draft_lse)
            else:
                log_difference = tl.where(y < float("inf"), y - x, float("-inf"))
                log_ratio = log_difference * inverse_temperature(temperature, FP64) + (target_lse - draft_lse)
                residual_score = (score - target_lse) + tl.log(1.0 - tl.exp(log_ratio))
                # false for NaN: non-candidates of `score` are -inf, and q >= p has no residual
                residual = tl.where((log_ratio < 0) & (residual_score > float("-inf")), residual_score,
                                    float("-inf"))
        store_block_best(partial_score_ptr, partial_index_ptr, residual_out, residual, tl.max(residual, axis=0),
                         first_col, FP64)


@jit
def rejection_emit_kernel(
    target_logits_ptr,  # [B, K+1, V] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V] f32, columns contiguous (unused when ONE_HOT)
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64, position of row 0
    temperature_ptr,  # [B] f32
    emit_row_ptr,  # [B] i32, a_b, from rejection_decide_kernel
    emit_mode_ptr,  # [B] i32, from rejection_decide_kernel
    log_normalizer_ptr,  # [B, 2] f32 (f64 as [B, 4] words), from rejection_decide_kernel
    V,
    K,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    partial_score_ptr,  # [2B, NUM_BLOCKS] f32 output (f64 words when FP64): rows < B residual, rows >= B Gumbel
    partial_index_ptr,  # [2B, NUM_BLOCKS] i32 output
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,  # config.vocab_align
    FAST_MATH: tl.constexpr,  # gumbel_sample's noise log (config.fast_math)
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
):
    """Requests whose emitted token rejection_stats_kernel did not reduce: _emit_block of row a_b."""
    b = tl.program_id(0)
    emit_mode = tl.load(emit_mode_ptr + b)
    if (emit_mode == EMIT_RESIDUAL) | (emit_mode == EMIT_SAMPLE):
        b64 = b.to(tl.int64)
        block = tl.program_id(1)
        emit_row = tl.load(emit_row_ptr + b)
        temperature = load_temperature(temperature_ptr, b)
        if FP64:
            log_normalizer = log_normalizer_ptr.to(tl.pointer_type(tl.float64))
        else:
            log_normalizer = log_normalizer_ptr
        x, y, noise = _emit_inputs(
            target_logits_ptr, draft_logits_ptr, b64, block, load_seed(seeds_ptr, b, SEED_WORDS),
            tl.load(positions_ptr + b).to(tl.int64) + emit_row, temperature, emit_row, emit_mode == EMIT_RESIDUAL,
            aligned(V, VOCAB_ALIGN), target_batch_stride, target_row_stride, draft_batch_stride, draft_row_stride,
            ONE_HOT, FP64, BLOCK_V, ROW_ALIGN, FAST_MATH)
        _emit_block(x, y, noise, draft_tokens_ptr, b64, block, tl.num_programs(1), temperature, emit_row, emit_mode,
                    tl.load(log_normalizer + b64 * 2), tl.load(log_normalizer + b64 * 2 + 1), K, tl.num_programs(0),
                    partial_score_ptr, partial_index_ptr, ONE_HOT, FP64, BLOCK_V, FAST_MATH)


@jit
def rejection_decide_emit_kernel(
    target_logits_ptr,  # [B, K+1, V] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V] f32, columns contiguous (unused when ONE_HOT)
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    num_draft_tokens_ptr,  # [B] i32|i64, n_b (clamped to [0, K])
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64, position of row 0
    temperature_ptr,  # [B] f32
    stats_ptr,  # [B * K, NUM_STATS * NUM_BLOCKS] f32 (f64 words when FP64), from rejection_stats_kernel
    row_score_ptr,  # [B * (K+1), NUM_BLOCKS] f32 (f64 words when FP64), from rejection_stats_kernel
    row_index_ptr,  # [B * (K+1), NUM_BLOCKS] i32, from rejection_stats_kernel
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read or written
    V,
    K,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    partial_score_ptr,  # [2B, NUM_BLOCKS] f32 output, as rejection_emit_kernel's
    partial_index_ptr,  # [2B, NUM_BLOCKS] i32 output
    emit_row_ptr,  # [B] i32 output: a_b (written by block 0)
    emit_mode_ptr,  # [B] i32 output (written by block 0)
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,  # config.vocab_align
    FAST_MATH: tl.constexpr,  # gumbel_sample's noise log (config.fast_math)
    BLOCK_K: tl.constexpr,  # next power of two >= K + 1
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= NUM_BLOCKS
    PDL: tl.constexpr = False,  # a programmatic dependent launch (dependent_launch)
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """rejection_decide_kernel and rejection_emit_kernel in one launch, for small batches
    (decide_in_emit): every program of request b makes the request's decision itself (the same code,
    so the same a_b everywhere), then runs _emit_block of row a_b. The decision's chain of dependent
    loads replaces a launch; at large batches it would run B * NUM_BLOCKS times over. The stats launch
    ran with BONUS_PROGRAMS, so a request that accepts every draft only copies row n_b's partials here.

    Under PDL, everything read from the op's own inputs comes before the wait for the stats launch
    (_decision_inputs; and at K <= 1, where only row 0 can need this launch's pass, that row's block
    and noise): the wait then covers only the partials' loads and the decision itself."""
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, tl.program_id(0)):  # padding: the finish launch writes its outputs
            return
    _decide_emit_program(
        target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, num_draft_tokens_ptr, seeds_ptr, positions_ptr,
        temperature_ptr, stats_ptr, row_score_ptr, row_index_ptr, V, K, tl.num_programs(0), target_batch_stride, target_row_stride,
        draft_batch_stride, draft_row_stride, partial_score_ptr, partial_index_ptr, emit_row_ptr, emit_mode_ptr,
        tl.program_id(0), tl.program_id(1), tl.num_programs(1), emit_row_ptr, 0, STRICT, ONE_HOT, FP64, BLOCK_V,
        ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, BLOCK_K, REDUCE_BLOCK, PDL, False, SEED_WORDS)


@jit
def _wait_for_stats(PDL: tl.constexpr, TICKETS: tl.constexpr, stats_arrivals_ptr, stats_programs):
    """Where the decision waits for the stats partials: griddepcontrol.wait under PDL; in
    rejection_one_launch_kernel until all `stats_programs` stats programs have arrived (their
    release, this acquire; the barrier orders every thread's loads after it)."""
    if TICKETS:
        arrived = tl.atomic_add(stats_arrivals_ptr, 0, sem="acquire", scope="gpu")
        while arrived < stats_programs:
            arrived = tl.atomic_add(stats_arrivals_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
    else:
        dependent_launch(PDL, True)


@jit
def _decide_emit_program(
        target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, num_draft_tokens_ptr, seeds_ptr, positions_ptr,
        temperature_ptr, stats_ptr, row_score_ptr, row_index_ptr, V, K, B, target_batch_stride, target_row_stride,
        draft_batch_stride, draft_row_stride, partial_score_ptr, partial_index_ptr, emit_row_ptr, emit_mode_ptr,
        b, block, num_blocks, stats_arrivals_ptr, stats_programs, STRICT: tl.constexpr, ONE_HOT: tl.constexpr,
        FP64: tl.constexpr, BLOCK_V: tl.constexpr, ROW_ALIGN: tl.constexpr, VOCAB_ALIGN: tl.constexpr,
        FAST_MATH: tl.constexpr, BLOCK_K: tl.constexpr, REDUCE_BLOCK: tl.constexpr, PDL: tl.constexpr,
        TICKETS: tl.constexpr, SEED_WORDS: tl.constexpr):
    """Program (b, block) of rejection_decide_emit_kernel (of num_blocks per request)."""
    b64 = b.to(tl.int64)
    num_drafts = tl.minimum(tl.maximum(tl.load(num_draft_tokens_ptr + b), 0), K)
    seed = load_seed(seeds_ptr, b, SEED_WORDS)
    position = tl.load(positions_ptr + b).to(tl.int64)
    temperature = load_temperature(temperature_ptr, b)
    V = aligned(V, VOCAB_ALIGN)
    drafts, valid, target_at_draft, draft_at_draft, u = _decision_inputs(
        target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, b64, num_drafts, seed, position, temperature, V, K,
        target_batch_stride, target_row_stride, draft_batch_stride, draft_row_stride, STRICT, ONE_HOT, FP64, BLOCK_K)
    ROW_0_ONLY: tl.constexpr = BLOCK_K <= 2  # K <= 1
    if ROW_0_ONLY:
        # the stats launch reduced row n_b and every strict or greedy row, so this launch's pass is
        # row 0's residual or nothing (at most 4 requests here: the wasted reads are small)
        x, y, noise = _emit_inputs(
            target_logits_ptr, draft_logits_ptr, b64, block, seed, position, temperature, 0, num_drafts > 0, V,
            target_batch_stride, target_row_stride, draft_batch_stride, draft_row_stride, ONE_HOT, FP64, BLOCK_V,
            ROW_ALIGN, FAST_MATH)
    _wait_for_stats(PDL, TICKETS, stats_arrivals_ptr, stats_programs)
    rows = tl.arange(0, BLOCK_K)
    if ROW_0_ONLY:
        # K <= 1, where requests that accept their draft emit row n_b's sample from the stats launch
        # (EMIT_STATS_ROW): this block's stats partials of both rows, loaded with the decision's
        # (with more rows it cost the other requests more than it saved)
        stats_rows_at = (b64 * (K + 1) + rows) * num_blocks + block
        if FP64:
            row_scores = tl.load(row_score_ptr.to(tl.pointer_type(tl.float64)) + stats_rows_at, mask=rows <= K)
        else:
            row_scores = tl.load(row_score_ptr + stats_rows_at, mask=rows <= K)
        row_columns = tl.load(row_index_ptr + stats_rows_at, mask=rows <= K)
    emit_row, resample, greedy_emit, target_lse, draft_lse = _decide(
        stats_ptr, row_score_ptr, row_index_ptr, b64, num_drafts, temperature, K, num_blocks, drafts, valid,
        target_at_draft, draft_at_draft, u, target_logits_ptr, target_batch_stride, target_row_stride, V, STRICT,
        ONE_HOT, FP64, BLOCK_K, REDUCE_BLOCK)
    emit_mode = _emit_mode(emit_row, resample, greedy_emit, num_drafts, True)  # the stats launch's BONUS_PROGRAMS
    if block == 0:
        tl.store(emit_row_ptr + b, emit_row)
        tl.store(emit_mode_ptr + b, emit_mode)
    if emit_mode == EMIT_STATS_ROW:
        # row a_b's stats partials copied into the emit partials, so the finish launch reads nothing
        # else (STATS_ROW_IN_EMIT)
        if ROW_0_ONLY:
            # rows the stats launch did not write hold anything (NaN too): only row a_b's values pass
            emit_score = tl.max(tl.where(rows == emit_row, row_scores, float("-inf")), axis=0)
            emit_column = tl.max(tl.where(rows == emit_row, row_columns, -2147483648), axis=0)  # flags are < 0
        else:
            emit_row_at = (b64 * (K + 1) + emit_row) * num_blocks + block
            if FP64:
                emit_score = tl.load(row_score_ptr.to(tl.pointer_type(tl.float64)) + emit_row_at)
            else:
                emit_score = tl.load(row_score_ptr + emit_row_at)
            emit_column = tl.load(row_index_ptr + emit_row_at)
        out = (B + b64) * num_blocks + block
        if FP64:
            tl.store(partial_score_ptr.to(tl.pointer_type(tl.float64)) + out, emit_score)
        else:
            tl.store(partial_score_ptr + out, emit_score)
        tl.store(partial_index_ptr + out, emit_column)
    elif emit_mode != EMIT_GREEDY:  # EMIT_GREEDY: the finish launch takes row a_b's argmax
        if not ROW_0_ONLY:
            x, y, noise = _emit_inputs(
                target_logits_ptr, draft_logits_ptr, b64, block, seed, position + emit_row, temperature, emit_row,
                emit_mode == EMIT_RESIDUAL, V, target_batch_stride, target_row_stride, draft_batch_stride,
                draft_row_stride, ONE_HOT, FP64, BLOCK_V, ROW_ALIGN, FAST_MATH)
        _emit_block(x, y, noise, draft_tokens_ptr, b64, block, num_blocks, temperature, emit_row, emit_mode,
                    target_lse, draft_lse, K, B, partial_score_ptr, partial_index_ptr, ONE_HOT, FP64, BLOCK_V,
                    FAST_MATH)


@jit
def _load_drafts(draft_tokens_ptr, b64, K, BLOCK_K: tl.constexpr):
    """Request b's K draft tokens (-1 past K), for _write_request."""
    rows = tl.arange(0, BLOCK_K)
    return tl.load(draft_tokens_ptr + b64 * K + rows, mask=rows < K, other=-1)


@jit
def _write_padding(tokens_ptr, num_sampled_ptr, b64, K, BLOCK_K: tl.constexpr):
    """A padding request's outputs: tokens[b] all -1, num_sampled[b] = 0."""
    rows = tl.arange(0, BLOCK_K)
    tl.store(tokens_ptr + b64 * (K + 1) + rows, tl.full([BLOCK_K], -1, tl.int32), mask=rows < K + 1)
    tl.store(num_sampled_ptr + b64, 0)


@jit
def _write_request(tokens_ptr, num_sampled_ptr, drafts, b64, K, emit_row, emitted, BLOCK_K: tl.constexpr):
    """tokens[b] = accepted drafts (of _load_drafts), the emitted token, then -1; num_sampled[b] = a_b + 1."""
    rows = tl.arange(0, BLOCK_K)
    out = tl.where(rows < emit_row, drafts, tl.where(rows == emit_row, emitted, -1))
    tl.store(tokens_ptr + b64 * (K + 1) + rows, out, mask=rows < K + 1)
    tl.store(num_sampled_ptr + b64, emit_row + 1)


@jit
def rejection_finish_kernel(
    target_logits_ptr,  # [B, K+1, V]: read only for a row a_b that is greedy because its scaled logits overflow
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    emit_row_ptr,  # [B] i32, a_b, from rejection_decide_kernel
    emit_mode_ptr,  # [B] i32, from rejection_decide_kernel
    row_score_ptr,  # [B * (K+1), NUM_BLOCKS] f32 (f64 words when FP64), from rejection_stats_kernel
    row_index_ptr,  # [B * (K+1), NUM_BLOCKS] i32
    emit_score_ptr,  # [2B, NUM_BLOCKS] f32 (f64 words when FP64), from rejection_emit_kernel
    emit_index_ptr,  # [2B, NUM_BLOCKS] i32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): tokens -1, num_sampled 0
    num_blocks,
    K,
    V,
    target_batch_stride,
    target_row_stride,
    tokens_ptr,  # [B, K+1] i32 output
    num_sampled_ptr,  # [B] i32 output
    FP64: tl.constexpr,
    BLOCK_K: tl.constexpr,  # next power of two >= K + 1
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= num_blocks
    STATS_ROW_IN_EMIT: tl.constexpr = False,  # after rejection_decide_emit_kernel, which copies row a_b's partials
    PDL: tl.constexpr = False,  # the last launch of a programmatic dependent launch chain (dependent_launch)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """The emitted token: the residual sample when row a_b resamples one (its Gumbel-max sample when
    the residual is all zero), else row a_b's Gumbel-max sample, from the emit or the stats launch
    (from the emit partials always with STATS_ROW_IN_EMIT)."""
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, tl.program_id(0)):
            _write_padding(tokens_ptr, num_sampled_ptr, tl.program_id(0).to(tl.int64), K, BLOCK_K)
            return
    _finish_program(target_logits_ptr, draft_tokens_ptr, emit_row_ptr, emit_mode_ptr, row_score_ptr, row_index_ptr,
                    emit_score_ptr, emit_index_ptr, num_blocks, K, tl.num_programs(0), V, target_batch_stride,
                    target_row_stride, tokens_ptr, num_sampled_ptr, tl.program_id(0), FP64, BLOCK_K, REDUCE_BLOCK,
                    STATS_ROW_IN_EMIT, PDL)


@jit
def _finish_program(target_logits_ptr, draft_tokens_ptr, emit_row_ptr, emit_mode_ptr, row_score_ptr, row_index_ptr,
                    emit_score_ptr, emit_index_ptr, num_blocks, K, B, V, target_batch_stride, target_row_stride,
                    tokens_ptr, num_sampled_ptr, b, FP64: tl.constexpr, BLOCK_K: tl.constexpr,
                    REDUCE_BLOCK: tl.constexpr, STATS_ROW_IN_EMIT: tl.constexpr, PDL: tl.constexpr):
    """Program b of rejection_finish_kernel. Row a_b's greedy argmax replaces the sample when it is
    EMIT_GREEDY or its Gumbel-max partials are flagged (its scaled logits overflow)."""
    b64 = b.to(tl.int64)
    drafts = _load_drafts(draft_tokens_ptr, b64, K, BLOCK_K)  # an input: before the wait
    if PDL:
        gdc_wait()
    emit_row = tl.load(emit_row_ptr + b)
    emit_mode = tl.load(emit_mode_ptr + b)
    # the emit launch's partials are reduced whatever the mode (unwritten ones are discarded): their
    # loads then go out with emit_mode's, not after it
    residual = reduce_block_best(emit_score_ptr, emit_index_ptr, b64, num_blocks, FP64, REDUCE_BLOCK)
    sampled, overflow = reduce_block_best_flagged(emit_score_ptr, emit_index_ptr, B + b64, num_blocks, FP64,
                                                  REDUCE_BLOCK, False)
    emitted = tl.where((emit_mode == EMIT_RESIDUAL) & (residual >= 0), residual, sampled)
    if STATS_ROW_IN_EMIT:
        greedy = (emit_mode == EMIT_GREEDY) | (((emit_mode == EMIT_SAMPLE) | (emit_mode == EMIT_STATS_ROW)) & overflow)
    else:
        greedy = (emit_mode == EMIT_GREEDY) | ((emit_mode == EMIT_SAMPLE) & overflow)
        if emit_mode == EMIT_STATS_ROW:
            emitted, greedy = reduce_block_best_flagged(row_score_ptr, row_index_ptr, b64 * (K + 1) + emit_row,
                                                        num_blocks, FP64, REDUCE_BLOCK, False)
    if greedy:
        emitted = greedy_argmax_row(target_logits_ptr + b64 * target_batch_stride
                                    + tl.cast(emit_row, tl.int64) * target_row_stride, V, 1024)
    _write_request(tokens_ptr, num_sampled_ptr, drafts, b64, K, emit_row, emitted, BLOCK_K)


@jit
def rejection_one_launch_kernel(
    target_logits_ptr,  # [B, K+1, V] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V] f32, columns contiguous (unused when ONE_HOT)
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    num_draft_tokens_ptr,  # [B] i32|i64, n_b (clamped to [0, K])
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64, position of row 0
    temperature_ptr,  # [B] f32
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): tokens -1, num_sampled 0, nothing read
    V,
    K,  # <= 1
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    num_blocks,
    stats_ptr,  # scratch output, as rejection_stats_kernel's
    row_score_ptr,  # scratch output, as rejection_stats_kernel's
    row_index_ptr,  # scratch output, as rejection_stats_kernel's
    emit_score_ptr,  # scratch output, as rejection_decide_emit_kernel's partial_score_ptr
    emit_index_ptr,  # scratch output, as rejection_decide_emit_kernel's partial_index_ptr
    emit_row_ptr,  # scratch output [B] i32
    emit_mode_ptr,  # scratch output [B] i32
    counters_ptr,  # [2 + B] i32 output, zeroed before the launch: tickets, stats arrivals, each request's emit arrivals
    tokens_ptr,  # [B, K+1] i32 output
    num_sampled_ptr,  # [B] i32 output
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    VOCAB_ALIGN: tl.constexpr,  # config.vocab_align
    FAST_MATH: tl.constexpr,  # gumbel_sample's noise log (config.fast_math)
    BLOCK_K: tl.constexpr,  # next power of two >= K + 1
    REDUCE_BLOCK: tl.constexpr,  # next power of two >= NUM_BLOCKS
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """The three launches of a small batch at K <= 1 in one, for targets where every launch costs host
    time and PDL is not available (JAX; lab INDEX: explore_jax_dispatch). Grid (B * 2 * NUM_BLOCKS +
    B * NUM_BLOCKS,): every program takes a ticket from an atomic counter; the first B * 2 * NUM_BLOCKS
    tickets run the stats programs (bonus row on programs of its own), the others the decide-emit
    programs, which wait until every stats program has arrived, and the last of request b's
    decide-emit programs to arrive runs its finish. No deadlock whatever the GPU keeps resident: a
    waiting program's ticket is above every stats ticket, and those are held by programs already
    running, which wait for nothing. The same program bodies as the three
    launches, all with config.num_warps = config.decide_num_warps (K <= 1), so the same tokens."""
    B = tl.num_programs(0) // (3 * num_blocks)  # the batch, from the grid: no compilation per batch size
    stats_programs = B * 2 * num_blocks
    ticket = tl.atomic_add(counters_ptr, 1, sem="relaxed", scope="gpu")
    if ticket < stats_programs:
        valid = True
        if HAS_ROW_VALID:  # a padding request's programs arrive without work
            valid = not is_padding(row_valid_ptr, ticket // (2 * num_blocks))
        if valid:
            _stats_program(target_logits_ptr, draft_logits_ptr, seeds_ptr, positions_ptr, temperature_ptr,
                           num_draft_tokens_ptr, V, K, target_batch_stride, target_row_stride, draft_batch_stride,
                           draft_row_stride, stats_ptr, row_score_ptr, row_index_ptr, ticket // (2 * num_blocks),
                           (ticket // num_blocks) % 2, ticket % num_blocks, 2, num_blocks, STRICT, ONE_HOT, False, FP64,
                           BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, True, SEED_WORDS)
        tl.debug_barrier()  # every thread's stores before the one release
        tl.atomic_add(counters_ptr + 1, 1, sem="release", scope="gpu")
    else:
        b = (ticket - stats_programs) // num_blocks
        valid = True
        if HAS_ROW_VALID:
            valid = not is_padding(row_valid_ptr, b)
        if valid:
            _decide_emit_program(
                target_logits_ptr, draft_logits_ptr, draft_tokens_ptr, num_draft_tokens_ptr, seeds_ptr, positions_ptr,
                temperature_ptr, stats_ptr, row_score_ptr, row_index_ptr, V, K, B, target_batch_stride,
                target_row_stride, draft_batch_stride, draft_row_stride, emit_score_ptr, emit_index_ptr, emit_row_ptr,
                emit_mode_ptr, b, (ticket - stats_programs) % num_blocks, num_blocks, counters_ptr + 1, stats_programs,
                STRICT, ONE_HOT, FP64, BLOCK_V, ROW_ALIGN, VOCAB_ALIGN, FAST_MATH, BLOCK_K, REDUCE_BLOCK, False, True,
                SEED_WORDS)
            tl.debug_barrier()
            if tl.atomic_add(counters_ptr + 2 + b, 1, sem="acq_rel", scope="gpu") == num_blocks - 1:
                _finish_program(target_logits_ptr, draft_tokens_ptr, emit_row_ptr, emit_mode_ptr, row_score_ptr,
                                row_index_ptr, emit_score_ptr, emit_index_ptr, num_blocks, K, B, V, target_batch_stride,
                                target_row_stride, tokens_ptr, num_sampled_ptr, b, FP64, BLOCK_K, REDUCE_BLOCK, True,
                                False)
        elif (ticket - stats_programs) % num_blocks == 0:
            _write_padding(tokens_ptr, num_sampled_ptr, b.to(tl.int64), K, BLOCK_K)


@jit
def synthetic_rejection_kernel(
    target_tokens_ptr,  # [B, K+1] i32|i64, contiguous
    draft_tokens_ptr,  # [B, K] i32|i64, contiguous
    num_draft_tokens_ptr,  # [B] i32|i64, n_b (clamped to [0, K])
    seeds_ptr,  # [B] i32|u32|i64
    positions_ptr,  # [B] i32|i64
    conditional_rates_ptr,  # [K] or [B, K] f32, contiguous
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): tokens -1, num_sampled 0
    K,
    rates_batch_stride,  # 0 for [K] rates, K for [B, K]
    tokens_ptr,  # [B, K+1] i32 output
    num_sampled_ptr,  # [B] i32 output
    FP64: tl.constexpr,
    BLOCK_K: tl.constexpr,  # next power of two >= K + 1
    SEED_WORDS: tl.constexpr = 1,  # 2: seeds are [B, 2] u32 (low, high) words (stream.load_seed)
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Accept draft j iff u_j < conditional_rates[j] (u_j: stream 2, position P + j) and the draft fits in
    int32 (an int64 draft beyond it is no token id: rejected); emit target_tokens[b, a_b]."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            _write_padding(tokens_ptr, num_sampled_ptr, b64, K, BLOCK_K)
            return
    num_drafts = tl.minimum(tl.maximum(tl.load(num_draft_tokens_ptr + b), 0), K)
    rows = tl.arange(0, BLOCK_K)
    active = rows < num_drafts
    rates = tl.load(conditional_rates_ptr + b64 * rates_batch_stride + rows, mask=active, other=0.0)
    seed = load_seed(seeds_ptr, b, SEED_WORDS)
    u = _acceptance_uniforms(seed, tl.load(positions_ptr + b).to(tl.int64) + rows.to(tl.int64), FP64)
    if FP64:
        accept = active & (u < rates.to(tl.float64))
    else:
        accept = active & (u < rates)
    drafts = _load_drafts(draft_tokens_ptr, b64, K, BLOCK_K)
    accept = accept & (drafts.to(tl.int32).to(drafts.dtype) == drafts)  # int64 drafts beyond int32: no token id
    emit_row = _first_rejection(accept, rows, num_drafts)
    emitted = tl.load(target_tokens_ptr + b64 * (K + 1) + emit_row)
    emitted = tl.where(emitted.to(tl.int32).to(emitted.dtype) == emitted, emitted, -1)  # int64 beyond int32: no token
    _write_request(tokens_ptr, num_sampled_ptr, drafts, b64, K, emit_row, emitted, BLOCK_K)


REJECTION_VARIANTS = ("four launches", "three launches", "one launch")


@functools.lru_cache(maxsize=512)
def plan_rejection_sample(target_logits: ArgSpec, draft_logits: ArgSpec, seeds: ArgSpec, target: Target, *,
                          strict: bool, fp64: bool, variant: str = None, row_valid: bool = False,
                          return_logprobs: bool = False, num_top: int = 0) -> Plan:
    """The launches of `rejection_sample` on inputs `target_logits` [B, K+1, V], `draft_logits`
    [B, K, V] (None: one-hot drafts; columns contiguous, any batch and row strides), `draft_tokens`
    [B, K] i32, `num_draft_tokens` [B] i32, `seeds`, `positions`, `temperature` [B] f32; outputs
    `tokens` [B, K+1] and `num_sampled` [B] i32. With `row_valid`, input `row_valid` (common.is_padding) marks a
    padding request (tokens -1, num_sampled 0, its logits unread).

    The variant (REJECTION_VARIANTS) is chosen here unless given (tests run each): "four launches"
    for large batches; "three launches" for small ones (decide_in_emit), chained by programmatic
    dependent launch where the target has it; "one launch" (rejection_one_launch_kernel) instead
    where every launch costs the caller host time (Target.launch_bound) and K <= 1. Tokens never
    depend on the variant.

    With `return_logprobs`, input `num_top` [1] i32 and the outputs `sampled` (the tokens), `num_sampled`,
    then token_logprobs' of every emitted token under its target row [B, K + 1] (logprobs.with_logprobs:
    no filters, so kept == scaled; a token -1 past num_sampled gives NaN and rank 0)."""
    if return_logprobs:
        from jsample.kernels.logprobs import with_logprobs

        sampling = plan_rejection_sample(target_logits, draft_logits, seeds, target, strict=strict, fp64=fp64,
                                         variant=variant, row_valid=row_valid)
        return with_logprobs(sampling, target_logits, target, has_top_k=False, has_top_p=False, has_min_p=False,
                             fp64=fp64, num_top=num_top, row_valid=row_valid, logits_name="target_logits")
    batch, rows, vocab = target_logits.shape
    k = rows - 1
    outputs = (Buffer("tokens", (batch, rows), "int32"), Buffer("num_sampled", (batch,), "int32"))
    if batch == 0:
        return Plan(outputs, (), ("tokens", "num_sampled"), "empty")
    one_hot = strict or draft_logits is None
    draft = target_logits if one_hot else draft_logits  # never read when ONE_HOT
    strides = (target_logits.strides[0], target_logits.strides[1], draft.strides[0], draft.strides[1])
    config = rejection_launch_config(vocab, k, strides, fp64, fast_math=not target.interpreter)
    fused = config.decide_num_warps == config.num_warps and k <= 1  # rejection_one_launch_kernel's condition
    if variant is None:
        variant = "four launches"
        if decide_in_emit(batch, config) and not target.large_programs:  # the interpreter: programs cost, launches don't
            variant = "one launch" if target.launch_bound and fused else "three launches"
    if variant not in REJECTION_VARIANTS or (variant == "one launch" and not fused):
        raise ValueError(f"plan_rejection_sample: no variant {variant!r} for K = {k}")
    three = variant != "four launches"
    pdl = variant == "three launches" and target.pdl and config.fast_math
    words = 2 if fp64 else 1  # f64 values are stored as two f32 words
    drafts = "draft_tokens" if k else "no_drafts"  # K = 0: a one-element stand-in, never read
    logits = ("target_logits", "target_logits" if one_hot else "draft_logits")
    requests = ("seeds", "positions", "temperature")
    valid = "row_valid" if row_valid else "num_draft_tokens"  # the stand-in is never read
    padding = dict(HAS_ROW_VALID=row_valid)
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    tiles = dict(BLOCK_V=config.block_v, ROW_ALIGN=config.row_align, VOCAB_ALIGN=config.vocab_align,
                 FAST_MATH=config.fast_math)
    flags = dict(STRICT=strict, ONE_HOT=one_hot, FP64=fp64)
    seed_words = seed_word_count(seeds.shape)
    buffers = (
        Buffer("stats", (batch * max(k, 1), STATS_PER_BLOCK * config.num_blocks * words), "float32"),
        Buffer("row_score", (batch * rows, config.num_blocks * words), "float32"),
        Buffer("row_index", (batch * rows, config.num_blocks), "int32"),
        Buffer("emit_score", (2 * batch, config.num_blocks * words), "float32"),
        Buffer("emit_index", (2 * batch, config.num_blocks), "int32"),
        Buffer("emit_row", (batch,), "int32"), Buffer("emit_mode", (batch,), "int32"),
        Buffer("log_normalizer", (batch, 2 * words), "float32"),
        Buffer("counters", (2 + batch,), "int32", zeroed=True),  # the one launch's tickets and arrivals
        Buffer("no_drafts", (1,), "int32", zeroed=True), num_rows_buffer(batch)) + outputs
    stats_outputs = ("stats", "row_score", "row_index")
    if variant == "one launch":
        launches = (launch(
            rejection_one_launch_kernel, (batch * 3 * config.num_blocks,),
            (*logits, drafts, "num_draft_tokens", *requests, valid, vocab, k, *strides, config.num_blocks),
            stats_outputs + ("emit_score", "emit_index", "emit_row", "emit_mode", "counters", "tokens", "num_sampled"),
            **padding, **flags, **tiles, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block,
            SEED_WORDS=seed_words,
            num_warps=config.num_warps, **options),)
    else:
        # padded_row_slots for the stats (a padding request costs its flag, not 4 x 75 programs); the emit launch keeps
        # its grid: its padding programs only read an emit mode, and a looped emit kernel needs more registers
        slots = row_valid and not three
        rows = "num_rows" if slots else "num_draft_tokens"  # (a stand-in, never read, without slots)
        stats = launch(
            rejection_stats_kernel, (padded_row_slots(batch) if slots else batch, config.stats_rows + three,
                                     config.num_blocks),
            (*logits, *requests, "num_draft_tokens", valid, rows, vocab, k, *strides), stats_outputs,
            **padding, ROW_SLOTS=slots, **flags, BONUS_IN_STATS=config.bonus_in_stats and not three,
            BONUS_PROGRAMS=three, **tiles, PDL=pdl,
            SEED_WORDS=seed_words, num_warps=config.num_warps, **options)
        if three:
            middle = (launch(
                rejection_decide_emit_kernel, (batch, config.num_blocks),
                (*logits, drafts, "num_draft_tokens", *requests, *stats_outputs, valid, vocab, k, *strides),
                ("emit_score", "emit_index", "emit_row", "emit_mode"),
                **padding, **flags, **tiles, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block, PDL=pdl,
                SEED_WORDS=seed_words, num_warps=config.decide_num_warps, pdl=pdl, **options),)
        else:
            middle = (
                launch(rejection_decide_kernel, (batch,),
                       (*logits, drafts, "num_draft_tokens", *requests, *stats_outputs, valid, vocab, k, *strides,
                        config.num_blocks), ("emit_row", "emit_mode", "log_normalizer"),
                       **padding, **flags, BONUS_IN_STATS=config.bonus_in_stats, BLOCK_K=config.block_k,
                       REDUCE_BLOCK=config.reduce_block, SEED_WORDS=seed_words, num_warps=config.decide_num_warps,
                       **options),
                launch(rejection_emit_kernel, (batch, config.num_blocks),
                       (*logits, drafts, *requests, "emit_row", "emit_mode", "log_normalizer", vocab, k,
                        *strides), ("emit_score", "emit_index"),
                       ONE_HOT=one_hot, FP64=fp64, **tiles, SEED_WORDS=seed_words, num_warps=config.num_warps,
                       **options))
        finish = launch(
            rejection_finish_kernel, (batch,),
            ("target_logits", drafts, "emit_row", "emit_mode", "row_score", "row_index", "emit_score", "emit_index",
             valid, config.num_blocks, k, vocab, strides[0], strides[1]), ("tokens", "num_sampled"),
            **padding, FP64=fp64, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block, STATS_ROW_IN_EMIT=three, PDL=pdl,
            num_warps=config.per_request_num_warps, pdl=pdl, **options)
        launches = (stats,) + middle + (finish,)
    used = {name for step in launches for name in step.args + step.outputs}
    return Plan(tuple(b for b in buffers if b.name in used), launches, ("tokens", "num_sampled"),
                variant + (", PDL" if pdl else ""))


@functools.lru_cache(maxsize=512)
def plan_synthetic_rejection_sample(target_tokens: ArgSpec, conditional_rates: ArgSpec, seeds: ArgSpec,
                                    target: Target, *, fp64: bool, row_valid: bool = False) -> Plan:
    """The launch of `synthetic_rejection_sample` on inputs `target_tokens` [B, K+1], `draft_tokens`
    [B, K], `num_draft_tokens` [B] (i32, contiguous), `seeds`, `positions` [B] and
    `conditional_rates` [K] or [B, K] f32 (contiguous); outputs `tokens` [B, K+1], `num_sampled` [B]."""
    batch, rows = target_tokens.shape
    k = rows - 1
    buffers = (Buffer("tokens", (batch, rows), "int32"), Buffer("num_sampled", (batch,), "int32"),
               Buffer("no_drafts", (1,), "int32", zeroed=True), Buffer("no_rates", (1,), "float32", zeroed=True))
    if batch == 0:
        return Plan(buffers[:2], (), ("tokens", "num_sampled"), "empty")
    config = rejection_launch_config(1, k, (), fp64, fast_math=not target.interpreter)
    drafts, rates = ("draft_tokens", "conditional_rates") if k else ("no_drafts", "no_rates")  # K = 0: never read
    rates_batch_stride = conditional_rates.strides[0] if len(conditional_rates.shape) == 2 and k else 0
    launches = (launch(
        synthetic_rejection_kernel, (batch,),
        ("target_tokens", drafts, "num_draft_tokens", "seeds", "positions", rates,
         "row_valid" if row_valid else "num_draft_tokens", k, rates_batch_stride),
        ("tokens", "num_sampled"), HAS_ROW_VALID=row_valid, FP64=fp64, BLOCK_K=config.block_k, SEED_WORDS=seed_word_count(seeds.shape),
        num_warps=config.per_request_num_warps, num_stages=config.num_stages,
        enable_fp_fusion=config.enable_fp_fusion),)
    used = {name for step in launches for name in step.args + step.outputs}
    return Plan(tuple(b for b in buffers if b.name in used), launches, ("tokens", "num_sampled"), "one launch")
