"""Vocab-parallel `rejection_sample` (issue 42): target (and draft) logits split along the vocabulary over
devices, the unsharded call's tokens, bit for bit, for any split whose shards start at multiples of 4.

What the one-GPU op (rejection.py) decides, and how each part splits:

* The Gumbel-max rows (strict rows, greedy requests, the bonus row n_b, the fallback of a residual) and the
  residual's argmax are argmaxes of per-column scores (the noise keyed by the global column): any partition of
  the columns gives the same (best score, lowest column), so each shard scores its own columns, in blocks from
  its first column (as vocab_parallel.shard_partial_kernel), and the shards' bests are merged. So is the greedy
  argmax of an emitted row whose scaled logits overflow (each shard's largest finite logit and its lowest
  column); a greedy decision only asks whether the draft is its row's argmax, which the blocks' largest finite
  logits and the first column of the maximum in the draft's block decide.
* The softmax normalisers of the probabilistic decision rows are FP32 (FP64) float sums, reduced per vocabulary
  block in an order the block's layout fixes, then merged over the blocks (`_merge_log_normalizer`): they are
  the unsharded call's bits only if every global block of BLOCK_V columns is reduced whole, by the same code,
  from a load the compiler lays out alike. So global block k is reduced by the shard holding its first column
  (its owner), from the shard's own memory where the shard's alignment gives the unsharded call's vector width
  (`DIRECT`), else from an aligned copy; a block that runs past the owner's last column (the shards' edges need
  not be block edges) is completed from the next shards' first columns, all-gathered first (the heads round).
  The owners' block partials are all-gathered and laid out as the one-GPU stats, which `_decide` reads with the
  one-GPU loads and warps.

Rounds (plan.run_rounds; every record all-gathered over the shards):

0. (only when a shard's edge cuts a block and some row is probabilistic) `shard_heads_kernel`: each shard's
   head, its columns before its first block edge (at most BLOCK_V - 1), of the K decision rows of the target
   and draft logits, widened to float32 (exact).
1. `shard_owned_copy_kernel` (where blocks are copied), `shard_rejection_stats_kernel` (per request, decision
   row j < n_b and block: the owned blocks' softmax partials of the probabilistic rows, the Gumbel-max partials
   of the sampled rows (strict and greedy requests) over the shard's own columns, and what decides whether a
   draft is its row's argmax (for rows whose scaled logits overflow: the blocks' largest finite logits, and the
   first column of its maximum in the draft's block)),
   `shard_rejection_record_kernel` (the request's record: the owned blocks' partials, each sampled row's best
   and overflow flag, each decision row's argmax parts, the target and draft logits at the drafts the shard
   holds).
2. `shard_rejection_merge_kernel` (the records in the one-GPU layouts), `shard_rejection_decide_kernel` (the
   one-GPU `_decide`, so every shard takes the same a_b, emit mode and normalisers), `shard_rejection_emit_kernel`
   (row a_b's sample and the residual's block partials over the shard's own columns, `_emit_scores`: the bonus
   row only where every draft was accepted; row a_b's greedy candidates where it is greedy or may overflow),
   `shard_rejection_emit_record_kernel` (the shard's bests).
3. `shard_rejection_finish_kernel`: the emitted token from the shards' bests (the one-GPU finish's rules), the
   accepted drafts, num_sampled.

Records are O(B x K x V / BLOCK_V / shards) words (the owned blocks' partials) and O(B x K x BLOCK_V) for the
heads; no [B, V] array crosses devices. The batch is a grid dimension, the shard's first column a device scalar:
no batch size and no shard index costs a compilation.
"""

import functools
import math

import triton
import triton.language as tl

from jsample.kernels.common import (aligned, block_noise, inverse_temperature, is_greedy, is_padding,
                                    largest_power_of_two_dividing, load_block, load_temperature,
                                    overflow_from_magnitude, store_sampled_block)
from jsample.kernels.host import jit
from jsample.kernels.plan import ArgSpec, Buffer, Plan, ShardedPlan, Target, launch
from jsample.kernels.rejection import (EMIT_GREEDY, EMIT_RESIDUAL, EMIT_SAMPLE, EMIT_STATS_ROW, NUM_STATS,
                                       STATS_PER_BLOCK, _decide, _decision_inputs, _emit_mode, _emit_scores,
                                       _load_drafts, _softmax_partials, _write_padding, _write_request,
                                       rejection_launch_config)
from jsample.kernels.stream import STREAM_TOKEN, load_seed, seed_word_count
from jsample.kernels.vocab_parallel import START_MULTIPLE, store_greedy_candidate

_NO_COLUMN = tl.constexpr(2147483647)
# a sampled row's words in the record after its score (1 word, 2 in FP64): its column, its overflow flag
_ROW_WORDS = 2
# a decision row's argmax parts: the shard's largest finite logit, its largest before the draft's block (f32
# bits), the lowest column of the largest in the draft's block where the shard holds that block (-1 elsewhere), a
# word of padding (even)
_ARGMAX_WORDS = 4
# a decision row's logits at its draft (f32 bits): the target's, the draft's
_DRAFT_WORDS = 2
# which owned blocks a plan copies (the rest are read in place): none, the last (a shard's edge cuts it), every one
COPY_NONE, COPY_LAST, COPY_ALL = 0, 1, 2
_COPY_LAST, _COPY_ALL = tl.constexpr(COPY_LAST), tl.constexpr(COPY_ALL)  # the kernels' copies
_COPY_BLOCK = tl.constexpr(1024)  # the record kernel copies the owned blocks' partials this many words at a time



def record_words(k: int, max_owned: int, fp64: bool) -> int:
    """The int32 words of a request's round-1 record (_record_offsets' layout)."""
    words = 2 if fp64 else 1
    return k * STATS_PER_BLOCK * max_owned * words + (k + 1) * (words + _ROW_WORDS) + k * _ARGMAX_WORDS \
        + k * _DRAFT_WORDS


@jit
def _record_offsets(K, max_owned, WORDS: tl.constexpr):
    """Where a request's round-1 record keeps (in int32 words; every part even-aligned, so an FP64 value lies on
    8 bytes): the owned blocks' softmax partials [K, NUM_STATS, max_owned] (f32, f64 in FP64) from word 0, then
    each row's sampled best (score, column, overflow flag) [K + 1], each decision row's argmax parts
    (_store_argmax_parts, reduced over the shard's blocks: 4 words) [K], each decision row's target and draft
    logits at its draft [K] -> (the rows' offset, the argmax parts', the drafts', the record's words)."""
    rows_at = K * NUM_STATS * max_owned * WORDS
    argmax_at = rows_at + (K + 1) * (WORDS + 2)
    drafts_at = argmax_at + K * 4
    return rows_at, argmax_at, drafts_at, drafts_at + K * 2


@jit
def _float_words(ptr, FP64: tl.constexpr):
    """`ptr` (int32 words) as a pointer to the plan's floats (f64 in FP64)."""
    if FP64:
        return ptr.to(tl.pointer_type(tl.float64))
    else:
        return ptr.to(tl.pointer_type(tl.float32))


@jit
def _shard_span(vocab_start_ptr, V_shard, START_ALIGN: tl.constexpr, BLOCK_V: tl.constexpr):
    """(this shard's first global column, its end, its first owned block (the first global block whose first
    column it holds), the number of blocks it owns). START_ALIGN divides every shard's start and V, so also the
    shard's size: its rows' masks (cols < end) keep the loads vectorised where jax-triton does not tell the
    compiler an integer's divisibility."""
    start = aligned(tl.load(vocab_start_ptr), START_ALIGN)
    end = start + aligned(V_shard, START_ALIGN)
    first_owned = (start + BLOCK_V - 1) // BLOCK_V
    return start, end, first_owned, (end + BLOCK_V - 1) // BLOCK_V - first_owned


