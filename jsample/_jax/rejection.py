"""`rejection_sample` and `synthetic_rejection_sample` for JAX: validate, allocate, launch (jax.jit-able)."""

import functools

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample.kernels.stream import seed_word_count
from jsample._jax._launch import launch, not_differentiable, rowwise, spec, temperature_array
from jsample.kernels.rejection import STATS_PER_BLOCK
from jsample.validation import check_rejection_sample, check_synthetic_rejection_sample


@not_differentiable("rejection_sample")
def rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, *,
                     draft_logits=None, method="probabilistic", fp64=False):
    """Speculative-decoding verification: accept a prefix of the drafts, then emit one target token.

    Row j of request b (j = 0..K) is drawn at position positions[b] + j (STREAM.md, "Rejection
    sampling"). With p = softmax(target_logits[b, j] / T_b) and q = softmax(draft_logits[b, j] / T_b)
    (q one-hot on the draft when `draft_logits` is None):

    * method="probabilistic": draft d_j is accepted iff u_j < p(d_j) / q(d_j), u_j the stream-2
      uniform of row j. At the first rejected row a the emitted token is
      argmax_k (log r_k + g_k), r = max(p - q, 0) (p without d_a for one-hot drafts; p itself if r
      is all zero), g the stream-0 Gumbel noise of row a. So the emitted tokens are distributed as the
      target model's (the speculative-sampling theorem) when the drafts were sampled from q.
    * method="strict": d_j is accepted iff it equals the stream-0 Gumbel-max sample of row j; at the
      first rejection that sample is emitted.
    * Rows of a request with T_b < 1e-5, and rows whose scaled logits overflow float32 (the target's,
      or for a decision row the draft's: docs/STREAM.md), are greedy under either method: accept iff d_j == argmax_k
      target_logits[b, j, k]; emit that argmax at the first rejection.
    * All n_b drafts accepted: the bonus token is the stream-0 Gumbel-max sample of row n_b, equal to
      `gumbel_sample(target_logits[:, n_b], seeds, positions + n_b, temperature)`.

    Determinism: a request's outputs depend only on its own rows, seed, position, temperature, n_b,
    method and `fp64`: not on the batch, row order or jit; they equal `torch_backend.rejection_sample`'s
    bit for bit. Changing seeds, positions, temperatures or n_b never recompiles.

    Args:
        target_logits: [B, K+1, V] float32, bfloat16 or float16.
        draft_tokens: [B, K] int32. Entries at j >= n_b are ignored; a draft outside [0, V) is
            always rejected.
        num_draft_tokens: [B] int32, n_b in [0, K] (unchecked; values outside are clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0 (>= 0, unchecked).
        temperature: as `gumbel_sample`: a number in [0, 3.4e38], or a [B] or scalar array of any float
            dtype (values unchecked: below 1e-5, negative and NaN are greedy).
        draft_logits: [B, K, V] float32, or None for one-hot drafts. Ignored by method="strict".
        method: "probabilistic" or "strict".
        fp64: FP64 softmax, ratios, uniforms and scores instead of FP32 (works with jax_enable_x64 off).

    Returns:
        tokens: [B, K+1] int32 — the accepted drafts, the emitted token, then -1 (the emitted token is
            -1 when its row has no finite logit).
        num_sampled: [B] int32, accepted drafts + 1.
    """
    op = "rejection_sample"
    check_rejection_sample(op, spec(op, "target_logits", target_logits), spec(op, "draft_tokens", draft_tokens),
                           spec(op, "num_draft_tokens", num_draft_tokens), spec(op, "seeds", seeds),
                           spec(op, "positions", positions), spec(op, "temperature", temperature),
                           spec(op, "draft_logits", draft_logits), method, fp64)
    batch, rows, _ = target_logits.shape
    if batch == 0:
        return jnp.zeros((0, rows), jnp.int32), jnp.zeros((0,), jnp.int32)
    strict = method == "strict"
    one_hot = draft_logits is None or strict
    return rowwise(functools.partial(_rejection_rows, strict=strict, fp64=fp64), jnp.asarray(target_logits),
                   jnp.asarray(draft_tokens), jnp.asarray(num_draft_tokens), jnp.asarray(seeds),
                   jnp.asarray(positions), temperature_array(temperature, batch),
                   None if one_hot else jnp.asarray(draft_logits))


