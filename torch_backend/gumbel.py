"""`gumbel_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.ops import Logprobs, docstring, logprobs_plan_flags
from jsample.validation import check_gumbel_sample, check_logprobs_request
from torch_backend import _execute as execute
from torch_backend.logprobs import num_top_tensor, vocab_parallel_logprobs
from torch_backend._launch import (dense, empty_outputs, row_logits, row_valid, temperature_array, temperature_value,
                                   traced, validate)
from torch_backend._vocab_parallel import run_sharded, shard_layout


def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None,
                  return_logprobs=False, num_top=0, vocab_group=None):
    # Docstring: jsample.ops (one text for both frontends).
    arguments = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    call = None
    if vocab_group is not None:
        return _vocab_parallel(arguments, fp64, draft, num_valid, return_logprobs, num_top, vocab_group)
    if return_logprobs is not False or num_top != 0:
        check_logprobs_request("gumbel_sample", return_logprobs, num_top)
    if num_valid is None and not return_logprobs:  # (nor a call with padding: its row flags are computed)
        replayed, call = execute.replay("gumbel_sample", arguments, (fp64, draft), kernels.plan_gumbel_sample)
        if replayed is not None:
            return replayed[0]
    call = validate("gumbel_sample", check_gumbel_sample, arguments, (fp64, draft), call)
    valid = row_valid("gumbel_sample", num_valid, logits.shape[0], logits.device)
    if valid is not None or return_logprobs:
        call = None
    logits = row_logits(logits)
    seeds, positions, batch = dense(seeds), dense(positions), logits.shape[0]
    if traced(logits) and return_logprobs:
        outputs = _gumbel_sample_logprobs_op(logits, seeds, positions,
                                             temperature_array(temperature, batch, logits.device), fp64, draft, valid,
                                             num_top)
        return outputs[0], Logprobs(*outputs[1:])
    if traced(logits):
        return _gumbel_sample_op(logits, seeds, positions, temperature_array(temperature, batch, logits.device), fp64,
                                 draft, valid)
    return _gumbel_sample(logits, seeds, positions, temperature_value(temperature, batch, logits.device), fp64, draft,
                          valid, call, arguments, num_top if return_logprobs else None)


gumbel_sample.__doc__ = docstring("gumbel_sample", "torch")


def _gumbel_sample(logits, seeds, positions, temperature, fp64, draft, valid=None, call=None, arguments=None,
                   num_top=None):
    """The tokens; with num_top (not None: return_logprobs), (tokens, Logprobs)."""
    logprobs = logprobs_plan_flags(num_top)
    plan = execute.plan(kernels.plan_gumbel_sample, (logits, seeds), logits.device, call, fp64=fp64, draft=draft,
                        row_valid=valid is not None, **logprobs)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    if valid is not None:
        inputs["row_valid"] = valid
    if num_top is not None:
        inputs["num_top"] = num_top_tensor(num_top, logits.device)
        outputs = execute.run(plan, logits.device, inputs)
        return outputs[0], Logprobs(*outputs[1:])
    (tokens,) = execute.run(plan, logits.device, inputs, (call, arguments, kernels.plan_gumbel_sample))
    return tokens


# A custom op, so torch.compile sees one opaque call (no graph break, shape known from the fake).
@torch.library.custom_op("jsample::gumbel_sample", mutates_args=())
def _gumbel_sample_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, temperature: torch.Tensor,
                      fp64: bool, draft: bool, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _gumbel_sample(logits, seeds, positions, temperature, fp64, draft, valid)


@_gumbel_sample_op.register_fake
def _(logits, seeds, positions, temperature, fp64, draft, valid=None):
    return empty_outputs("gumbel_sample", logits, logits.shape[0])[0]


@torch.library.custom_op("jsample::gumbel_sample_logprobs", mutates_args=())
def _gumbel_sample_logprobs_op(logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                               temperature: torch.Tensor, fp64: bool, draft: bool, valid: Optional[torch.Tensor],
                               num_top: int) -> list[torch.Tensor]:
    tokens, logprobs = _gumbel_sample(logits, seeds, positions, temperature, fp64, draft, valid, num_top=num_top)
    return [tokens, *logprobs]


@_gumbel_sample_logprobs_op.register_fake
def _(logits, seeds, positions, temperature, fp64, draft, valid, num_top):
    batch = logits.shape[0]
    return [*empty_outputs("gumbel_sample", logits, batch), *empty_outputs("token_logprobs", logits, batch, num_top)]


def _vocab_parallel(arguments, fp64, draft, num_valid, return_logprobs, num_top, group):
    """gumbel_sample of logits whose vocabulary is split over the ranks of `group` (rank r holds the r-th
    contiguous shard, any sizes whose starts are multiples of 4): each rank's summary of its rows, one
    all-gather of the summaries (B x SUMMARY_WORDS int32 words a rank), the token from them on every rank
    (jsample/kernels/vocab_parallel.py): the unsharded call's tokens, on every rank. With return_logprobs, then
    the tokens' vocab-parallel token_logprobs (the unsharded call's: its logprobs are token_logprobs')."""
    op = "gumbel_sample"
    check_logprobs_request(op, return_logprobs, num_top)
    validate(op, check_gumbel_sample, arguments, (fp64, draft), None)
    logits = row_logits(arguments["logits"])
    shards, start_align, start = shard_layout(op, group, logits)
    batch, device = logits.shape[0], logits.device
    inputs = dict(logits=logits, seeds=dense(arguments["seeds"]), positions=dense(arguments["positions"]),
                  temperature=temperature_array(arguments["temperature"], batch, device), vocab_start=start)
    valid = row_valid(op, num_valid, batch, device)
    if valid is not None:
        inputs["row_valid"] = valid
    sharded = execute.plan(kernels.plan_gumbel_sample_shard, (logits, inputs["seeds"]), device, None, fp64=fp64,
                           draft=draft, shards=shards, start_align=start_align, row_valid=valid is not None)
    tokens = run_sharded(sharded, device, inputs, group, shards)[0]
    if not return_logprobs:
        return tokens
    return tokens, vocab_parallel_logprobs(logits, tokens, inputs["temperature"], group, op=op, num_top=num_top,
                                           valid=valid)