@jit
def _num_drafts(num_draft_tokens_ptr, b, K):
    return tl.minimum(tl.maximum(tl.load(num_draft_tokens_ptr + b), 0), K)


@jit
def _store_argmax_parts(x, x_max, first_col, draft, value_ptr, index_ptr, out, BLOCK_V: tl.constexpr):
    """What the decision of a row whose scaled logits overflow (greedy: accept iff the draft is the row's argmax)
    needs of a block of its FP32 logits `x` (columns first_col ..; `x_max` a max of x that is finite only where
    the block holds no +inf, NaN aside): the block's largest finite logit at value_ptr[out] and, where the block
    holds the draft, that logit's lowest column at index_ptr[out] (-1 elsewhere, and where none is finite). The
    draft is the row's argmax iff its logit is the row's largest, no block before the draft's holds that value,
    and the draft is its block's first column of it."""
    if x_max < float("inf"):
        largest = x_max
    else:
        largest = tl.max(tl.where(tl.abs(x) < float("inf"), x, float("-inf")), axis=0)
    column = -1
    if (draft >= first_col) & (draft < first_col + BLOCK_V) & (largest > float("-inf")):
        cols = first_col + tl.arange(0, BLOCK_V)
        column = tl.min(tl.where(x == largest, cols, _NO_COLUMN), axis=0)
    tl.store(value_ptr + out, largest)
    tl.store(index_ptr + out, column)


@jit
def shard_heads_kernel(
    target_logits_ptr,  # [B, K+1, V_shard] f32|bf16|f16: this shard's columns, columns contiguous
    draft_logits_ptr,  # [B, K, V_shard] (ONE_HOT: unused)
    vocab_start_ptr,  # [1] i32: this shard's first global column
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read
    V_shard,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    heads_ptr,  # [B, R, HEAD] f32 output: R = K decision rows of the target, then (not ONE_HOT) the draft's
    ONE_HOT: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HEAD: tl.constexpr,  # a power of two >= every shard's head: min(BLOCK_V, the largest shard's size)
    START_ALIGN: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, R): row r's head, its columns before the shard's first block edge (the rest of the row's output
    unwritten past it), widened to float32: what the shards before complete their last owned block from."""
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            return
    r = tl.program_id(1)
    rows = tl.num_programs(1)
    K = rows if ONE_HOT else rows // 2
    b64 = b.to(tl.int64)
    start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
    head = tl.minimum(end, first_owned * BLOCK_V) - start
    offsets = tl.arange(0, HEAD)
    out = heads_ptr + (b64 * rows + r) * HEAD + offsets
    if r < K:  # (the two logits may differ in dtype: a load each)
        target_row = target_logits_ptr + b64 * target_batch_stride + r.to(tl.int64) * target_row_stride
        tl.store(out, tl.load(target_row + offsets, mask=offsets < head).to(tl.float32), mask=offsets < head)
    else:
        draft_row = draft_logits_ptr + b64 * draft_batch_stride + (r - K).to(tl.int64) * draft_row_stride
        tl.store(out, tl.load(draft_row + offsets, mask=offsets < head).to(tl.float32), mask=offsets < head)


@jit
def shard_owned_copy_kernel(
    logits_ptr,  # [B, rows, V_shard] f32|bf16|f16: this shard's target (or draft) logits
    gathered_heads_ptr,  # [SHARDS, B, R, HEAD] f32: every shard's heads (HAS_HEADS)
    vocab_start_ptr,  # [1] i32
    shard_starts_ptr,  # [SHARDS + 1] i32: every shard's first global column, then V
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read
    V,
    V_shard,
    batch_stride,
    row_stride,
    head_row,  # the heads' row of this launch's row 0 (0: target, K: draft)
    heads_rows,  # R
    owned_ptr,  # [B, K, COPIES * BLOCK_V] output, the logits' dtype: the copied owned blocks
    SHARDS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HEAD: tl.constexpr,
    START_ALIGN: tl.constexpr,
    COPY: tl.constexpr,  # COPY_LAST: the last owned block only (grid dimension 2 is 1); COPY_ALL: every one
    HAS_HEADS: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, K, copies): an owned block of a decision row, whole, in an aligned buffer of the logits' dtype:
    its columns from the shard, those past the shard's end (a block the shard's edge cuts) from the shards
    holding them (their heads), columns past V unwritten (every load of them is masked)."""
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            return
    j = tl.program_id(1)
    slot = tl.program_id(2)
    copies = tl.num_programs(2)
    b64 = b.to(tl.int64)
    start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
    owned = num_owned - 1 if COPY == _COPY_LAST else slot
    if (owned >= 0) & (owned < num_owned):
        cols = (first_owned + owned) * BLOCK_V + tl.arange(0, BLOCK_V)
        row_ptr = logits_ptr + b64 * batch_stride + j.to(tl.int64) * row_stride - start
        x = tl.load(row_ptr + cols, mask=cols < end, other=0.0)
        if HAS_HEADS and ((first_owned + owned + 1) * BLOCK_V > end):  # (only a block past the shard's end)
            batch = tl.num_programs(0).to(tl.int64)
            for q in tl.static_range(SHARDS):
                first = tl.load(shard_starts_ptr + q)
                held = (cols >= end) & (cols >= first) & (cols < tl.load(shard_starts_ptr + q + 1)) & (cols < V)
                head_ptr = gathered_heads_ptr + ((q * batch + b64) * heads_rows + head_row + j) * HEAD - first
                x = tl.where(held, tl.load(head_ptr + cols, mask=held, other=0.0).to(x.dtype), x)
        out = owned_ptr + ((b64 * tl.num_programs(1) + j) * copies + slot) * BLOCK_V
        tl.store(out + tl.arange(0, BLOCK_V), x, mask=cols < V)