def _rejection_rows(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, *,
                    strict, fp64):
    """The launches of rejection_sample on validated arrays, the requests on axis 0."""
    batch, rows, vocab = target_logits.shape
    k = rows - 1
    one_hot = draft_logits is None
    draft = target_logits if one_hot else draft_logits  # never read when ONE_HOT
    strides = (rows * vocab, vocab, k * vocab, vocab) if not one_hot else (rows * vocab, vocab) * 2
    config = kernels.rejection_launch_config(vocab, k, strides, fp64)
    words = 2 if fp64 else 1  # f64 values are stored as two f32 words
    if k == 0:
        draft_tokens = jnp.zeros((1,), jnp.int32)  # never read
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    f32, i32 = jnp.float32, jnp.int32
    # small batches: three launches (one at K <= 1), the bonus row on stats programs of its own (BONUS_PROGRAMS)
    three_launches = kernels.decide_in_emit(batch, config)
    stats_shapes = [jax.ShapeDtypeStruct((batch * max(k, 1), STATS_PER_BLOCK * config.num_blocks * words), f32),
                    jax.ShapeDtypeStruct((batch * rows, config.num_blocks * words), f32),
                    jax.ShapeDtypeStruct((batch * rows, config.num_blocks), i32)]
    emit_shapes = [jax.ShapeDtypeStruct((2 * batch, config.num_blocks * words), f32),
                   jax.ShapeDtypeStruct((2 * batch, config.num_blocks), i32)]
    if three_launches and k <= 1 and config.decide_num_warps == config.num_warps:
        # the three in one launch: JAX pays host time for every launch (rejection_one_launch_kernel)
        *_, tokens, num_sampled = launch(
            kernels.rejection_one_launch_kernel, target_logits, draft, draft_tokens, num_draft_tokens, seeds,
            positions, temperature, vocab, k, batch, *strides, config.num_blocks,
            grid=(batch * 3 * config.num_blocks,),
            out_shapes=stats_shapes + emit_shapes + [
                jax.ShapeDtypeStruct((batch,), i32), jax.ShapeDtypeStruct((batch,), i32),
                jax.ShapeDtypeStruct((2 + batch,), i32), jax.ShapeDtypeStruct((batch, rows), i32),
                jax.ShapeDtypeStruct((batch,), i32)],
            zeroed_outputs=(7,),  # the ticket and arrival counters
            STRICT=strict, ONE_HOT=one_hot, FP64=fp64, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
            VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math, BLOCK_K=config.block_k,
            REDUCE_BLOCK=config.reduce_block, SEED_WORDS=seed_word_count(seeds.shape), num_warps=config.num_warps, **options)
        return tokens, num_sampled
    stats, row_score, row_index = launch(
        kernels.rejection_stats_kernel, target_logits, draft, seeds, positions, temperature, num_draft_tokens,
        vocab, k, *strides, grid=(batch, config.stats_rows + three_launches, config.num_blocks),
        out_shapes=stats_shapes,
        STRICT=strict, ONE_HOT=one_hot, BONUS_IN_STATS=config.bonus_in_stats and not three_launches,
        BONUS_PROGRAMS=three_launches, FP64=fp64, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
        VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math, SEED_WORDS=seed_word_count(seeds.shape),
        num_warps=config.num_warps, **options)
    if three_launches:  # no PDL: jax-triton cannot chain them
        emit_score, emit_index, emit_row, emit_mode = launch(
            kernels.rejection_decide_emit_kernel, target_logits, draft, draft_tokens, num_draft_tokens, seeds,
            positions, temperature, stats, row_score, row_index, vocab, k, batch, *strides,
            grid=(batch, config.num_blocks),
            out_shapes=emit_shapes + [jax.ShapeDtypeStruct((batch,), i32), jax.ShapeDtypeStruct((batch,), i32)],
            STRICT=strict, ONE_HOT=one_hot, FP64=fp64,
            BLOCK_V=config.block_v, ROW_ALIGN=config.row_align, VOCAB_ALIGN=config.vocab_align,
            FAST_MATH=config.fast_math, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block,
            SEED_WORDS=seed_word_count(seeds.shape), num_warps=config.decide_num_warps, **options)
    else:
        emit_row, emit_mode, log_normalizer = launch(
            kernels.rejection_decide_kernel, target_logits, draft, draft_tokens, num_draft_tokens, seeds, positions,
            temperature, stats, row_score, row_index, vocab, k, *strides, config.num_blocks,
            grid=(batch,),
            out_shapes=[jax.ShapeDtypeStruct((batch,), i32), jax.ShapeDtypeStruct((batch,), i32),
                        jax.ShapeDtypeStruct((batch, 2 * words), f32)],
            STRICT=strict, ONE_HOT=one_hot, BONUS_IN_STATS=config.bonus_in_stats, FP64=fp64,
            BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block,
            SEED_WORDS=seed_word_count(seeds.shape), num_warps=config.decide_num_warps, **options)
        emit_score, emit_index = launch(
            kernels.rejection_emit_kernel, target_logits, draft, draft_tokens, seeds, positions, temperature,
            emit_row, emit_mode, log_normalizer, vocab, k, batch, *strides,
            grid=(batch, config.num_blocks), out_shapes=emit_shapes,
            ONE_HOT=one_hot, FP64=fp64, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
            VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math, SEED_WORDS=seed_word_count(seeds.shape),
            num_warps=config.num_warps, **options)
    tokens, num_sampled = launch(
        kernels.rejection_finish_kernel, target_logits, draft_tokens, emit_row, emit_mode, row_score, row_index,
        emit_score, emit_index, config.num_blocks, k, batch, vocab, strides[0], strides[1],
        grid=(batch,),
        out_shapes=[jax.ShapeDtypeStruct((batch, rows), i32), jax.ShapeDtypeStruct((batch,), i32)],
        FP64=fp64, BLOCK_K=config.block_k, REDUCE_BLOCK=config.reduce_block,
        STATS_ROW_IN_EMIT=three_launches,
        num_warps=config.per_request_num_warps, **options)
    return tokens, num_sampled


