"""`rejection_sample` and `synthetic_rejection_sample` for PyTorch: validate, plan, run."""

from typing import Optional

import torch

from jsample import kernels
from jsample.validation import check_rejection_sample, check_synthetic_rejection_sample, rates_from_list
from torch_backend import _execute as execute
from torch_backend._launch import (dense, float32_logits, row_valid, temperature_array, temperature_value, traced,
                                   validate)


def rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, *,
                     draft_logits=None, method="probabilistic", fp64=False, num_valid=None):
    """Speculative-decoding verification: accept a prefix of the drafts, then emit one target token.

    Row j of request b (j = 0..K) is drawn at position positions[b] + j (STREAM.md, "Rejection
    sampling"). With p = softmax(target_logits[b, j] / T_b) and q = softmax(draft_logits[b, j] / T_b)
    (q one-hot on the draft when `draft_logits` is None):

    * method="probabilistic": draft d_j is accepted iff u_j < p(d_j) / q(d_j), u_j the stream-2
      uniform of row j. At the first rejected row a the emitted token is
      argmax_k (log r_k + g_k), r = max(p - q, 0) (p without d_a for one-hot drafts; p itself if r
      is all zero), g the stream-0 Gumbel noise of row a. So the emitted tokens are distributed as the
      target model's (the speculative-sampling theorem) when the drafts were sampled from q.
    * method="strict": d_j is accepted iff it equals the stream-0 Gumbel-max sample of row j; at the
      first rejection that sample is emitted.
    * Rows of a request with T_b < 1e-5, and rows whose scaled logits overflow float32 (the target's,
      or for a decision row the draft's: docs/STREAM.md), are greedy under either method: accept iff d_j == argmax_k
      target_logits[b, j, k]; emit that argmax at the first rejection.
    * All n_b drafts accepted: the bonus token is the stream-0 Gumbel-max sample of row n_b, equal to
      `gumbel_sample(target_logits[:, n_b], seeds, positions + n_b, temperature)`.

    Determinism: a request's outputs depend only on its own rows, seed, position, temperature, n_b,
    method and `fp64`: not on the batch, row order, strides or CUDA graphs; they equal
    `jsample.rejection_sample`'s bit for bit. No host synchronisation; every decision is made by the
    shared Triton kernels.

    Args:
        target_logits: [B, K+1, V] float32, bfloat16 or float16; columns are made contiguous.
        draft_tokens: [B, K] int32 or int64 (read as such, never narrowed). Entries at j >= n_b are
            ignored; a draft outside [0, V) is always rejected.
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; values outside are clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0 (>= 0, unchecked).
        temperature: as `gumbel_sample`: a number in [0, 3.4e38], or a [B] or scalar tensor of any float
            dtype (values unchecked: below 1e-5, negative and NaN are greedy).
        draft_logits: [B, K, V] float32, or None for one-hot drafts. Ignored by method="strict".
        method: "probabilistic" or "strict".
        fp64: FP64 softmax, ratios, uniforms and scores instead of FP32.
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.

    Returns:
        tokens: [B, K+1] int32 — the accepted drafts, the emitted token, then -1 (the emitted token is
            -1 when its row has no finite logit).
        num_sampled: [B] int32, accepted drafts + 1.

    Example:
        >>> import torch, torch_backend
        >>> target = torch.zeros(1, 3, 4)  # B = 1, K = 2, V = 4
        >>> target[0, :, 2] = 5.0  # every row prefers token 2
        >>> tokens, num_sampled = torch_backend.rejection_sample(
        ...     target, torch.tensor([[2, 2]]), torch.tensor([2]), torch.tensor([0]), torch.tensor([0]), 0.0)
        >>> tokens.tolist(), num_sampled.tolist()  # greedy: both drafts accepted, then the bonus token
        ([[2, 2, 2]], [3])
    """
    arguments = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                     seeds=seeds, positions=positions, temperature=temperature, draft_logits=draft_logits)
    call = None
    if num_valid is None:  # (a call with padding is not remembered for replay: its row flags are computed)
        replayed, call = execute.replay("rejection_sample", arguments, (method, fp64), kernels.plan_rejection_sample)
        if replayed is not None:
            return replayed
    call = validate("rejection_sample", check_rejection_sample, arguments, (method, fp64), call)
    valid = row_valid("rejection_sample", num_valid, target_logits.shape[0], target_logits.device)
    if valid is not None:
        call = None
    target_logits, draft_logits = float32_logits(target_logits), float32_logits(draft_logits)
    if target_logits.stride(2) != 1:
        target_logits = target_logits.contiguous()
    if draft_logits is not None and draft_logits.stride(2) != 1:
        draft_logits = draft_logits.contiguous()
    batch, device = target_logits.shape[0], target_logits.device
    requests = (dense(draft_tokens), dense(num_draft_tokens), dense(seeds), dense(positions))
    draft_logits = None if method == "strict" else draft_logits
    if traced(target_logits):
        return _rejection_sample_op(target_logits, *requests, temperature_array(temperature, batch, device),
                                    draft_logits, method == "strict", fp64, valid)
    return _rejection_sample(target_logits, *requests, temperature_value(temperature, batch, device), draft_logits,
                             method == "strict", fp64, valid, call, arguments)