@jit
def shard_rejection_stats_kernel(
    target_logits_ptr,  # [B, K+1, V_shard] f32|bf16|f16, columns contiguous
    draft_logits_ptr,  # [B, K, V_shard] (unused when ONE_HOT)
    owned_target_ptr,  # [B, K, COPIES * BLOCK_V]: shard_owned_copy_kernel's (unused with COPY_NONE)
    owned_draft_ptr,
    draft_tokens_ptr,  # [B, K] i32|i64 (global columns)
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    num_draft_tokens_ptr,
    vocab_start_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): nothing read
    V,
    V_shard,
    K,
    max_owned,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    owned_stats_ptr,  # [B * K, NUM_STATS * max_owned] f32 (f64 as word pairs) output: the owned blocks' partials
    row_score_ptr,  # [B * (K+1), NSB] f32 (f64 as word pairs) output: the sampled rows' block partials
    row_index_ptr,  # [B * (K+1), NSB] i32 output
    greedy_value_ptr,  # [B * (K+1), NSB] f32 output: each block's largest finite logit (_store_argmax_parts)
    greedy_index_ptr,  # [B * (K+1), NSB] i32 output: its lowest column in the draft's block, -1 elsewhere
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # a power of two dividing the shard's batch and row strides
    VOCAB_ALIGN: tl.constexpr,  # the unsharded call's (a power of two dividing V)
    START_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    COPY: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B, max(K, 1), NSB): program (b, j, i) of a decision row j < n_b. A sampled row (strict requests,
    greedy ones): the Gumbel-max partials of the shard's i-th block of its own columns (rejection's
    _store_sampled_partials: gumbel_sample's code at the global columns). A probabilistic row: the softmax
    partials of its i-th owned block (rejection_stats_kernel's code and loads, the unsharded block's columns),
    stored at owned slot i. Both: the block's argmax parts (_store_argmax_parts). (Row a_b's sample, the bonus
    row's too, is the emit round's: a request that rejects a draft never draws its bonus row.)"""
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            return
    j = tl.program_id(1)
    i = tl.program_id(2)
    num_blocks = tl.num_programs(2)
    V = aligned(V, VOCAB_ALIGN)
    b64 = b.to(tl.int64)
    num_drafts = _num_drafts(num_draft_tokens_ptr, b, K)
    temperature = load_temperature(temperature_ptr, b)
    sampled_row = STRICT or is_greedy(temperature)  # the decision rows j < n_b that are Gumbel-max samples
    out = (b64 * (K + 1) + j) * num_blocks + i
    start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
    target_ptr = target_logits_ptr + tl.multiple_of(b64 * target_batch_stride, ROW_ALIGN) - start
    if j < num_drafts:
        if sampled_row:
            first_col = start + i * BLOCK_V
            if first_col < end:
                x = store_sampled_block(target_ptr, j, target_row_stride, end, first_col,
                                        load_seed(seeds_ptr, b, SEED_WORDS),
                                        tl.load(positions_ptr + b).to(tl.int64) + j, temperature, row_score_ptr,
                                        row_index_ptr, out, STREAM_TOKEN, BLOCK_V, ROW_ALIGN, FP64, FAST_MATH)
                _store_argmax_parts(x, tl.max(x, axis=0), first_col, tl.load(draft_tokens_ptr + b64 * K + j),
                                    greedy_value_ptr, greedy_index_ptr, out, BLOCK_V)
        elif i < num_owned:
            first_col = (first_owned + i) * BLOCK_V
            cols = first_col + tl.arange(0, BLOCK_V)
            copied = (COPY == _COPY_ALL) | ((COPY == _COPY_LAST) & (i == num_owned - 1))
            if copied:
                slot = i if COPY == _COPY_ALL else 0
                copies = max_owned if COPY == _COPY_ALL else 1
                at = ((b64 * K + j) * copies + slot) * BLOCK_V - first_col
                target_row_ptr = owned_target_ptr + at
                draft_row_ptr = owned_draft_ptr + at
            else:
                target_row_ptr = target_ptr + tl.multiple_of(j.to(tl.int64) * target_row_stride, ROW_ALIGN)
                draft_row_ptr = (draft_logits_ptr + tl.multiple_of(b64 * draft_batch_stride, ROW_ALIGN) - start
                                 + tl.multiple_of(j.to(tl.int64) * draft_row_stride, ROW_ALIGN))
            x = load_block(target_row_ptr, cols, V, FP64)
            if not ONE_HOT:
                y = load_block(draft_row_ptr, cols, V, FP64)
            inverse_t = inverse_temperature(temperature, FP64)
            target_max, target_sum, magnitude, x_max = _softmax_partials(x, inverse_t, FP64, FAST_MATH)
            overflow = overflow_from_magnitude(x, magnitude, temperature)
            stats = _float_words(owned_stats_ptr, FP64) + (b64 * K + j) * (NUM_STATS * max_owned) + i
            if not ONE_HOT:
                draft_max, draft_sum, magnitude, _ = _softmax_partials(y, inverse_t, FP64, FAST_MATH)
                overflow = overflow | overflow_from_magnitude(y, magnitude, temperature)
                tl.store(stats + 2 * max_owned, draft_max)
                tl.store(stats + 3 * max_owned, draft_sum)
            tl.store(stats, target_max)
            tl.store(stats + max_owned, tl.where(overflow, -1.0, target_sum))  # -1: the row is greedy
            # (x_max: NaN where the block holds one; the masked max then)
            _store_argmax_parts(x.to(tl.float32), tl.where(x_max == x_max, x_max, float("inf")).to(tl.float32),
                                first_col, tl.load(draft_tokens_ptr + b64 * K + j), greedy_value_ptr,
                                greedy_index_ptr, out, BLOCK_V)


@jit
def _best_of(scores, columns, axis: tl.constexpr):
    """(best score, the lowest column among it) along `axis`."""
    best = tl.max(scores, axis=axis)
    return best, tl.min(tl.where(scores == tl.expand_dims(best, axis), columns, _NO_COLUMN), axis=axis)


@jit
def _greedy_of(values, columns, axis: tl.constexpr):
    """(largest finite logit, its lowest column, -1 where none) of greedy candidates along `axis`."""
    largest = tl.max(values, axis=axis)
    column = tl.min(tl.where((values == tl.expand_dims(largest, axis)) & (columns >= 0), columns, _NO_COLUMN),
                    axis=axis)
    return largest, tl.where(largest > float("-inf"), column, -1)


@jit
def shard_rejection_record_kernel(
    target_logits_ptr,  # as shard_rejection_stats_kernel's
    draft_logits_ptr,
    draft_tokens_ptr,  # [B, K] i32|i64 (global columns)
    num_draft_tokens_ptr,
    temperature_ptr,
    vocab_start_ptr,
    row_valid_ptr,
    owned_stats_ptr,  # shard_rejection_stats_kernel's outputs
    row_score_ptr,
    row_index_ptr,
    greedy_value_ptr,
    greedy_index_ptr,
    V_shard,
    K,
    max_owned,
    num_blocks,  # NSB
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    record_ptr,  # [B, record_words] i32 output (_record_offsets)
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    START_ALIGN: tl.constexpr,
    BLOCK_K: tl.constexpr,  # a power of two >= K + 1
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= NSB
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): request b's record (_record_offsets), for the all-gather."""
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            return
    b64 = b.to(tl.int64)
    WORDS: tl.constexpr = 2 if FP64 else 1
    rows_at, argmax_at, drafts_at, words = _record_offsets(K, max_owned, WORDS)
    record = record_ptr + b64 * words
    # the owned blocks' partials, as the stats kernel laid them out (rows it did not write hold anything: the
    # decision reads only its probabilistic rows < n_b)
    stats_words = rows_at
    source = owned_stats_ptr.to(tl.pointer_type(tl.int32)) + b64 * stats_words
    first = 0
    while first < stats_words:  # (a while loop: the interpreter cannot range() over a runtime bound)
        at = first + tl.arange(0, _COPY_BLOCK)
        tl.store(record + at, tl.load(source + at, mask=at < stats_words), mask=at < stats_words)
        first += _COPY_BLOCK
    num_drafts = _num_drafts(num_draft_tokens_ptr, b, K)
    temperature = load_temperature(temperature_ptr, b)
    start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
    rows = tl.arange(0, BLOCK_K)
    sampled = (rows < num_drafts) & (STRICT or is_greedy(temperature))
    probabilistic = (rows < num_drafts) & ~sampled
    shard_blocks = (end - start + BLOCK_V - 1) // BLOCK_V
    blocks = tl.arange(0, REDUCE_BLOCK)[None, :]
    offsets = (b64 * (K + 1) + rows)[:, None] * num_blocks + blocks
    in_sampled = sampled[:, None] & (blocks < shard_blocks)
    scores = tl.load(_float_words(row_score_ptr, FP64) + offsets, mask=in_sampled, other=float("-inf"))
    columns = tl.load(row_index_ptr + offsets, mask=in_sampled, other=0)
    best, column = _best_of(scores, columns, 1)
    flagged = (tl.min(columns, axis=1) < 0).to(tl.int32)
    row_words = record + rows_at + rows * (WORDS + 2)
    tl.store(_float_words(row_words, FP64), best, mask=rows <= K)
    tl.store(row_words + WORDS, column, mask=rows <= K)
    tl.store(row_words + WORDS + 1, flagged, mask=rows <= K)
    # each decision row's argmax parts over the shard's blocks: its largest finite logit, its largest in the blocks
    # wholly before the draft's (in column order), the lowest column of its block maximum in the draft's block
    drafts = tl.load(draft_tokens_ptr + b64 * K + rows, mask=rows < num_drafts, other=-1).to(tl.int64)
    in_blocks = (in_sampled | (probabilistic[:, None] & (blocks < num_owned)))
    values = tl.load(greedy_value_ptr + offsets, mask=in_blocks, other=float("-inf"))
    block_start = tl.where(sampled[:, None], start + blocks * BLOCK_V, (first_owned + blocks) * BLOCK_V)
    before = (block_start + BLOCK_V).to(tl.int64) <= drafts[:, None]
    argmax_words = record + argmax_at + rows * 4
    tl.store(argmax_words.to(tl.pointer_type(tl.float32)), tl.max(values, axis=1), mask=rows < K)
    tl.store((argmax_words + 1).to(tl.pointer_type(tl.float32)),
             tl.max(tl.where(before, values, float("-inf")), axis=1), mask=rows < K)
    tl.store(argmax_words + 2, tl.max(tl.load(greedy_index_ptr + offsets, mask=in_blocks, other=-1), axis=1),
             mask=rows < K)
    # the target and draft logits at each decision row's draft, where this shard holds it
    held = (rows < num_drafts) & (drafts >= start) & (drafts < end)
    column_at = tl.where(held, drafts - start, 0)
    target_at = tl.load(target_logits_ptr + b64 * target_batch_stride + rows.to(tl.int64) * target_row_stride
                        + column_at, mask=held, other=0.0).to(tl.float32)
    draft_words = record + drafts_at + rows * 2
    tl.store(draft_words.to(tl.pointer_type(tl.float32)), target_at, mask=rows < K)
    if not ONE_HOT:
        draft_at = tl.load(draft_logits_ptr + b64 * draft_batch_stride + rows.to(tl.int64) * draft_row_stride
                           + column_at, mask=held, other=0.0).to(tl.float32)
        tl.store((draft_words + 1).to(tl.pointer_type(tl.float32)), draft_at, mask=rows < K)


