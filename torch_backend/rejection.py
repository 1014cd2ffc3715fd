"""`rejection_sample` and `synthetic_rejection_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.ops import Logprobs, docstring, logprobs_plan_flags, logprobs_shapes
from jsample.validation import (check_logprobs_request, check_rejection_sample, check_synthetic_rejection_sample,
                                check_vocab_parallel, rates_from_list)
from torch_backend import _execute as execute
from torch_backend._vocab_parallel import run_sharded, shard_sizes, vocab_start
from torch_backend.logprobs import vocab_parallel_logprobs
from torch_backend.logprobs import num_top_tensor
from torch_backend._launch import (dense, empty_outputs, float32_logits, kept_tensor, row_valid, temperature_array,
                                   temperature_value, traced, validate)


def rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, *,
                     draft_logits=None, method="probabilistic", fp64=False, num_valid=None, return_logprobs=False,
                     num_top=0, vocab_group=None):
    # Docstring: jsample.ops (one text for both frontends).
    arguments = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                     seeds=seeds, positions=positions, temperature=temperature, draft_logits=draft_logits)
    if vocab_group is not None:
        return _vocab_parallel(arguments, method, fp64, num_valid, return_logprobs, num_top, vocab_group)
    call = None
    if return_logprobs is not False or num_top != 0:
        check_logprobs_request("rejection_sample", return_logprobs, num_top)
    if num_valid is None and not return_logprobs:  # (nor a call with padding: its row flags are computed)
        replayed, call = execute.replay("rejection_sample", arguments, (method, fp64), kernels.plan_rejection_sample)
        if replayed is not None:
            return replayed
    call = validate("rejection_sample", check_rejection_sample, arguments, (method, fp64), call)
    valid = row_valid("rejection_sample", num_valid, target_logits.shape[0], target_logits.device)
    if valid is not None or return_logprobs:
        call = None
    target_logits, draft_logits = float32_logits(target_logits), float32_logits(draft_logits)
    if target_logits.stride(2) != 1:
        target_logits = target_logits.contiguous()
    if draft_logits is not None and draft_logits.stride(2) != 1:
        draft_logits = draft_logits.contiguous()
    batch, device = target_logits.shape[0], target_logits.device
    requests = (dense(draft_tokens), dense(num_draft_tokens), dense(seeds), dense(positions))
    draft_logits = None if method == "strict" else draft_logits
    if traced(target_logits) and return_logprobs:
        outputs = _rejection_sample_logprobs_op(target_logits, *requests, temperature_array(temperature, batch, device),
                                                draft_logits, method == "strict", fp64, valid, num_top)
        return outputs[0], outputs[1], Logprobs(*outputs[2:])
    if traced(target_logits):
        return _rejection_sample_op(target_logits, *requests, temperature_array(temperature, batch, device),
                                    draft_logits, method == "strict", fp64, valid)
    return _rejection_sample(target_logits, *requests, temperature_value(temperature, batch, device), draft_logits,
                             method == "strict", fp64, valid, call, arguments, num_top if return_logprobs else None)


rejection_sample.__doc__ = docstring("rejection_sample", "torch")


def _vocab_parallel(arguments, method, fp64, num_valid, return_logprobs, num_top, group):
    """rejection_sample of target (and draft) logits whose vocabulary is split over the ranks of `group` (rank r
    holds the r-th contiguous shard, any sizes whose starts are multiples of 4): three or four all-gathers of
    per-request records (jsample/kernels/vocab_parallel_rejection.py), the unsharded call's tokens on every rank.
    With return_logprobs, then the emitted tokens' vocab-parallel token_logprobs under their target rows."""
    import torch.distributed as dist

    op = "rejection_sample"
    check_logprobs_request(op, return_logprobs, num_top)
    validate(op, check_rejection_sample, arguments, (method, fp64), None)
    strict = method == "strict"
    target_logits = _aligned_columns(float32_logits(arguments["target_logits"]))
    draft_logits = None if strict else arguments["draft_logits"]
    if draft_logits is not None:
        draft_logits = _aligned_columns(float32_logits(draft_logits))
    batch, rows, _ = target_logits.shape
    device = target_logits.device
    sizes = shard_sizes(group, target_logits.shape[2])
    starts, vocab = tuple(sum(sizes[:r]) for r in range(len(sizes))), sum(sizes)
    check_vocab_parallel(op, "vocab_group", target_logits.shape, starts, rows=True)
    shards = len(starts)
    inputs = dict(target_logits=target_logits, draft_tokens=dense(arguments["draft_tokens"]),
                  num_draft_tokens=dense(arguments["num_draft_tokens"]), seeds=dense(arguments["seeds"]),
                  positions=dense(arguments["positions"]),
                  temperature=temperature_array(arguments["temperature"], batch, device),
                  vocab_start=vocab_start(starts[dist.get_rank(group)], device),
                  shard_starts=kept_tensor(_SHARD_STARTS, (starts, vocab, device),
                                           lambda: torch.tensor(starts + (vocab,), dtype=torch.int32, device=device),
                                           device))
    if draft_logits is not None:
        inputs["draft_logits"] = draft_logits
    valid = row_valid(op, num_valid, batch, device)
    if valid is not None:
        inputs["row_valid"] = valid
    sharded = execute.plan(kernels.plan_rejection_sample_shard, (target_logits, draft_logits, inputs["seeds"]), device,
                           None, strict=strict, fp64=fp64, vocab=vocab, starts=starts,
                           start_align=kernels.start_alignment(starts), row_valid=valid is not None)
    tokens, num_sampled = run_sharded(sharded, device, inputs, group, shards)
    if not return_logprobs:
        return tokens, num_sampled
    # every emitted token under its target row: token_logprobs of the [B * (K + 1)] rows (the one-GPU op's own)
    flat_valid = None
    if valid is not None:  # the count (or the flags) of the [B * (K + 1)] rows
        flat_valid = valid * rows if valid.dtype != torch.uint8 else valid.repeat_interleave(rows)
    logprobs = vocab_parallel_logprobs(target_logits.reshape(batch * rows, -1), tokens.reshape(-1),
                                       inputs["temperature"].repeat_interleave(rows), group, op=op, num_top=num_top,
                                       valid=flat_valid)
    return tokens, num_sampled, Logprobs(*(value.reshape(batch, rows, *value.shape[1:]) for value in logprobs))