def _rejection_sample(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, strict,
                      fp64, valid=None, call=None, arguments=None):
    plan = execute.plan(kernels.plan_rejection_sample, (target_logits, draft_logits, seeds), target_logits.device,
                        strict=strict, fp64=fp64, row_valid=valid is not None)
    inputs = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, temperature=temperature)
    if draft_logits is not None:
        inputs["draft_logits"] = draft_logits
    if valid is not None:
        inputs["row_valid"] = valid
    return execute.run(plan, target_logits.device, inputs, (call, arguments, kernels.plan_rejection_sample))


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
    return (target_logits.new_empty(batch, rows, dtype=torch.int32),
            target_logits.new_empty(batch, dtype=torch.int32))


def synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *,
                               fp64=False, num_valid=None):
    """Rejection with prescribed acceptance rates (benchmarking a serving stack at a chosen acceptance).

    Draft j of request b is accepted iff u_j < conditional_rates[(b,) j], u_j the stream-2 uniform
    (call 0) at position positions[b] + j (STREAM.md). At the first rejected row a (a = n_b when all
    are accepted) the emitted token is target_tokens[b, a]. So P(a_b > j) = prod_{i <= j} c_i, the
    unconditional rate of position j (see `jsample.rates`).

    Determinism: as `rejection_sample`; equal to `jsample.synthetic_rejection_sample` bit for bit.
    Changing the rate values never recompiles (they are read on the device).

    Args:
        target_tokens: [B, K+1] int32 or int64 (torch.argmax's), the target's sampled token of each row (e.g.
            gumbel_sample's); read as int64: a value beyond int32 is no token id and emits -1.
        draft_tokens: [B, K] int32 or int64 (read as such: an int64 draft beyond the int32 range is
            never accepted; entries at j >= n_b ignored).
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0.
        conditional_rates: float32 [K] (one schedule) or [B, K] (one per request), values in [0, 1]
            (unchecked: reading them would synchronise); a float64 tensor is rounded to float32, and a
            list of numbers (`jsample.unconditional_to_conditional_rates` gives one) is copied to
            the device as float32 at each call.
        fp64: FP64 uniforms (compared with the rates widened to FP64).
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.

    Returns:
        tokens [B, K+1] int32 (accepted drafts, the emitted token, then -1) and num_sampled [B] int32.

    Example:
        >>> import jsample, torch, torch_backend
        >>> rates = jsample.unconditional_to_conditional_rates([1.0, 0.0])  # draft 0 always accepted, draft 1 never
        >>> tokens, num_sampled = torch_backend.synthetic_rejection_sample(
        ...     torch.tensor([[10, 11, 12]], dtype=torch.int32), torch.tensor([[5, 6]]), torch.tensor([2]),
        ...     torch.tensor([0]), torch.tensor([0]), rates)
        >>> tokens.tolist(), num_sampled.tolist()  # draft 5, then the target's token of row 1
        ([[5, 11, -1]], [2])
    """
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
    return (target_tokens.new_empty(batch, rows, dtype=torch.int32),
            target_tokens.new_empty(batch, dtype=torch.int32))