@jit
def _owner(column, shard_starts_ptr, SHARDS: tl.constexpr):
    """The shard holding global column `column` (a tensor): the last whose first column is at or before it."""
    owner = tl.zeros(column.shape, tl.int32)
    for q in tl.static_range(1, SHARDS):
        owner += (tl.load(shard_starts_ptr + q) <= column).to(tl.int32)
    return owner


@jit
def shard_rejection_merge_kernel(
    gathered_record_ptr,  # [SHARDS, B, record_words] i32: every shard's round-1 record
    draft_tokens_ptr,  # [B, K] i32|i64
    num_draft_tokens_ptr,
    shard_starts_ptr,  # [SHARDS + 1] i32
    row_valid_ptr,
    V,
    K,
    max_owned,
    num_blocks,  # the unsharded call's NUM_BLOCKS
    stats_ptr,  # [B * K, NUM_STATS * NUM_BLOCKS] f32 (f64 words) output: rejection_stats_kernel's layout
    row_score_ptr,  # [B * (K+1), NUM_BLOCKS] f32 (f64 words) output: each row's merged best at block 0
    row_index_ptr,  # [B * (K+1), NUM_BLOCKS] i32 output
    greedy_rows_ptr,  # [B * (K+1)] i32 output: each row's greedy argmax
    draft_values_ptr,  # [B * K, 2] f32 output: the target's and the draft's logit at each draft
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,  # a power of two >= NUM_BLOCKS
    SHARDS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,  # a power of two >= SHARDS
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): the shards' records of request b in the layouts the one-GPU decision reads: every global
    block's softmax partials from its owner; each row's sampled best (the shards' best, lowest column, flagged
    as overflowing where any shard flagged it) as its only block; each row's greedy argmax; the logits at the
    drafts from the shards holding them."""
    b = tl.program_id(0)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            return
    b64 = b.to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    WORDS: tl.constexpr = 2 if FP64 else 1
    rows_at, argmax_at, drafts_at, words = _record_offsets(K, max_owned, WORDS)
    blocks = tl.arange(0, REDUCE_BLOCK)
    in_row = blocks < num_blocks
    owner = _owner(blocks * BLOCK_V, shard_starts_ptr, SHARDS)
    slot = blocks - (tl.load(shard_starts_ptr + owner, mask=in_row, other=0) + BLOCK_V - 1) // BLOCK_V
    owner_stats = _float_words(gathered_record_ptr + (owner.to(tl.int64) * batch + b64) * words, FP64)
    stats = _float_words(stats_ptr, FP64)
    in_record = in_row & (slot >= 0) & (slot < max_owned)  # (always, for starts that split V: precompile's zeros)
    j = 0
    while j < K:
        for s in tl.static_range(NUM_STATS):
            value = tl.load(owner_stats + (j * NUM_STATS + s) * max_owned + slot, mask=in_record)
            tl.store(stats + (b64 * K + j) * (NUM_STATS * num_blocks) + s * num_blocks + blocks, value, mask=in_row)
        j += 1
    rows = tl.arange(0, BLOCK_K)
    shards = tl.arange(0, SHARDS_BLOCK)
    present = (rows <= K)[:, None] & (shards < SHARDS)[None, :]
    record = gathered_record_ptr + (shards.to(tl.int64)[None, :] * batch + b64) * words
    row_words = record + rows_at + (rows * (WORDS + 2))[:, None]
    scores = tl.load(_float_words(row_words, FP64), mask=present, other=float("-inf"))
    best, column = _best_of(scores, tl.load(row_words + WORDS, mask=present, other=0), 1)
    flagged = tl.max(tl.load(row_words + WORDS + 1, mask=present, other=0), axis=1) > 0
    first = (b64 * (K + 1) + rows)[:, None] * num_blocks + blocks[None, :]
    at_first = blocks[None, :] == 0
    tl.store(_float_words(row_score_ptr, FP64) + first, tl.where(at_first, best[:, None], float("-inf")),
             mask=(rows <= K)[:, None] & in_row[None, :])
    # flagged: a negative column, which _target_tokens reads as the row's overflow
    tl.store(row_index_ptr + first, tl.where(at_first, tl.where(flagged, -1, column)[:, None], 0),
             mask=(rows <= K)[:, None] & in_row[None, :])
    num_drafts = _num_drafts(num_draft_tokens_ptr, b, K)
    drafts = tl.load(draft_tokens_ptr + b64 * K + rows, mask=rows < num_drafts, other=-1).to(tl.int64)
    valid = (rows < num_drafts) & (drafts >= 0) & (drafts < V)
    holder = _owner(tl.where(valid, drafts, 0), shard_starts_ptr, SHARDS)
    held_words = gathered_record_ptr + (holder.to(tl.int64) * batch + b64) * words + drafts_at + rows * 2
    target_at = tl.load(held_words.to(tl.pointer_type(tl.float32)), mask=valid, other=0.0)
    tl.store(draft_values_ptr + (b64 * K + rows) * 2, target_at, mask=rows < K)
    tl.store(draft_values_ptr + (b64 * K + rows) * 2 + 1,
             tl.load((held_words + 1).to(tl.pointer_type(tl.float32)), mask=valid, other=0.0), mask=rows < K)
    # a row's greedy argmax is the draft iff the draft's logit is the row's largest finite one, no block before the
    # draft's holds that value, and the draft is its block's first column of it (_store_argmax_parts); the
    # decision of a row whose scaled logits overflow only compares its draft with the argmax, so the draft
    # stands for it where that holds, and -2 (no draft) elsewhere
    argmax_words = record + argmax_at + (rows * 4)[:, None]
    decision_rows = (rows < K)[:, None] & (shards < SHARDS)[None, :]
    largest = tl.max(tl.load(argmax_words.to(tl.pointer_type(tl.float32)), mask=decision_rows,
                             other=float("-inf")), axis=1)
    before = tl.max(tl.load((argmax_words + 1).to(tl.pointer_type(tl.float32)), mask=decision_rows,
                            other=float("-inf")), axis=1)
    first_column = tl.max(tl.load(argmax_words + 2, mask=decision_rows, other=-1), axis=1)
    is_argmax = valid & (target_at == largest) & (before < largest) & (first_column == drafts)
    tl.store(greedy_rows_ptr + b64 * (K + 1) + rows, tl.where(is_argmax, drafts, -2).to(tl.int32), mask=rows <= K)


@jit
def shard_rejection_decide_kernel(
    draft_tokens_ptr,  # [B, K] i32|i64
    num_draft_tokens_ptr,
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    stats_ptr,  # shard_rejection_merge_kernel's outputs
    row_score_ptr,
    row_index_ptr,
    greedy_rows_ptr,
    draft_values_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): emit mode EMIT_STATS_ROW, nothing else
    V,
    K,
    num_blocks,
    emit_row_ptr,  # [B] i32 output: a_b
    emit_mode_ptr,  # [B] i32 output: EMIT_STATS_ROW, EMIT_RESIDUAL or EMIT_GREEDY
    log_normalizer_ptr,  # [B, 2] f32 (f64 as [B, 4] words) output
    STRICT: tl.constexpr,
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_K: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,), the one-GPU decision's warps: rejection_decide_kernel's decision (_decide, the same loads of the
    same layouts) from the merged records, on every shard alike: a_b, and what row a_b emits (EMIT_STATS_ROW: a
    sampled decision row's best, in the records; EMIT_SAMPLE, EMIT_RESIDUAL: the emit launch's; EMIT_GREEDY, also
    for a sampled decision row whose scaled logits overflow: row a_b's greedy argmax, the emit launch's)."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            tl.store(emit_row_ptr + b, 0)
            tl.store(emit_mode_ptr + b, EMIT_STATS_ROW)
            return
    num_drafts = _num_drafts(num_draft_tokens_ptr, b, K)
    temperature = load_temperature(temperature_ptr, b)
    drafts, valid, target_at_draft, draft_at_draft, u = _decision_inputs(
        draft_values_ptr, draft_values_ptr, draft_tokens_ptr, b64, num_drafts, load_seed(seeds_ptr, b, SEED_WORDS),
        tl.load(positions_ptr + b).to(tl.int64), temperature, V, K, 0, 0, 0, 0, STRICT, ONE_HOT, FP64, BLOCK_K,
        draft_values_ptr, True)
    rows = tl.arange(0, BLOCK_K)
    greedy_rows = tl.load(greedy_rows_ptr + b64 * (K + 1) + rows, mask=rows <= K, other=-1)
    emit_row, resample, greedy_emit, target_lse, draft_lse = _decide(
        stats_ptr, row_score_ptr, row_index_ptr, b64, num_drafts, temperature, K, num_blocks, drafts, valid,
        target_at_draft, draft_at_draft, u, stats_ptr, 0, 0, V, STRICT, ONE_HOT, FP64, BLOCK_K, REDUCE_BLOCK,
        greedy_rows, True)
    emit_mode = _emit_mode(emit_row, resample, greedy_emit, num_drafts, False)
    if emit_mode == EMIT_STATS_ROW:  # a sampled decision row: its best, or its greedy argmax where it overflows
        if tl.load(row_index_ptr + (b64 * (K + 1) + emit_row) * num_blocks) < 0:  # (the merge's overflow flag)
            emit_mode = EMIT_GREEDY
    tl.store(emit_row_ptr + b, emit_row)
    tl.store(emit_mode_ptr + b, emit_mode)
    log_normalizer = _float_words(log_normalizer_ptr, FP64)
    tl.store(log_normalizer + b64 * 2, target_lse)
    tl.store(log_normalizer + b64 * 2 + 1, draft_lse)


@jit
def shard_rejection_emit_kernel(
    target_logits_ptr,  # [B, K+1, V_shard]
    draft_logits_ptr,  # [B, K, V_shard] (unused when ONE_HOT)
    draft_tokens_ptr,
    seeds_ptr,
    positions_ptr,
    temperature_ptr,
    vocab_start_ptr,
    emit_row_ptr,  # shard_rejection_decide_kernel's
    emit_mode_ptr,
    log_normalizer_ptr,
    V_shard,
    K,
    target_batch_stride,
    target_row_stride,
    draft_batch_stride,
    draft_row_stride,
    emit_score_ptr,  # [2B, NSB] f32 (f64 words) output: rows < B the residual's, rows >= B row a_b's sample
    emit_index_ptr,  # [2B, NSB] i32 output (the sample's flagged as overflowing: store_block_best)
    greedy_value_ptr,  # [B, NSB] f32 output: row a_b's greedy candidates
    greedy_index_ptr,  # [B, NSB] i32 output
    ONE_HOT: tl.constexpr,
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    START_ALIGN: tl.constexpr,
    FAST_MATH: tl.constexpr,
    SEED_WORDS: tl.constexpr = 1,
):
    """Grid (B, NSB), requests whose emitted token is taken here (EMIT_RESIDUAL, EMIT_SAMPLE, EMIT_GREEDY; a padding
    request's mode is EMIT_STATS_ROW): the shard's i-th block of its own columns of row a_b, scored by the one-GPU
    emit's _emit_scores at the global columns (the residual and row a_b's Gumbel-max sample from one evaluation
    of the noise, _emit_inputs' noise), and for EMIT_SAMPLE and EMIT_GREEDY the block's greedy candidate (the
    sample's fallback where row a_b overflows; EMIT_GREEDY's token)."""
    b = tl.program_id(0)
    emit_mode = tl.load(emit_mode_ptr + b)
    if emit_mode != EMIT_STATS_ROW:
        start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
        i = tl.program_id(1)
        num_blocks = tl.num_programs(1)
        first_col = start + i * BLOCK_V
        if first_col < end:
            b64 = b.to(tl.int64)
            emit_row = tl.load(emit_row_ptr + b)
            cols = first_col + tl.arange(0, BLOCK_V)
            row = tl.cast(emit_row, tl.int64)
            target_row_ptr = (target_logits_ptr + tl.multiple_of(b64 * target_batch_stride, ROW_ALIGN) - start
                              + tl.multiple_of(row * target_row_stride, ROW_ALIGN))
            x = load_block(target_row_ptr, cols, end, FP64)
            if emit_mode != EMIT_GREEDY:
                temperature = load_temperature(temperature_ptr, b)
                if ONE_HOT:
                    y = x  # unused
                else:
                    # end or start (every column masked, nothing read: row a_b = n_b = K has no draft row)
                    draft_end = tl.where(emit_mode == EMIT_RESIDUAL, end, start)
                    y = load_block(draft_logits_ptr + tl.multiple_of(b64 * draft_batch_stride, ROW_ALIGN) - start
                                   + tl.multiple_of(row * draft_row_stride, ROW_ALIGN), cols, draft_end, FP64)
                if is_greedy(temperature):
                    noise = tl.zeros_like(x)
                else:
                    noise = block_noise(load_seed(seeds_ptr, b, SEED_WORDS),
                                        tl.load(positions_ptr + b).to(tl.int64) + row, first_col, STREAM_TOKEN,
                                        BLOCK_V, FP64, FAST_MATH)
                log_normalizer = _float_words(log_normalizer_ptr, FP64)
                batch = tl.num_programs(0).to(tl.int64)
                _emit_scores(x, y, noise, draft_tokens_ptr, b64, first_col, temperature, emit_row, emit_mode,
                             tl.load(log_normalizer + b64 * 2), tl.load(log_normalizer + b64 * 2 + 1), K,
                             emit_score_ptr, emit_index_ptr, (batch + b64) * num_blocks + i, b64 * num_blocks + i,
                             ONE_HOT, FP64, BLOCK_V, FAST_MATH)
            if emit_mode != EMIT_RESIDUAL:
                store_greedy_candidate(x.to(tl.float32), first_col, greedy_value_ptr, greedy_index_ptr,
                                       b64 * num_blocks + i, BLOCK_V)


# the emit record of a request: the residual's best score, row a_b's sample's (f32, f64 in FP64), then their
# columns, the sample's overflow flag, row a_b's greedy candidate (f32 bits, column), a word of padding (even)
EMIT_RECORD_WORDS = 6
_EMIT_RECORD_WORDS = tl.constexpr(EMIT_RECORD_WORDS)  # the kernels' copy


@jit
def shard_rejection_emit_record_kernel(
    emit_mode_ptr,
    emit_score_ptr,  # shard_rejection_emit_kernel's
    emit_index_ptr,
    greedy_value_ptr,
    greedy_index_ptr,
    vocab_start_ptr,
    V_shard,
    num_blocks,  # NSB
    emit_record_ptr,  # [B, 2 * WORDS + EMIT_RECORD_WORDS] i32 output
    FP64: tl.constexpr,
    BLOCK_V: tl.constexpr,
    START_ALIGN: tl.constexpr,
    REDUCE_BLOCK: tl.constexpr,
):
    """Grid (B,): the shard's best residual and sample scores of row a_b and its greedy candidate (-inf where the
    emit launch did not take them), for the all-gather."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    batch = tl.num_programs(0).to(tl.int64)
    WORDS: tl.constexpr = 2 if FP64 else 1
    start, end, first_owned, num_owned = _shard_span(vocab_start_ptr, V_shard, START_ALIGN, BLOCK_V)
    blocks = tl.arange(0, REDUCE_BLOCK)
    emit_mode = tl.load(emit_mode_ptr + b)
    # no block to read where the emit launch did not score the request (or take its greedy candidates)
    shard_blocks = (end - start + BLOCK_V - 1) // BLOCK_V
    read = tl.where((emit_mode == EMIT_RESIDUAL) | (emit_mode == EMIT_SAMPLE), shard_blocks, 0)
    read_greedy = tl.where((emit_mode == EMIT_SAMPLE) | (emit_mode == EMIT_GREEDY), shard_blocks, 0)
    # both rows at once: [2, REDUCE_BLOCK], the residual's (rows < B), then the sample's
    kinds = tl.arange(0, 2)
    mask = (kinds >= 0)[:, None] & (blocks < read)[None, :]
    offsets = (kinds.to(tl.int64) * batch + b64)[:, None] * num_blocks + blocks[None, :]
    scores = tl.load(_float_words(emit_score_ptr, FP64) + offsets, mask=mask, other=float("-inf"))
    columns = tl.load(emit_index_ptr + offsets, mask=mask, other=0)
    best, column = _best_of(scores, columns, 1)
    record = emit_record_ptr + b64 * (2 * WORDS + _EMIT_RECORD_WORDS)
    tl.store(_float_words(record, FP64) + kinds, best)
    tl.store(record + 2 * WORDS + kinds, column)
    flagged = (tl.min(columns, axis=1) < 0).to(tl.int32)  # (the sample's: store_block_best's overflow flag)
    tl.store(record + 2 * WORDS + 2, tl.sum(tl.where(kinds == 1, flagged, 0), axis=0))
    in_row = blocks < read_greedy
    largest, greedy_column = _greedy_of(tl.load(greedy_value_ptr + b64 * num_blocks + blocks, mask=in_row,
                                                other=float("-inf")),
                                        tl.load(greedy_index_ptr + b64 * num_blocks + blocks, mask=in_row, other=-1), 0)
    tl.store((record + 2 * WORDS + 3).to(tl.pointer_type(tl.float32)), largest)
    tl.store(record + 2 * WORDS + 4, greedy_column)


