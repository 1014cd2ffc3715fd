"""`rejection_sample` and `synthetic_rejection_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax.numpy as jnp

from jsample import kernels
from jsample.ops import Logprobs, docstring, logprobs_plan_flags, logprobs_shapes
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax.logprobs import vocab_parallel_logprobs
from jsample._jax._launch import (empty_outputs, logits_array, not_differentiable, row_valid, rowwise, spec,
                                  temperature_array)
from jsample.validation import (check_logprobs_request, check_rejection_sample, check_synthetic_rejection_sample,
                                rates_from_list)


@not_differentiable("rejection_sample")
def rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, *,
                     draft_logits=None, method="probabilistic", fp64=False, num_valid=None, return_logprobs=False,
                     num_top=0, vocab_axis=None):
    # Docstring: jsample.ops (one text for both frontends).
    op = "rejection_sample"
    check_rejection_sample(op, spec(op, "target_logits", target_logits), spec(op, "draft_tokens", draft_tokens),
                           spec(op, "num_draft_tokens", num_draft_tokens), spec(op, "seeds", seeds),
                           spec(op, "positions", positions), spec(op, "temperature", temperature),
                           spec(op, "draft_logits", draft_logits), method, fp64)
    check_logprobs_request(op, return_logprobs, num_top)
    batch, rows, _ = target_logits.shape
    if batch == 0:
        empty = empty_outputs(op, 0, rows)
        return empty if not return_logprobs else (
            *empty, Logprobs(*(jnp.zeros(shape, dtype) for shape, dtype in logprobs_shapes(0, rows, num_top))))
    strict = method == "strict"
    one_hot = draft_logits is None or strict
    if vocab_axis is not None:
        return _vocab_parallel(logits_array(target_logits), jnp.asarray(draft_tokens), jnp.asarray(num_draft_tokens),
                               jnp.asarray(seeds), jnp.asarray(positions), temperature_array(temperature, batch),
                               None if one_hot else logits_array(draft_logits), row_valid(op, num_valid, batch),
                               strict=strict, fp64=fp64, axis=vocab_axis, num_top=num_top if return_logprobs else None)
    # under jax.jit, target (and draft) logits sharded along the vocabulary take the vocab-parallel plan
    vocab_fn = functools.partial(_vocab_sharded_rows, strict=strict, fp64=fp64,
                                 num_top=num_top if return_logprobs else None)
    outputs = rowwise(functools.partial(_rejection_rows, strict=strict, fp64=fp64,
                                        num_top=num_top if return_logprobs else None),
                      logits_array(target_logits), jnp.asarray(draft_tokens), jnp.asarray(num_draft_tokens),
                      jnp.asarray(seeds), jnp.asarray(positions), temperature_array(temperature, batch),
                      None if one_hot else logits_array(draft_logits), row_valid(op, num_valid, batch),
                      vocab_fn=vocab_fn, vocab_arrays=(0, 6))
    return (outputs[0], outputs[1], Logprobs(*outputs[2:])) if return_logprobs else tuple(outputs)


rejection_sample.__doc__ = docstring("rejection_sample", "jax")


def _rejection_rows(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, valid,
                    *, strict, fp64, num_top):
    """rejection_sample on validated arrays, the requests on axis 0 (with num_top, not None: return_logprobs,
    then token_logprobs' outputs too)."""
    logprobs = logprobs_plan_flags(num_top)
    plan = kernels.plan_rejection_sample(arg_spec(target_logits), None if draft_logits is None else arg_spec(draft_logits),
                                         arg_spec(seeds), execute.target(), strict=strict, fp64=fp64,
                                         row_valid=valid is not None, **logprobs)
    inputs = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, temperature=temperature)
    if draft_logits is not None:
        inputs["draft_logits"] = draft_logits
    if valid is not None:
        inputs["row_valid"] = valid
    if num_top is not None:
        inputs["num_top"] = jnp.full((1,), num_top, jnp.int32)
    return run(plan, inputs)


