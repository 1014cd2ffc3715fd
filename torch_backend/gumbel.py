"""`gumbel_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.validation import check_gumbel_sample
from torch_backend import _execute as execute
from torch_backend._launch import (dense, float32_logits, row_valid, temperature_array, temperature_value, traced,
                                   validate)


def gumbel_sample(logits, seeds, positions, temperature, *, fp64=False, draft=False, num_valid=None) -> torch.Tensor:
    """Seeded Gumbel-max sampling: token_b = argmax_k (logits[b, k] / T_b + g(u_bk)).

    `u_bk` is the stream-0 (or, with `draft=True`, stream-1) uniform of column k for
    (seeds[b], positions[b]) as defined in STREAM.md (version 1); g(u) = -log(-log1p(-u)).
    T_b < 1e-5 is greedy: argmax_k logits[b, k]; so is a row in which some finite logits[b, k] / T_b
    overflows float32 (docs/STREAM.md, "Clarifications of version 1"). Ties go to the lowest
    column; -inf, +inf and NaN logits are never chosen; a row with no finite logit gives -1.

    Determinism: a row's token depends only on its logits row, seed, position, temperature and the
    `fp64`/`draft` flags: not on the batch, row order, row stride, vocabulary padding, device
    count, CUDA graphs or torch.compile, and it equals `jsample.gumbel_sample`'s token bit for bit.

    Args:
        logits: [B, V] float32, bfloat16 or float16 (CUDA, or CPU through the Triton interpreter).
            Rows may be strided; a non-unit column stride is copied to contiguous first.
        seeds: [B] int32, uint32 or int64 (the element's value is the 64-bit seed), or [B, 2] uint32
            or int32 (low, high) words of 64-bit seeds (`seed_words`). Any strides.
        positions: [B] int32 or int64, the position of the token being drawn (>= 0, unchecked).
        temperature: a number in [0, 3.4e38] (below 1e-5 is greedy), or a [B] or scalar tensor of
            any float dtype, read as float32. Tensor values are not checked (that would read the
            device): below 1e-5, negative and NaN are greedy, +inf samples uniformly.
        fp64: FP64 uniforms, noise and scores instead of FP32.
        draft: draw from stream 1 (draft-token sampling) instead of stream 0.
        num_valid: None, or the number of valid rows: an int in [0, B] or an int32 / int64 scalar array
            (unchecked: e.g. a CUDA graph's or a jitted bucket's live count); rows at or past it are
            padding: their token is -1 and their logits are not read. The valid rows' tokens do not change.

    Returns:
        [B] int32 token ids on the logits' device.

    Example:
        >>> import torch, torch_backend
        >>> logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 0.0]])
        >>> seeds, positions = torch.tensor([7, 7]), torch.tensor([0, 1])
        >>> tokens = torch_backend.gumbel_sample(logits, seeds, positions, torch.tensor([1.0, 0.0]))
        >>> tokens.dtype, tokens.shape, int(tokens[1])  # row 1 is greedy (T = 0): its argmax
        (torch.int32, torch.Size([2]), 0)
    """
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
    return logits.new_empty(logits.shape[0], dtype=torch.int32)