@jit
def _merged_greedy(greedy_words, present):
    """Row a_b's greedy argmax from the shards' candidates at `greedy_words` [SHARDS_BLOCK] (value, column)."""
    largest, column = _greedy_of(tl.load(greedy_words.to(tl.pointer_type(tl.float32)), mask=present,
                                         other=float("-inf")), tl.load(greedy_words + 1, mask=present, other=-1), 0)
    return column


@jit
def shard_rejection_finish_kernel(
    gathered_emit_record_ptr,  # [SHARDS, B, 2 * WORDS + EMIT_RECORD_WORDS] i32
    gathered_record_ptr,  # [SHARDS, B, record_words] i32 (round 1's)
    draft_tokens_ptr,  # [B, K] i32|i64
    emit_row_ptr,  # [B] i32 (round 2's, this shard's: every shard's are the same)
    emit_mode_ptr,
    row_valid_ptr,  # common.is_padding's (read with HAS_ROW_VALID): tokens -1, num_sampled 0
    K,
    max_owned,
    tokens_ptr,  # [B, K+1] i32 output
    num_sampled_ptr,  # [B] i32 output
    FP64: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SHARDS: tl.constexpr,
    SHARDS_BLOCK: tl.constexpr,
    HAS_ROW_VALID: tl.constexpr = False,
):
    """Grid (B,): rejection_finish_kernel's rules over the shards' bests: the residual sample (row a_b's Gumbel-max
    sample where the residual is all zero), or row a_b's sample (the emit round's, or a sampled decision row's
    from the records), its greedy argmax (the emit round's candidates) where it is EMIT_GREEDY or a shard flagged
    the bonus row as overflowing; then the accepted drafts, the emitted token, -1, and num_sampled."""
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    drafts = _load_drafts(draft_tokens_ptr, b64, K, BLOCK_K)
    if HAS_ROW_VALID:
        if is_padding(row_valid_ptr, b):
            _write_padding(tokens_ptr, num_sampled_ptr, b64, K, BLOCK_K)
            return
    batch = tl.num_programs(0).to(tl.int64)
    WORDS: tl.constexpr = 2 if FP64 else 1
    emit_row = tl.load(emit_row_ptr + b)
    emit_mode = tl.load(emit_mode_ptr + b)
    shards = tl.arange(0, SHARDS_BLOCK)
    present = shards < SHARDS
    emits = gathered_emit_record_ptr + (shards.to(tl.int64) * batch + b64) * (2 * WORDS + _EMIT_RECORD_WORDS)
    if emit_mode == EMIT_GREEDY:
        emitted = _merged_greedy(emits + 2 * WORDS + 3, present)
    elif (emit_mode == EMIT_RESIDUAL) | (emit_mode == EMIT_SAMPLE):
        best, column = _best_of(tl.load(_float_words(emits, FP64), mask=present, other=float("-inf")),
                                tl.load(emits + 2 * WORDS, mask=present, other=0), 0)
        emitted = tl.where(best > float("-inf"), column, -1)
        if (emit_mode == EMIT_SAMPLE) | (emitted < 0):  # the sample, also the all-zero residual's fallback
            best, column = _best_of(tl.load(_float_words(emits, FP64) + 1, mask=present, other=float("-inf")),
                                    tl.load(emits + 2 * WORDS + 1, mask=present, other=0), 0)
            emitted = tl.where(best > float("-inf"), column, -1)
            flagged = tl.max(tl.load(emits + 2 * WORDS + 2, mask=present, other=0), axis=0) > 0
            if (emit_mode == EMIT_SAMPLE) & flagged:  # row a_b = n_b overflows: its greedy argmax
                emitted = _merged_greedy(emits + 2 * WORDS + 3, present)
    else:  # EMIT_STATS_ROW: a sampled decision row's best (one that overflows was made EMIT_GREEDY)
        rows_at, argmax_at, drafts_at, words = _record_offsets(K, max_owned, WORDS)
        row_words = gathered_record_ptr + (shards.to(tl.int64) * batch + b64) * words + rows_at + emit_row * (WORDS + 2)
        best, column = _best_of(tl.load(_float_words(row_words, FP64), mask=present, other=float("-inf")),
                                tl.load(row_words + WORDS, mask=present, other=0), 0)
        emitted = tl.where(best > float("-inf"), column, -1)
    _write_request(tokens_ptr, num_sampled_ptr, drafts, b64, K, emit_row, emitted, BLOCK_K)

