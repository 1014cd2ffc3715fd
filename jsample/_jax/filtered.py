"""`top_k_top_p_sample` for JAX: validate, allocate, launch the shared Triton kernels (jax.jit-able)."""

import functools

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample.kernels.stream import seed_word_count
from jsample._jax._launch import launch, not_differentiable, rowwise, per_row, spec, temperature_array
from jsample.kernels.filtered import MAX_CHUNKS, STATE_WORDS
from jsample.validation import check_top_k_top_p_sample


@not_differentiable("top_k_top_p_sample")
def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False) -> jax.Array:
    """Seeded top-k / top-p / min-p sampling: gumbel_sample over the tokens the filters keep.

    With p = softmax(logits[b] / T_b) the filters apply in this order, each to what the one before
    kept: top-k keeps the logits >= the k-th largest (ties kept); top-p keeps a token iff the kept
    mass of the tokens with a larger logit is < top_p of the kept mass (masses in fixed point,
    2**-24 of the largest token's); min-p keeps a token iff p >= min_p * max p. The token is
    `gumbel_sample`'s (stream 0) on the row with every other logit at -inf, so without filters it
    is gumbel_sample's token bit for bit. Greedy rows (as `gumbel_sample`'s) are the argmax, unfiltered.

    Determinism: a row's token depends only on its logits row, seed, position, temperature, filter
    values and `fp64`: not on the batch, row order or jit (the kept set is found with integer sums),
    and it equals `torch_backend.top_k_top_p_sample`'s token bit for bit. Changing filter values
    never recompiles; passing a filter or None is a different program.

    Args:
        logits, seeds, positions, temperature, fp64: as `gumbel_sample`.
        top_k: None, an int in [0, 2**31), or a [B] or scalar array of any integer dtype (read as
            int64); 0 (or >= V) keeps every token.
        top_p: None, a number in (0, 1], or a [B] or scalar array of any float dtype (read as
            float32); 1 keeps every token.
        min_p: None, a number in [0, 1], or a [B] or scalar array of any float dtype (read as
            float32); 0 keeps every token.
        Array values are not checked; out-of-range ones are clamped (docs/STREAM.md): top_k < 1 or
        > V keeps all; top_p >= 1 or NaN keeps all, <= 0 keeps only the largest logit; min_p <= 0
        or NaN keeps all, >= 1 keeps only the largest logit.

    Returns:
        [B] int32 token ids.
    """
    op = "top_k_top_p_sample"
    check_top_k_top_p_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                             spec(op, "positions", positions), spec(op, "temperature", temperature),
                             spec(op, "top_k", top_k), spec(op, "top_p", top_p), spec(op, "min_p", min_p), fp64)
    batch = logits.shape[0]
    if batch == 0:
        return jnp.zeros((0,), jnp.int32)
    top_k, top_p, min_p = (None if v is None else per_row(v, batch, d)
                           for v, d in ((top_k, jnp.int64), (top_p, jnp.float32), (min_p, jnp.float32)))
    return rowwise(functools.partial(_filtered_rows, fp64=fp64), jnp.asarray(logits), jnp.asarray(seeds),
                   jnp.asarray(positions), temperature_array(temperature, batch), top_k, top_p, min_p)


def _filtered_rows(logits, seeds, positions, temperature, top_k, top_p, min_p, *, fp64):
    """The launches of top_k_top_p_sample on validated arrays, the requests on axis 0."""
    batch, vocab = logits.shape
    config = kernels.filtered_launch_config(batch, vocab, vocab, jnp.dtype(logits.dtype).name, fp64)
    plan = kernels.filtered_plan(config, top_k is not None, top_p is not None)
    has_min_p = min_p is not None
    unused = temperature  # stands for the filters a call does not have: never read
    top_k, top_p, min_p = (unused if v is None else v for v in (top_k, top_p, min_p))
    gumbel = config.gumbel
    options = dict(num_stages=config.num_stages, enable_fp_fusion=config.enable_fp_fusion)
    # int64 state and partials as pairs of int32 words (no jax_enable_x64 needed)
    state_shape = jax.ShapeDtypeStruct((batch, 2 * STATE_WORDS), jnp.int32)
    partials_shape = jax.ShapeDtypeStruct((batch, 2 * config.ways * config.num_chunks), jnp.int32)
    state, partials = unused, unused  # the stats launch reads neither
    for step in plan[:-1]:
        state, partials = launch(
            kernels.filter_step_kernel, logits, temperature, top_k, top_p, state, partials, vocab, vocab,
            config.num_chunks, config.chunk, grid=(batch, config.num_chunks), out_shapes=[state_shape, partials_shape],
            PHASE=step.phase, PREV_PHASE=step.prev_phase, CAPTURE_NORMALIZER=step.capture_normalizer,
            KEY_SHIFT=config.key_shift, FP64=fp64, THREADS=32 * config.num_warps, VEC=config.vec,
            ROW_ALIGN=gumbel.row_align, VOCAB_ALIGN=gumbel.vocab_align, WAYS=config.ways,
            MAX_CHUNKS=MAX_CHUNKS, WIDE_SUMS=config.wide_sums, num_warps=config.num_warps, **options)
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    sample = plan[-1]
    partial_score, partial_index = launch(
        kernels.filtered_partial_kernel, logits, seeds, positions, temperature, top_k,
        top_p, min_p, state, partials, vocab, vocab, config.num_chunks,
        grid=(batch, gumbel.num_blocks),
        out_shapes=[jax.ShapeDtypeStruct((batch, gumbel.num_blocks * words), jnp.float32),
                    jax.ShapeDtypeStruct((batch, gumbel.num_blocks), jnp.int32)],
        PREV_PHASE=sample.prev_phase, CAPTURE_NORMALIZER=sample.capture_normalizer, HAS_MIN_P=has_min_p,
        KEY_SHIFT=config.key_shift, FP64=fp64, BLOCK_V=gumbel.block_v, ROW_ALIGN=gumbel.row_align,
        VOCAB_ALIGN=gumbel.vocab_align, FAST_MATH=gumbel.fast_math, WAYS=config.ways, MAX_CHUNKS=MAX_CHUNKS,
        SEED_WORDS=seed_word_count(seeds.shape), num_warps=gumbel.num_warps, **options)
    (tokens,) = launch(
        kernels.argmax_reduce_kernel, partial_score, partial_index, logits, vocab, vocab, gumbel.num_blocks,
        grid=(batch,), out_shapes=[jax.ShapeDtypeStruct((batch,), jnp.int32)],
        FP64=fp64, REDUCE_BLOCK=gumbel.reduce_block, num_warps=1, **options)
    return tokens
