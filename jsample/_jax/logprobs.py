"""`token_logprobs` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax
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
                   fp64=False, vocab_axis=None) -> Logprobs:
    # Docstring: jsample.ops (one text for both frontends).
    op = "token_logprobs"
    check_token_logprobs(op, spec(op, "logits", logits), spec(op, "tokens", tokens),
                         spec(op, "temperature", temperature), spec(op, "top_k", top_k), spec(op, "top_p", top_p),
                         spec(op, "min_p", min_p), num_top, fp64)
    batch = logits.shape[0]
    if vocab_axis is not None:
        shards = execute.axis_shards(op, vocab_axis, logits.shape)
        if isinstance(tokens, (np.ndarray, list)):
            check_token_values(op, tokens, logits.shape[1] * shards)
        if batch == 0:
            return Logprobs(*empty_outputs(op, 0, num_top))
        return vocab_parallel_logprobs(logits_array(logits), jnp.asarray(tokens), temperature_array(temperature, batch),
                                       axis=vocab_axis, shards=shards, num_top=num_top,
                                       filters=filter_rows(top_k, top_p, min_p, batch), fp64=fp64,
                                       list_capacity=kernels.shard_list_capacity(top_k))
    if isinstance(tokens, (np.ndarray, list)):
        check_token_values(op, tokens, logits.shape[1])
    if batch == 0:
        return Logprobs(*empty_outputs(op, 0, num_top))
    # under jax.jit, logits sharded along the vocabulary take the vocab-parallel plan
    vocab_fn = functools.partial(_vocab_sharded_rows, num_top=num_top, fp64=fp64,
                                 list_capacity=kernels.shard_list_capacity(top_k))
    in_list = kernels.top_k_within_list(top_k)  # (a Python int: no search)
    top_k, top_p, min_p = filter_rows(top_k, top_p, min_p, batch)
    return Logprobs(*rowwise(functools.partial(_logprobs_rows, num_top=num_top, fp64=fp64, top_k_in_list=in_list),
                             logits_array(logits),
                             jnp.asarray(tokens), temperature_array(temperature, batch), top_k, top_p, min_p,
                             vocab_fn=vocab_fn))


token_logprobs.__doc__ = docstring("token_logprobs", "jax")


def _logprobs_rows(logits, tokens, temperature, top_k, top_p, min_p, *, num_top, fp64, top_k_in_list=False):
    """token_logprobs on validated arrays, the requests on axis 0."""
    plan = kernels.plan_token_logprobs(arg_spec(logits), execute.target(), has_top_k=top_k is not None,
                                       has_top_p=top_p is not None, has_min_p=min_p is not None, fp64=fp64,
                                       num_top=num_top, top_k_in_list=top_k_in_list)
    inputs = dict(logits=logits, tokens=tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  num_top=jnp.full((1,), num_top, jnp.int32))  # read on the device: no count costs a compilation
    return run(plan, {name: value for name, value in inputs.items() if value is not None})


def vocab_parallel_logprobs(logits, tokens, temperature, *, axis, shards, num_top=0, filters=(None, None, None),
                            fp64=False, valid=None, kept_threshold=None, list_capacity=0):
    """token_logprobs of this device's shard `logits` [B, V / shards] of a vocabulary split over mesh axis `axis`
    (equal shards in axis order; `tokens` global columns; `filters`: filter_rows' top_k, top_p, min_p or None;
    `valid`: the samplers' row flags; `kept_threshold`: the sampler's last round's kept set): with filters, the
    sharded searches of their kept set first (unless kept_threshold is given; with `list_capacity`,
    shard_list_capacity of a Python-int top_k, the sampler's lists: one all-gather); then two all-gathers of
    per-row records (jsample/kernels/vocab_parallel_logprobs.py), the unsharded call's Logprobs on every device."""
    start, start_align = execute.shard_start(axis, shards, logits.shape[1])
    width = logits.shape[1]
    top_k, top_p, min_p = filters
    if list_capacity and kept_threshold is None:  # (its token, of zero seeds, is not used)
        zeros = jnp.zeros((logits.shape[0],), jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)  # (precompile's)
        lists = kernels.plan_top_k_top_p_shard(arg_spec(logits), arg_spec(zeros), execute.target(), has_top_k=True,
                                               has_top_p=top_p is not None, has_min_p=False, fp64=fp64,
                                               shards=shards, start_align=start_align, list_capacity=list_capacity,
                                               store_threshold=True)
        inputs = dict(logits=logits, seeds=zeros, positions=zeros, temperature=temperature, top_k=top_k, top_p=top_p,
                      vocab_start=start)
        kept_threshold = execute.run_sharded(lists, {name: value for name, value in inputs.items()
                                                     if value is not None}, axis)[1]
    sharded = kernels.plan_token_logprobs_shard(arg_spec(logits), execute.target(), vocab=width * shards,
                                                starts=tuple(i * width for i in range(shards)),
                                                start_align=start_align, num_top=num_top,
                                                row_valid=valid is not None, has_top_k=top_k is not None,
                                                has_top_p=top_p is not None, has_min_p=min_p is not None, fp64=fp64,
                                                threshold_given=kept_threshold is not None)
    inputs = dict(logits=logits, tokens=tokens, temperature=temperature, vocab_start=start,
                  num_top=jnp.full((1,), num_top, jnp.int32), top_k=top_k, top_p=top_p, min_p=min_p, row_valid=valid,
                  kept_threshold=kept_threshold)
    return Logprobs(*execute.run_sharded(sharded, {name: value for name, value in inputs.items() if value is not None},
                                         axis))


def _vocab_sharded_rows(axis, shards, logits, tokens, temperature, top_k, top_p, min_p, *, num_top, fp64,
                        list_capacity):
    """_logprobs_rows' outputs on this device's shard of the vocabulary (jax.jit with the logits sharded along it:
    _launch.batch_partitioned's vocab_fn, where mesh axis `axis` holds `shards` equal shards)."""
    return tuple(vocab_parallel_logprobs(logits, tokens, temperature, axis=axis, shards=shards, num_top=num_top,
                                         filters=(top_k, top_p, min_p), fp64=fp64, list_capacity=list_capacity))
