"""`rejection_sample` and `synthetic_rejection_sample` for JAX: validate, plan, run (jax.jit-able)."""

import functools

import jax.numpy as jnp

from jsample import kernels
from jsample._jax import _execute as execute
from jsample._jax._execute import arg_spec, run
from jsample._jax._launch import logits_array, not_differentiable, row_valid, rowwise, spec, temperature_array
from jsample.validation import check_rejection_sample, check_synthetic_rejection_sample, rates_from_list


@not_differentiable("rejection_sample")
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
    method and `fp64`: not on the batch, row order or jit; they equal `torch_backend.rejection_sample`'s
    bit for bit. Changing seeds, positions, temperatures or n_b never recompiles.

    Args:
        target_logits: [B, K+1, V] float32, bfloat16 or float16.
        draft_tokens: [B, K] int32 or int64 (read as such, never narrowed; 64-bit arrays need
            jax_enable_x64). Entries at j >= n_b are ignored; a draft outside [0, V) is always rejected.
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; values outside are clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0 (>= 0, unchecked).
        temperature: as `gumbel_sample`: a number in [0, 3.4e38], or a [B] or scalar array of any float
            dtype (values unchecked: below 1e-5, negative and NaN are greedy).
        draft_logits: [B, K, V] float32, or None for one-hot drafts. Ignored by method="strict".
        method: "probabilistic" or "strict".
        fp64: FP64 softmax, ratios, uniforms and scores instead of FP32 (works with jax_enable_x64 off).
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.

    Returns:
        tokens: [B, K+1] int32 — the accepted drafts, the emitted token, then -1 (the emitted token is
            -1 when its row has no finite logit).
        num_sampled: [B] int32, accepted drafts + 1.

    Example:
        >>> import jax.numpy as jnp, jsample
        >>> target = jnp.zeros((1, 3, 4), jnp.float32).at[0, :, 2].set(5.0)  # B = 1, K = 2, V = 4: every row prefers token 2
        >>> tokens, num_sampled = jsample.rejection_sample(
        ...     target, jnp.array([[2, 2]]), jnp.array([2]), jnp.array([0]), jnp.array([0]), 0.0)
        >>> tokens.tolist(), num_sampled.tolist()  # greedy: both drafts accepted, then the bonus token
        ([[2, 2, 2]], [3])
    """
    op = "rejection_sample"
    check_rejection_sample(op, spec(op, "target_logits", target_logits), spec(op, "draft_tokens", draft_tokens),
                           spec(op, "num_draft_tokens", num_draft_tokens), spec(op, "seeds", seeds),
                           spec(op, "positions", positions), spec(op, "temperature", temperature),
                           spec(op, "draft_logits", draft_logits), method, fp64)
    batch, rows, _ = target_logits.shape
    if batch == 0:
        return jnp.zeros((0, rows), jnp.int32), jnp.zeros((0,), jnp.int32)
    strict = method == "strict"
    one_hot = draft_logits is None or strict
    return rowwise(functools.partial(_rejection_rows, strict=strict, fp64=fp64), logits_array(target_logits),
                   jnp.asarray(draft_tokens), jnp.asarray(num_draft_tokens), jnp.asarray(seeds),
                   jnp.asarray(positions), temperature_array(temperature, batch),
                   None if one_hot else logits_array(draft_logits), row_valid(op, num_valid, batch))


def _rejection_rows(target_logits, draft_tokens, num_draft_tokens, seeds, positions, temperature, draft_logits, valid,
                    *, strict, fp64):
    """rejection_sample on validated arrays, the requests on axis 0."""
    plan = kernels.plan_rejection_sample(arg_spec(target_logits), None if draft_logits is None else arg_spec(draft_logits),
                                         arg_spec(seeds), execute.target(), strict=strict, fp64=fp64,
                                         row_valid=valid is not None)
    inputs = dict(target_logits=target_logits, draft_tokens=draft_tokens, num_draft_tokens=num_draft_tokens,
                  seeds=seeds, positions=positions, temperature=temperature)
    if draft_logits is not None:
        inputs["draft_logits"] = draft_logits
    if valid is not None:
        inputs["row_valid"] = valid
    return run(plan, inputs)


@not_differentiable("synthetic_rejection_sample")
def synthetic_rejection_sample(target_tokens, draft_tokens, num_draft_tokens, seeds, positions, conditional_rates, *,
                               fp64=False, num_valid=None):
    """Rejection with prescribed acceptance rates (benchmarking a serving stack at a chosen acceptance).

    Draft j of request b is accepted iff u_j < conditional_rates[(b,) j], u_j the stream-2 uniform
    (call 0) at position positions[b] + j (STREAM.md). At the first rejected row a (a = n_b when all
    are accepted) the emitted token is target_tokens[b, a]. So P(a_b > j) = prod_{i <= j} c_i, the
    unconditional rate of position j (see `jsample.rates`).

    Determinism: as `rejection_sample`; equal to `torch_backend.synthetic_rejection_sample` bit for
    bit. The rates are a device array: changing their values never recompiles.

    Args:
        target_tokens: [B, K+1] int32 or int64 (torch.argmax's), the target's sampled token of each row (e.g.
            gumbel_sample's); read as int64: a value beyond int32 is no token id and emits -1.
        draft_tokens: [B, K] int32 or int64 (read as such: an int64 draft beyond the int32 range is
            never accepted; entries at j >= n_b ignored). 64-bit arrays need jax_enable_x64.
        num_draft_tokens: [B] int32 or int64, n_b in [0, K] (unchecked; clamped).
        seeds: as `gumbel_sample`: [B] int32, uint32 or int64, or [B, 2] (low, high) 32-bit words.
        positions: [B] int32 or int64, the position of row 0.
        conditional_rates: float32 [K] (one schedule) or [B, K] (one per request), values in [0, 1]
            (unchecked); float64 arrays and lists of numbers (`jsample.unconditional_to_conditional_rates`
            gives one) are rounded to float32.
        fp64: FP64 uniforms (compared with the rates widened to FP64).
        num_valid: None, or the number of valid requests: an int in [0, B] or an int32 / int64 scalar
            array (unchecked); requests at or past it are padding: every token -1, num_sampled 0, their
            logits not read. The valid requests' outputs do not change.

    Returns:
        tokens [B, K+1] int32 (accepted drafts, the emitted token, then -1) and num_sampled [B] int32.

    Example:
        >>> import jax.numpy as jnp, jsample
        >>> rates = jsample.unconditional_to_conditional_rates([1.0, 0.0])  # draft 0 always accepted, draft 1 never
        >>> tokens, num_sampled = jsample.synthetic_rejection_sample(
        ...     jnp.array([[10, 11, 12]], jnp.int32), jnp.array([[5, 6]]), jnp.array([2]), jnp.array([0]), jnp.array([0]),
        ...     rates)
        >>> tokens.tolist(), num_sampled.tolist()  # draft 5, then the target's token of row 1
        ([[5, 11, -1]], [2])
    """
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
        return jnp.zeros((0, rows), jnp.int32), jnp.zeros((0,), jnp.int32)
    rates = jnp.broadcast_to(jnp.asarray(conditional_rates, jnp.float32), (batch, k))  # [K]: every request the same schedule
    return rowwise(functools.partial(_synthetic_rows, fp64=fp64), jnp.asarray(target_tokens), jnp.asarray(draft_tokens),
                   jnp.asarray(num_draft_tokens), jnp.asarray(seeds), jnp.asarray(positions), rates,
                   row_valid(op, num_valid, batch))


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