_SHARD_STARTS = {}  # (starts, vocab, device) -> [shards + 1] int32 device tensor


def _aligned_columns(logits):
    """`logits` with contiguous columns on 16 bytes (a copy where they are not): the shards' own loads then have
    the vector width the unsharded call's have, which its normalisers' rounding follows."""
    if logits.stride(-1) != 1 or logits.data_ptr() % 16:
        logits = logits.contiguous() if logits.stride(-1) != 1 else logits.clone()
    return logits


def _rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, strict,
                      fp64, valid=None, call=None, arguments=None, num_top=None):
    """(tokens, num_sampled); with num_top (not None: return_logprobs), (tokens, num_sampled, Logprobs)."""
    logprobs = logprobs_plan_flags(num_top)
    plan = execute.plan(kernels.plan_rejection_sample, (target_logits, draft_logits, seeds), target_logits.device,
                        strict=strict, fp64=fp64, row_valid=valid is not None, **logprobs)
    inputs = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, temperature=temperature)
    if draft_logits is not None:
        inputs["draft_logits"] = draft_logits
    if valid is not None:
        inputs["row_valid"] = valid
    if num_top is not None:
        inputs["num_top"] = num_top_tensor(num_top, target_logits.device)
        outputs = execute.run(plan, target_logits.device, inputs)
        return outputs[0], outputs[1], Logprobs(*outputs[2:])
    return execute.run(plan, target_logits.device, inputs, (call, arguments, kernels.plan_rejection_sample))


