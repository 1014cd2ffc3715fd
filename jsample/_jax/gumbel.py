"""`gumbel_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import logits_array, not_differentiable, row_valid, rowwise, spec, temperature_array
from jsample.validation import check_gumbel_sample


@not_differentiable("gumbel_sample")
def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None) -> jax.Array:
    """Seeded Gumbel-max sampling: token_b = argmax_k (logits[b, k] / T_b + g(u_bk)).

    `u_bk` is the stream-0 (or, with `draft=True`, stream-1) uniform of column k for
    (seeds[b], positions[b]) as defined in STREAM.md (version 1); g(u) = -log(-log1p(-u)).
    T_b < 1e-5 is greedy: argmax_k logits[b, k]; so is a row in which some finite logits[b, k] / T_b
    overflows float32 (docs/STREAM.md, "Clarifications of version 1"). Ties go to the lowest
    column; -inf, +inf and NaN logits are never chosen; a row with no finite logit gives -1.

    Determinism: a row's token depends only on its logits row, seed, position, temperature and the
    `fp64`/`draft` flags: not on the batch, row order, vocabulary padding, jit or sharding, and it
    equals `torch_backend.gumbel_sample`'s token bit for bit. Changing seed, position or
    temperature values never recompiles. In a jitted decode loop at small batches, the XLA flags of
    the README ("Small batches in a jitted JAX loop") let XLA capture its launches into a CUDA graph.

    Args:
        logits: [B, V] float32, bfloat16 or float16.
        seeds: [B] int32, uint32 or int64 (the value is the 64-bit seed), or [B, 2] uint32 or int32
            (low, high) words of 64-bit seeds (`jsample.seed_words`). With jax_enable_x64 off, JAX
            narrows an int64 array to int32 before the op sees it: eagerly a NumPy int64 array is
            refused, but under jax.jit it arrives narrowed (the seed's high bits lost), so pass words.
        positions: [B] int32 or int64, the position of the token being drawn (>= 0, unchecked).
        temperature: a number in [0, 3.4e38] (below 1e-5 is greedy), or a [B] or scalar array of any
            float dtype, read as float32. Array values, and Python numbers traced by jax.jit (they
            are arrays then), are not checked: below 1e-5, negative and NaN are greedy, +inf
            samples uniformly, as in torch for a tensor of the same value.
        fp64: FP64 uniforms, noise and scores instead of FP32 (works with jax_enable_x64 off).
        draft: draw from stream 1 (draft-token sampling) instead of stream 0.
        num_valid: None, or the number of valid rows: an int in [0, B] or an int32 / int64 scalar array
            (unchecked: e.g. a CUDA graph's or a jitted bucket's live count); rows at or past it are
            padding: their token is -1 and their logits are not read. The valid rows' tokens do not change.

    Returns:
        [B] int32 token ids.

    Example:
        >>> import jax.numpy as jnp, jsample
        >>> logits = jnp.array([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]], jnp.float32)
        >>> seeds, positions = jnp.array([7, 7]), jnp.array([0, 1])
        >>> tokens = jsample.gumbel_sample(logits, seeds, positions, jnp.array([1.0, 0.0], jnp.float32))
        >>> str(tokens.dtype), tokens.shape, int(tokens[1])  # row 1 is greedy (T = 0): its argmax
        ('int32', (2,), 0)
    """
    op = "gumbel_sample"
    check_gumbel_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                        spec(op, "positions", positions), spec(op, "temperature", temperature), fp64, draft)
    batch = logits.shape[0]
    if batch == 0:
        return jnp.zeros((0,), jnp.int32)
    return rowwise(functools.partial(_gumbel_rows, fp64=fp64, draft=draft), logits_array(logits),
                   jnp.asarray(seeds), jnp.asarray(positions), temperature_array(temperature, batch),
                   row_valid(op, num_valid, batch))


def _gumbel_rows(logits, seeds, positions, temperature, valid, *, fp64, draft):
    """gumbel_sample on validated arrays, the requests on axis 0."""
    plan = kernels.plan_gumbel_sample(arg_spec(logits), arg_spec(seeds), execute.target(), fp64=fp64, draft=draft,
                                      row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    if valid is not None:
        inputs["row_valid"] = valid
    (tokens,) = run(plan, inputs)
    return tokens
