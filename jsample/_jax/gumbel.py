"""`gumbel_sample` for JAX: validate, allocate, launch the shared Triton kernels (jax.jit-able)."""

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax._launch import launch, spec, temperature_array
from jsample.validation import check_gumbel_sample


def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False) -> jax.Array:
    """Seeded Gumbel-max sampling: token_b = argmax_k (logits[b, k] / T_b + g(u_bk)).

    `u_bk` is the stream-0 (or, with `draft=True`, stream-1) uniform of column k for
    (seeds[b], positions[b]) as defined in STREAM.md (version 1); g(u) = -log(-log1p(-u)).
    T_b == 0 is greedy: argmax_k logits[b, k]. Ties go to the lowest column; -inf, +inf and NaN
    logits are never chosen; a row with no finite logit gives -1.

    Determinism: a row's token depends only on its logits row, seed, position, temperature and the
    `fp64`/`draft` flags: not on the batch, row order, vocabulary padding, jit or sharding, and it
    equals `torch_backend.gumbel_sample`'s token bit for bit. Changing seed, position or
    temperature values never recompiles.

    Args:
        logits: [B, V] float32, bfloat16 or float16.
        seeds: [B] int32, uint32 or int64 (int64 needs jax_enable_x64); the value is the 64-bit seed.
        positions: [B] int32 or int64, the position of the token being drawn (>= 0, unchecked).
        temperature: [B] or scalar float32 array, or a finite number >= 0; 0 means greedy.
            Array values are not checked: negative values sample softmax(logits / T), NaN gives -1.
        fp64: FP64 uniforms, noise and scores instead of FP32 (works with jax_enable_x64 off).
        draft: draw from stream 1 (draft-token sampling) instead of stream 0.

    Returns:
        [B] int32 token ids.
    """
    op = "gumbel_sample"
    check_gumbel_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                        spec(op, "positions", positions), spec(op, "temperature", temperature), fp64, draft)
    batch, vocab = logits.shape
    if batch == 0:
        return jnp.zeros((0,), jnp.int32)
    config = kernels.gumbel_launch_config(vocab, vocab, fp64)
    words = 2 if fp64 else 1  # f64 partial scores are stored as two f32 words
    launch_options = dict(num_warps=config.num_warps, num_stages=config.num_stages,
                          enable_fp_fusion=config.enable_fp_fusion)
    partial_score, partial_index = launch(
        kernels.gumbel_partial_kernel, jnp.asarray(logits), jnp.asarray(seeds), jnp.asarray(positions),
        temperature_array(temperature, batch), vocab, vocab,
        grid=(batch, config.num_blocks),
        out_shapes=[jax.ShapeDtypeStruct((batch, config.num_blocks * words), jnp.float32),
                    jax.ShapeDtypeStruct((batch, config.num_blocks), jnp.int32)],
        STREAM=1 if draft else 0, FP64=fp64, BLOCK_V=config.block_v, ROW_ALIGN=config.row_align,
        VOCAB_ALIGN=config.vocab_align, FAST_MATH=config.fast_math,
        **launch_options)
    (tokens,) = launch(
        kernels.argmax_reduce_kernel, partial_score, partial_index, config.num_blocks,
        grid=(batch,), out_shapes=[jax.ShapeDtypeStruct((batch,), jnp.int32)],
        FP64=fp64, REDUCE_BLOCK=config.reduce_block, **{**launch_options, "num_warps": 1})
    return tokens
