"""`top_k_top_p_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import (logits_array, not_differentiable, per_row, row_valid, rowwise, spec,
                                  temperature_array)
from jsample.validation import check_top_k_top_p_sample


@not_differentiable("top_k_top_p_sample")
def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False, num_valid=None) -> jax.Array:
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
        logits, seeds, positions, temperature, fp64, num_valid: as `gumbel_sample`.
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

    Example:
        >>> import jax.numpy as jnp, jsample
        >>> logits = jnp.array([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]], jnp.float32)
        >>> seeds, positions = jnp.array([7, 7]), jnp.array([0, 1])
        >>> jsample.top_k_top_p_sample(logits, seeds, positions, 1.0, top_k=1).tolist()  # the largest logit
        [1, 0]
        >>> tokens = jsample.top_k_top_p_sample(logits, seeds, positions, 0.8, top_k=2, top_p=0.9, min_p=0.05)
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
    return rowwise(functools.partial(_filtered_rows, fp64=fp64), logits_array(logits), jnp.asarray(seeds),
                   jnp.asarray(positions), temperature_array(temperature, batch), top_k, top_p, min_p,
                   row_valid(op, num_valid, batch))


def _filtered_rows(logits, seeds, positions, temperature, top_k, top_p, min_p, valid, *, fp64):
    """top_k_top_p_sample on validated arrays, the requests on axis 0."""
    plan = kernels.plan_top_k_top_p_sample(arg_spec(logits), arg_spec(seeds), execute.target(), has_top_k=top_k is not None,
                                           has_top_p=top_p is not None, has_min_p=min_p is not None, fp64=fp64,
                                           row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=valid)
    (tokens,) = run(plan, {name: value for name, value in inputs.items() if value is not None})
    return tokens
