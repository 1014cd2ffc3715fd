"""`top_k_top_p_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.validation import check_top_k_top_p_sample
from torch_backend import _execute as execute
from torch_backend._launch import (dense, float32_logits, per_row, row_valid, temperature_array, temperature_value,
                                   traced, validate)


def top_k_top_p_sample(logits, seeds, positions, temperature, *, top_k=None, top_p=None, min_p=None,
                       fp64=False, num_valid=None) -> torch.Tensor:
    """Seeded top-k / top-p / min-p sampling: gumbel_sample over the tokens the filters keep.

    With p = softmax(logits[b] / T_b) the filters apply in this order, each to what the one before
    kept: top-k keeps the logits >= the k-th largest (ties kept); top-p keeps a token iff the kept
    mass of the tokens with a larger logit is < top_p of the kept mass (masses in fixed point,
    2**-24 of the largest token's); min-p keeps a token iff p >= min_p * max p. The token is
    `gumbel_sample`'s (stream 0) on the row with every other logit at -inf, so without filters it
    is gumbel_sample's token bit for bit. Greedy rows (as `gumbel_sample`'s) are the argmax, unfiltered.

    Determinism: a row's token depends only on its logits row, seed, position, temperature, filter
    values and `fp64`: not on the batch or row order (the kept set is found with integer sums),
    and it equals `jsample.top_k_top_p_sample`'s token bit for bit.

    Args:
        logits, seeds, positions, temperature, fp64, num_valid: as `gumbel_sample`.
        top_k: None, an int in [0, 2**31), or a [B] or scalar tensor of any integer dtype (read as
            int64); 0 (or >= V) keeps every token.
        top_p: None, a number in (0, 1], or a [B] or scalar tensor of any float dtype (read as
            float32); 1 keeps every token.
        min_p: None, a number in [0, 1], or a [B] or scalar tensor of any float dtype (read as
            float32); 0 keeps every token.
        Tensor values are not checked; out-of-range ones are clamped (docs/STREAM.md): top_k < 1 or
        > V keeps all; top_p >= 1 or NaN keeps all, <= 0 keeps only the largest logit; min_p <= 0
        or NaN keeps all, >= 1 keeps only the largest logit.

    Returns:
        [B] int32 token ids on the logits' device.

    Example:
        >>> import torch, torch_backend
        >>> logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]])
        >>> seeds, positions = torch.tensor([7, 7]), torch.tensor([0, 1])
        >>> torch_backend.top_k_top_p_sample(logits, seeds, positions, 1.0, top_k=1).tolist()  # the largest logit
        [1, 0]
        >>> tokens = torch_backend.top_k_top_p_sample(logits, seeds, positions, 0.8, top_k=2, top_p=0.9, min_p=0.05)
    """
    arguments = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                     min_p=min_p)
    call = None
    if num_valid is None:  # (a call with padding is not remembered for replay: its row flags are computed)
        replayed, call = execute.replay("top_k_top_p_sample", arguments, (fp64,), kernels.plan_top_k_top_p_sample)
        if replayed is not None:
            return replayed[0]
    call = validate("top_k_top_p_sample", check_top_k_top_p_sample, arguments, (fp64,), call)
    valid = row_valid("top_k_top_p_sample", num_valid, logits.shape[0], logits.device)
    if valid is not None:
        call = None
    logits = float32_logits(logits)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    batch, device = logits.shape[0], logits.device
    top_k, top_p, min_p = (None if value is None else per_row(value, batch, dtype, device)
                           for value, dtype in ((top_k, torch.int64), (top_p, torch.float32), (min_p, torch.float32)))
    seeds, positions = dense(seeds), dense(positions)
    if traced(logits):
        return _top_k_top_p_sample_op(logits, seeds, positions, temperature_array(temperature, batch, device), top_k,
                                      top_p, min_p, fp64, valid)
    return _top_k_top_p_sample(logits, seeds, positions, temperature_value(temperature, batch, device), top_k, top_p,
                               min_p, fp64, valid, call, arguments)


def _top_k_top_p_sample(logits, seeds, positions, temperature, top_k, top_p, min_p, fp64, valid=None, call=None,
                        arguments=None):
    plan = execute.plan(kernels.plan_top_k_top_p_sample, (logits, seeds), logits.device, call,
                        has_top_k=top_k is not None, has_top_p=top_p is not None, has_min_p=min_p is not None,
                        fp64=fp64, row_valid=valid is not None)
    inputs = dict(logits=logits, seeds=seeds, positions=positions, temperature=temperature, top_k=top_k, top_p=top_p,
                  min_p=min_p, row_valid=valid)
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
    return logits.new_empty(logits.shape[0], dtype=torch.int32)
