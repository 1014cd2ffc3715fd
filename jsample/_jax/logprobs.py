"""`token_logprobs` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax.numpy as jnp
import numpy as np

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import (empty_outputs, filter_rows, logits_array, not_differentiable, rowwise, spec,
                                  temperature_array)
from jsample.ops import Logprobs, docstring
from jsample.validation import check_token_logprobs, check_token_values


@not_differentiable("token_logprobs")
def token_logprobs(logits, tokens, temperature, *, top_k=None, top_p=None, min_p=None, num_top=0,
                   fp64=False) -> Logprobs:
    # Docstring: jsample.ops (one text for both frontends).
    op = "token_logprobs"
    check_token_logprobs(op, spec(op, "logits", logits), spec(op, "tokens", tokens),
                         spec(op, "temperature", temperature), spec(op, "top_k", top_k), spec(op, "top_p", top_p),
                         spec(op, "min_p", min_p), num_top, fp64)
    if isinstance(tokens, (np.ndarray, list)):
        check_token_values(op, tokens, logits.shape[1])
    batch = logits.shape[0]
    if batch == 0:
        return Logprobs(*empty_outputs(op, 0, num_top))
    top_k, top_p, min_p = filter_rows(top_k, top_p, min_p, batch)
    return Logprobs(*rowwise(functools.partial(_logprobs_rows, num_top=num_top, fp64=fp64), logits_array(logits),
                             jnp.asarray(tokens), temperature_array(temperature, batch), top_k, top_p, min_p))


token_logprobs.__doc__ = docstring("token_logprobs", "jax")


def _logprobs_rows(logits, tokens, temperature, top_k, top_p, min_p, *, num_top, fp64):
    """token_logprobs on validated arrays, the requests on axis 0."""
    plan = kernels.plan_token_logprobs(arg_spec(logits), execute.target(), has_top_k=top_k is not None,
                                       has_top_p=top_p is not None, has_min_p=min_p is not None, fp64=fp64,
                                       num_top=num_top)
    inputs = dict(logits=logits, tokens=tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  num_top=jnp.full((1,), num_top, jnp.int32))  # read on the device: no count costs a compilation
    return run(plan, {name: value for name, value in inputs.items() if value is not None})
