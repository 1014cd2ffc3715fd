"""`token_logprobs` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.ops import Logprobs, docstring
from jsample.validation import check_token_logprobs, check_token_values
from torch_backend import _execute as execute
from torch_backend import _fast_path
from torch_backend._launch import (dense, empty_outputs, filter_rows, row_logits, temperature_array, temperature_value,
                                   traced, validate)
from torch_backend._vocab_parallel import run_sharded, shard_layout, shard_starts

_NUM_TOP = {}  # (device, count) -> the [1] int32 tensor the kernel reads the count from


def token_logprobs(logits, tokens, temperature, *, top_k=None, top_p=None, min_p=None, num_top=0,
                   fp64=False, vocab_group=None) -> Logprobs:
    # Docstring: jsample.ops (one text for both frontends).
    op = "token_logprobs"
    arguments = dict(logits=logits, tokens=tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    validate(op, check_token_logprobs, arguments, (num_top, fp64))
    if vocab_group is not None:
        return vocab_parallel_logprobs(logits, tokens, temperature, vocab_group,
                                       filters=filter_rows(top_k, top_p, min_p, logits.shape[0], logits.device),
                                       fp64=fp64, num_top=num_top, list_capacity=kernels.shard_list_capacity(top_k))
    if tokens.device.type == "cpu" and type(tokens) is torch.Tensor:  # (not a fake or traced tensor)
        check_token_values(op, tokens.numpy(), logits.shape[1])
    logits = row_logits(logits)
    batch, device = logits.shape[0], logits.device
    in_list = kernels.top_k_within_list(top_k)  # (a Python int: no search)
    top_k, top_p, min_p = filter_rows(top_k, top_p, min_p, batch, device)
    tokens = dense(tokens)
    if traced(logits):
        return Logprobs(*_token_logprobs_op(logits, tokens, temperature_array(temperature, batch, device), top_k, top_p,
                                            min_p, num_top, fp64, in_list))
    return Logprobs(*_token_logprobs(logits, tokens, temperature_value(temperature, batch, device), top_k, top_p,
                                     min_p, num_top, fp64, in_list))


token_logprobs.__doc__ = docstring("token_logprobs", "torch")


def vocab_parallel_logprobs(logits, tokens, temperature, group, *, op="token_logprobs", filters=(None, None, None),
                            fp64=False, num_top=0, valid=None, kept_threshold=None, list_capacity=0) -> Logprobs:
    """token_logprobs of logits whose vocabulary is split over the ranks of `group` (rank r holds the r-th
    contiguous shard): with `filters` (top_k, top_p, min_p: filter_rows' [B] tensors or None), their kept set
    first (the sharded searches, or the lists with `list_capacity`); then two all-gathers of per-row records
    (jsample/kernels/vocab_parallel_logprobs.py), the unsharded call's Logprobs on every rank; `tokens` are
    global columns; `valid`: the samplers' row flags; `kept_threshold`: the sampler's last round's (the kept set,
    no search); `list_capacity` (shard_list_capacity of a Python-int top_k): the kept set from the sampler's lists
    (one all-gather) rather than the searches."""
    logits = row_logits(logits)
    shards, start_align, start = shard_layout(op, group, logits)
    starts, vocab = shard_starts(group, logits)
    if tokens.device.type == "cpu" and type(tokens) is torch.Tensor:
        check_token_values(op, tokens.numpy(), vocab)
    batch, device = logits.shape[0], logits.device
    top_k, top_p, min_p = filters
    if list_capacity and kept_threshold is None:  # (its token, of zero seeds, is not used)
        zeros = torch.zeros((batch,), dtype=torch.int64, device=device)
        lists = execute.plan(kernels.plan_top_k_top_p_shard, (logits, zeros), device, None, has_top_k=True,
                             has_top_p=top_p is not None, has_min_p=False, fp64=fp64, shards=shards,
                             start_align=start_align, list_capacity=list_capacity, store_threshold=True)
        inputs = dict(logits=logits, seeds=zeros, positions=zeros, top_k=top_k, top_p=top_p, vocab_start=start,
                      temperature=temperature_array(temperature, batch, device))
        kept_threshold = run_sharded(lists, device, {name: value for name, value in inputs.items()
                                                     if value is not None}, group, shards)[1]
    sharded = execute.plan(kernels.plan_token_logprobs_shard, (logits,), device, None, vocab=vocab, starts=starts,
                           start_align=start_align, num_top=num_top, row_valid=valid is not None,
                           has_top_k=top_k is not None, has_top_p=top_p is not None, has_min_p=min_p is not None,
                           fp64=fp64, threshold_given=kept_threshold is not None)
    inputs = dict(logits=logits, tokens=dense(tokens), temperature=temperature_array(temperature, batch, device),
                  vocab_start=start, num_top=num_top_tensor(num_top, device), top_k=top_k, top_p=top_p, min_p=min_p,
                  row_valid=valid, kept_threshold=kept_threshold)
    inputs = {name: value for name, value in inputs.items() if value is not None}
    return Logprobs(*run_sharded(sharded, device, inputs, group, shards))


def num_top_tensor(count: int, device) -> torch.Tensor:
    found = _NUM_TOP.get((device, count))
    if found is None:
        found = torch.full((1,), count, dtype=torch.int32, device=device)
        if not (device.type == "cuda" and _fast_path.stream_capturing()):  # (one made in a capture stays its own)
            _NUM_TOP[(device, count)] = found
    return found


def _token_logprobs(logits, tokens, temperature, top_k, top_p, min_p, num_top, fp64, top_k_in_list=False):
    plan = execute.plan(kernels.plan_token_logprobs, (logits,), logits.device, has_top_k=top_k is not None,
                        has_top_p=top_p is not None, has_min_p=min_p is not None, fp64=fp64, num_top=num_top,
                        top_k_in_list=top_k_in_list)
    inputs = dict(logits=logits, tokens=tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                  num_top=num_top_tensor(num_top, logits.device))
    return execute.run(plan, logits.device, {name: value for name, value in inputs.items() if value is not None})


# A custom op, so torch.compile sees one opaque call (no graph break, shapes known from the fake).
@torch.library.custom_op("jsample::token_logprobs", mutates_args=())
def _token_logprobs_op(logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor,
                       top_k: Optional[torch.Tensor], top_p: Optional[torch.Tensor], min_p: Optional[torch.Tensor],
                       num_top: int, fp64: bool, top_k_in_list: bool) -> tuple[
                           torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor]:
    return tuple(_token_logprobs(logits, tokens, temperature, top_k, top_p, min_p, num_top, fp64, top_k_in_list))


@_token_logprobs_op.register_fake
def _(logits, tokens, temperature, top_k, top_p, min_p, num_top, fp64, top_k_in_list):
    return empty_outputs("token_logprobs", logits, logits.shape[0], num_top)