@not_differentiable("synthetic_rejection_sample")
def synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *,
                               fp64=False):
    """Rejection with prescribed acceptance rates (benchmarking a serving stack at a chosen acceptance).

    Draft j of request b is accepted iff u_j < conditional_rates[(b,) j], u_j the stream-2 uniform
    (call 0) at position positions[b] + j (STREAM.md). At the first rejected row a (a = n_b when all
    are accepted) the emitted token is target_tokens[b, a]. So P(a_b > j) = prod_{i <= j} c_i, the
    unconditional rate of position j (see `jsample.rates`).

    Determinism: as `rejection_sample`; equal to `torch_backend.synthetic_rejection_sample` bit for
    bit. The rates are a device array: changing their values never recompiles.

    Args:
        target_tokens: [B, K+1] int32, the target's sampled token of each row (e.g. gumbel_sample's).
        draft_tokens: [B, K] int32 (entries at j >= n_b ignored).
        num_draft_tokens: [B] int32, n_b in [0, K] (unchecked; clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0.
        conditional_rates: float32 [K] (one schedule) or [B, K] (one per request), values in [0, 1]
            (unchecked).
        fp64: FP64 uniforms (compared with the rates widened to FP64).

    Returns:
        tokens [B, K+1] int32 (accepted drafts, the emitted token, then -1) and num_sampled [B] int32.
    """
    op = "synthetic_rejection_sample"
    check_synthetic_rejection_sample(op, spec(op, "target_tokens", target_tokens),
                                     spec(op, "draft_tokens", draft_tokens),
                                     spec(op, "num_draft_tokens", num_draft_tokens), spec(op, "seeds", seeds),
                                     spec(op, "positions", positions),
                                     spec(op, "conditional_rates", conditional_rates), fp64)
    batch, rows = target_tokens.shape
    k = rows - 1
    if batch == 0:
        return jnp.zeros((0, rows), jnp.int32), jnp.zeros((0,), jnp.int32)
    rates = jnp.broadcast_to(jnp.asarray(conditional_rates), (batch, k))  # [K]: every request the same schedule
    return rowwise(functools.partial(_synthetic_rows, fp64=fp64), jnp.asarray(target_tokens), jnp.asarray(draft_tokens),
                   jnp.asarray(num_draft_tokens), jnp.asarray(seeds), jnp.asarray(positions), rates)


def _synthetic_rows(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *, fp64):
    """The launch of synthetic_rejection_sample on validated arrays, the requests on axis 0."""
    batch, rows = target_tokens.shape
    k = rows - 1
    config = kernels.rejection_launch_config(1, k, (), fp64)
    if k == 0:  # never read; avoids empty buffers
        draft_tokens, conditional_rates = jnp.zeros((1,), jnp.int32), jnp.zeros((1,), jnp.float32)
    return tuple(launch(
        kernels.synthetic_rejection_kernel, target_tokens, draft_tokens, num_draft_tokens, seeds, positions,
        conditional_rates, k, k, grid=(batch,),
        out_shapes=[jax.ShapeDtypeStruct((batch, rows), jnp.int32), jax.ShapeDtypeStruct((batch,), jnp.int32)],
        FP64=fp64, BLOCK_K=config.block_k, SEED_WORDS=seed_word_count(seeds.shape), num_warps=config.per_request_num_warps,
        num_stages=config.num_stages,
        enable_fp_fusion=config.enable_fp_fusion))
