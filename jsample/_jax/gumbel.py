"""`gumbel_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import (empty_outputs, logits_array, not_differentiable, row_valid, rowwise, spec,
                                  temperature_array)
from jsample._jax.logprobs import vocab_parallel_logprobs
from jsample.ops import Logprobs, docstring, logprobs_plan_flags
from jsample.validation import check_gumbel_sample, check_logprobs_request


@not_differentiable("gumbel_sample")
def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None,
                  return_logprobs=False, num_top=0, vocab_axis=None):
    # Docstring: jsample.ops (one text for both frontends).
    op = "gumbel_sample"
    check_gumbel_sample(op, spec(op, "logits", logits), spec(op, "seeds", seeds),
                        spec(op, "positions", positions), spec(op, "temperature", temperature), fp64, draft)
    check_logprobs_request(op, return_logprobs, num_top)
    batch = logits.shape[0]
    if vocab_axis is not None:
        return _vocab_parallel(logits_array(logits), jnp.asarray(seeds), jnp.asarray(positions),
                               temperature_array(temperature, batch), fp64=fp64, draft=draft, axis=vocab_axis,
                               num_valid=num_valid, return_logprobs=return_logprobs, num_top=num_top)
    if batch == 0:
        return empty_outputs(op, 0)[0] if not return_logprobs else (
            empty_outputs(op, 0)[0], Logprobs(*empty_outputs("token_logprobs", 0, num_top)))
    # under jax.jit, logits sharded along the vocabulary take the vocab-parallel plan (logprobs too)
    vocab_fn = functools.partial(_vocab_sharded_rows, fp64=fp64, draft=draft, return_logprobs=return_logprobs,
                                 num_top=num_top)
    outputs = rowwise(functools.partial(_gumbel_rows, fp64=fp64, draft=draft,
                                        num_top=num_top if return_logprobs else None),
                      logits_array(logits), jnp.asarray(seeds), jnp.asarray(positions),
                      temperature_array(temperature, batch), row_valid(op, num_valid, batch), vocab_fn=vocab_fn)
    return (outputs[0], Logprobs(*outputs[1:])) if return_logprobs else outputs[0]


gumbel_sample.__doc__ = docstring("gumbel_sample", "jax")


def _gumbel_rows(logits, seeds, positions, temperature, valid, *, fp64, draft, num_top):
    """gumbel_sample on validated arrays, the requests on axis 0: (tokens,), and token_logprobs' outputs
    where num_top is not None (return_logprobs)."""
    logprobs = logprobs_plan_flags(num_top)
    plan = kernels.plan_gumbel_sample(arg_spec(logits), arg_spec(seeds), execute.target(), fp64=fp64, draft=draft,
                                      row_valid=valid is not None, **logprobs)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    if valid is not None:
        inputs["row_valid"] = valid
    if num_top is not None:
        inputs["num_top"] = jnp.full((1,), num_top, jnp.int32)
    return tuple(run(plan, inputs))


def _vocab_parallel(logits, seeds, positions, temperature, *, fp64, draft, axis, num_valid, return_logprobs,
                    num_top):
    """gumbel_sample of the logits whose vocabulary is split over mesh axis `axis` (inside shard_map: this
    device's columns, the shards in axis order, equal sizes): each device's summary of its rows, one
    all-gather of the summaries (B x SUMMARY_WORDS int32 words a device), the token from them on every device
    (jsample/kernels/vocab_parallel.py): the unsharded call's tokens; with return_logprobs, then their
    vocab-parallel token_logprobs (the unsharded call's: its logprobs are token_logprobs')."""
    batch = logits.shape[0]
    shards = execute.axis_shards("gumbel_sample", axis, logits.shape)
    valid = row_valid("gumbel_sample", num_valid, batch)  # (checked at every batch size, as torch checks it)
    if batch == 0:
        tokens = jnp.zeros((0,), jnp.int32)
        return (tokens, Logprobs(*empty_outputs("token_logprobs", 0, num_top))) if return_logprobs else tokens
    outputs = _vocab_sharded_rows(axis, shards, logits, seeds, positions, temperature, valid, fp64=fp64, draft=draft,
                                  return_logprobs=return_logprobs, num_top=num_top)
    return (outputs[0], Logprobs(*outputs[1:])) if return_logprobs else outputs[0]


def _vocab_sharded_rows(axis, shards, logits, seeds, positions, temperature, valid, *, fp64, draft,
                        return_logprobs=False, num_top=0):
    """_gumbel_rows' outputs on this device's shard of the vocabulary (inside shard_map, or jax.jit with the
    logits sharded along it: _launch.batch_partitioned's vocab_fn, called where mesh axis `axis` holds `shards`
    equal shards): the tokens, and with return_logprobs their vocab-parallel token_logprobs."""
    tokens = _shard_tokens(logits, seeds, positions, temperature, valid, fp64=fp64, draft=draft, axis=axis,
                           shards=shards)
    if not return_logprobs:
        return (tokens,)
    return (tokens,) + tuple(vocab_parallel_logprobs(logits, tokens, temperature, axis=axis, shards=shards,
                                                     num_top=num_top, valid=valid))


def _shard_tokens(logits, seeds, positions, temperature, valid, *, fp64, draft, axis, shards):
    """The vocab-parallel tokens of this device's shard `logits` [B, V / shards] (the shards in the order of
    mesh axis `axis`), every device's summary all-gathered over the axis."""
    start, start_align = execute.shard_start(axis, shards, logits.shape[1])
    sharded = kernels.plan_gumbel_sample_shard(arg_spec(logits), arg_spec(seeds), execute.target(), fp64=fp64,
                                               draft=draft, shards=shards, start_align=start_align,
                                               row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, vocab_start=start)
    if valid is not None:
        inputs["row_valid"] = valid
    return execute.run_sharded(sharded, inputs, axis)[0]