def _itemsize(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def shard_blocks(starts: tuple, vocab: int, block_v: int) -> tuple:
    """(each shard's number of owned blocks (global blocks whose first column it holds), each shard's blocks of
    BLOCK_V of its own columns from its first)."""
    ends = tuple(starts[1:]) + (vocab,)
    owned = tuple(-(-end // block_v) - -(-start // block_v) for start, end in zip(starts, ends))
    return owned, tuple(-(-(end - start) // block_v) for start, end in zip(starts, ends))


@functools.lru_cache(maxsize=512)
def plan_rejection_sample_shard(target_logits: ArgSpec, draft_logits: ArgSpec, seeds: ArgSpec, target: Target, *,
                                strict: bool, fp64: bool, vocab: int, starts: tuple, start_align: int,
                                row_valid: bool = False) -> ShardedPlan:
    """Vocab-parallel `rejection_sample` of this device's shards `target_logits` [B, K+1, V_shard] and
    `draft_logits` [B, K, V_shard] (None: one-hot drafts; columns contiguous) of a `vocab`-column vocabulary whose
    shards start at `starts` (every shard's first column, in order; this one's is the input `vocab_start` [1] i32,
    a multiple of `start_align`, and `shard_starts` [shards + 1] i32 holds `starts` then `vocab`): the other
    inputs as plan_rejection_sample's (draft tokens are global columns), outputs `tokens` [B, K+1] and
    `num_sampled` [B] on every device: the unsharded call's (of contiguous [B, K+1, vocab] logits), bit for bit.
    The module's docstring gives the rounds."""
    if start_align < START_MULTIPLE or start_align & (start_align - 1) or any(s % start_align for s in starts):
        raise ValueError(f"start_align must be a power of two >= {START_MULTIPLE} dividing every start, got "
                         f"{start_align} for {starts}")
    batch, rows, shard_vocab = target_logits.shape
    k = rows - 1
    shards = len(starts)
    words = 2 if fp64 else 1
    one_hot = strict or draft_logits is None
    draft = target_logits if one_hot else draft_logits
    # the unsharded call's tiling, for contiguous [B, K+1, vocab] logits (its blocks, warps and vocab alignment)
    config = rejection_launch_config(vocab, k, (vocab * rows, vocab, vocab * max(k, 1), vocab), fp64,
                                     fast_math=not target.interpreter)
    block_v = config.block_v
    owned, own_blocks = shard_blocks(starts, vocab, block_v)
    max_owned, blocks = max(max(owned), 1), max(max(own_blocks), 1)
    outputs = (Buffer("tokens", (batch, rows), "int32"), Buffer("num_sampled", (batch,), "int32"))
    record = Buffer("record", (batch, record_words(k, max_owned, fp64)), "int32")
    emit_record = Buffer("emit_record", (batch, 2 * words + EMIT_RECORD_WORDS), "int32")
    if batch == 0:
        return ShardedPlan((Plan((record,), (), ("record",), "empty"),
                            Plan((emit_record,), (), ("emit_record",), "empty"),
                            Plan(outputs, (), ("tokens", "num_sampled"), "empty")), "empty")
    decisions = not strict and k >= 1  # rows whose softmax partials decide: blocks reduced whole by their owners
    cut = any(start % block_v and start < vocab for start in starts[1:])
    heads = decisions and cut
    strides = (target_logits.strides[0], target_logits.strides[1], draft.strides[0], draft.strides[1])
    stride_gcd = 0
    for stride in strides:
        stride_gcd = math.gcd(stride_gcd, int(stride))
    row_align = largest_power_of_two_dividing(stride_gcd, 16) if stride_gcd else 16
    # a shard's own loads have the unsharded call's vector width where its alignment allows (`DIRECT`): its blocks
    # are then read in place, else copied whole into aligned buffers (the normalisers' sums follow the layout)
    shard_align = min(row_align, start_align)
    direct = all(shard_align >= min(config.vocab_align, 16 // _itemsize(spec.dtype))
                 for spec in ((target_logits,) if one_hot else (target_logits, draft_logits)))
    copy = COPY_NONE if not decisions else (COPY_ALL if not direct else (COPY_LAST if cut else COPY_NONE))
    # what the kernels take as START_ALIGN: a power of two dividing every start and V (so every shard's size too)
    start_align = min(start_align, config.vocab_align)
    copies = max_owned if copy == COPY_ALL else 1
    valid = "row_valid" if row_valid else "num_draft_tokens"  # the stand-in is never read
    drafts = "draft_tokens" if k else "no_drafts"  # K = 0: a one-element stand-in, never read
    logits = ("target_logits", "target_logits" if one_hot else "draft_logits")
    requests = ("seeds", "positions", "temperature")
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    padding = dict(HAS_ROW_VALID=row_valid)
    seed_words = seed_word_count(seeds.shape)
    heads_rows = k if one_hot else 2 * k
    shards_block = triton.next_power_of_2(shards)
    # a shard's head is shorter than a block and than the shard
    head = min(block_v, triton.next_power_of_2(max(end - start for start, end in zip(starts, starts[1:] + (vocab,)))))
    rounds = []
    if heads:
        rounds.append(Plan((Buffer("heads", (batch, heads_rows, head), "float32"),), (launch(
            shard_heads_kernel, (batch, heads_rows), (*logits, "vocab_start", valid, shard_vocab, *strides), ("heads",),
            ONE_HOT=one_hot, BLOCK_V=block_v, HEAD=head, START_ALIGN=start_align, **padding, num_warps=4),),
            ("heads",), "vocab shard heads"))
    stats_buffers = [
        Buffer("owned_stats", (batch * max(k, 1), STATS_PER_BLOCK * max_owned * words), "float32"),
        Buffer("row_score", (batch * rows, blocks * words), "float32"),
        Buffer("row_index", (batch * rows, blocks), "int32"), Buffer("greedy_value", (batch * rows, blocks), "float32"),
        Buffer("greedy_index", (batch * rows, blocks), "int32"),
        Buffer("no_drafts", (1,), "int32", zeroed=True), record]
    stats_launches = []
    owned_names = logits  # stand-ins without copies (of the dtypes the copies would have)
    if copy != COPY_NONE:
        owned_names = ("owned_target", "owned_target" if one_hot else "owned_draft")
        for name, spec, head_row, source in (("owned_target", target_logits, 0, "target_logits"),
                                             ("owned_draft", draft_logits, k, "draft_logits")):
            if name == "owned_draft" and one_hot:
                continue
            stats_buffers.append(Buffer(name, (batch, k, copies * block_v), spec.dtype))
            stats_launches.append(launch(
                shard_owned_copy_kernel, (batch, k, copies),
                (source, "gathered_heads" if heads else source, "vocab_start", "shard_starts", valid, vocab,
                 shard_vocab, spec.strides[0], spec.strides[1], head_row, heads_rows), (name,),
                SHARDS=shards, BLOCK_V=block_v, HEAD=head, START_ALIGN=start_align, COPY=copy, HAS_HEADS=heads,
                **padding,
                num_warps=4))
    stats_launches.append(launch(
        shard_rejection_stats_kernel, (batch, max(k, 1), blocks),
        (*logits, *owned_names, drafts, *requests, "num_draft_tokens", "vocab_start", valid, vocab, shard_vocab, k,
         max_owned, *strides), ("owned_stats", "row_score", "row_index", "greedy_value", "greedy_index"),
        STRICT=strict, ONE_HOT=one_hot, FP64=fp64, BLOCK_V=block_v, ROW_ALIGN=row_align,
        VOCAB_ALIGN=config.vocab_align, START_ALIGN=start_align, FAST_MATH=config.fast_math, COPY=copy,
        SEED_WORDS=seed_words, **padding, num_warps=config.num_warps, **options))
    stats_launches.append(launch(
        shard_rejection_record_kernel, (batch,),
        (*logits, drafts, "num_draft_tokens", "temperature", "vocab_start", valid, "owned_stats", "row_score",
         "row_index", "greedy_value", "greedy_index", shard_vocab, k, max_owned, blocks, *strides), ("record",),
        STRICT=strict, ONE_HOT=one_hot, FP64=fp64, BLOCK_V=block_v, START_ALIGN=start_align, BLOCK_K=config.block_k,
        REDUCE_BLOCK=triton.next_power_of_2(blocks), **padding, num_warps=4))
    rounds.append(Plan(tuple(stats_buffers), tuple(stats_launches), ("record",), "vocab shard rejection stats"))
    emit_launches = [
        launch(shard_rejection_merge_kernel, (batch,),
               ("gathered_record", drafts, "num_draft_tokens", "shard_starts", valid, vocab, k, max_owned,
                config.num_blocks),
               ("stats", "merged_score", "merged_index", "greedy_rows", "draft_values"),
               FP64=fp64, BLOCK_V=block_v, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block, SHARDS=shards,
               SHARDS_BLOCK=shards_block, **padding, num_warps=4),
        launch(shard_rejection_decide_kernel, (batch,),
               (drafts, "num_draft_tokens", *requests, "stats", "merged_score", "merged_index", "greedy_rows",
                "draft_values", valid, vocab, k, config.num_blocks), ("emit_row", "emit_mode", "log_normalizer"),
               STRICT=strict, ONE_HOT=one_hot, FP64=fp64, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block,
               SEED_WORDS=seed_words, **padding, num_warps=config.decide_num_warps, **options)]
    emit_launches.append(launch(
        shard_rejection_emit_kernel, (batch, blocks),
        (*logits, drafts, *requests, "vocab_start", "emit_row", "emit_mode", "log_normalizer", shard_vocab, k,
         *strides), ("emit_score", "emit_index", "emit_greedy_value", "emit_greedy_index"),
        ONE_HOT=one_hot, FP64=fp64, BLOCK_V=block_v, ROW_ALIGN=row_align, START_ALIGN=start_align,
        FAST_MATH=config.fast_math, SEED_WORDS=seed_words, num_warps=config.num_warps, **options))
    emit_launches.append(launch(
        shard_rejection_emit_record_kernel, (batch,),
        ("emit_mode", "emit_score", "emit_index", "emit_greedy_value", "emit_greedy_index", "vocab_start", shard_vocab,
         blocks), ("emit_record",),
        FP64=fp64, BLOCK_V=block_v, START_ALIGN=start_align, REDUCE_BLOCK=triton.next_power_of_2(blocks), num_warps=1))
    emit_buffers = (
        Buffer("stats", (batch * max(k, 1), STATS_PER_BLOCK * config.num_blocks * words), "float32"),
        Buffer("merged_score", (batch * rows, config.num_blocks * words), "float32"),
        Buffer("merged_index", (batch * rows, config.num_blocks), "int32"),
        Buffer("greedy_rows", (batch * rows,), "int32"), Buffer("draft_values", (batch * max(k, 1), 2), "float32"),
        Buffer("emit_row", (batch,), "int32"), Buffer("emit_mode", (batch,), "int32"),
        Buffer("log_normalizer", (batch, 2 * words), "float32"),
        Buffer("emit_score", (2 * batch, blocks * words), "float32"),
        Buffer("emit_index", (2 * batch, blocks), "int32"), Buffer("emit_greedy_value", (batch, blocks), "float32"),
        Buffer("emit_greedy_index", (batch, blocks), "int32"),
        Buffer("no_drafts", (1,), "int32", zeroed=True), emit_record)
    rounds.append(Plan(emit_buffers, tuple(emit_launches), ("emit_record", "emit_row", "emit_mode"),
                       "vocab shard rejection decide and emit"))
    rounds.append(Plan(outputs + (Buffer("no_drafts", (1,), "int32", zeroed=True),), (launch(
        shard_rejection_finish_kernel, (batch,),
        ("gathered_emit_record", "gathered_record", drafts, "emit_row_in", "emit_mode_in", valid, k, max_owned),
        ("tokens", "num_sampled"), FP64=fp64, BLOCK_K=config.block_k, SHARDS=shards, SHARDS_BLOCK=shards_block,
        **padding, num_warps=1),), ("tokens", "num_sampled"), "vocab shard rejection finish"))
    for i, plan in enumerate(rounds):  # only the buffers a round's launches name
        used = {name for step in plan.launches for name in step.args + step.outputs}
        rounds[i] = Plan(tuple(b for b in plan.buffers if b.name in used), plan.launches, plan.outputs, plan.variant)
    return ShardedPlan(tuple(rounds), "vocab shard rejection" + (", heads" if heads else "")
                       + {COPY_NONE: "", COPY_LAST: ", last blocks copied", COPY_ALL: ", blocks copied"}[copy])
