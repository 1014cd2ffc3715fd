"""`gumbel_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax
import jax.numpy as jnp

from jsample import kernels
from jsample.ops import docstring
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import (empty_outputs, logits_array, not_differentiable, row_valid, rowwise, spec,
                                  temperature_array)
from jsample.validation import check_gumbel_sample


@not_differentiable("gumbel_sample")
def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None) -> jax.Array:
    # Docstring: jsample.ops (one text for both frontends).
    op = "gumbel_sample"
    check_gumbel_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                        spec(op, "positions", positions), spec(op, "temperature", temperature), fp64, draft)
    batch = logits.shape[0]
    if batch == 0:
        return empty_outputs(op, 0)[0]
    return rowwise(functools.partial(_gumbel_rows, fp64=fp64, draft=draft), logits_array(logits),
                   jnp.asarray(seeds), jnp.asarray(positions), temperature_array(temperature, batch),
                   row_valid(op, num_valid, batch))


gumbel_sample.__doc__ = docstring("gumbel_sample", "jax")


def _gumbel_rows(logits, seeds, positions, temperature, valid, *, fp64, draft):
    """gumbel_sample on validated arrays, the requests on axis 0."""
    plan = kernels.plan_gumbel_sample(arg_spec(logits), arg_spec(seeds), execute.target(), fp64=fp64, draft=draft,
                                      row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    if valid is not None:
        inputs["row_valid"] = valid
    (tokens,) = run(plan, inputs)
    return tokens