def _vocab_parallel(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, valid,
                    *, strict, fp64, axis, num_top):
    """rejection_sample of this device's shards of target (and draft) logits [B, K+1, V / n] whose vocabulary is
    split over mesh axis `axis` (inside shard_map, equal shards in axis order): three or four all-gathers of
    per-request records (jsample/kernels/vocab_parallel_rejection.py), the unsharded call's tokens on every device;
    with num_top (not None: return_logprobs), then the emitted tokens' vocab-parallel token_logprobs."""
    shards = execute.axis_shards("rejection_sample", axis, target_logits.shape, rows=True)
    outputs = _vocab_sharded_rows(axis, shards, target_logits, draft_tokens, num_draft_tokens, seeds, positions,
                                  temperature, draft_logits, valid, strict=strict, fp64=fp64, num_top=num_top)
    return outputs if num_top is None else (outputs[0], outputs[1], Logprobs(*outputs[2:]))


def _vocab_sharded_rows(axis, shards, target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature,
                        draft_logits, valid, *, strict, fp64, num_top):
    """_rejection_rows' outputs on this device's shards of the vocabulary (inside shard_map, or jax.jit with the
    logits sharded along it: _launch.batch_partitioned's vocab_fn, called where mesh axis `axis` holds `shards`
    equal shards)."""
    batch, rows, width = target_logits.shape
    starts = tuple(i * width for i in range(shards))
    start, start_align = execute.shard_start(axis, shards, width)
    sharded = kernels.plan_rejection_sample_shard(
        arg_spec(target_logits), None if draft_logits is None else arg_spec(draft_logits), arg_spec(seeds),
        execute.target(), strict=strict, fp64=fp64, vocab=width * shards, starts=starts, start_align=start_align,
        row_valid=valid is not None)
    inputs = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, temperature=temperature, vocab_start=start,
                  shard_starts=jnp.array(starts + (width * shards,), jnp.int32), draft_logits=draft_logits,
                  row_valid=valid)
    tokens, num_sampled = execute.run_sharded(sharded, {name: value for name, value in inputs.items()
                                                        if value is not None}, axis)
    if num_top is None:
        return tokens, num_sampled
    logprobs = vocab_parallel_logprobs(target_logits.reshape(batch * rows, width), tokens.reshape(-1),
                                       jnp.repeat(temperature, rows), axis=axis, shards=shards, num_top=num_top,
                                       valid=None if valid is None else jnp.repeat(valid, rows))
    return (tokens, num_sampled) + tuple(value.reshape(batch, rows, *value.shape[1:]) for value in logprobs)


@not_differentiable("synthetic_rejection_sample")
def synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *,
                               fp64=False, num_valid=None):
    # Docstring: jsample.ops (one text for both frontends).
    op = "synthetic_rejection_sample"
    conditional_rates = rates_from_list(op, conditional_rates)
    check_synthetic_rejection_sample(op, spec(op, "target_tokens", target_tokens),
                                     spec(op, "draft_tokens", draft_tokens),
                                     spec(op, "num_draft_tokens", num_draft_tokens), spec(op, "seeds", seeds),
                                     spec(op, "positions", positions),
                                     spec(op, "conditional_rates", conditional_rates), fp64)
    batch, rows = target_tokens.shape
    k = rows - 1
    if batch == 0:
        return empty_outputs(op, 0, rows)
    rates = jnp.broadcast_to(jnp.asarray(conditional_rates, jnp.float32), (batch, k))  # [K]: every request the same schedule
    return rowwise(functools.partial(_synthetic_rows, fp64=fp64), jnp.asarray(target_tokens), jnp.asarray(draft_tokens),
                   jnp.asarray(num_draft_tokens), jnp.asarray(seeds), jnp.asarray(positions), rates,
                   row_valid(op, num_valid, batch))


synthetic_rejection_sample.__doc__ = docstring("synthetic_rejection_sample", "jax")


def _synthetic_rows(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, valid, *, fp64):
    """synthetic_rejection_sample on validated arrays, the requests on axis 0."""
    plan = kernels.plan_synthetic_rejection_sample(arg_spec(target_tokens), arg_spec(conditional_rates),
                                                   arg_spec(seeds), execute.target(), fp64=fp64,
                                                   row_valid=valid is not None)
    inputs = dict(target_tokens=target_tokens, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, conditional_rates=conditional_rates)
    if valid is not None:
        inputs["row_valid"] = valid
    return run(plan, inputs)
