"""`gumbel_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.ops import docstring
from jsample.validation import check_gumbel_sample
from torch_backend import _execute as execute
from torch_backend._launch import (dense, empty_outputs, float32_logits, row_valid, temperature_array,
                                   temperature_value, traced, validate)


def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None) -> torch.Tensor:
    # Docstring: jsample.ops (one text for both frontends).
    arguments = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    call = None
    if num_valid is None:  # (a call with padding is not remembered for replay: its row flags are computed)
        replayed, call = execute.replay("gumbel_sample", arguments, (fp64, draft), kernels.plan_gumbel_sample)
        if replayed is not None:
            return replayed[0]
    call = validate("gumbel_sample", check_gumbel_sample, arguments, (fp64, draft), call)
    valid = row_valid("gumbel_sample", num_valid, logits.shape[0], logits.device)
    if valid is not None:
        call = None
    logits = float32_logits(logits)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    seeds, positions, batch = dense(seeds), dense(positions), logits.shape[0]
    if traced(logits):
        return _gumbel_sample_op(logits, seeds, positions, temperature_array(temperature, batch, logits.device), fp64,
                                 draft, valid)
    return _gumbel_sample(logits, seeds, positions, temperature_value(temperature, batch, logits.device), fp64, draft,
                          valid, call, arguments)


gumbel_sample.__doc__ = docstring("gumbel_sample", "torch")


def _gumbel_sample(logits, seeds, positions, temperature, fp64, draft, valid=None, call=None, arguments=None):
    plan = execute.plan(kernels.plan_gumbel_sample, (logits, seeds), logits.device, call, fp64=fp64, draft=draft,
                        row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature)
    if valid is not None:
        inputs["row_valid"] = valid
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
