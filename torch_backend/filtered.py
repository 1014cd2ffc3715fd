"""`top_k_top_p_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.ops import Logprobs, docstring, logprobs_plan_flags
from jsample.validation import check_logprobs_request, check_top_k_top_p_sample
from torch_backend import _execute as execute
from torch_backend.logprobs import num_top_tensor, vocab_parallel_logprobs
from torch_backend._launch import (dense, empty_outputs, filter_rows, row_logits, row_valid, temperature_array,
                                   temperature_value, traced, validate)
from torch_backend._vocab_parallel import run_sharded, shard_layout


def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False, num_valid=None, return_logprobs=False, num_top=0, vocab_group=None):
    # Docstring: jsample.ops (one text for both frontends).
    arguments = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                     min_p=min_p)
    call = None
    if vocab_group is not None:
        return _vocab_parallel(arguments, fp64, num_valid, return_logprobs, num_top, vocab_group)
    if return_logprobs is not False or num_top != 0:
        check_logprobs_request("top_k_top_p_sample", return_logprobs, num_top)
    if num_valid is None and not return_logprobs:  # (nor a call with padding: its row flags are computed)
        replayed, call = execute.replay("top_k_top_p_sample", arguments, (fp64,), kernels.plan_top_k_top_p_sample)
        if replayed is not None:
            return replayed[0]
    call = validate("top_k_top_p_sample", check_top_k_top_p_sample, arguments, (fp64,), call)
    valid = row_valid("top_k_top_p_sample", num_valid, logits.shape[0], logits.device)
    if valid is not None or return_logprobs:
        call = None
    logits = row_logits(logits)
    batch, device = logits.shape[0], logits.device
    in_list = kernels.top_k_within_list(top_k)  # (a Python int: the logprobs need no search)
    top_k, top_p, min_p = filter_rows(top_k, top_p, min_p, batch, device)
    seeds, positions = dense(seeds), dense(positions)
    if traced(logits) and return_logprobs:
        temperatures = temperature_array(temperature, batch, device)
        outputs = _top_k_top_p_sample_logprobs_op(logits, seeds, positions, temperatures, top_k, top_p, min_p, fp64,
                                                  valid, num_top, in_list)
        return outputs[0], Logprobs(*outputs[1:])
    if traced(logits):
        return _top_k_top_p_sample_op(logits, seeds, positions, temperature_array(temperature, batch, device), top_k,
                                      top_p, min_p, fp64, valid)
    return _top_k_top_p_sample(logits, seeds, positions, temperature_value(temperature, batch, device), top_k, top_p,
                               min_p, fp64, valid, call, arguments, num_top if return_logprobs else None, in_list)


top_k_top_p_sample.__doc__ = docstring("top_k_top_p_sample", "torch")


def _top_k_top_p_sample(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid=None, call=None,
                        arguments=None, num_top=None, top_k_in_list=False):
    """The tokens; with num_top (not None: return_logprobs), (tokens, Logprobs)."""
    logprobs = logprobs_plan_flags(num_top, top_k_in_list)
    plan = execute.plan(kernels.plan_top_k_top_p_sample, (logits, seeds), logits.device, call,
                        has_top_k=top_k is not None, has_top_p=top_p is not None, has_min_p=min_p is not None,
                        fp64=fp64, row_valid=valid is not None, **logprobs)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=valid)
    if num_top is not None:
        inputs["num_top"] = num_top_tensor(num_top, logits.device)
        outputs = execute.run(plan, logits.device, {name: value for name, value in inputs.items() if value is not None})
        return outputs[0], Logprobs(*outputs[1:])
    (tokens,) = execute.run(plan, logits.device, {name: value for name, value in inputs.items() if value is not None},
                            (call, arguments, kernels.plan_top_k_top_p_sample))
    return tokens


@torch.library.custom_op("jsample::top_k_top_p_sample", mutates_args=())
def _top_k_top_p_sample_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                           temperature: torch.Tensor, top_k: Optional[torch.Tensor], top_p: Optional[torch.Tensor],
                           min_p: Optional[torch.Tensor], fp64: bool,
                           valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _top_k_top_p_sample(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid)


@_top_k_top_p_sample_op.register_fake
def _(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid=None):
    return empty_outputs("top_k_top_p_sample", logits, logits.shape[0])[0]


@torch.library.custom_op("jsample::top_k_top_p_sample_logprobs", mutates_args=())
def _top_k_top_p_sample_logprobs_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                                    temperature: torch.Tensor, top_k: Optional[torch.Tensor],
                                    top_p: Optional[torch.Tensor], min_p: Optional[torch.Tensor], fp64: bool,
                                    valid: Optional[torch.Tensor], num_top: int,
                                    top_k_in_list: bool) -> list[torch.Tensor]:
    tokens, logprobs = _top_k_top_p_sample(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid,
                                           num_top=num_top, top_k_in_list=top_k_in_list)
    return [tokens, *logprobs]


@_top_k_top_p_sample_logprobs_op.register_fake
def _(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid, num_top, top_k_in_list):
    batch = logits.shape[0]
    return [*empty_outputs("top_k_top_p_sample", logits, batch),
            *empty_outputs("token_logprobs", logits, batch, num_top)]


def _vocab_parallel(arguments, fp64, num_valid, return_logprobs, num_top, group):
    """top_k_top_p_sample of logits whose vocabulary is split over the ranks of `group` (rank r holds the r-th
    contiguous shard, any sizes whose starts are multiples of 4): the rounds of
    jsample/kernels/vocab_parallel_filtered.py, an all-gather of per-row integer records between them; the
    unsharded call's kept set and tokens, on every rank; with return_logprobs, then the tokens' vocab-parallel
    token_logprobs with the same filters (the unsharded call's: its logprobs are token_logprobs')."""
    op = "top_k_top_p_sample"
    check_logprobs_request(op, return_logprobs, num_top)
    validate(op, check_top_k_top_p_sample, arguments, (fp64,), None)
    logits = row_logits(arguments["logits"])
    shards, start_align, start = shard_layout(op, group, logits)
    batch, device = logits.shape[0], logits.device
    top_k, top_p, min_p = filter_rows(arguments["top_k"], arguments["top_p"], arguments["min_p"], batch, device)
    inputs = dict(logits=logits, seeds=dense(arguments["seeds"]), positions=dense(arguments["positions"]),
                  temperature=temperature_array(arguments["temperature"], batch, device), top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=row_valid(op, num_valid, batch, device), vocab_start=start)
    inputs = {name: value for name, value in inputs.items() if value is not None}
    list_capacity = kernels.shard_list_capacity(arguments["top_k"])
    sharded = execute.plan(kernels.plan_top_k_top_p_shard, (logits, inputs["seeds"]), device, None,
                           has_top_k=top_k is not None, has_top_p=top_p is not None, has_min_p=min_p is not None,
                           fp64=fp64, shards=shards, start_align=start_align, row_valid="row_valid" in inputs,
                           list_capacity=list_capacity, store_threshold=return_logprobs)
    outputs = run_sharded(sharded, device, inputs, group, shards)
    if not return_logprobs:
        return outputs[0]
    # (the sampling rounds' last one gives the kept set: no search again)
    return outputs[0], vocab_parallel_logprobs(logits, outputs[0], inputs["temperature"], group, op=op,
                                               filters=(top_k, top_p, min_p), fp64=fp64, num_top=num_top,
                                               valid=inputs.get("row_valid"), kept_threshold=outputs[1])