@torch.library.custom_op("jsample::rejection_sample_logprobs", mutates_args=())
def _rejection_sample_logprobs_op(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                                  num_draft_tokens: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                                  temperature: torch.Tensor, draft_logits: Optional[torch.Tensor], strict: bool,
                                  fp64: bool, valid: Optional[torch.Tensor], num_top: int) -> list[torch.Tensor]:
    tokens, num_sampled, logprobs = _rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions,
                                                      temperature, draft_logits, strict, fp64, valid, num_top=num_top)
    return [tokens, num_sampled, *logprobs]


@_rejection_sample_logprobs_op.register_fake
def _(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, strict, fp64, valid,
      num_top):
    batch, rows, _ = target_logits.shape
    return [*empty_outputs("rejection_sample", target_logits, batch, rows),
            *(target_logits.new_empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in
              logprobs_shapes(batch, rows, num_top))]


# A custom op, so torch.compile sees one opaque call (no graph break, shapes known from the fake).
@torch.library.custom_op("jsample::rejection_sample", mutates_args=())
def _rejection_sample_op(target_logits: torch.Tensor, draft_tokens: torch.Tensor, num_draft_tokens: torch.Tensor,
                         seeds: torch.Tensor, positions: torch.Tensor, temperature: torch.Tensor,
                         draft_logits: Optional[torch.Tensor], strict: bool, fp64: bool,
                         valid: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits,
                             strict, fp64, valid)


@_rejection_sample_op.register_fake
def _(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, strict, fp64,
      valid=None):
    batch, rows, _ = target_logits.shape
    return empty_outputs("rejection_sample", target_logits, batch, rows)


def synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *,
                               fp64=False, num_valid=None):
    # Docstring: jsample.ops (one text for both frontends).
    op = "synthetic_rejection_sample"
    if isinstance(conditional_rates, (list, tuple)):
        rates = torch.from_numpy(rates_from_list(op, conditional_rates))
        conditional_rates = rates.to(target_tokens.device) if isinstance(target_tokens, torch.Tensor) else rates
    arguments = dict(target_tokens=target_tokens, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                     seeds=seeds, positions=positions, conditional_rates=conditional_rates)
    call = None
    if num_valid is None:  # (a call with padding is not remembered for replay: its row flags are computed)
        replayed, call = execute.replay(op, arguments, (fp64,), kernels.plan_synthetic_rejection_sample)
        if replayed is not None:
            return replayed
    call = validate(op, check_synthetic_rejection_sample, arguments, (fp64,), call)
    valid = row_valid(op, num_valid, target_tokens.shape[0], target_tokens.device)
    if valid is not None:
        call = None
    args = (dense(target_tokens), dense(draft_tokens), dense(num_draft_tokens), dense(seeds), dense(positions),
            dense(conditional_rates.to(torch.float32)), fp64, valid)
    if traced(target_tokens):
        return _synthetic_rejection_sample_op(*args)
    return _synthetic_rejection_sample(*args, call, arguments)


synthetic_rejection_sample.__doc__ = docstring("synthetic_rejection_sample", "torch")


def _synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, fp64,
                                valid=None, call=None, arguments=None):
    plan = execute.plan(kernels.plan_synthetic_rejection_sample, (target_tokens, conditional_rates, seeds),
                        target_tokens.device, fp64=fp64, row_valid=valid is not None)
    inputs = dict(target_tokens=target_tokens, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, conditional_rates=conditional_rates)
    if valid is not None:
        inputs["row_valid"] = valid
    return execute.run(plan, target_tokens.device, inputs, (call, arguments, kernels.plan_synthetic_rejection_sample))


@torch.library.custom_op("jsample::synthetic_rejection_sample", mutates_args=())
def _synthetic_rejection_sample_op(target_tokens: torch.Tensor, draft_tokens: torch.Tensor,
                                   num_draft_tokens: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                                   conditional_rates: torch.Tensor, fp64: bool,
                                   valid: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions,
                                       conditional_rates, fp64, valid)


@_synthetic_rejection_sample_op.register_fake
def _(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, fp64, valid=None):
    batch, rows = target_tokens.shape
    return empty_outputs("synthetic_rejection_sample", target_tokens, batch, rows)
