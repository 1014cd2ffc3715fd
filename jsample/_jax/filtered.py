"""`top_k_top_p_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax.logprobs import vocab_parallel_logprobs
from jsample._jax._launch import (empty_outputs, filter_rows, logits_array, not_differentiable, row_valid, rowwise,
                                  spec, temperature_array)
from jsample.ops import Logprobs, docstring, logprobs_plan_flags
from jsample.validation import check_logprobs_request, check_top_k_top_p_sample


@not_differentiable("top_k_top_p_sample")
def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False, num_valid=None, return_logprobs=False, num_top=0, vocab_axis=None):
    # Docstring: jsample.ops (one text for both frontends).
    op = "top_k_top_p_sample"
    check_top_k_top_p_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                             spec(op, "positions", positions), spec(op, "temperature", temperature),
                             spec(op, "top_k", top_k), spec(op, "top_p", top_p), spec(op, "min_p", min_p), fp64)
    check_logprobs_request(op, return_logprobs, num_top)
    batch = logits.shape[0]
    if vocab_axis is not None:
        return _vocab_parallel(logits_array(logits), jnp.asarray(seeds), jnp.asarray(positions),
                               temperature_array(temperature, batch), *filter_rows(top_k, top_p, min_p, batch),
                               fp64=fp64, axis=vocab_axis, num_valid=num_valid, return_logprobs=return_logprobs,
                               num_top=num_top, list_capacity=kernels.shard_list_capacity(top_k))
    if batch == 0:
        return empty_outputs(op, 0)[0] if not return_logprobs else (
            empty_outputs(op, 0)[0], Logprobs(*empty_outputs("token_logprobs", 0, num_top)))
    list_capacity = kernels.shard_list_capacity(top_k)
    in_list = kernels.top_k_within_list(top_k)  # (a Python int: the logprobs need no search)
    top_k, top_p, min_p = filter_rows(top_k, top_p, min_p, batch)
    # under jax.jit, logits sharded along the vocabulary take the vocab-parallel plan
    vocab_fn = functools.partial(_vocab_sharded_rows, fp64=fp64, list_capacity=list_capacity,
                                 num_top=num_top if return_logprobs else None)
    outputs = rowwise(functools.partial(_filtered_rows, fp64=fp64, num_top=num_top if return_logprobs else None,
                                        top_k_in_list=in_list),
                      logits_array(logits), jnp.asarray(seeds), jnp.asarray(positions),
                      temperature_array(temperature, batch), top_k, top_p, min_p, row_valid(op, num_valid, batch),
                      vocab_fn=vocab_fn)
    return (outputs[0], Logprobs(*outputs[1:])) if return_logprobs else outputs[0]


top_k_top_p_sample.__doc__ = docstring("top_k_top_p_sample", "jax")


def _filtered_rows(logits, seeds, positions, temperature, top_k, top_p, min_p, valid, *, fp64, num_top,
                   top_k_in_list=False):
    """top_k_top_p_sample on validated arrays, the requests on axis 0: (tokens,), and token_logprobs'
    outputs where num_top is not None (return_logprobs)."""
    logprobs = logprobs_plan_flags(num_top, top_k_in_list)
    plan = kernels.plan_top_k_top_p_sample(arg_spec(logits), arg_spec(seeds), execute.target(),
                                           has_top_k=top_k is not None, has_top_p=top_p is not None,
                                           has_min_p=min_p is not None, fp64=fp64, row_valid=valid is not None,
                                           **logprobs)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=valid, num_top=None if num_top is None else jnp.full((1,), num_top, jnp.int32))
    return tuple(run(plan, {name: value for name, value in inputs.items() if value is not None}))


def _vocab_parallel(logits, seeds, positions, temperature, top_k, top_p, min_p, *, fp64, axis, num_valid,
                    return_logprobs, num_top, list_capacity):
    """top_k_top_p_sample of the logits whose vocabulary is split over mesh axis `axis` (inside shard_map: this
    device's columns, the shards in axis order, equal sizes): the rounds of
    jsample/kernels/vocab_parallel_filtered.py, an all-gather of per-row integer records between them; the
    unsharded call's kept set and tokens; with return_logprobs, then their vocab-parallel token_logprobs."""
    batch = logits.shape[0]
    shards = execute.axis_shards("top_k_top_p_sample", axis, logits.shape)
    valid = row_valid("top_k_top_p_sample", num_valid, batch)
    if batch == 0:
        tokens = jnp.zeros((0,), jnp.int32)
        return (tokens, Logprobs(*empty_outputs("token_logprobs", 0, num_top))) if return_logprobs else tokens
    outputs = _vocab_sharded_rows(axis, shards, logits, seeds, positions, temperature, top_k, top_p, min_p, valid,
                                  fp64=fp64, list_capacity=list_capacity,
                                  num_top=num_top if return_logprobs else None)
    return (outputs[0], Logprobs(*outputs[1:])) if return_logprobs else outputs[0]


def _vocab_sharded_rows(axis, shards, logits, seeds, positions, temperature, top_k, top_p, min_p, valid, *, fp64,
                        list_capacity, num_top):
    """_filtered_rows' outputs on this device's shard of the vocabulary (inside shard_map, or jax.jit with the
    logits sharded along it: _launch.batch_partitioned's vocab_fn, called where mesh axis `axis` holds `shards`
    equal shards): the tokens, and where num_top is not None (return_logprobs) their vocab-parallel
    token_logprobs with the same filters."""
    outputs = _shard_tokens(logits, seeds, positions, temperature, top_k, top_p, min_p, valid, fp64=fp64, axis=axis,
                            shards=shards, list_capacity=list_capacity,
                            store_threshold=num_top is not None)
    if num_top is None:
        return outputs[:1]
    # (the sampling rounds' last one gives the kept set: no search again)
    return outputs[:1] + tuple(vocab_parallel_logprobs(
        logits, outputs[0], temperature, axis=axis, shards=shards, num_top=num_top, filters=(top_k, top_p, min_p),
        fp64=fp64, valid=valid, kept_threshold=outputs[1]))


def _shard_tokens(logits, seeds, positions, temperature, top_k, top_p, min_p, valid, *, fp64, axis, shards,
                  list_capacity, store_threshold=False):
    """(the vocab-parallel tokens, and with store_threshold the kept set's thresholds) of this device's shard
    `logits` [B, V / shards] (the shards in the order of mesh axis `axis`); list_capacity:
    kernels.shard_list_capacity of the call's top_k."""
    start, start_align = execute.shard_start(axis, shards, logits.shape[1])
    sharded = kernels.plan_top_k_top_p_shard(arg_spec(logits), arg_spec(seeds), execute.target(),
                                             has_top_k=top_k is not None, has_top_p=top_p is not None,
                                             has_min_p=min_p is not None, fp64=fp64, shards=shards,
                                             start_align=start_align, row_valid=valid is not None,
                                             list_capacity=list_capacity, store_threshold=store_threshold)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=valid, vocab_start=start)
    inputs = {name: value for name, value in inputs.items() if value is not None}
    return tuple(execute.run_sharded(sharded, inputs, axis))
